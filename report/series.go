package report

import (
	"sync/atomic"
	"time"
)

// The time series of a phase: ops and bytes per interval since the
// phase's start, one bucket per second, kept by every Recorder beside its
// histogram and summed over ranks at the gather (Timeline in the
// manifest).
//
// Each Recorder holds SeriesCap buckets in a fixed array, allocated and
// mapped with the Recorder, so recording allocates nothing. A phase longer
// than SeriesCap seconds coarsens the series: pairs of buckets are merged
// and the interval doubles (2 s, 4 s, …), so the whole phase always fits in
// SeriesCap buckets. An op counts in the bucket of its end. The recorders
// of a phase share its start (Set.StartSeries; sets made by Set.Sibling
// share it too); a recorder whose start was never set takes its first
// op's start.

// SeriesCap is the number of buckets of a Recorder's series: 20 minutes at
// 1 s, coarser beyond.
const SeriesCap = 1200

// seriesBase is the width of a bucket before any coarsening.
const seriesBase = int64(time.Second)

// opSeries is one Recorder's ops and bytes per bucket.
type opSeries struct {
	origin *atomic.Int64 // the phase's start, ns since epoch; 0 until set
	base   int64         // the origin the buckets are counted from
	lo, hi int64         // bounds (ns since epoch) of bucket cur: the fast path
	cur    int
	n      int   // buckets in use
	width  int64 // ns per bucket: seriesBase × 2^k
	off    bool  // NoSeries: the ops carry no time of their own
	// b holds each bucket's ops and bytes side by side: an op touches one
	// cache line (and one page) of it.
	b [SeriesCap]bucket
}

type bucket struct{ ops, bytes int64 }

func (s *opSeries) init(origin *atomic.Int64) {
	s.origin, s.width = origin, seriesBase
	// Written once here so that every page is mapped before the first
	// timed op (see NewRecorder).
	clear(s.b[:])
}

// add counts one op that ended at end (ns since epoch) and moved n bytes.
func (s *opSeries) add(start, end, n int64) {
	if end >= s.lo && end < s.hi && s.base == s.origin.Load() {
		b := &s.b[s.cur]
		b.ops++
		b.bytes += n
		return
	}
	s.slow(start, end, n)
}

func (s *opSeries) slow(start, end, n int64) {
	o := s.origin.Load()
	if o == 0 {
		s.origin.CompareAndSwap(0, nonZeroNs(start))
		o = s.origin.Load()
	}
	s.rebase(o)
	i := s.index(end)
	s.cur = i
	s.lo = s.base + int64(i)*s.width
	s.hi = s.lo + s.width
	if i == 0 {
		s.lo = minInt64 // an op that ended before the start counts in the first bucket
	}
	s.n = max(s.n, i+1)
	s.b[i].ops++
	s.b[i].bytes += n
}

const minInt64 = -1 << 63

// index is the bucket of time t (ns since epoch), coarsening the series
// until it fits.
func (s *opSeries) index(t int64) int {
	d := max(t-s.base, 0)
	for d/s.width >= SeriesCap {
		s.coarsen()
	}
	return int(d / s.width)
}

// coarsen merges pairs of buckets, doubling the interval.
func (s *opSeries) coarsen() {
	h := (s.n + 1) / 2
	for i := 0; i < h; i++ {
		j := 2 * i
		b := s.b[j]
		if j+1 < s.n {
			b.ops, b.bytes = b.ops+s.b[j+1].ops, b.bytes+s.b[j+1].bytes
		}
		s.b[i] = b
	}
	clear(s.b[h:s.n])
	s.n, s.width = h, s.width*2
	s.lo, s.hi = 0, 0
}

// rebase moves the buckets to count from origin o (the phase's start was
// set after some ops were recorded).
func (s *opSeries) rebase(o int64) {
	if s.base == o {
		return
	}
	old := s.base
	s.base, s.lo, s.hi = o, 0, 0
	if s.n > 0 && old != 0 {
		s.move(old)
	}
}

// move re-places the buckets counted from old (rare: only when the start
// moved after ops were recorded, never in a timed loop).
func (s *opSeries) move(old int64) {
	moved := append([]bucket(nil), s.b[:s.n]...)
	clear(s.b[:s.n])
	s.n = 0
	s.place(old, s.width, moved)
}

// place adds buckets of width w counted from origin from into s, each at
// the bucket of its middle.
func (s *opSeries) place(from, w int64, bs []bucket) {
	if len(bs) > 0 {
		s.index(from + int64(len(bs)-1)*w + w/2) // coarsen first, so that no placed bucket moves
	}
	for j, b := range bs {
		if b == (bucket{}) {
			continue
		}
		i := s.index(from + int64(j)*w + w/2)
		s.b[i].ops += b.ops
		s.b[i].bytes += b.bytes
		s.n = max(s.n, i+1)
	}
	s.lo, s.hi = 0, 0
}

// merge adds o's buckets into s, aligned on their starts.
func (s *opSeries) merge(o *opSeries) {
	if o.n == 0 {
		return
	}
	if s.origin.Load() == 0 {
		s.origin.CompareAndSwap(0, o.base)
	}
	s.rebase(s.origin.Load())
	for s.width < o.width {
		s.coarsen()
	}
	s.place(o.base, o.width, o.b[:o.n])
}

// SeriesShape is the interval of r's series (ns) and how far it reaches
// (ns since the phase's start): what a rank tells rank 0 before the
// series are summed.
func (r *Recorder) SeriesShape() (widthNs, extentNs int64) {
	s := &r.series
	if s.n == 0 {
		return 0, 0
	}
	s.rebase(s.origin.Load())
	return s.width, int64(s.n) * s.width
}

// AppendSeries appends r's ops and then its bytes per bucket at interval
// widthNs (a multiple of r's own, as SeriesShape agreed over ranks: 1 s ×
// 2^k), n buckets of each, counted from the phase's start.
func (r *Recorder) AppendSeries(dst []int64, widthNs int64, n int) []int64 {
	s := &r.series
	s.rebase(s.origin.Load())
	at := len(dst)
	dst = append(dst, make([]int64, 2*n)...)
	if s.n == 0 || widthNs <= 0 {
		return dst
	}
	f := max(widthNs/s.width, 1)
	for j := 0; j < s.n; j++ {
		i := j / int(f)
		if i >= n {
			break
		}
		dst[at+i] += s.b[j].ops
		dst[at+n+i] += s.b[j].bytes
	}
	return dst
}

// NoSeries keeps r's ops out of the time series: for ops that carry no
// time of their own (fio's latency bins, ingested after fio ran).
func (r *Recorder) NoSeries() { r.series.off = true }

// Sibling returns an empty set whose recorders share s's phase start: a
// worker's set, merged into s when the worker is done.
func (s *Set) Sibling() *Set {
	return &Set{recs: map[string]*Recorder{}, origin: s.origin}
}

// StartSeries sets the start of the phase whose ops s (and its siblings)
// record: bucket 0 of every series begins at t.
func (s *Set) StartSeries(t time.Time) { s.origin.Store(nonZeroNs(int64(t.Sub(epoch)))) }

// nonZeroNs is t (ns since epoch), moved off 0, which means "not set".
func nonZeroNs(t int64) int64 {
	if t == 0 {
		return 1
	}
	return t
}

// Timeline is a phase's ops and bytes per interval since its start, per op
// type, summed over ranks (the manifest's timeline).
type Timeline struct {
	// IntervalSeconds is the width of a bucket: 1, or 2, 4, … for a phase
	// longer than SeriesCap seconds.
	IntervalSeconds float64 `json:"interval_seconds"`
	// Ops holds, per op type, the ops that ended in each interval.
	Ops map[string][]int64 `json:"ops"`
	// Bytes holds, per op type that moved bytes, the bytes of the ops that
	// ended in each interval.
	Bytes map[string][]int64 `json:"bytes,omitempty"`
}

// Len is the number of intervals (the longest array: a manifest edited
// by hand may hold arrays of different lengths).
func (t *Timeline) Len() int {
	n := 0
	if t == nil {
		return 0
	}
	for _, v := range t.Ops {
		n = max(n, len(v))
	}
	for _, v := range t.Bytes {
		n = max(n, len(v))
	}
	return n
}

// NewTimeline builds a Timeline from the summed buckets of ops (each op's
// ops then bytes, n of each, as AppendSeries wrote them).
func NewTimeline(ops []string, widthNs int64, n int, sums []int64) *Timeline {
	if n == 0 || widthNs <= 0 || len(sums) < 2*n*len(ops) {
		return nil
	}
	t := &Timeline{IntervalSeconds: float64(widthNs) / 1e9, Ops: map[string][]int64{}}
	for k, op := range ops {
		o := sums[2*n*k : 2*n*k+n]
		b := sums[2*n*k+n : 2*n*(k+1)]
		if nonZero(o) {
			t.Ops[op] = append([]int64(nil), o...)
		}
		if nonZero(b) {
			if t.Bytes == nil {
				t.Bytes = map[string][]int64{}
			}
			t.Bytes[op] = append([]int64(nil), b...)
		}
	}
	if len(t.Ops) == 0 {
		return nil
	}
	return t
}

func nonZero(v []int64) bool {
	for _, x := range v {
		if x != 0 {
			return true
		}
	}
	return false
}
