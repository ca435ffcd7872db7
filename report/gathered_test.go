package report

import (
	"strings"
	"testing"
)

// The binary rank record round-trips: rows in rank order with every field,
// per-op counters and metrics summed over the ranks, strings interned.
func TestGatheredRoundTrip(t *testing.T) {
	recs := []RankRecord{
		{Rank: 0, Host: "cn1", Ops: 5, Bytes: 500, Errors: 0, MaxNs: 900, Seconds: 1.25, CPUs: "0-3",
			OpsByType: map[string]OpCount{"write": {Ops: 4, Bytes: 500}, "fsync": {Ops: 1}}, Metrics: map[string]float64{"au": 0.5}},
		{Rank: 1, Host: "cn1", Ops: 7, Bytes: -1, Errors: 2, MaxNs: 1 << 40, Seconds: 2.5, Error: "rank 1: EIO", CPUs: "4-7",
			OpsByType: map[string]OpCount{"write": {Ops: 7, Bytes: 700, Errors: 2}}, Metrics: map[string]float64{"au": 0.25, "x": 3}},
	}
	g := Gather(recs)
	if g.Rows.Len() != 2 {
		t.Fatalf("%d rows", g.Rows.Len())
	}
	r := g.Rows.At(1)
	if r.Rank != 1 || r.Host != "cn1" || r.Ops != 7 || r.Bytes != -1 || r.Errors != 2 || r.MaxLatencyNs != 1<<40 || r.Seconds != 2.5 || r.Error != "rank 1: EIO" || r.CPUs != "4-7" {
		t.Errorf("row 1: %+v", r)
	}
	if w := g.ByType["write"]; w.Ops != 11 || w.Bytes != 1200 || w.Errors != 2 || g.ByType["fsync"].Ops != 1 {
		t.Errorf("by type %+v", g.ByType)
	}
	if g.Metrics["au"] != 0.75 || g.Metrics["x"] != 3 {
		t.Errorf("metrics %v", g.Metrics)
	}
	if ops := g.Ops(); strings.Join(ops, ",") != "fsync,write" {
		t.Errorf("ops %v", ops)
	}
	if Gather([]RankRecord{{Rank: 0}}).Metrics != nil {
		t.Error("no metrics should give nil, as the manifest omits them")
	}
}

// A truncated, extended or foreign record is an error, never a panic or a
// silently wrong row.
func TestGatheredRefusesBadRecords(t *testing.T) {
	rec := RankRecord{Rank: 3, Host: "h", Ops: 1, OpsByType: map[string]OpCount{"read": {Ops: 1}}}
	b := rec.AppendBinary(nil)
	for _, bad := range [][]byte{nil, b[:len(b)-1], append(append([]byte{}, b...), 0), append([]byte{9}, b[1:]...), []byte(`{"rank":3}`)} {
		if err := NewGathered(1).Add(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func FuzzGatheredAdd(f *testing.F) {
	rec := RankRecord{Rank: 1, Host: "h", OpsByType: map[string]OpCount{"w": {Ops: 2}}, Metrics: map[string]float64{"m": 1}}
	f.Add(rec.AppendBinary(nil))
	f.Add([]byte{recordVersion, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		g := NewGathered(1)
		if g.Add(b) == nil && g.Rows.Len() != 1 {
			t.Fatalf("accepted without a row")
		}
	})
}
