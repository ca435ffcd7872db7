package report

import (
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
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
	hist   *hdr.Histogram
	Ops    int64 // successful ops (each one is in the histogram)
	Bytes  int64
	Errors int64
	MaxNs  int64
	npend  int

	// live is what other goroutines may read while the worker runs: the
	// progress printer and the stall watchdog. Single writer, atomic stores.
	live struct {
		inflight atomic.Int64 // start of the op in flight (ns since epoch), 0 if none
		target   atomic.Pointer[string]
		under    atomic.Pointer[string] // the directory a relative target is in (Under)
		done     atomic.Int64           // ops + errors so far
		bytes    atomic.Int64
	}

	// pend holds latencies not yet in hist. An op records into this buffer
	// (one sequential store) and the buffer goes into the histogram every
	// pendCap ops: a histogram record lands on a random line of a ~200 KiB
	// counts array, and between two syscalls on a kernel that flushes the
	// TLB at each one (page-table isolation without PCID, common on VMs) that
	// miss cost a 3 µs stat loop 3-4% of its rate. Folded in a batch, the
	// array stays in the TLB and cache for all pendCap records.
	pend [pendCap]int64

	// series counts ops and bytes per second since the phase's start
	// (series.go); last, so that its buckets do not sit between the hot
	// fields above.
	series opSeries
}

// pendCap latencies (1 KiB) are buffered before they go into the histogram.
const pendCap = 128

// Hist returns the latency histogram with every observation so far in it.
// Like the rest of the Recorder, it is for the owning worker, or for anyone
// once the worker is done.
func (r *Recorder) Hist() *hdr.Histogram {
	r.flush()
	return r.hist
}

// flush moves the buffered latencies into the histogram; they were clamped
// into its range by ObserveNs, so RecordValue cannot fail.
func (r *Recorder) flush() {
	for _, v := range r.pend[:r.npend] {
		_ = r.hist.RecordValue(v)
	}
	r.npend = 0
}

// epoch anchors the monotonic in-flight timestamps; Sub of two time.Times
// with monotonic readings needs no clock read.
var epoch = time.Now()

// Begin marks an op in flight, for the stall watchdog, and returns its
// start: use it instead of time.Now() in timed loops.
//
//	start := rec.Begin()
//	n, err := pio.Pread(fd, buf, off)
//	rec.Observe(start, n, err)
func (r *Recorder) Begin() time.Time {
	t := time.Now()
	r.live.inflight.Store(int64(t.Sub(epoch)) + 1)
	return t
}

// BeginAt marks an op in flight that started at t, a Ticks reading, for
// loops that already read the op clock (one read per op: an op's end is the
// next op's start).
func (r *Recorder) BeginAt(target *string, t int64) {
	if target != nil && r.live.target.Load() != target { // a loop over one file or directory stores it once
		r.live.target.Store(target)
	}
	r.live.inflight.Store(TicksEpochNs(t) + 1)
}

// BeginOn is Begin for an op on a named file, so a stall report can name
// it. target must outlive the op (point into a slice prepared in Setup).
func (r *Recorder) BeginOn(target *string) time.Time {
	r.live.target.Store(target)
	return r.Begin()
}

// Under names the directory the recorder's relative targets are in (the
// path of the directory handle a phase's *at calls go through), so that a
// stall report names the file whole. It returns r, and is called once per
// Setup or Run, not per op.
func (r *Recorder) Under(dir string) *Recorder {
	if p := r.live.under.Load(); p == nil || *p != dir {
		d := dir // only a change moves a copy to the heap, not every call
		r.live.under.Store(&d)
	}
	return r
}

// NewRecorder returns an empty recorder for op. The histogram's counts are
// written once here, outside any timed op: a large allocation fresh from
// the OS is not zeroed by Go, so its pages would be mapped in one by one by
// the first record landing on each, a page fault (tens of µs on a VM) in the
// latency of that op. Measured: ~20 faults per timed 20,000-op stat loop
// before, none after.
func NewRecorder(op string) *Recorder { return newRecorder(op, new(atomic.Int64)) }

// newRecorder is NewRecorder for a recorder of a set, whose series counts
// from the set's phase start.
func newRecorder(op string, origin *atomic.Int64) *Recorder {
	h := NewHistogram()
	h.Reset() // writes every count, so every page is mapped now
	r := &Recorder{Op: op, hist: h}
	r.series.init(origin)
	made[0].Add(1)
	return r
}

// made counts the recorders this process has created and the recorder
// merges it has done (Made).
var made [2]atomic.Int64

// Made returns how many recorders this process has created and how many
// recorder merges it has done, for tests that bracket a phase's Run with
// it: a Run must do neither between its clock reads (creating a recorder
// clears a ~270 KiB histogram, ~115 µs; merging one adds its counts,
// ~0.25 ms), but leave both to Setup and to the engine (phases/doc.go,
// "Timed loops"). It counts every goroutine's, so it means something only
// while nothing else in the process makes recorders.
func Made() (created, merged int64) { return made[0].Load(), made[1].Load() }

// Observe records one op that started at start, moved n bytes and returned
// err. It is the hot path: no allocation, no lock. A failed op is counted in
// Errors and kept out of the latency distribution, so a burst of instant
// EACCES cannot pull the percentiles down.
func (r *Recorder) Observe(start time.Time, n int, err error) {
	ns := int64(time.Since(start))
	r.observe(ns, int64(start.Sub(epoch))+ns, int64(n), err) // start and epoch are monotonic: no second clock read
}

// ObserveNs records an op whose duration is already known (ops timed by an
// external tool such as fio, or by a caller that shares one clock read
// between two ops).
//
// The op's end, for the time series, is its start as Begin, BeginAt or
// BeginOn marked it plus ns; without one, the clock is read (or, after
// NoSeries, the op is in no series).
func (r *Recorder) ObserveNs(ns, n int64, err error) {
	end := int64(0)
	if s := r.live.inflight.Load(); s != 0 {
		end = s - 1 + ns
	}
	r.observe(ns, end, n, err)
}

// observe records an op of ns that ended at end (ns since epoch; 0 if
// unknown).
func (r *Recorder) observe(ns, end, n int64, err error) {
	r.live.inflight.Store(0)
	if err != nil {
		r.Errors++
		r.live.done.Add(1)
		return
	}
	if ns < LowestNs {
		ns = LowestNs
	} else if ns > HighestNs {
		ns = HighestNs
	}
	r.pend[r.npend] = ns
	if r.npend++; r.npend == pendCap {
		r.flush()
	}
	if ns > r.MaxNs {
		r.MaxNs = ns
	}
	r.Ops++
	r.live.done.Store(r.Ops + r.Errors)
	if !r.series.off {
		if end == 0 {
			end = int64(time.Since(epoch))
		}
		r.series.add(end-ns, end, n)
	}
	if n > 0 {
		r.Bytes += n
		r.live.bytes.Store(r.Bytes)
	}
}

// Live is a consistent-enough view of a recorder taken from another
// goroutine while its worker runs.
type Live struct {
	Op       string
	Done     int64         // ops finished (including failed ones)
	Bytes    int64         // bytes moved by successful ops
	InFlight time.Duration // how long the current op has been running; 0 if none
	Target   string        // file of the current op, if the phase named it
}

// Snapshot reads the live counters; safe to call concurrently with Observe.
func (r *Recorder) Snapshot(now time.Time) Live {
	l := Live{Op: r.Op, Done: r.live.done.Load(), Bytes: r.live.bytes.Load()}
	if s := r.live.inflight.Load(); s != 0 {
		l.InFlight = now.Sub(epoch) - time.Duration(s-1)
		if t := r.live.target.Load(); t != nil {
			l.Target = *t
			if u := r.live.under.Load(); u != nil && l.Target != "" && !WholeTarget(l.Target) {
				l.Target = joinTarget(*u, l.Target)
			}
		}
	}
	return l
}

// WholeTarget tells whether an op's target names its file or object by
// itself: an absolute path, or a URL (s3://bucket/key).
func WholeTarget(target string) bool {
	return filepath.IsAbs(target) || strings.Contains(target, "://")
}

// joinTarget puts a relative target below dir, a directory path or a URL
// prefix; filepath.Join would turn s3://b/p into s3:/b/p.
func joinTarget(dir, target string) string {
	if strings.Contains(dir, "://") {
		return strings.TrimSuffix(dir, "/") + "/" + target
	}
	return filepath.Join(dir, target)
}

// Merge adds o's observations into r.
func (r *Recorder) Merge(o *Recorder) {
	made[1].Add(1)
	r.Hist().Merge(o.Hist())
	r.Ops += o.Ops
	r.Bytes += o.Bytes
	r.Errors += o.Errors
	r.series.merge(&o.series)
	if o.MaxNs > r.MaxNs {
		r.MaxNs = o.MaxNs
	}
}

// Set holds one Recorder per op type: a worker's (or a rank's) measurements.
// Lookups happen when a phase is set up, never between two timestamps.
// The map is guarded so a watchdog may list recorders while a worker adds
// one; the recorders themselves are not.
type Set struct {
	mu     sync.Mutex
	recs   map[string]*Recorder
	origin *atomic.Int64 // the phase's start for every recorder's series (StartSeries)
}

// NewSet returns an empty set.
func NewSet() *Set { return &Set{recs: map[string]*Recorder{}, origin: new(atomic.Int64)} }

// Op returns the recorder for op, creating it on first use.
func (s *Set) Op(op string) *Recorder {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.recs[op]; ok {
		return r
	}
	r := newRecorder(op, s.origin)
	s.recs[op] = r
	return r
}

// Snapshot reads every recorder's live counters.
func (s *Set) Snapshot(now time.Time) []Live {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Live, 0, len(s.recs))
	for _, r := range s.recs {
		out = append(out, r.Snapshot(now))
	}
	return out
}

// Ops returns the op names in sorted order.
func (s *Set) Ops() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.recs))
	for n := range s.recs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Get returns the recorder for op, or nil.
func (s *Set) Get(op string) *Recorder {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recs[op]
}

// Merge adds every recorder of o into s.
func (s *Set) Merge(o *Set) {
	for _, name := range o.Ops() {
		s.Op(name).Merge(o.Get(name))
	}
}

// Totals sums ops, bytes and errors over every op type, and the largest
// single latency.
func (s *Set) Totals() (ops, bytes, errors, maxNs int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
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

// RecorderBytes is what one Recorder holds in memory (its histogram's
// counts, its buffer of pending latencies and its time series): the unit of a phase's
// memory estimate, one per op type and worker.
var RecorderBytes = int64(CountsLen)*8 + pendCap*8 + 2*SeriesCap*8 + 1024
