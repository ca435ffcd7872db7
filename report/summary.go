package report

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteSummary prints the human summary of a manifest: one row per phase,
// one indented row per op type, then failures.
func WriteSummary(w io.Writer, m *Manifest) error {
	fmt.Fprintf(w, "prism %s  run %s  status %s\n", m.Version, m.RunID, m.Status)
	fmt.Fprintf(w, "comm %s (%d ranks on %d hosts, rank from %s)  host %s  %s\n",
		m.Comm.Kind, m.Comm.Ranks, m.Comm.Hosts, m.Comm.RankSource, m.Host.Hostname, m.Host.CPUModel)
	fmt.Fprintf(w, "workdir %s (%s, %s)\n\n", m.Host.Workdir, m.Host.FSType, m.Host.MountOptions)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tkind\tranks\tstatus\tops\tbytes\twall\tMiB/s\tops/s\tmean\tp50\tp99\tmax\tcache\t")
	for _, p := range m.Phases {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\t%.1f\t%.0f\t%s\t%s\t%s\t%s\t%s\t\n",
			p.Name, p.Kind, p.Ranks, p.Status, p.Ops, FormatBytes(p.Bytes), FormatSeconds(p.WallSeconds),
			p.BytesPerSec/(1<<20), p.OpsPerSec,
			FormatNs(int64(p.Latency.Mean)), FormatNs(p.Latency.P50), FormatNs(p.Latency.P99), FormatNs(p.Latency.Max),
			p.Cache.Applied)
		ops := make([]string, 0, len(p.OpsByType))
		for op := range p.OpsByType {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		if len(ops) > 1 {
			for _, op := range ops {
				s := p.OpsByType[op]
				fmt.Fprintf(tw, "  %s\t\t\t\t%d\t%s\t\t%.1f\t%.0f\t%s\t%s\t%s\t%s\t\t\n",
					op, s.Ops, FormatBytes(s.Bytes), s.BytesPerSec/(1<<20), s.OpsPerSec,
					FormatNs(int64(s.Latency.Mean)), FormatNs(s.Latency.P50), FormatNs(s.Latency.P99), FormatNs(s.Latency.Max))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range m.Phases {
		if p.Error != "" {
			fmt.Fprintf(w, "\n%s %s: %s\n", p.Name, p.Status, p.Error)
		}
		for _, v := range p.Expect {
			verdict := "pass"
			if !v.Passed {
				verdict = "FAIL"
			}
			fmt.Fprintf(w, "expect %s %s: %s (limit %s) %s\n", p.Name, v.Metric, v.Value, v.Limit, verdict)
		}
	}
	if m.Error != "" {
		fmt.Fprintf(w, "\nrun %s: %s\n", m.Status, m.Error)
	}
	for _, warn := range m.Host.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	return nil
}

// FormatBytes prints a byte count with a binary unit.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		f /= unit
		if f < unit || u == "PiB" {
			return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.2f", f), "0"), ".0") + u
		}
	}
	return fmt.Sprintf("%dB", n)
}

// FormatNs prints a latency with three significant figures and a unit.
func FormatNs(ns int64) string {
	if ns <= 0 {
		return "-"
	}
	d := time.Duration(ns)
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", ns)
	case d < time.Millisecond:
		return fmt.Sprintf("%.3gµs", float64(ns)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.3gms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.3gs", d.Seconds())
}

// FormatSeconds prints a wall time.
func FormatSeconds(s float64) string {
	if s <= 0 {
		return "-"
	}
	return FormatNs(int64(s * 1e9))
}
