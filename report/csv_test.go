package report

import (
	"bytes"
	"encoding/csv"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// readCSV parses b and returns its header and its rows as maps by column.
func readCSV(t *testing.T, b []byte) ([]string, []map[string]string) {
	t.Helper()
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatalf("not CSV a reader accepts: %v\n%s", err, b)
	}
	if len(recs) == 0 {
		t.Fatal("no header row")
	}
	var rows []map[string]string
	for _, r := range recs[1:] {
		row := map[string]string{}
		for i, c := range recs[0] {
			row[c] = r[i]
		}
		rows = append(rows, row)
	}
	return recs[0], rows
}

// TestPhasesCSV: one row per phase × rank count, in the manifest's order,
// whose cells read back as the manifest's numbers; a skipped phase has
// empty rates and latencies, not zeros; an error with a comma and quotes
// survives quoting.
func TestPhasesCSV(t *testing.T) {
	m := synthManifest(1, 1)
	m.Phases[4].Error = `rank 3: rename "f7", then "f8": EIO`
	var b bytes.Buffer
	if err := WritePhasesCSV(&b, m); err != nil {
		t.Fatal(err)
	}
	header, rows := readCSV(t, b.Bytes())
	if !slices.Equal(header, PhaseCSVColumns) {
		t.Fatalf("header %v", header)
	}
	if len(rows) != len(m.Phases) {
		t.Fatalf("%d rows for %d phases", len(rows), len(m.Phases))
	}
	for i, row := range rows {
		p := m.Phases[i]
		for col, want := range map[string]string{"run_id": m.RunID, "phase": p.Name, "kind": p.Kind, "status": p.Status,
			"ranks": strconv.Itoa(p.Ranks), "index": strconv.Itoa(p.Index), "error": p.Error, "iterations": strconv.Itoa(len(p.Iterations))} {
			if row[col] != want {
				t.Errorf("row %d %s = %q, want %q", i, col, row[col], want)
			}
		}
		if p.Status == StatusSkipped {
			for _, col := range []string{"nodes", "ops_per_sec", "bytes_per_sec", "lat_p50_ns", "lat_max_ns", "lat_mean_ns"} {
				if row[col] != "" {
					t.Errorf("skipped %s: %s = %q, want empty", p.Name, col, row[col])
				}
			}
			continue
		}
		ints := map[string]int64{"ops": p.Ops, "bytes": p.Bytes, "errors": p.Errors, "lat_min_ns": p.Latency.Min, "lat_p50_ns": p.Latency.P50,
			"lat_p90_ns": p.Latency.P90, "lat_p99_ns": p.Latency.P99, "lat_p999_ns": p.Latency.P999, "lat_max_ns": p.Latency.Max}
		for col, want := range ints {
			if got, err := strconv.ParseInt(row[col], 10, 64); err != nil || got != want {
				t.Errorf("%s [%d]: %s = %q, want %d", p.Name, p.Ranks, col, row[col], want)
			}
		}
		floats := map[string]float64{"wall_seconds": p.WallSeconds, "ops_per_sec": p.OpsPerSec, "bytes_per_sec": p.BytesPerSec,
			"lat_mean_ns": p.Latency.Mean, "mib_per_sec": p.BytesPerSec / (1 << 20), "last_done_seconds": p.LastDoneSeconds}
		for col, want := range floats {
			got, err := strconv.ParseFloat(row[col], 64)
			if err != nil || got < want*0.999 || got > want*1.001 || strings.ContainsAny(row[col], "eE") {
				t.Errorf("%s [%d]: %s = %q, want %g in plain decimal", p.Name, p.Ranks, col, row[col], want)
			}
		}
		if row["nodes"] != "2" && p.Ranks == 8 || row["nodes"] != "1" && p.Ranks <= 4 {
			t.Errorf("%s [%d]: nodes = %q (4 ranks per host)", p.Name, p.Ranks, row["nodes"])
		}
	}
}

// TestOpsCSV: one row per phase × op × rank count, ops in name order, the
// per-op counts and percentiles of the manifest.
func TestOpsCSV(t *testing.T) {
	m := synthManifest(2, 1)
	var b bytes.Buffer
	if err := WriteOpsCSV(&b, m); err != nil {
		t.Fatal(err)
	}
	header, rows := readCSV(t, b.Bytes())
	if !slices.Equal(header, OpCSVColumns) {
		t.Fatalf("header %v", header)
	}
	var want []string
	for _, p := range m.Phases {
		var ops []string
		for op := range p.OpsByType {
			ops = append(ops, op)
		}
		slices.Sort(ops)
		for _, op := range ops {
			want = append(want, p.Name+"/"+strconv.Itoa(p.Ranks)+"/"+op)
		}
	}
	var got []string
	for _, r := range rows {
		got = append(got, r["phase"]+"/"+r["ranks"]+"/"+r["op"])
	}
	if !slices.Equal(got, want) || !slices.Contains(got, "list_files/8/readdir") || !slices.Contains(got, "list_files/8/stat") {
		t.Fatalf("rows %v, want %v", got, want)
	}
	for _, r := range rows {
		var p *PhaseResult
		for i := range m.Phases {
			if m.Phases[i].Name == r["phase"] && strconv.Itoa(m.Phases[i].Ranks) == r["ranks"] {
				p = &m.Phases[i]
			}
		}
		st := p.OpsByType[r["op"]]
		for col, want := range map[string]int64{"ops": st.Ops, "bytes": st.Bytes, "errors": st.Errors, "lat_p50_ns": st.Latency.P50,
			"lat_p99_ns": st.Latency.P99, "lat_p999_ns": st.Latency.P999, "lat_min_ns": st.Latency.Min, "lat_max_ns": st.Latency.Max} {
			if r[col] != strconv.FormatInt(want, 10) {
				t.Errorf("%s/%s: %s = %q, want %d", r["phase"], r["op"], col, r[col], want)
			}
		}
		if got, err := strconv.ParseFloat(r["ops_per_sec"], 64); err != nil || got < st.OpsPerSec*0.999 || got > st.OpsPerSec*1.001 {
			t.Errorf("%s/%s: ops_per_sec = %q, want %v", r["phase"], r["op"], r["ops_per_sec"], st.OpsPerSec)
		}
		if r["status"] != p.Status || r["kind"] != p.Kind {
			t.Errorf("%s/%s: status %q kind %q", r["phase"], r["op"], r["status"], r["kind"])
		}
	}
}
