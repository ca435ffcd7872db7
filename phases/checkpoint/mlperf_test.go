package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/phases/ckpt"
	"github.com/prism-hpc/prism/phases/phasestest"
	"github.com/prism-hpc/prism/report"
)

// TestMLPerfPauseAndKeep: mlperf_checkpoint waits time_between_checkpoints
// before each save and each load, untimed: the idle time it reports is at
// least the waits asked for, and the checkpoints' durations and the waits
// together fit in the phase's wall time, which they could not if a
// duration included its wait. With [plan] keep = true every checkpoint
// file stays, DLIO's names and sizes.
func TestMLPerfPauseAndKeep(t *testing.T) {
	const pause = 1.0
	plan := `[plan]
keep = true
drop_caches = "none"
[[phase]]
kind = "mlperf_checkpoint"
scale = 0.00002
num_checkpoints_write = 2
num_checkpoints_read = 1
time_between_checkpoints = "1s"
`
	res := phasestest.Run(t, registry(), plan)
	ph := res.Phase(t, "mlperf_checkpoint")
	if ph.Status != report.StatusPassed {
		t.Fatalf("%s: %s", ph.Status, ph.Error)
	}
	m := ph.Metrics
	idle := m["idle_seconds"]
	if idle < 3*pause || m["time_between_checkpoints_seconds"] != pause {
		t.Errorf("idle %.3fs, time_between_checkpoints %v: want at least 3 waits of %.1fs", idle, m["time_between_checkpoints_seconds"], pause)
	}
	a := ph.MetricArrays
	if len(a["save_ckpt_seconds"]) != 2 || len(a["save_ckpt_min_seconds"]) != 2 || len(a["load_ckpt_seconds"]) != 1 ||
		len(a["process_save_mean_seconds"]) != 8 || len(a["process_load_mean_seconds"]) != 8 {
		t.Errorf("metric_arrays %v: want 2 saves, 1 load, 8 processes", a)
	}
	for k := range m {
		if strings.Contains(k, "_ckpt_0") || strings.HasPrefix(k, "process_0") {
			t.Errorf("metric %q: a list flattened into key names", k)
		}
	}
	for i, d := range a["save_ckpt_seconds"] {
		if d <= 0 || d < a["save_ckpt_min_seconds"][i] {
			t.Errorf("checkpoint %d: slowest %v, fastest %v", i, d, a["save_ckpt_min_seconds"][i])
		}
	}
	for id, d := range a["process_save_mean_seconds"] {
		if d <= 0 || d > a["save_ckpt_seconds"][0]+a["save_ckpt_seconds"][1] {
			t.Errorf("process %d's mean save %v outside (0, the sum of the slowest %v]", id, d, a["save_ckpt_seconds"])
		}
	}
	busy := a["save_ckpt_seconds"][0] + a["save_ckpt_seconds"][1] + a["load_ckpt_seconds"][0]
	// The wall leaves the waits out (Env.Idle) and holds the durations:
	// a duration that included its wait would not fit in it.
	if busy <= 0 || busy > ph.WallSeconds || ph.WallSeconds >= idle {
		t.Errorf("durations %.3fs, idle %.3fs, wall time %.3fs: want the durations inside a wall that leaves the idle out", busy, idle, ph.WallSeconds)
	}
	files, err := ckpt.MLPerfModels["llama3-8b"].Files(8, 0.00002)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"global_epoch1_step1", "global_epoch1_step2"} {
		dirs, _ := filepath.Glob(filepath.Join(res.Workdir, "prism-*", "01-mlperf_checkpoint", step))
		if len(dirs) != 1 {
			t.Fatalf("%s: not kept (keep = true)", step)
		}
		for _, f := range files {
			st, err := os.Stat(filepath.Join(dirs[0], f.Name))
			if err != nil {
				t.Errorf("%s: %v", step, err)
				continue
			}
			// A torch.save file: the tensors and the zip around them.
			if st.Size() < f.Bytes() || st.Size() > f.Bytes()+64<<10 {
				t.Errorf("%s/%s: %d bytes for %d of tensors", step, f.Name, st.Size(), f.Bytes())
			}
		}
	}
}

// TestMLPerfKeep: the phase's keep decides whether its checkpoints
// outlive its teardown. In a kept run directory, the phase with keep =
// true (the default) leaves every checkpoint file, the one with keep =
// false none; a run without [plan] keep leaves no run directory at all.
func TestMLPerfKeep(t *testing.T) {
	const phase = `[[phase]]
kind = "mlperf_checkpoint"
name = %q
scale = 0.00002
num_checkpoints_write = 2
num_checkpoints_read = 1
time_between_checkpoints = "0s"
%s
`
	files, err := ckpt.MLPerfModels["llama3-8b"].Files(8, 0.00002)
	if err != nil {
		t.Fatal(err)
	}
	count := func(t *testing.T, root, name string) int {
		t.Helper()
		n := 0
		for _, step := range []string{"global_epoch1_step1", "global_epoch1_step2"} {
			dirs, _ := filepath.Glob(filepath.Join(root, "prism-*", "*-"+name, step))
			if len(dirs) > 1 {
				t.Fatalf("%s: %d directories %s", name, len(dirs), step)
			}
			for _, d := range dirs {
				for _, f := range files {
					if _, err := os.Stat(filepath.Join(d, f.Name)); err == nil {
						n++
					}
				}
			}
		}
		return n
	}
	plan := "[plan]\nkeep = true\ndrop_caches = \"none\"\n" +
		fmt.Sprintf(phase, "kept", "") + fmt.Sprintf(phase, "dropped", "keep = false")
	res := phasestest.Run(t, registry(), plan)
	for _, name := range []string{"kept", "dropped"} {
		if ph := res.Phase(t, name); ph.Status != report.StatusPassed {
			t.Fatalf("%s: %s: %s", name, ph.Status, ph.Error)
		}
	}
	if n := count(t, res.Workdir, "kept"); n != 2*len(files) {
		t.Errorf("keep = true (default): %d of %d checkpoint files left after the run", n, 2*len(files))
	}
	if n := count(t, res.Workdir, "dropped"); n != 0 {
		t.Errorf("keep = false: %d checkpoint files left after the phase", n)
	}

	res = phasestest.Run(t, registry(), "[plan]\ndrop_caches = \"none\"\n"+fmt.Sprintf(phase, "kept", ""))
	if ph := res.Phase(t, "kept"); ph.Status != report.StatusPassed {
		t.Fatalf("%s: %s", ph.Status, ph.Error)
	}
	if left, _ := filepath.Glob(filepath.Join(res.Workdir, "prism-*")); len(left) != 0 {
		t.Errorf("without [plan] keep the run directory stays: %v", left)
	}
}

// TestMLPerfWorkerSetsOncePerIteration: each simulated process times into
// a set the engine merges once after its iteration's clock (Env.NewSet),
// whose recorders Setup made for exactly the ops Run does. Over a warmup
// and two measured iterations on two ranks, every file op is counted
// iterations × checkpoints × files, the bytes are the checkpoints' bytes,
// no op type is listed that did not happen (saves only, loads only), and
// the counts agree with the metrics, which come from the durations
// (save_checkpoints, the per-checkpoint arrays).
func TestMLPerfWorkerSetsOncePerIteration(t *testing.T) {
	const iters = 2
	files, err := ckpt.MLPerfModels["llama3-8b"].Files(8, 0.00002)
	if err != nil {
		t.Fatal(err)
	}
	var bytes int64
	for _, f := range files {
		bytes += f.Bytes()
	}
	n := int64(len(files))
	for _, tc := range []struct{ nw, nr int64 }{{2, 1}, {0, 2}, {1, 0}} {
		name := fmt.Sprintf("%d saves %d loads", tc.nw, tc.nr)
		plan := fmt.Sprintf(`[plan]
drop_caches = "none"
[[phase]]
kind = "mlperf_checkpoint"
scale = 0.00002
num_checkpoints_write = %d
num_checkpoints_read = %d
time_between_checkpoints = "0s"
warmup = 1
iterations = %d
`, tc.nw, tc.nr, iters)
		res := phasestest.Run(t, registry(), plan, phasestest.Ranks(2))
		ph := res.Phase(t, "mlperf_checkpoint")
		if ph.Status != report.StatusPassed || len(ph.Iterations) != iters {
			t.Fatalf("%s: %s, %d iterations: %s", name, ph.Status, len(ph.Iterations), ph.Error)
		}
		m, a := ph.Metrics, ph.MetricArrays
		if int64(m["checkpoint_bytes"]) != bytes || m["save_checkpoints"] != float64(iters*tc.nw) || m["load_checkpoints"] != float64(iters*tc.nr) ||
			int64(len(a["save_ckpt_seconds"])) != iters*tc.nw || int64(len(a["load_ckpt_seconds"])) != iters*tc.nr {
			t.Errorf("%s: checkpoint_bytes %v (want %d), save_checkpoints %v, load_checkpoints %v, %d and %d durations; want %d saves and %d loads",
				name, m["checkpoint_bytes"], bytes, m["save_checkpoints"], m["load_checkpoints"], len(a["save_ckpt_seconds"]), len(a["load_ckpt_seconds"]), iters*tc.nw, iters*tc.nr)
		}
		// A write or read per tensor or chunk: their counts are the
		// layout's, their bytes the checkpoints'.
		saves, loads := iters*tc.nw*n, iters*tc.nr*n
		want := map[string]phasestest.Want{"open": {Ops: saves + loads}, "close": {Ops: saves + loads}}
		if saves > 0 {
			want["save_file"] = phasestest.Want{Ops: saves}
			want["fsync"] = phasestest.Want{Ops: saves}
			want["write"] = phasestest.Want{Ops: ph.OpsByType["write"].Ops, Bytes: iters * tc.nw * bytes}
		}
		if loads > 0 {
			want["load_file"] = phasestest.Want{Ops: loads}
			want["read"] = phasestest.Want{Ops: ph.OpsByType["read"].Ops, Bytes: iters * tc.nr * bytes}
		}
		phasestest.CheckOps(t, ph, want)
	}
}

// TestMLPerfRunMakesNoRecorder: Setup makes every recorder the Run times
// into (a recorder's creation is ~115 µs of clearing its histogram, which
// the first checkpoint's duration would hold), and Run merges none into
// the rank's set: the engine does, after the clock (Env.NewSet).
func TestMLPerfRunMakesNoRecorder(t *testing.T) {
	for _, tc := range []struct{ nw, nr int }{{2, 1}, {0, 2}, {1, 0}} {
		p := &mlperfCheckpoint{cfg: defaultMLPerfConfig()}
		p.cfg.Scale, p.cfg.NumWrite, p.cfg.NumRead, p.cfg.TimeBetween = 0.00002, tc.nw, tc.nr, 0
		if err := p.cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		env := phasestest.Env(t, "mlperf_checkpoint")
		ctx := context.Background()
		if err := p.Setup(ctx, env); err != nil {
			t.Fatal(err)
		}
		made := map[*mlpProc][19]*report.Recorder{}
		for _, pr := range p.procs {
			made[pr] = pr.recs.all()
		}
		if err := p.Run(ctx, env); err != nil {
			t.Fatal(err)
		}
		var saves int64
		for pr, recs := range made {
			if pr.recs.all() != recs {
				t.Errorf("%d saves %d loads: process %d: Run made a recorder Setup had not", tc.nw, tc.nr, pr.id)
			}
			if pr.recs.saveFile != nil {
				saves += pr.recs.saveFile.Ops
			}
		}
		if want := int64(tc.nw) * 16; saves != want {
			t.Errorf("%d saves %d loads: Setup's recorders hold %d saved files, want %d", tc.nw, tc.nr, saves, want)
		}
		for _, op := range []string{"save_file", "load_file", "write", "read"} {
			if n := env.Recorder(op).Ops; n != 0 {
				t.Errorf("%d saves %d loads: Run merged %d ops %s into the rank's set inside the timed span", tc.nw, tc.nr, n, op)
			}
		}
		if err := p.Teardown(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
}
