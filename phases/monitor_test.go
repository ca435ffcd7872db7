package phases_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/phasestest"
)

// sleepy is a test phase whose one op sleeps, standing in for a storage
// call that hangs in the kernel.
type sleepy struct {
	cfg struct {
		Sleep phases.Duration `toml:"sleep" doc:"how long the op takes"`
	}
	target string
}

func (p *sleepy) Config() any { return &p.cfg }
func (p *sleepy) Setup(ctx context.Context, env *phases.Env) error {
	p.target = env.RankDir + "/slow"
	return nil
}
func (p *sleepy) Verify(ctx context.Context, env *phases.Env) error { return nil }
func (p *sleepy) Teardown(context.Context, *phases.Env) error       { return nil }
func (p *sleepy) Run(ctx context.Context, env *phases.Env) error {
	rec := env.Recorder("open")
	start := rec.BeginOn(&p.target)
	time.Sleep(time.Duration(p.cfg.Sleep)) // deliberately deaf to ctx, like a stuck syscall
	rec.Observe(start, 0, nil)
	return nil
}

func runSleepy(t *testing.T, plan string) (*phases.Outcome, string, time.Duration) {
	t.Helper()
	reg := phases.NewRegistry()
	reg.Register(phases.Kind{Name: "sleepy", Family: "test", New: func() phases.Phase { return &sleepy{} }})
	// An op abandoned past op_timeout leaves the run directory in place.
	res := phasestest.Run(t, reg, plan, phasestest.File("sleepy.toml"), phasestest.MayLeaveRunDir())
	return res.Outcome, res.Stderr, res.Elapsed
}

// TestStallReportedWhileStuck: an op slower than stall_after is reported
// with rank, op and file while it runs, and counted in the manifest.
func TestStallReportedWhileStuck(t *testing.T) {
	out, stderr, _ := runSleepy(t, "[plan]\ndrop_caches = \"none\"\nstall_after = \"300ms\"\n[[phase]]\nkind = \"sleepy\"\nsleep = \"1500ms\"\n")
	if out.Status != "passed" {
		t.Fatalf("status %s", out.Status)
	}
	if !strings.Contains(stderr, "stall: rank 0: sleepy") || !strings.Contains(stderr, "op open on ") || !strings.Contains(stderr, "/slow in flight for") {
		t.Fatalf("no stall report:\n%s", stderr)
	}
	// Counted by the op's own words: on a loaded disk the untimed cleanup
	// may outlast stall_after too, and is rightly reported apart.
	if n := strings.Count(stderr, "op open on "); n != 1 {
		t.Errorf("the same stuck op reported %d times:\n%s", n, stderr)
	}
	if got := out.Manifest.Phases[0].Metrics["stalls"]; got != 1 {
		t.Errorf("manifest stalls = %v", got)
	}
}

// TestOpTimeoutFailsInsteadOfHanging: an op past op_timeout fails the
// phase and the run ends although the op never returns in time.
func TestOpTimeoutFailsInsteadOfHanging(t *testing.T) {
	out, _, took := runSleepy(t, "[plan]\ndrop_caches = \"none\"\n[[phase]]\nkind = \"sleepy\"\nsleep = \"20s\"\nop_timeout = \"1s\"\n[[phase]]\nkind = \"sleepy\"\nsleep = \"1ms\"\n")
	if took > 15*time.Second {
		t.Fatalf("the run waited for the stuck op (%v)", took)
	}
	ph := out.Manifest.Phases
	if out.Status != "failed" || ph[0].Status != "failed" || !strings.Contains(ph[0].Error, "op_timeout = 1s exceeded") || !strings.Contains(ph[0].Error, "/slow") {
		t.Fatalf("status %s phase %s error %q", out.Status, ph[0].Status, ph[0].Error)
	}
	if ph[1].Status != "skipped" {
		t.Errorf("next phase %s", ph[1].Status)
	}
}

// paced is a test phase whose ranks do different numbers of ops, one per
// millisecond: rank r does (r+1) × ops, moving 1 KiB each.
type paced struct {
	cfg struct {
		Ops int `toml:"ops" doc:"ops of rank 0; rank r does (r+1) times as many"`
	}
}

func (p *paced) Config() any                                 { return &p.cfg }
func (p *paced) Setup(context.Context, *phases.Env) error    { return nil }
func (p *paced) Verify(context.Context, *phases.Env) error   { return nil }
func (p *paced) Teardown(context.Context, *phases.Env) error { return nil }
func (p *paced) Run(ctx context.Context, env *phases.Env) error {
	rec := env.Recorder("op")
	for i := 0; i < (env.WorldRank+1)*p.cfg.Ops; i++ {
		start := rec.Begin()
		time.Sleep(time.Millisecond)
		rec.Observe(start, 1024, nil)
	}
	return nil
}

func pacedRegistry() *phases.Registry {
	reg := phases.NewRegistry()
	reg.Register(phases.Kind{Name: "paced", Family: "test", New: func() phases.Phase { return &paced{} }})
	return reg
}

// progressLines returns the lines of stderr that start with label.
func progressLines(stderr, label string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, label) {
			out = append(out, l)
		}
	}
	return out
}

// TestProgressSumsEveryRank: rank 0's progress counts every rank's ops, not
// its own times the ranks: with rank 1 doing twice rank 0's ops, the last
// line of the Run says 3 × ops, and no line ever counts more.
func TestProgressSumsEveryRank(t *testing.T) {
	res := phasestest.Run(t, pacedRegistry(), "[[phase]]\nkind = \"paced\"\nops = 40\n",
		phasestest.Ranks(2), phasestest.Progress(phases.ProgressLine, 10*time.Millisecond))
	if res.Outcome.Status != "passed" {
		t.Fatalf("status %s\n%s", res.Outcome.Status, res.Stderr)
	}
	if got := progressLines(res.Stderr, "[1/1] paced on 2 ranks: 1 iteration"); len(got) != 1 {
		t.Fatalf("start line: %q\nstderr:\n%s", got, res.Stderr)
	}
	lines := progressLines(res.Stderr, "[1/1] paced:")
	if len(lines) == 0 || !strings.HasPrefix(lines[len(lines)-1], "[1/1] paced: done, 120 ops 120KiB") {
		t.Fatalf("last line is not the sum of both ranks (40 + 80 ops):\n%s", res.Stderr)
	}
	t.Logf("%d lines, the first %q", len(lines), lines[0])
	last := int64(-1)
	for _, l := range lines[:len(lines)-1] {
		var el string
		var ops int64
		if _, err := fmt.Sscanf(l, "[1/1] paced: %s %d ops", &el, &ops); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if ops < last || ops > 120 {
			t.Errorf("ops went from %d to %d (of 120): %q", last, ops, l)
		}
		last = ops
	}
}

// TestProgressNone: without progress the engine prints no phase lines.
func TestProgressNone(t *testing.T) {
	res := phasestest.Run(t, pacedRegistry(), "[[phase]]\nkind = \"paced\"\nops = 5\n", phasestest.Ranks(2))
	if strings.Contains(res.Stderr, "[1/1]") {
		t.Fatalf("progress printed:\n%s", res.Stderr)
	}
}

// TestProgressTTYClearsForMessages: with a progress line redrawn in place,
// a message printed during the Run (here a stall report) first erases the
// drawn line, so it starts at the left margin on a line of its own
// instead of after the progress figures; the line is drawn again after it.
func TestProgressTTYClearsForMessages(t *testing.T) {
	reg := phases.NewRegistry()
	reg.Register(phases.Kind{Name: "sleepy", Family: "test", New: func() phases.Phase { return &sleepy{} }})
	res := phasestest.Run(t, reg, "[plan]\ndrop_caches = \"none\"\nstall_after = \"300ms\"\n[[phase]]\nkind = \"sleepy\"\nsleep = \"1500ms\"\n",
		phasestest.Progress(phases.ProgressTTY, 20*time.Millisecond))
	if res.Outcome.Status != "passed" {
		t.Fatalf("status %s\n%q", res.Outcome.Status, res.Stderr)
	}
	const clear = "\r\x1b[K"
	at := strings.Index(res.Stderr, "prism: stall: rank 0")
	if at < 0 {
		t.Fatalf("no stall report: %q", res.Stderr)
	}
	before := res.Stderr[:at]
	if !strings.Contains(before, "[1/1] sleepy:") {
		t.Fatalf("no progress line drawn before the stall report (300 ms at 20 ms a line): %q", res.Stderr)
	}
	if !strings.HasSuffix(before, clear) {
		t.Errorf("the stall report follows the drawn line without clearing it: %q", before[max(0, len(before)-120):])
	}
	after := res.Stderr[at:]
	if !strings.Contains(after, "\r[1/1] sleepy:") {
		t.Errorf("the progress line was not drawn again after the report: %q", after)
	}
	if !strings.HasSuffix(res.Stderr, clear) && !strings.Contains(res.Stderr[strings.LastIndex(res.Stderr, "\r[1/1] sleepy:"):], clear) {
		t.Errorf("the last drawn line was not cleared at the end of the Run: %q", res.Stderr[max(0, len(res.Stderr)-200):])
	}
}

// TestIterationWallIsTheRunsOwn: an iteration's wall is read around the
// phase's Run itself, so what the engine does around the step (its
// goroutines, the stall monitor, progress, waking up when the step ends)
// is not charged to the storage. A hook stretches that part to 300 ms
// while the Run sleeps 1 ms: a wall holding the hook's time fails.
func TestIterationWallIsTheRunsOwn(t *testing.T) {
	defer phases.SetBeforeRunStep(func() { time.Sleep(300 * time.Millisecond) })()
	out, _, _ := runSleepy(t, "[plan]\ndrop_caches = \"none\"\n[[phase]]\nkind = \"sleepy\"\nsleep = \"1ms\"\niterations = 2\n")
	ph := out.Manifest.Phases[0]
	if out.Status != "passed" || len(ph.Iterations) != 2 {
		t.Fatalf("status %s, %d iterations", out.Status, len(ph.Iterations))
	}
	for i, w := range ph.Iterations {
		if !(w > 0 && w < 0.3) {
			t.Errorf("iteration %d: wall %.3f s holds the engine's 300 ms before the Run (want the Run's ~1 ms)", i, w)
		}
	}
}
