package report

import (
	"errors"
	"fmt"
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

// The hot path allocates nothing, time series included: Observe,
// ObserveNs after BeginAt, and ObserveNs without a Begin (a clock read),
// on a set whose phase start is set and on one whose start the first op
// takes.
func TestRecorderObserveAllocatesNothing(t *testing.T) {
	set := NewSet()
	set.StartSeries(time.Now().Add(-1500 * time.Millisecond))
	for _, r := range []*Recorder{NewRecorder("stat"), set.Sibling().Op("stat")} {
		target := "/x"
		if n := testing.AllocsPerRun(1000, func() { r.Observe(r.BeginOn(&target), 4096, nil) }); n != 0 {
			t.Fatalf("Observe allocates %.1f per op, want 0", n)
		}
		if n := testing.AllocsPerRun(1000, func() {
			r.BeginAt(&target, Ticks())
			r.ObserveNs(1000, 4096, nil)
			r.ObserveNs(1000, 0, nil)
		}); n != 0 {
			t.Fatalf("ObserveNs allocates %.1f per op, want 0", n)
		}
		if w, ext := r.SeriesShape(); w != int64(time.Second) || ext < int64(time.Second) {
			t.Fatalf("the ops are in no series: interval %d, extent %d", w, ext)
		}
	}
}

// The time series: ops land in the second of their end, counted from the
// set's start; a worker's sibling set shares it; a merge of a later
// iteration lands later; a phase beyond SeriesCap seconds coarsens; and
// AppendSeries exports at the interval the ranks agreed.
func TestRecorderSeries(t *testing.T) {
	set := NewSet()
	t0 := time.Now()
	set.StartSeries(t0)
	r := set.Sibling().Op("write")
	at := func(sec float64) time.Time { return t0.Add(time.Duration(sec * 1e9)) }
	// Observe computes the end from its start: fake starts in the future
	// are ops that end ~then.
	for _, s := range []float64{0.1, 0.5, 0.9, 1.2, 3.7, 3.8} {
		st := at(s)
		r.series.add(int64(st.Sub(epoch)), int64(st.Sub(epoch)), 4096)
		r.Ops++
	}
	w, ext := r.SeriesShape()
	if w != int64(time.Second) || ext != 4*int64(time.Second) {
		t.Fatalf("shape %d, %d; want 1 s, 4 s", w, ext)
	}
	got := r.AppendSeries(nil, w, 4)
	want := []int64{3, 1, 0, 2, 3 * 4096, 4096, 0, 2 * 4096}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	// At 2 s per interval: pairs summed.
	if got := r.AppendSeries(nil, 2*w, 2); fmt.Sprint(got[:2]) != "[4 2]" {
		t.Fatalf("coarse %v", got)
	}
	// A real Observe after BeginOn lands in the current second (bucket 0).
	target := "f"
	r2 := set.Op("read")
	r2.Observe(r2.BeginOn(&target), 10, nil)
	r2.ObserveNs(5, 10, nil) // no Begin: the clock says when
	if got := r2.AppendSeries(nil, w, 1); got[0] != 2 || got[1] != 20 {
		t.Fatalf("observed %v", got)
	}
	// Merged into a set started 10 s earlier: 10 s later in its series.
	m := NewSet()
	m.StartSeries(t0.Add(-10 * time.Second))
	m.Op("write").Merge(r)
	if got := m.Op("write").AppendSeries(nil, w, 14); got[10] != 3 || got[13] != 2 || got[0] != 0 {
		t.Fatalf("merged %v", got[:14])
	}
	// An hour of one op per second coarsens to 4 s intervals, nothing lost.
	long := NewSet()
	long.StartSeries(t0)
	lr := long.Op("stat")
	for s := 0; s < 3600; s++ {
		e := int64(at(float64(s) + 0.5).Sub(epoch))
		lr.series.add(e, e, 0)
	}
	w, ext = lr.SeriesShape()
	if w != 4*int64(time.Second) || ext != 3600*int64(time.Second) {
		t.Fatalf("an hour: interval %v, extent %v", time.Duration(w), time.Duration(ext))
	}
	var sum int64
	for _, v := range lr.AppendSeries(nil, w, 900)[:900] {
		if v != 4 {
			t.Fatalf("an hour at 4 s: bucket of %d ops", v)
		}
		sum += v
	}
	if sum != 3600 {
		t.Fatalf("an hour: %d ops in the series", sum)
	}
	// NoSeries: counted, but in no series.
	f := NewRecorder("read")
	f.NoSeries()
	f.ObserveNs(100, 1, nil)
	if w, _ := f.SeriesShape(); w != 0 || f.Ops != 1 {
		t.Fatalf("NoSeries: interval %d, ops %d", w, f.Ops)
	}
	// The summed buckets of two ops become a Timeline.
	tl := NewTimeline([]string{"read", "stat"}, int64(time.Second), 2, []int64{1, 2, 10, 20, 5, 0, 0, 0})
	if tl.Len() != 2 || tl.Bytes["read"][1] != 20 || tl.Ops["stat"][0] != 5 || tl.Bytes["stat"] != nil {
		t.Fatalf("timeline %+v", tl)
	}
}

// BenchmarkRecorderObserveNs is the bookkeeping alone, without a clock
// read: BeginAt and ObserveNs of a loop that reads the op clock once per
// op (here, a fixed reading). It must report 0 allocs/op.
func BenchmarkRecorderObserveNs(b *testing.B) {
	r := NewRecorder("stat")
	target := "/data/file"
	t := Ticks()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.BeginAt(&target, t)
		r.ObserveNs(1000+int64(i&1023), 4096, nil)
	}
}

// A live op's target is named whole: a relative one below the directory
// or URL prefix the recorder is Under (a URL's "//" kept, which
// filepath.Join would fold into "s3:/"), an absolute path or a URL as is.
func TestSnapshotTargetWhole(t *testing.T) {
	for _, c := range []struct{ under, target, want string }{
		{"/run/01-x/r0", "files/f1", "/run/01-x/r0/files/f1"},
		{"s3://bucket/run/ckpt", "model.safetensors", "s3://bucket/run/ckpt/model.safetensors"},
		{"s3://bucket/run/ckpt/", "a/b", "s3://bucket/run/ckpt/a/b"},
		{"/run/01-x/r0", "/elsewhere/f", "/elsewhere/f"},
		{"s3://bucket/run", "s3://other/key", "s3://other/key"},
		{"", "rel/f", "rel/f"},
	} {
		r := NewRecorder("op")
		if c.under != "" {
			r.Under(c.under)
		}
		target := c.target
		start := r.BeginOn(&target)
		got := r.Snapshot(start.Add(time.Millisecond)).Target
		r.Observe(start, 0, nil)
		if got != c.want {
			t.Errorf("Under(%q), target %q: live target %q, want %q", c.under, c.target, got, c.want)
		}
	}
}
