package report

import (
	"encoding/csv"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// phases.csv and ops.csv are the manifest's phase and per-op tables in a
// form spreadsheets and chart tools read directly: one header row, then one
// row per phase × rank count (phases.csv) and per phase × op × rank count
// (ops.csv). Numbers are plain (no units, no thousands separators): bytes,
// seconds, ns and per-second rates, as the column names say; a rate or
// latency a phase does not have (skipped, no ops) is an empty cell.

// PhaseCSVColumns and OpCSVColumns are the header rows; the README's
// results section documents every column.
var (
	PhaseCSVColumns = []string{"run_id", "index", "phase", "kind", "status", "ranks", "nodes", "group", "started_at",
		"iterations", "wall_seconds", "ops", "bytes", "errors", "ops_per_sec", "bytes_per_sec", "mib_per_sec",
		"lat_mean_ns", "lat_min_ns", "lat_p50_ns", "lat_p90_ns", "lat_p99_ns", "lat_p999_ns", "lat_max_ns",
		"first_done_seconds", "last_done_seconds", "per_node_ops_per_sec", "per_node_bytes_per_sec", "error"}
	HostCSVColumns = []string{"run_id", "index", "phase", "kind", "status", "ranks", "nodes", "host", "host_ranks",
		"ops", "bytes", "errors", "ops_per_sec", "bytes_per_sec", "mib_per_sec",
		"first_done_seconds", "last_done_seconds", "lat_max_ns"}
	OpCSVColumns = []string{"run_id", "index", "phase", "kind", "status", "ranks", "nodes", "op",
		"wall_seconds", "ops", "bytes", "errors", "ops_per_sec", "bytes_per_sec", "mib_per_sec",
		"lat_mean_ns", "lat_min_ns", "lat_p50_ns", "lat_p90_ns", "lat_p99_ns", "lat_p999_ns", "lat_max_ns"}
)

// WritePhasesCSV writes phases.csv for m: one row per phase and rank count,
// in the manifest's order.
func WritePhasesCSV(w io.Writer, m *Manifest) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(PhaseCSVColumns); err != nil {
		return err
	}
	for i := range m.Phases {
		p := &m.Phases[i]
		started := ""
		if !p.StartedAt.IsZero() {
			started = p.StartedAt.UTC().Format(time.RFC3339Nano)
		}
		row := append(phaseCSVKey(m, p),
			p.Group, started, strconv.Itoa(len(p.Iterations)), csvSeconds(p.WallSeconds),
			csvInt(p.Ops), csvInt(p.Bytes), csvInt(p.Errors))
		row = append(row, csvRates(p.Ops, p.OpsPerSec, p.BytesPerSec)...)
		row = append(row, csvLatency(p.Ops, p.Latency)...)
		row = append(row, csvSeconds(p.FirstDoneSeconds), csvSeconds(p.LastDoneSeconds),
			csvRate(p.Ops, p.PerNodeOpsPerSec), csvRate(p.Ops, p.PerNodeBytesPerSec), p.Error)
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteOpsCSV writes ops.csv for m: one row per phase, op type and rank
// count, ops in name order within a phase; a phase that ran no op (a
// skipped one) has no rows.
func WriteOpsCSV(w io.Writer, m *Manifest) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(OpCSVColumns); err != nil {
		return err
	}
	for i := range m.Phases {
		p := &m.Phases[i]
		ops := make([]string, 0, len(p.OpsByType))
		for op := range p.OpsByType {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		for _, op := range ops {
			st := p.OpsByType[op]
			row := append(phaseCSVKey(m, p), op, csvSeconds(p.WallSeconds), csvInt(st.Ops), csvInt(st.Bytes), csvInt(st.Errors))
			row = append(row, csvRates(st.Ops, st.OpsPerSec, st.BytesPerSec)...)
			row = append(row, csvLatency(st.Ops, st.Latency)...)
			if err := cw.Write(row); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteHostsCSV writes hosts.csv for m: one row per phase, rank count and
// host (per_host), hosts in the order of their first rank.
func WriteHostsCSV(w io.Writer, m *Manifest) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(HostCSVColumns); err != nil {
		return err
	}
	for i := range m.Phases {
		p := &m.Phases[i]
		for _, h := range p.PerHost {
			row := append(phaseCSVKey(m, p), h.Host, strconv.Itoa(len(h.Ranks)), csvInt(h.Ops), csvInt(h.Bytes), csvInt(h.Errors))
			row = append(row, csvRates(h.Ops, h.OpsPerSec, h.BytesPerSec)...)
			row = append(row, csvSeconds(h.FirstDoneSeconds), csvSeconds(h.LastDoneSeconds), csvInt(h.MaxLatencyNs))
			if err := cw.Write(row); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// phaseCSVKey are the columns every file starts with: run_id, index,
// phase, kind, status, ranks, nodes.
func phaseCSVKey(m *Manifest, p *PhaseResult) []string {
	nodes := ""
	if n := phaseNodes(p); n > 0 {
		nodes = strconv.Itoa(n)
	}
	return []string{m.RunID, strconv.Itoa(p.Index), p.Name, p.Kind, p.Status, strconv.Itoa(p.Ranks), nodes}
}

// phaseNodes is the number of hosts a phase ran on: the nodes = k it
// selected, else the distinct hosts of its ranks (0 for a phase that did
// not run).
func phaseNodes(p *PhaseResult) int {
	if p.Nodes > 0 {
		return p.Nodes
	}
	if len(p.PerHost) > 0 {
		return len(p.PerHost)
	}
	hosts := map[string]bool{}
	for _, r := range p.PerRank.All() {
		hosts[r.Host] = true
	}
	return len(hosts)
}

func csvRates(ops int64, opsPerSec, bytesPerSec float64) []string {
	mib := ""
	if ops > 0 {
		mib = csvFloat(bytesPerSec / (1 << 20))
	}
	return []string{csvRate(ops, opsPerSec), csvRate(ops, bytesPerSec), mib}
}

// csvLatency is mean, min, p50, p90, p99, p999, max in ns; empty without
// ops (a zero would read as a latency of 0 ns).
func csvLatency(ops int64, l Latency) []string {
	if ops == 0 {
		return []string{"", "", "", "", "", "", ""}
	}
	return []string{strconv.FormatFloat(l.Mean, 'f', 1, 64), csvInt(l.Min), csvInt(l.P50), csvInt(l.P90), csvInt(l.P99), csvInt(l.P999), csvInt(l.Max)}
}

func csvRate(ops int64, v float64) string {
	if ops == 0 {
		return ""
	}
	return csvFloat(v)
}

func csvInt(v int64) string { return strconv.FormatInt(v, 10) }

// csvSeconds writes seconds to the ns, csvFloat rates to a thousandth:
// plain decimal (never 1e+06, which some tools read as text), without the
// binary noise of a float (0.45299999999999996) or trailing zeros.
func csvSeconds(v float64) string { return csvDecimal(v, 9) }

func csvFloat(v float64) string { return csvDecimal(v, 3) }

func csvDecimal(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return ""
	}
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}
