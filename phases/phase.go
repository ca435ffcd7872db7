package phases

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

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
	Iteration int    // 0-based, counting warm-up iterations
	Warmup    bool
	// Cache is the cache policy that takes effect for this phase:
	// "drop_caches", "fadvise" or "none".
	Cache string
	// Log receives warnings (stderr); phases never write to stdout.
	Log io.Writer
	// State is shared by the phases of one run on this rank, so a load
	// phase can find what an earlier save phase wrote.
	State map[string]any

	set        *report.Set
	metrics    map[string]float64
	phaseIndex int
	spec       *Spec

	mu     sync.Mutex
	extra  []*report.Set // worker sets handed out by NewSet, watched live
	stalls int64
	stuck  bool // an op was abandoned past op_timeout
}

// NewSet returns a recorder set for one worker goroutine (iodepth > 1,
// several jobs). The stall watchdog and progress printer see it while the
// worker runs; Merge it into the rank's set when the worker is done.
func (e *Env) NewSet() *report.Set {
	s := report.NewSet()
	e.mu.Lock()
	e.extra = append(e.extra, s)
	e.mu.Unlock()
	return s
}

// live snapshots every recorder of the current step.
func (e *Env) live(now time.Time) []report.Live {
	e.mu.Lock()
	sets := append([]*report.Set{e.set}, e.extra...)
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

// Recorder returns this rank's recorder for op in the current iteration.
// Call it in Setup or before a loop, not between two clock reads.
func (e *Env) Recorder(op string) *report.Recorder { return e.set.Op(op) }

// Merge adds a worker goroutine's recorders into the rank's and stops
// watching them (a set merged twice would count twice).
func (e *Env) Merge(s *report.Set) {
	e.mu.Lock()
	for i, x := range e.extra {
		if x == s {
			e.extra = append(e.extra[:i], e.extra[i+1:]...)
			break
		}
	}
	e.mu.Unlock()
	e.set.Merge(s)
}

// SetMetric records a phase-specific figure (e.g. au_percent) for this rank.
func (e *Env) SetMetric(name string, v float64) { e.metrics[name] = v }

// Errorf returns an error prefixed with the phase kind, name and rank, the
// context every phase error must carry.
func (e *Env) Errorf(format string, args ...any) error {
	return fmt.Errorf("%s %q: rank %d: %w", e.Kind, e.Name, e.WorldRank, fmt.Errorf(format, args...))
}
