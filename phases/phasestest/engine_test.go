package phasestest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/report"
)

// tick is a test kind: each rank records ops+rank "tick" ops of bytes
// each; fail_rank makes that rank fail in fail_step ("run" or "agree");
// the other ranks, in "run", loop until they are stopped.
type tick struct{ cfg tickConfig }

type tickConfig struct {
	Ops      int    `toml:"ops" doc:"ops per rank, plus the rank number"`
	Bytes    int64  `toml:"bytes" doc:"bytes per op"`
	FailRank int    `toml:"fail_rank" doc:"rank that fails (-1: none)"`
	FailStep string `toml:"fail_step" doc:"run | agree"`
	Short    int    `toml:"short_rank" doc:"rank that does a third of the ops (-1: none)"`
	PauseMs  int    `toml:"pause_ms" doc:"milliseconds between two ops"`
	Sets     bool   `toml:"worker_sets" doc:"record into two worker sets (Env.NewSet), merge the first, leave the second to the engine"`
}

func (p *tick) Config() any                                 { return &p.cfg }
func (p *tick) Setup(context.Context, *phases.Env) error    { return nil }
func (p *tick) Verify(context.Context, *phases.Env) error   { return nil }
func (p *tick) Teardown(context.Context, *phases.Env) error { return nil }
func (p *tick) ExpectedOps() int64                          { return int64(p.cfg.Ops) }
func (p *tick) fails(env *phases.Env, step string) bool {
	return p.cfg.FailRank == env.WorldRank && p.cfg.FailStep == step
}
func (p *tick) failure(env *phases.Env, step string) error {
	return env.Errorf("%s: disk on fire", step)
}
func (p *tick) Footprint(ranks int) phases.Footprint { return phases.Footprint{} }

func (p *tick) Run(ctx context.Context, env *phases.Env) error {
	rec := env.Recorder("tick")
	var sets [2]*report.Set
	if p.cfg.Sets {
		sets = [2]*report.Set{env.NewSet(), env.NewSet()}
	}
	n := p.cfg.Ops + env.Rank
	if env.WorldRank == p.cfg.Short {
		n /= 3
	}
	for i := 0; i < n; i++ {
		if p.cfg.Sets {
			rec = sets[i%2].Op("tick")
		}
		rec.Observe(rec.Begin(), int(p.cfg.Bytes), nil)
		time.Sleep(time.Duration(p.cfg.PauseMs) * time.Millisecond)
	}
	if p.cfg.Sets {
		env.Merge(sets[0])
	}
	switch {
	case p.fails(env, "run"):
		return p.failure(env, "run")
	case p.cfg.FailStep == "run" && p.cfg.FailRank >= 0:
		// Wait to be stopped by the failing rank's alert.
		<-ctx.Done()
		return ctx.Err()
	case p.cfg.FailStep == "agree":
		var local error
		if p.fails(env, "agree") {
			local = p.failure(env, "agree")
		}
		err := env.Agree(ctx, local)
		if err != nil && !p.fails(env, "agree") && !errors.Is(err, phases.ErrStopped) {
			return fmt.Errorf("rank %d: Agree returned %v, want ErrStopped", env.WorldRank, err)
		}
		return err
	}
	return nil
}

func tickRegistry() *phases.Registry {
	reg := phases.NewRegistry()
	reg.Register(phases.Kind{Name: "tick", Family: "test", Summary: "test ops",
		New: func() phases.Phase { return &tick{cfg: tickConfig{Ops: 10, Bytes: 100, FailRank: -1, Short: -1}} }})
	return reg
}

// The gather: per-rank records in rank order, ops and bytes summed, and
// the histograms reduced (their total count is every rank's ops).
func TestGatherMergesEveryRank(t *testing.T) {
	res := Run(t, tickRegistry(), "[[phase]]\nkind = \"tick\"\nops = 10\n", Ranks(3), Hosts("a", "b", "b"))
	ph := res.Phase(t, "tick")
	if ph.Status != report.StatusPassed {
		t.Fatalf("status %s: %s", ph.Status, ph.Error)
	}
	if ph.Ops != 33 || ph.Bytes != 3300 {
		t.Errorf("ops %d bytes %d, want 33 and 3300 (10+11+12 ops of 100 B)", ph.Ops, ph.Bytes)
	}
	if ph.PerRank.Len() != 3 {
		t.Fatalf("%d per-rank rows, want 3", ph.PerRank.Len())
	}
	for r, row := range ph.PerRank.All() {
		if row.Rank != r || row.Ops != int64(10+r) || row.Host != []string{"a", "b", "b"}[r] {
			t.Errorf("per_rank[%d] = rank %d, %d ops, host %q", r, row.Rank, row.Ops, row.Host)
		}
	}
	if op, ok := ph.OpsByType["tick"]; !ok || op.Ops != 33 {
		t.Errorf("ops_by_type[tick] = %+v, want 33 ops from the reduced histogram", op)
	}
	if res.Manifest.Comm.Hosts != 2 || res.Manifest.Comm.Ranks != 3 {
		t.Errorf("comm: %d ranks on %d hosts, want 3 on 2", res.Manifest.Comm.Ranks, res.Manifest.Comm.Hosts)
	}
}

// Worker sets (Env.NewSet) a Run leaves unmerged are merged by the engine
// after the timed span, once each, iteration by iteration; a set the Run
// merged itself is not counted again.
func TestEngineMergesWorkerSetsLeftByRun(t *testing.T) {
	res := Run(t, tickRegistry(), "[[phase]]\nkind = \"tick\"\nops = 10\nworker_sets = true\nwarmup = 1\niterations = 2\n", Ranks(2))
	ph := res.Phase(t, "tick")
	if ph.Status != report.StatusPassed {
		t.Fatalf("status %s: %s", ph.Status, ph.Error)
	}
	// Two measured iterations of 10 + 11 ops.
	if op := ph.OpsByType["tick"]; ph.Ops != 42 || ph.Bytes != 4200 || op.Ops != 42 {
		t.Errorf("ops %d bytes %d ops_by_type %+v, want 42 ops and 4200 bytes", ph.Ops, ph.Bytes, op)
	}
}

// The time series: every rank's ops per second since its phase's start,
// summed at the gather; a phase of ~1.5 s has two or three intervals that
// hold every op and byte, and ops in more than one.
func TestGatherTimeline(t *testing.T) {
	res := Run(t, tickRegistry(), "[[phase]]\nkind = \"tick\"\nops = 10\npause_ms = 140\n", Ranks(3))
	ph := res.Phase(t, "tick")
	tl := ph.Timeline
	if tl == nil || tl.IntervalSeconds != 1 || tl.Len() < 2 || tl.Len() > 4 {
		t.Fatalf("timeline %+v, want 2 to 4 intervals of 1 s", tl)
	}
	var ops, bytes int64
	used := 0
	for i, v := range tl.Ops["tick"] {
		ops += v
		bytes += tl.Bytes["tick"][i]
		if v > 0 {
			used++
		}
	}
	if ops != 33 || bytes != 3300 || used < 2 {
		t.Errorf("timeline holds %d ops and %d bytes in %d intervals (%v), want 33, 3300, in 2 or more", ops, bytes, used, tl.Ops["tick"])
	}
}

// A sweep runs once per size on the first k ranks; each result counts
// only the ranks that ran.
func TestSweepRunsEachSize(t *testing.T) {
	res := Run(t, tickRegistry(), "[[phase]]\nkind = \"tick\"\nops = 5\nranks = [1, 2, 3]\n", Ranks(3))
	if n := len(res.Manifest.Phases); n != 3 {
		t.Fatalf("%d results, want one per sweep size", n)
	}
	for i, want := range []struct{ ranks, ops int64 }{{1, 5}, {2, 11}, {3, 18}} {
		ph := res.Manifest.Phases[i]
		if int64(ph.Ranks) != want.ranks || ph.Ops != want.ops || ph.PerRank.Len() != int(want.ranks) {
			t.Errorf("sweep size %d: ranks %d, ops %d, %d rows; want %d ranks, %d ops", i, ph.Ranks, ph.Ops, ph.PerRank.Len(), want.ranks, want.ops)
		}
	}
}

// A group runs its phase on the first k ranks while the next phase runs on
// the others; both results say with whom they ran.
func TestGroupRunsSideBySide(t *testing.T) {
	plan := "[[phase]]\nname = \"ingest\"\nkind = \"tick\"\nranks = 1\ngroup = \"g\"\n[[phase]]\nname = \"load\"\nkind = \"tick\"\n"
	res := Run(t, tickRegistry(), plan, Ranks(3))
	in, load := res.Phase(t, "ingest"), res.Phase(t, "load")
	if in.Ranks != 1 || load.Ranks != 2 {
		t.Errorf("ingest on %d ranks, load on %d; want 1 and 2", in.Ranks, load.Ranks)
	}
	if in.ConcurrentWith != "load" || load.ConcurrentWith != "ingest" {
		t.Errorf("concurrent_with: %q and %q", in.ConcurrentWith, load.ConcurrentWith)
	}
	if load.PerRank.At(0).Rank != 1 || load.PerRank.At(1).Rank != 2 {
		t.Errorf("load ran on world ranks %d, %d; want 1, 2", load.PerRank.At(0).Rank, load.PerRank.At(1).Rank)
	}
}

// One rank's failure in Run stops the others (which wait for it) promptly,
// the phase fails naming that rank and its error, and later phases are
// skipped.
func TestErrorAgreementStopsEveryRank(t *testing.T) {
	plan := "[plan]\ncoordination_timeout = \"60s\"\n[[phase]]\nkind = \"tick\"\nfail_rank = 1\nfail_step = \"run\"\n[[phase]]\nname = \"after\"\nkind = \"tick\"\n"
	res := Run(t, tickRegistry(), plan, Ranks(3))
	ph := res.Phase(t, "tick")
	if ph.Status != report.StatusFailed || ph.FailedRank == nil || *ph.FailedRank != 1 || !strings.Contains(ph.Error, "disk on fire") {
		t.Fatalf("status %s, failed rank %v, error %q; want failed on rank 1 with its error", ph.Status, ph.FailedRank, ph.Error)
	}
	if st := res.Phase(t, "after").Status; st != report.StatusSkipped {
		t.Errorf("the phase after a failure: %s, want skipped", st)
	}
	// The waiting ranks are stopped by the alert, not by the 60 s timeout.
	if res.Elapsed > 30*time.Second {
		t.Errorf("the run took %s: the waiting ranks were not stopped by the failure", res.Elapsed)
	}
	if res.Manifest.Status != report.StatusFailed {
		t.Errorf("run status %s", res.Manifest.Status)
	}
}

// Env.Agree inside a step: the failing rank gets its own error, the others
// ErrStopped (checked inside the phase), and the phase names the failing
// rank.
func TestAgreeInsideAStep(t *testing.T) {
	res := Run(t, tickRegistry(), "[[phase]]\nkind = \"tick\"\nfail_rank = 2\nfail_step = \"agree\"\n", Ranks(3))
	ph := res.Phase(t, "tick")
	if ph.Status != report.StatusFailed || ph.FailedRank == nil || *ph.FailedRank != 2 || !strings.Contains(ph.Error, "agree: disk on fire") {
		t.Fatalf("status %s, failed rank %v, error %q; want failed on rank 2 with its error", ph.Status, ph.FailedRank, ph.Error)
	}
}

// A node selection runs on every rank of the first k hosts, hosts taken in
// the order of their first rank whatever order the launcher numbered the
// ranks in; a sweep over node counts gives one result per count with its
// node count; more nodes than the job's hosts is a plan error naming the
// key, on every rank.
func TestNodeSweep(t *testing.T) {
	hosts := []string{"a", "b", "a", "c", "b"} // a launcher's round-robin order
	res := Run(t, tickRegistry(), "[[phase]]\nkind = \"tick\"\nops = 10\nnodes = [1, 2, 3]\n", Ranks(5), Hosts(hosts...))
	want := []struct {
		nodes int
		hosts map[string]int // ranks per host
	}{
		{1, map[string]int{"a": 2}},
		{2, map[string]int{"a": 2, "b": 2}},
		{3, map[string]int{"a": 2, "b": 2, "c": 1}},
	}
	if len(res.Manifest.Phases) != len(want) {
		t.Fatalf("%d results, want %d", len(res.Manifest.Phases), len(want))
	}
	for i, w := range want {
		p := res.Manifest.Phases[i]
		got := map[string]int{}
		for _, r := range p.PerRank.All() {
			got[r.Host]++
		}
		n := 0
		for _, c := range w.hosts {
			n += c
		}
		if p.Status != report.StatusPassed || p.Nodes != w.nodes || p.Ranks != n || len(got) != len(w.hosts) || len(p.PerHost) != w.nodes {
			t.Errorf("nodes = %d: status %s, nodes %d, %d ranks on %v, %d per_host rows; want %d ranks on %v",
				w.nodes, p.Status, p.Nodes, p.Ranks, got, len(p.PerHost), n, w.hosts)
		}
		for h, c := range w.hosts {
			if got[h] != c {
				t.Errorf("nodes = %d: %d ranks on %s, want %d", w.nodes, got[h], h, c)
			}
		}
	}

	var page bytes.Buffer
	if err := report.WriteHTML(&page, []*report.Manifest{res.Manifest}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"sweep over 1, 2, 3 nodes", "latency vs nodes", "bytes per host"} {
		if !strings.Contains(page.String(), s) {
			t.Errorf("report.html lacks %q", s)
		}
	}

	bad := Run(t, tickRegistry(), "[[phase]]\nkind = \"tick\"\nnodes = 4\n", Ranks(5), Hosts(hosts...), ExpectError())
	for r, err := range bad.Errs {
		var pe *phases.PlanError
		if !errors.As(err, &pe) || pe.Key != "nodes" || !strings.Contains(err.Error(), "3 hosts") {
			t.Errorf("rank %d: nodes = 4 on 3 hosts: %v", r, err)
		}
	}
}

// Caches are dropped once per host, by its first rank, and the manifest
// names that rank on each host.
func TestDropCachesOncePerHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("dropping caches needs root")
	}
	res := Run(t, tickRegistry(), "[plan]\ndrop_caches = \"root\"\n[[phase]]\nkind = \"tick\"\n", Ranks(3), Hosts("a", "b", "a"))
	c := res.Phase(t, "tick").Cache
	if c.Applied != "drop_caches" {
		t.Skipf("caches not dropped here: %s (%s)", c.Applied, c.Reason)
	}
	want := []report.HostRank{{Host: "a", Rank: 0}, {Host: "b", Rank: 1}}
	if len(c.DroppedBy) != 2 || c.DroppedBy[0] != want[0] || c.DroppedBy[1] != want[1] {
		t.Errorf("dropped_by %+v, want %+v", c.DroppedBy, want)
	}
}
