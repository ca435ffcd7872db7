package report

import (
	"errors"
	"testing"
	"time"
)

func TestRecorderObserve(t *testing.T) {
	r := NewRecorder("read")
	r.ObserveNs(1500, 4096, nil)
	r.ObserveNs(2_000_000, 4096, nil)
	r.ObserveNs(10, 0, errors.New("eio"))
	r.ObserveNs(0, 0, nil)                  // clamped up to LowestNs
	r.ObserveNs(int64(2*time.Hour), 1, nil) // clamped down to HighestNs
	if r.Ops != 4 || r.Errors != 1 || r.Bytes != 8193 {
		t.Fatalf("ops=%d errors=%d bytes=%d", r.Ops, r.Errors, r.Bytes)
	}
	if r.MaxNs != HighestNs {
		t.Fatalf("max=%d want %d", r.MaxNs, HighestNs)
	}
	if got := r.Hist().TotalCount(); got != 4 {
		t.Fatalf("histogram count %d want 4 (errors excluded)", got)
	}
	// 3 significant figures at the bottom of the range: 1.5 µs stays 1.5 µs.
	if v := r.Hist().ValueAtQuantile(50); v < 1499 || v > 1501 {
		t.Fatalf("p50=%d want ~1500", v)
	}
}

// Latencies are buffered and folded into the histogram in batches; every
// way out (Hist, Merge) must see all of them, whether or not the last batch
// was full, in the buckets a direct record puts them in.
func TestRecorderBufferedExact(t *testing.T) {
	for _, n := range []int{1, pendCap - 1, pendCap, pendCap + 1, 5*pendCap + 7} {
		r, want := NewRecorder("stat"), NewHistogram()
		for i := 0; i < n; i++ {
			ns := int64(1+i%97) * 1013 * int64(1+i%5)
			r.ObserveNs(ns, 0, nil)
			_ = want.RecordValue(ns)
		}
		if !r.Hist().Equals(want) {
			t.Fatalf("n=%d: histogram holds %d values, want %d", n, r.Hist().TotalCount(), want.TotalCount())
		}
		r.ObserveNs(7777, 0, nil) // a record after a read still lands
		_ = want.RecordValue(7777)
		m := NewRecorder("stat")
		m.ObserveNs(42, 0, nil)
		_ = want.RecordValue(42)
		m.Merge(r)
		if !m.Hist().Equals(want) || m.Ops != int64(n)+2 {
			t.Fatalf("n=%d: merged %d values (ops %d), want %d", n, m.Hist().TotalCount(), m.Ops, want.TotalCount())
		}
	}
}

func TestCountsRoundTripAndSum(t *testing.T) {
	a, b := NewRecorder("x"), NewRecorder("x")
	for i := int64(1); i <= 1000; i++ {
		a.ObserveNs(i*1000, 0, nil)
		b.ObserveNs(i*1_000_000, 0, nil)
	}
	ca, cb := Counts(a.Hist()), Counts(b.Hist())
	if len(ca) != CountsLen {
		t.Fatalf("counts len %d want %d", len(ca), CountsLen)
	}
	for i := range ca {
		ca[i] += cb[i]
	}
	h := FromCounts(ca)
	a.Merge(b)
	if h.TotalCount() != 2000 || !h.Equals(a.Hist()) {
		t.Fatalf("summed counts differ from merged histogram: %d", h.TotalCount())
	}
	if p := h.ValueAtQuantile(50); p < 999_000 || p > 1_001_000 {
		t.Fatalf("p50 of the union = %d, want ~1ms", p)
	}
}

func TestSetMergeTotals(t *testing.T) {
	s1, s2 := NewSet(), NewSet()
	s1.Op("create").ObserveNs(100, 10, nil)
	s2.Op("create").ObserveNs(200, 10, nil)
	s2.Op("unlink").ObserveNs(300, 0, errors.New("x"))
	s1.Merge(s2)
	ops, bytes, errs, max := s1.Totals()
	if ops != 2 || bytes != 20 || errs != 1 || max != 200 {
		t.Fatalf("totals ops=%d bytes=%d errs=%d max=%d", ops, bytes, errs, max)
	}
	if got := s1.Ops(); len(got) != 2 || got[0] != "create" || got[1] != "unlink" {
		t.Fatalf("ops %v", got)
	}
}

// BenchmarkRecorderObserve is the hot path: a clock read and a histogram
// record per op. It must report 0 allocs/op.
func BenchmarkRecorderObserve(b *testing.B) {
	r := NewRecorder("stat")
	target := "/data/file"
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := r.BeginOn(&target)
		r.Observe(start, 4096, nil)
	}
}

func TestLiveSnapshot(t *testing.T) {
	r := NewRecorder("open")
	target := "/mnt/stuck"
	start := r.BeginOn(&target)
	l := r.Snapshot(start.Add(6 * time.Second))
	if l.InFlight < 6*time.Second || l.InFlight > 7*time.Second || l.Target != target || l.Done != 0 {
		t.Fatalf("in flight: %+v", l)
	}
	r.Observe(start, 10, nil)
	r.Begin()
	r.Observe(time.Now(), 0, errors.New("eio"))
	l = r.Snapshot(time.Now())
	if l.InFlight != 0 || l.Done != 2 || l.Bytes != 10 {
		t.Fatalf("after: %+v", l)
	}
}

func TestRecorderObserveAllocatesNothing(t *testing.T) {
	r := NewRecorder("stat")
	target := "/x"
	if n := testing.AllocsPerRun(1000, func() { r.Observe(r.BeginOn(&target), 4096, nil) }); n != 0 {
		t.Fatalf("Observe allocates %.1f per op, want 0", n)
	}
}
