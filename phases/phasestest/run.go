package phasestest

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/report"
	"github.com/prism-hpc/prism/spmd"
)

// Option changes how Run runs a plan.
type Option func(*config)

type config struct {
	ranks       int
	workdir     string
	rankDirs    []string
	results     string
	file        string
	ctx         context.Context
	expectErr   bool
	mayLeave    bool
	hosts       []string
	interrupted func() os.Signal
	progress    phases.Progress
	every       time.Duration
}

// Ranks runs the plan on n in-process ranks (default 1). With n > 1 they
// coordinate through a rendezvous in a temporary directory, each with its
// own decoded copy of the plan, as n processes would.
func Ranks(n int) Option { return func(c *config) { c.ranks = n } }

// Hosts names the host of each rank (default: every rank on "localhost"),
// for tests of per-host behaviour.
func Hosts(h ...string) Option { return func(c *config) { c.hosts = h } }

// Workdir runs in dir instead of a fresh t.TempDir().
func Workdir(dir string) Option { return func(c *config) { c.workdir = dir } }

// RankWorkdirs gives rank r the workdir dirs[r] (the ranks after them get
// the common one), as a node whose mount is missing would see a different
// filesystem under the same path.
func RankWorkdirs(dirs ...string) Option { return func(c *config) { c.rankDirs = dirs } }

// File names the plan in messages (default "test.toml").
func File(name string) Option { return func(c *config) { c.file = name } }

// Context runs the plan under ctx (default context.Background()).
func Context(ctx context.Context) Option { return func(c *config) { c.ctx = ctx } }

// ExpectError lets Execute return an error on a rank (a coordination
// failure, a plan the job cannot run) instead of failing the test; the
// errors are in Result.Errs.
func ExpectError() Option { return func(c *config) { c.expectErr = true } }

// MayLeaveRunDir skips the check that the run directory is gone after the
// run (for plans with keep = true, or runs that abandon a stuck op).
func MayLeaveRunDir() Option { return func(c *config) { c.mayLeave = true } }

// Interrupted is the engine's Options.Interrupted on every rank.
func Interrupted(f func() os.Signal) Option { return func(c *config) { c.interrupted = f } }

// Progress is the engine's Options.Progress and ProgressEvery on every
// rank (default none).
func Progress(mode phases.Progress, every time.Duration) Option {
	return func(c *config) { c.progress, c.every = mode, every }
}

// Result is what a run produced.
type Result struct {
	Outcome  *phases.Outcome  // rank 0's
	Manifest *report.Manifest // rank 0's, nil when none was written
	Workdir  string
	Results  string
	Stdout   string  // rank 0's
	Stderr   string  // every rank's, rank 0 first
	Errs     []error // per rank, from Execute
	Elapsed  time.Duration
}

// Phase returns the manifest entry of the phase named name (the first, in
// a sweep), failing the test when there is none.
func (r *Result) Phase(t testing.TB, name string) *report.PhaseResult {
	t.Helper()
	if r.Manifest == nil {
		t.Fatalf("no manifest; stderr:\n%s", r.Stderr)
	}
	return Phase(t, r.Manifest, name)
}

// Phase returns m's entry of the phase named name (the first, in a sweep),
// failing the test when there is none.
func Phase(t testing.TB, m *report.Manifest, name string) *report.PhaseResult {
	t.Helper()
	for i := range m.Phases {
		if m.Phases[i].Name == name {
			return &m.Phases[i]
		}
	}
	t.Fatalf("no phase %q in the manifest", name)
	return nil
}

// Run decodes plan (TOML text; a missing [plan] table gets one with
// drop_caches = "none") against reg and executes it on the ranks the
// options ask for, with the workdir and results directories in
// t.TempDir(). It fails the test when the plan does not decode, when a rank
// returns an error (unless ExpectError), and when the run directory is
// still there afterwards (unless MayLeaveRunDir or keep = true). Phase
// failures are in the Result for the test to assert.
func Run(t testing.TB, reg *phases.Registry, plan string, opts ...Option) *Result {
	t.Helper()
	c := config{ranks: 1, file: "test.toml", ctx: context.Background()}
	for _, o := range opts {
		o(&c)
	}
	if c.workdir == "" {
		c.workdir = t.TempDir()
	}
	c.results = t.TempDir()
	if !strings.Contains(plan, "[plan]") {
		plan = "[plan]\ndrop_caches = \"none\"\n" + plan
	}
	plans := make([]*phases.Plan, c.ranks)
	for r := range plans {
		p, err := phases.DecodePlan(reg, c.file, []byte(plan))
		if err != nil {
			t.Fatalf("plan: %v", err)
		}
		plans[r] = p
	}
	comms := make([]spmd.Comm, c.ranks)
	if c.ranks == 1 {
		comms[0] = spmd.NewSingle()
	} else {
		dir := t.TempDir()
		errs := make([]error, c.ranks)
		var wg sync.WaitGroup
		for r := range comms {
			host := "localhost"
			if r < len(c.hosts) {
				host = c.hosts[r]
			}
			wg.Go(func() {
				rc, err := spmd.NewRendezvous(c.ctx, spmd.RendezvousConfig{Dir: dir, Rank: r, Size: c.ranks, Host: host,
					Timeout: time.Duration(plans[r].Header.CoordinationTimeout)})
				comms[r], errs[r] = rc, err
			})
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: rendezvous: %v", r, err)
			}
		}
	}
	res := &Result{Workdir: c.workdir, Results: c.results, Errs: make([]error, c.ranks)}
	outs := make([]*phases.Outcome, c.ranks)
	stdouts := make([]bytes.Buffer, c.ranks)
	stderrs := make([]syncBuffer, c.ranks)
	start := time.Now()
	var wg sync.WaitGroup
	for r := range comms {
		workdir := c.workdir
		if r < len(c.rankDirs) {
			workdir = c.rankDirs[r]
		}
		wg.Go(func() {
			defer comms[r].Close()
			outs[r], res.Errs[r] = phases.Execute(c.ctx, phases.Options{
				Plan: plans[r], Comm: comms[r], RankSource: "phasestest", Workdir: workdir, Results: c.results,
				Version: "test", Stdout: &stdouts[r], Stderr: &stderrs[r], Interrupted: c.interrupted,
				Progress: c.progress, ProgressEvery: c.every,
			})
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Outcome = outs[0]
	if outs[0] != nil {
		res.Manifest = outs[0].Manifest
	}
	res.Stdout = stdouts[0].String()
	var all strings.Builder
	for r := range stderrs {
		all.WriteString(stderrs[r].String())
	}
	res.Stderr = all.String()
	for r, err := range res.Errs {
		if err != nil && !c.expectErr {
			t.Fatalf("rank %d: %v\nstderr:\n%s", r, err, res.Stderr)
		}
	}
	if !c.mayLeave && !plans[0].Header.Keep {
		for _, dir := range append([]string{c.workdir}, c.rankDirs...) {
			if left := LeftBehind(dir); len(left) != 0 {
				t.Errorf("run directory left behind in the workdir: %v\nstderr:\n%s", left, res.Stderr)
			}
		}
	}
	return res
}

// LeftBehind lists the run directories (prism-*) in workdir.
func LeftBehind(workdir string) []string {
	left, _ := filepath.Glob(filepath.Join(workdir, "prism-*"))
	return left
}

// syncBuffer is a bytes.Buffer that the engine's monitor goroutines and
// the rank itself may write at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var _ io.Writer = (*syncBuffer)(nil)

// Env returns an Env for driving one phase's methods directly on one rank,
// in a fresh t.TempDir().
func Env(t testing.TB, kind string) *phases.Env { return EnvIn(t, kind, t.TempDir()) }

// EnvIn is Env in dir (a mounted filesystem, say); its directory handles
// are closed when the test ends, so the filesystem can be unmounted.
func EnvIn(t testing.TB, kind, dir string) *phases.Env {
	env := phases.NewEnv(kind, dir, io.Discard)
	t.Cleanup(env.Close)
	return env
}
