package phases

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prism-hpc/prism/spmd"
)

// sleepy is a test phase whose one op sleeps, standing in for a storage
// call that hangs in the kernel.
type sleepy struct {
	cfg struct {
		Sleep Duration `toml:"sleep" doc:"how long the op takes"`
	}
	target string
}

func (p *sleepy) Config() any { return &p.cfg }
func (p *sleepy) Setup(ctx context.Context, env *Env) error {
	p.target = env.RankDir + "/slow"
	return nil
}
func (p *sleepy) Verify(ctx context.Context, env *Env) error { return nil }
func (p *sleepy) Teardown(context.Context, *Env) error       { return nil }
func (p *sleepy) Run(ctx context.Context, env *Env) error {
	rec := env.Recorder("open")
	start := rec.BeginOn(&p.target)
	time.Sleep(time.Duration(p.cfg.Sleep)) // deliberately deaf to ctx, like a stuck syscall
	rec.Observe(start, 0, nil)
	return nil
}

func runSleepy(t *testing.T, plan string) (*Outcome, string, time.Duration) {
	t.Helper()
	reg := NewRegistry()
	reg.Register(Kind{Name: "sleepy", Family: "test", New: func() Phase { return &sleepy{} }})
	p, err := DecodePlan(reg, "sleepy.toml", []byte(plan))
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	start := time.Now()
	out, err := Execute(context.Background(), Options{Plan: p, Comm: spmd.NewSingle(), Workdir: t.TempDir(), Results: t.TempDir(), Stdout: io.Discard, Stderr: &stderr, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return out, stderr.String(), time.Since(start)
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
	if n := strings.Count(stderr, "stall:"); n != 1 {
		t.Errorf("the same stuck op reported %d times", n)
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
