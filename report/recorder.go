package report

import (
	"sort"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram geometry shared by every rank; see the package doc.
const (
	LowestNs  = 1
	HighestNs = int64(time.Hour)
	SigFigs   = 3
)

// NewHistogram returns an empty histogram of the shared geometry.
func NewHistogram() *hdr.Histogram { return hdr.New(LowestNs, HighestNs, SigFigs) }

// Recorder accumulates one op type of one worker: its latency histogram and
// its op, byte and error counts. It is not safe for concurrent use: give each
// worker goroutine its own and Merge them when the phase ends.
type Recorder struct {
	Op     string
	Hist   *hdr.Histogram
	Ops    int64 // successful ops (each one is in Hist)
	Bytes  int64
	Errors int64
	MaxNs  int64
}

// NewRecorder returns an empty recorder for op.
func NewRecorder(op string) *Recorder {
	return &Recorder{Op: op, Hist: NewHistogram()}
}

// Observe records one op that started at start, moved n bytes and returned
// err. It is the hot path: no allocation, no lock. A failed op is counted in
// Errors and kept out of the latency distribution, so a burst of instant
// EACCES cannot pull the percentiles down.
func (r *Recorder) Observe(start time.Time, n int, err error) {
	r.ObserveNs(int64(time.Since(start)), int64(n), err)
}

// ObserveNs records an op whose duration is already known (ops timed by an
// external tool such as fio, or by a caller that shares one clock read
// between two ops).
func (r *Recorder) ObserveNs(ns, n int64, err error) {
	if err != nil {
		r.Errors++
		return
	}
	if ns < LowestNs {
		ns = LowestNs
	} else if ns > HighestNs {
		ns = HighestNs
	}
	_ = r.Hist.RecordValue(ns) // cannot fail: ns is clamped into range
	if ns > r.MaxNs {
		r.MaxNs = ns
	}
	r.Ops++
	if n > 0 {
		r.Bytes += n
	}
}

// Merge adds o's observations into r.
func (r *Recorder) Merge(o *Recorder) {
	r.Hist.Merge(o.Hist)
	r.Ops += o.Ops
	r.Bytes += o.Bytes
	r.Errors += o.Errors
	if o.MaxNs > r.MaxNs {
		r.MaxNs = o.MaxNs
	}
}

// Set holds one Recorder per op type: a worker's (or a rank's) measurements.
// Lookups happen when a phase is set up, never between two timestamps.
type Set struct {
	recs map[string]*Recorder
}

// NewSet returns an empty set.
func NewSet() *Set { return &Set{recs: map[string]*Recorder{}} }

// Op returns the recorder for op, creating it on first use.
func (s *Set) Op(op string) *Recorder {
	if r, ok := s.recs[op]; ok {
		return r
	}
	r := NewRecorder(op)
	s.recs[op] = r
	return r
}

// Ops returns the op names in sorted order.
func (s *Set) Ops() []string {
	names := make([]string, 0, len(s.recs))
	for n := range s.recs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Get returns the recorder for op, or nil.
func (s *Set) Get(op string) *Recorder { return s.recs[op] }

// Merge adds every recorder of o into s.
func (s *Set) Merge(o *Set) {
	for _, name := range o.Ops() {
		s.Op(name).Merge(o.recs[name])
	}
}

// Totals sums ops, bytes and errors over every op type, and the largest
// single latency.
func (s *Set) Totals() (ops, bytes, errors, maxNs int64) {
	for _, r := range s.recs {
		ops += r.Ops
		bytes += r.Bytes
		errors += r.Errors
		if r.MaxNs > maxNs {
			maxNs = r.MaxNs
		}
	}
	return
}

// Counts returns a copy of the histogram's count array, the unit that
// travels between ranks.
func Counts(h *hdr.Histogram) []int64 { return h.Export().Counts }

// FromCounts rebuilds a histogram of the shared geometry from a count array
// produced by Counts (possibly summed over ranks).
func FromCounts(counts []int64) *hdr.Histogram {
	return hdr.Import(&hdr.Snapshot{
		LowestTrackableValue:  LowestNs,
		HighestTrackableValue: HighestNs,
		SignificantFigures:    SigFigs,
		Counts:                counts,
	})
}

// CountsLen is the length of every count array of the shared geometry.
var CountsLen = len(NewHistogram().Export().Counts)
