package phases

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/report"
	"github.com/prism-hpc/prism/spmd"
)

// Phase is one kind of workload. The engine calls, on every rank of the
// phase's communicator and once per iteration:
//
//	Setup (untimed) → barrier → Run (timed) → barrier → Verify → Teardown
//
// and agrees on errors after each step, so every rank leaves a failing
// phase together. Run must time each operation into env.Recorder(op) and
// return promptly when ctx is cancelled. Teardown removes only what the
// phase created and runs even when an earlier step failed.
type Phase interface {
	// Config returns a pointer to the phase's parameter struct, pre-filled
	// with defaults; the plan's [[phase]] table is decoded into it. Every
	// field carries a toml tag and a doc tag (shown by `prism list`).
	Config() any
	Setup(ctx context.Context, env *Env) error
	Run(ctx context.Context, env *Env) error
	Verify(ctx context.Context, env *Env) error
	Teardown(ctx context.Context, env *Env) error
}

// Validator is implemented by configs that check their values after
// decoding; return a *KeyError so the message points at the plan line.
type Validator interface {
	Validate() error
}

// Footprinter is implemented by phases that can say, before running, how
// many files and bytes each rank will create (shown by `prism check`).
type Footprinter interface {
	Footprint(ranks int) Footprint
}

// Footprint is what one rank of a phase writes, at its peak.
type Footprint struct {
	Files int64
	Bytes int64
}

// MetricLiner is implemented by phases that report figures of merit the
// way another tool prints them (MLPerf Storage's "[METRIC] …" lines); rank 0
// prints them after the summary, computed from the phase's aggregate result.
type MetricLiner interface {
	MetricLines(res *report.PhaseResult) []string
}

// Verdicter is implemented by phases whose own figures carry a pass
// criterion (train: AU at least the preset's au_threshold, as in MLPerf
// Storage). Rank 0 adds its verdicts to the plan's [phase.expect] ones; a
// plan verdict on the same metric replaces the phase's (so min_au = 0
// relaxes train's). A missed one fails the phase like any expectation.
type Verdicter interface {
	Verdicts(res *report.PhaseResult) []report.Verdict
}

// Headliner is implemented by phases whose headline rates are another
// tool's own figures (fio's bandwidth and IOPS from its JSON, over its own
// runtime, which leaves out its start-up). Rank 0 calls Headline once the
// aggregate is filled and the metrics merged; it may replace the phase's
// and its op types' bytes_per_sec and ops_per_sec.
type Headliner interface {
	Headline(res *report.PhaseResult)
}

// Artefacter is implemented by phases that keep another tool's own output
// (fio's JSON) for the results directory: on the phase's rank 0, Artefacts
// maps result file names (one path component) to their contents, and rank
// 0 writes them beside the manifest.
type Artefacter interface {
	Artefacts() map[string][]byte
}

// Fadviser is implemented by phases whose timed run reads file data that
// Setup wrote, and that can evict it per file with posix_fadvise(DONTNEED)
// once Setup is done (the "fadvise" cache policy, and what "auto" means
// without root). Fadvises reports whether this configuration reads such
// data (a write-only job has nothing to evict); the engine applies the
// fadvise policy only when it returns true, and records why not otherwise.
type Fadviser interface {
	Fadvises() bool
}

// OpCounter is implemented by phases that know how many timed ops this
// rank records per iteration, so progress can show a percentage and an
// ETA. Each rank reports its own count to rank 0 with its progress, so
// ranks may differ (a ddp_save's rank 0 writes the whole checkpoint, the
// others nothing). Progress reads it after Setup, so a count that Setup
// works out (the checkpoint kinds count their planned calls) is fine; the
// start line ("N ops per rank") shows what it returned before the phase's
// first Setup, the count the plan fixes for every rank, and leaves out a 0.
type OpCounter interface {
	ExpectedOps() int64
}

// Runtimer is implemented by phases whose Run is bounded by time
// (blockio's time_based runtime), so progress can show elapsed over
// runtime; 0 means this configuration is not time-bounded.
type Runtimer interface {
	Runtime() time.Duration
}

// MemoryEstimator is implemented by phases that can say, before running,
// how many bytes one rank holds at its peak (buffers, prepared names,
// histograms of every worker, model tensors) on a job of ranks ranks, and
// which keys to lower when that is too much, so that a plan the node
// cannot hold is refused before it runs ([plan] max_memory) instead of
// ending in the kernel's OOM killer.
type MemoryEstimator interface {
	Memory(ranks int) (bytes int64, keys string)
}

// Resolver is implemented by phases whose parameters, as they run, are
// not all what the plan wrote: a preset fills the keys left at 0 (train's
// batch_size, mlperf_checkpoint's processes), and a phase that takes its
// input from an earlier phase of the plan uses that phase's instead of its
// own keys (untar extracts the tar phase's archive, md5_check reads the
// create_dataset's files). Resolve gets the phases before this one; the
// manifest's params and prism check show the result, so neither records a
// default that never applied.
type Resolver interface {
	Resolve(before []*Spec) Resolved
}

// Resolved is what Resolve says of a phase's keys.
type Resolved struct {
	// Set are keys whose value the phase resolved, in the config field's
	// Go type (an int, a Size, a Duration ...).
	Set map[string]any
	// Unused are keys that do not apply to this run of the phase.
	Unused []string
	// Notes say, one line each, where an inherited input comes from;
	// the manifest records them as params.resolved.
	Notes []string
	// Footprint, when not nil, replaces the phase's Footprint (an
	// inherited input's size, which the phase's own keys do not say).
	Footprint func(ranks int) Footprint
}

// Outputter is implemented by phases that leave files behind their
// Teardown on purpose, for later phases of the same run to use (a
// checkpoint for the loads after it, a dataset for md5_check and train, an
// archive for untar); the run directory's cleanup removes them at the end.
// Outputs lists them on this rank (files or directories, absolute paths).
type Outputter interface {
	Outputs() []string
}

// CacheMode is the cache policy that takes effect for one phase: what the
// engine did between Setup and the timed Run, and what a phase that
// evicts per file must do itself.
type CacheMode string

// The cache modes.
const (
	CacheNone    CacheMode = "none"        // caches left as they are
	CacheDrop    CacheMode = "drop_caches" // the engine dropped the page cache (root)
	CacheFadvise CacheMode = "fadvise"     // the phase evicts its files with posix_fadvise
)

// ErrStopped is what a step returns when it stopped because another rank
// failed (see Env.Agree); the engine does not count it as this rank's
// failure, since that rank reports the cause itself.
var ErrStopped = errors.New("stopped: another rank failed")

// MaxFilesPerRank bounds the files one rank of any phase creates, so a
// typo in a count fails at plan time instead of filling a filesystem.
const MaxFilesPerRank = 100_000_000

// KeyError is a bad value of one plan key.
type KeyError struct {
	Key string
	Msg string
}

func (e *KeyError) Error() string { return fmt.Sprintf("%s: %s", e.Key, e.Msg) }

// Env is what a phase sees of the run on one rank.
type Env struct {
	Comm      spmd.Comm // the phase's communicator (a sub-communicator in sweeps)
	Rank      int       // rank within Comm
	WorldRank int       // rank in the whole job, as errors and reports name it
	Size      int       // ranks within Comm
	Host      string
	Name      string // the phase's name in the plan
	Kind      string
	Dir       string // the phase's directory, shared by its ranks; created by the engine
	RankDir   string // Dir/r<rank>, this rank's private directory; created by the engine
	// Shared and Own are Dir and RankDir opened once by the engine. Every
	// file operation of a phase goes through them (pio.Dir's *at calls with
	// names relative to the descriptor), so that a directory renamed or
	// swapped for a link on the path while the phase runs is never
	// followed; Dir and RankDir name them in messages.
	Shared, Own *pio.Dir
	// Run is the run directory's handle, and Rel the phase directory's
	// name below it: what a phase records so that later phases, on any
	// rank, open its outputs relative to Run (Run.OpenPath).
	Run *pio.Dir
	Rel string
	// Workdir is the workdir's handle (the run directory's parent), for
	// the one tree prism keeps outside a run directory: persistent
	// datasets and checkpoints under <workdir>/prism-datasets/ (a phase's
	// persist and dataset keys), which no run's cleanup removes. Nil
	// outside Execute.
	Workdir   *pio.Dir
	Index     int // the phase's 0-based position in the plan
	Iteration int // 0-based, counting warm-up iterations
	Warmup    bool
	// RunID is the run's id: the name of its run directory (prism-<RunID>)
	// and of its prefix in object storage.
	RunID string
	// CoordinationTimeout is the plan's coordination_timeout: the longest
	// wait for another rank, and the default of a wait for another job
	// (persist_wait).
	CoordinationTimeout time.Duration
	// Storage is the plan's storage options ([plan] storage and s3_*), for
	// phases that can run over object storage (StorageOptions.Over).
	Storage StorageOptions
	// Cache is the cache policy that takes effect for this phase.
	Cache CacheMode
	// ProgressEvery is how often live progress samples the Run; 0 when
	// progress is off. A phase that feeds LiveOutside needs no fresher
	// totals than that.
	ProgressEvery time.Duration
	// Log receives warnings (stderr); phases never write to stdout.
	Log io.Writer
	// State is shared by the phases of one run on this rank, so a load
	// phase can find what an earlier save phase wrote.
	State map[string]any

	set     *report.Set
	metrics map[string]float64
	storage *report.StorageInfo
	spec    *Spec

	mu    sync.Mutex
	extra []*report.Set // worker sets handed out by NewSet, watched live
	// merged are the live ops and bytes of the worker sets merged since
	// the Run started: a merged set's live counters stay behind in it, and
	// progress must not see the Run's ops fall (monitor.go).
	merged [2]int64
	// outside are the running totals of ops another process does for the
	// Run (LiveOutside): fio's, which prism's recorders see only at its end.
	outside [2]int64
	side    *report.Set // recorders of untimed ops (Untimed), watched, never reported
	stalls  int64
	stuck   bool         // an op was abandoned past op_timeout
	idle    atomic.Int64 // ns of this iteration's Run spent idle (Idle)
}

// Idle tells the engine that the Run spent d on purpose doing nothing
// (mlperf_checkpoint's time_between_checkpoints, a simulated compute
// pause): the iteration's wall time, and so the phase's rates, leave it
// out. The longest idle of any rank is taken off the iteration's wall.
func (e *Env) Idle(d time.Duration) { e.idle.Add(int64(d)) }

// LiveOutside sets the running totals (ops, bytes) of the Run's ops that
// happen outside prism's recorders, in another process (fio, whose
// results are recorded when it exits), for live progress to add to the
// recorders'. Set them back to 0, 0 before recording those ops, so that
// progress does not count them twice.
func (e *Env) LiveOutside(ops, bytes int64) {
	e.mu.Lock()
	e.outside = [2]int64{ops, bytes}
	e.mu.Unlock()
}

// NewSet returns a recorder set for one worker goroutine (iodepth > 1,
// several jobs). The stall watchdog and progress printer see it while the
// worker runs. A set the Run has not merged (Merge) when it returns is
// merged by the engine once the iteration's clock has stopped, which is
// where a Run should leave it: merging creates the rank's recorder for
// each op (a ~270 KiB histogram, faulted in) and adds the counts, ~0.25 ms
// per op type measured inside a 10 ms Run (docs/PERFORMANCE.md).
func (e *Env) NewSet() *report.Set {
	s := e.set.Sibling() // its series count from the phase's start
	e.mu.Lock()
	e.extra = append(e.extra, s)
	e.mu.Unlock()
	return s
}

// mergeWatched merges every set NewSet handed out that the Run left
// unmerged into the rank's set, after the Run's clock has stopped.
func (e *Env) mergeWatched() {
	e.mu.Lock()
	sets := e.extra
	e.extra = nil
	now := time.Now()
	for _, s := range sets {
		for _, l := range s.Snapshot(now) {
			e.merged[0] += l.Done
			e.merged[1] += l.Bytes
		}
	}
	e.mu.Unlock()
	for _, s := range sets {
		e.set.Merge(s)
	}
}

// live snapshots every recorder of the current step.
func (e *Env) live(now time.Time) []report.Live {
	e.mu.Lock()
	sets := append([]*report.Set{e.set, e.side}, e.extra...)
	e.mu.Unlock()
	var out []report.Live
	for _, s := range sets {
		if s != nil {
			out = append(out, s.Snapshot(now)...)
		}
	}
	return out
}

func (e *Env) addStall() {
	e.mu.Lock()
	e.stalls++
	e.mu.Unlock()
}

// Untimed returns a recorder for an untimed op of Setup, Verify or
// Teardown (creating the files to list, removing what the phase made):
// the stall watchdog and op_timeout see an op stuck in it as they see a
// timed one, and its numbers go into no result. Call it outside the loop.
func (e *Env) Untimed(op string) *report.Recorder {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.side == nil {
		e.side = report.NewSet()
	}
	return e.side.Op(op)
}

// Recorder returns this rank's recorder for op in the current iteration.
// Call it in Setup or before a loop, not between two clock reads.
func (e *Env) Recorder(op string) *report.Recorder { return e.set.Op(op) }

// Merge adds a worker goroutine's recorders into the rank's and stops
// watching them (a set merged twice would count twice).
func (e *Env) Merge(s *report.Set) {
	e.mu.Lock()
	for i, x := range e.extra {
		if x == s {
			for _, l := range s.Snapshot(time.Now()) {
				e.merged[0] += l.Done
				e.merged[1] += l.Bytes
			}
			e.extra = append(e.extra[:i], e.extra[i+1:]...)
			break
		}
	}
	e.mu.Unlock()
	e.set.Merge(s)
}

// SetStorage records where the phase's data went (object storage: URI, run
// prefix, client settings) for the manifest; rank 0's is recorded.
func (e *Env) SetStorage(s *report.StorageInfo) { e.storage = s }

// SetMetric records a phase-specific figure (e.g. au_percent) for this rank.
func (e *Env) SetMetric(name string, v float64) { e.metrics[name] = v }

// Errorf returns an error prefixed with the phase kind, name and rank, the
// context every phase error must carry.
func (e *Env) Errorf(format string, args ...any) error {
	return fmt.Errorf("%s %q: rank %d: %w", e.Kind, e.Name, e.WorldRank, fmt.Errorf(format, args...))
}

// Agree is the error agreement of a collective piece of work inside a step
// (every rank wrote its shard; now rank 0 writes the metadata): each rank
// says whether it failed, and all learn whether any did, so no rank waits
// in a later collective for one that gave up. It returns the local error
// when this rank failed, ErrStopped when only another rank did, the
// communicator's error when the agreement itself failed, or nil.
func (e *Env) Agree(ctx context.Context, local error) error {
	flag := []int64{0}
	if local != nil {
		flag[0] = 1
	}
	if err := e.Comm.AllreduceInt64(ctx, spmd.Max, flag); err != nil {
		if local != nil {
			return local
		}
		return err
	}
	switch {
	case local != nil:
		return local
	case flag[0] != 0:
		return ErrStopped
	}
	return nil
}

// ResetRecorders gives the Env fresh recorders and metrics, as the engine
// does at the start of every iteration; for drivers built on NewEnv.
func (e *Env) ResetRecorders() {
	e.mu.Lock()
	e.set, e.extra = report.NewSet(), nil
	e.mu.Unlock()
	e.metrics = map[string]float64{}
}

// verifyDirs reports a phase or rank directory whose name no longer leads
// to the directory the engine opened (*pio.ReplacedError).
func (e *Env) verifyDirs() error {
	for _, d := range []*pio.Dir{e.Own, e.Shared} {
		if d == nil {
			continue
		}
		if err := d.Verify(); err != nil {
			return e.Errorf("%w", err)
		}
	}
	return nil
}

// RunRel is name (a path below the phase directory) relative to the run
// directory, for Run.OpenPath.
func (e *Env) RunRel(name string) string {
	if e.Rel == "" {
		return name
	}
	return e.Rel + "/" + name
}

// Close releases the directory handles of an Env made by NewEnv.
func (e *Env) Close() {
	if e.Own != nil {
		e.Own.Close()
	}
	if e.Shared != nil && e.Shared != e.Own {
		e.Shared.Close()
	}
}

// NewEnv returns an Env for driving one phase's methods directly, on a
// single rank and outside Execute (tests, benchmarks, tools): dir (which
// must exist) is both the phase's and the rank's directory, and no cache
// policy applies. It panics when dir cannot be opened.
func NewEnv(kind, dir string, log io.Writer) *Env {
	if log == nil {
		log = io.Discard
	}
	d, err := pio.OpenDir(dir)
	if err != nil {
		panic(fmt.Sprintf("phases.NewEnv: %v", err))
	}
	return &Env{Comm: spmd.NewSingle(), Size: 1, Host: "localhost", Name: kind, Kind: kind, Dir: dir, RankDir: dir,
		Shared: d, Own: d, Run: d, Cache: CacheNone, CoordinationTimeout: defaultCoordinationTimeout, Log: log, State: map[string]any{}, set: report.NewSet(), metrics: map[string]float64{}}
}
