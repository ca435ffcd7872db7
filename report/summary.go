package report

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// WriteSummary prints the human summary of a manifest: a header (run,
// communicator, host, storage), one row per phase (one per rank count of a
// sweep) with an indented row per op type when there are several, then the
// expectation verdicts, the outlier flags, errors and warnings. Names are
// left-aligned and numbers right-aligned, so columns read down.
func WriteSummary(w io.Writer, m *Manifest) error {
	fmt.Fprintf(w, "prism %s  run %s  status %s\n", m.Version, m.RunID, m.Status)
	if !m.StartedAt.IsZero() {
		fmt.Fprintf(w, "started %s", m.StartedAt.UTC().Format(time.RFC3339))
		if m.FinishedAt.After(m.StartedAt) {
			fmt.Fprintf(w, "  took %s", FormatSeconds(m.FinishedAt.Sub(m.StartedAt).Seconds()))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "comm %s (%d ranks on %d hosts, rank from %s)  host %s  %s\n",
		m.Comm.Kind, m.Comm.Ranks, m.Comm.Hosts, m.Comm.RankSource, m.Host.Hostname, m.Host.CPUModel)
	if m.Clock.Source != "" {
		fmt.Fprintf(w, "op clock %s  %s\n", m.Clock.Source, m.Clock.Reason)
	}
	fmt.Fprintf(w, "workdir %s (%s, %s)\n\n", m.Host.Workdir, m.Host.FSType, m.Host.MountOptions)

	t := newTable("lllrrrrrrrrrrl", "phase", "kind", "status", "ranks", "ops", "bytes", "wall", "MiB/s", "ops/s", "mean", "p50", "p99", "max", "cache")
	for _, p := range m.Phases {
		t.add(p.Name, p.Kind, p.Status, fmt.Sprint(p.Ranks), fmt.Sprint(p.Ops), FormatBytes(p.Bytes), FormatSeconds(p.WallSeconds),
			fmt.Sprintf("%.1f", p.BytesPerSec/(1<<20)), fmt.Sprintf("%.0f", p.OpsPerSec),
			FormatNs(int64(p.Latency.Mean)), FormatNs(p.Latency.P50), FormatNs(p.Latency.P99), FormatNs(p.Latency.Max),
			p.Cache.Applied)
		if len(p.OpsByType) > 1 {
			for _, op := range sortedOps(p.OpsByType) {
				s := p.OpsByType[op]
				t.add("  "+op, "", "", "", fmt.Sprint(s.Ops), FormatBytes(s.Bytes), "",
					fmt.Sprintf("%.1f", s.BytesPerSec/(1<<20)), fmt.Sprintf("%.0f", s.OpsPerSec),
					FormatNs(int64(s.Latency.Mean)), FormatNs(s.Latency.P50), FormatNs(s.Latency.P99), FormatNs(s.Latency.Max), "")
			}
		}
	}
	if err := t.write(w); err != nil {
		return err
	}

	var pass, fail int
	v := newTable("lrlrrl", "phase", "ranks", "metric", "value", "limit", "verdict")
	for _, p := range m.Phases {
		for _, x := range p.Expect {
			verdict := "pass"
			if x.Passed {
				pass++
			} else {
				fail++
				verdict = "FAIL"
			}
			v.add(p.Name, fmt.Sprint(p.Ranks), x.Metric, x.Value, x.Limit, verdict)
		}
	}
	if pass+fail > 0 {
		fmt.Fprintf(w, "\nexpectations: %d passed, %d failed\n", pass, fail)
		if err := v.write(w); err != nil {
			return err
		}
	}

	if flags := flagsOf(m); len(flags) > 0 {
		fmt.Fprintf(w, "\nflags\n")
		f := newTable("llrl", "kind", "phase", "ranks", "detail")
		for _, x := range flags {
			f.add(x.Kind, x.Phase, fmt.Sprint(x.Ranks), x.Detail)
		}
		if err := f.write(w); err != nil {
			return err
		}
	}

	first := true
	for _, p := range m.Phases {
		if p.Error == "" {
			continue
		}
		if first {
			fmt.Fprintln(w)
			first = false
		}
		where := ""
		if p.FailedRank != nil {
			where = fmt.Sprintf(" (rank %d)", *p.FailedRank)
		}
		fmt.Fprintf(w, "%s [%d ranks] %s%s: %s\n", p.Name, p.Ranks, p.Status, where, p.Error)
	}
	if m.Error != "" {
		fmt.Fprintf(w, "\nrun %s: %s\n", m.Status, m.Error)
	}
	for _, warn := range m.Host.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	return nil
}

// flagsOf returns the manifest's flags, computing them for a manifest
// written before flags existed.
func flagsOf(m *Manifest) []Flag {
	if m.Flags != nil {
		return m.Flags
	}
	return FlagsWith(m, DefaultFlagOptions)
}

func sortedOps[V any](m map[string]V) []string {
	ops := make([]string, 0, len(m))
	for op := range m {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	return ops
}

// table lays out text columns: 'l' columns are left-aligned (names),
// 'r' columns right-aligned (numbers); widths count runes, so "µs" is one
// column wide per rune. Trailing blanks are trimmed.
type table struct {
	align string
	rows  [][]string
}

func newTable(align string, header ...string) *table {
	t := &table{align: align}
	t.add(header...)
	return t
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) error {
	width := make([]int, len(t.align))
	for _, r := range t.rows {
		for i, c := range r {
			if n := utf8.RuneCountInString(c); n > width[i] {
				width[i] = n
			}
		}
	}
	var b strings.Builder
	for _, r := range t.rows {
		var line strings.Builder
		for i, c := range r {
			if i > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if t.align[i] == 'r' {
				line.WriteString(pad + c)
			} else {
				line.WriteString(c + pad)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
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
