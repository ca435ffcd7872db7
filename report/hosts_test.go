package report

import (
	"bytes"
	"strings"
	"testing"
)

// TestPerHost: the per-host rows sum each host's ranks, whatever the order
// the launcher numbered them in, and add up to the phase; the per-node
// average is the aggregate over the hosts; one host prints no host table.
func TestPerHost(t *testing.T) {
	recs := []RankRecord{
		{Rank: 0, Host: "a", Ops: 10, Bytes: 100, Seconds: 1.0, MaxNs: 5},
		{Rank: 1, Host: "b", Ops: 20, Bytes: 300, Seconds: 2.0, MaxNs: 9},
		{Rank: 2, Host: "a", Ops: 30, Bytes: 500, Seconds: 0.5, MaxNs: 7},
		{Rank: 3, Host: "b", Ops: 40, Bytes: 700, Seconds: 1.5, MaxNs: 3, Errors: 2},
	}
	var pr PhaseResult
	if err := Fill(&pr, recs, nil, []float64{2}); err != nil {
		t.Fatal(err)
	}
	if len(pr.PerHost) != 2 {
		t.Fatalf("%d host rows: %+v", len(pr.PerHost), pr.PerHost)
	}
	a, b := pr.PerHost[0], pr.PerHost[1]
	if a.Host != "a" || len(a.Ranks) != 2 || a.Ranks[1] != 2 || a.Ops != 40 || a.Bytes != 600 ||
		a.FirstDoneSeconds != 0.5 || a.LastDoneSeconds != 1.0 || a.MaxLatencyNs != 7 || a.BytesPerSec != 300 {
		t.Errorf("host a: %+v", a)
	}
	if b.Host != "b" || b.Ops != 60 || b.Bytes != 1000 || b.Errors != 2 || b.LastDoneSeconds != 2.0 || b.OpsPerSec != 30 {
		t.Errorf("host b: %+v", b)
	}
	if a.Bytes+b.Bytes != pr.Bytes || a.Ops+b.Ops != pr.Ops || a.BytesPerSec+b.BytesPerSec != pr.BytesPerSec {
		t.Errorf("hosts do not add up to the phase: %+v vs %d bytes %d ops", pr.PerHost, pr.Bytes, pr.Ops)
	}
	if pr.PerNodeBytesPerSec != pr.BytesPerSec/2 || pr.PerNodeOpsPerSec != pr.OpsPerSec/2 {
		t.Errorf("per node %v B/s %v ops/s, phase %v %v", pr.PerNodeBytesPerSec, pr.PerNodeOpsPerSec, pr.BytesPerSec, pr.OpsPerSec)
	}

	m := &Manifest{Phases: []PhaseResult{pr}}
	m.Phases[0].Name = "p"
	var s bytes.Buffer
	if err := WriteSummary(&s, m); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.String(), "per host") || !strings.Contains(s.String(), "per node") {
		t.Errorf("summary lacks the host table:\n%s", s.String())
	}
	var c bytes.Buffer
	if err := WriteHostsCSV(&c, m); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(c.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "run_id,index,phase") || !strings.Contains(lines[1], ",a,2,40,600,0,") || !strings.Contains(lines[2], ",b,2,60,1000,2,") {
		t.Errorf("hosts.csv:\n%s", c.String())
	}
	page := htmlOf(t, []*Manifest{m}, HTMLOptions{}, 1)
	if !strings.Contains(page, "bytes per host") || !strings.Contains(page, "busy time per host") {
		t.Error("report lacks the per-host bars")
	}

	one := recs[:1]
	var single PhaseResult
	if err := Fill(&single, one, nil, []float64{1}); err != nil {
		t.Fatal(err)
	}
	s.Reset()
	if err := WriteSummary(&s, &Manifest{Phases: []PhaseResult{single}}); err != nil {
		t.Fatal(err)
	}
	if len(single.PerHost) != 1 || strings.Contains(s.String(), "per host") {
		t.Errorf("one host: %d rows, summary:\n%s", len(single.PerHost), s.String())
	}
}
