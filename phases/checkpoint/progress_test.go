package checkpoint

import (
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/phasestest"
	"github.com/prism-hpc/prism/report"
)

// instances is the checkpoint family with every phase instance the ranks
// decode kept, by phase name: phasestest.Run decodes the plan once per
// rank, rank by rank, so a phase's i-th instance is job rank i's (a phase
// on ranks = n runs on the job's first n).
func instances() (*phases.Registry, func(name string) []phases.Phase) {
	var mu sync.Mutex
	var all []phases.Phase
	reg := phases.NewRegistry()
	for _, k := range registry().Kinds() {
		w := k
		w.New = func() phases.Phase {
			p := k.New()
			mu.Lock()
			defer mu.Unlock()
			all = append(all, p)
			return p
		}
		reg.Register(w)
	}
	return reg, func(name string) []phases.Phase {
		mu.Lock()
		defer mu.Unlock()
		var out []phases.Phase
		for _, p := range all {
			if phaseName(p) == name {
				out = append(out, p)
			}
		}
		return out
	}
}

// phaseName tells the instances of one test plan apart by their config's
// format and kind (each plan below has at most one phase of each).
func phaseName(p phases.Phase) string {
	switch x := p.(type) {
	case *ckptSave:
		return x.kind + "_save"
	case *ckptLoad:
		return x.kind + "_load"
	case *mlperfCheckpoint:
		return "mlperf_checkpoint"
	}
	return ""
}

// TestExpectedOpsAreTheRecordedOps: the ops every rank of every
// checkpoint kind records in a measured iteration are exactly its
// ExpectedOps, which progress turns into a percentage and an ETA (the
// last progress line of each Run: 100% of the ranks' sum); over
// several models, formats, call shapes and rank counts, where ranks issue
// different counts (ddp_save: rank 0 alone; fsdp: each its shard, rank 0
// the metadata too; rl_load: the first `readers`).
func TestExpectedOpsAreTheRecordedOps(t *testing.T) {
	adam := tinyModel + "optimizer = \"adam\"\n"
	big := "layers = 5\ninput_dim = 64\nhidden_dim = 160\n"
	for _, tc := range []struct {
		name  string
		ranks int
		plan  string
	}{
		{"torch-1rank", 1, fmt.Sprintf(`
[[phase]]
kind = "ddp_save"
iterations = 2
%s
[[phase]]
kind = "ddp_load"
iterations = 2
%s
[[phase]]
kind = "fsdp_save"
%s
[[phase]]
kind = "fsdp_load"
%s`, tinyModel, tinyModel, tinyModel, tinyModel)},
		{"torch-adam-3ranks", 3, fmt.Sprintf(`
[[phase]]
kind = "ddp_save"
fsync = true
%s
[[phase]]
kind = "ddp_load"
warmup = 1
%s
[[phase]]
kind = "fsdp_save"
iterations = 2
%s
[[phase]]
kind = "fsdp_load"
%s
[[phase]]
kind = "rl_load"
readers = 2
%s`, adam, adam, big, big, big)},
		{"chunks-2ranks", 2, fmt.Sprintf(`
[[phase]]
kind = "ddp_save"
write_size = "8KiB"
%s
[[phase]]
kind = "ddp_load"
read_size = "8KiB"
%s
[[phase]]
kind = "fsdp_save"
dcp_file_per_tensor = true
write_size = "4KiB"
%s
[[phase]]
kind = "fsdp_load"
read_size = "16KiB"
%s`, big, big, adam, adam)},
		{"safetensors-3ranks", 3, fmt.Sprintf(`
[[phase]]
kind = "ddp_save"
format = "safetensors"
%s
[[phase]]
kind = "ddp_load"
format = "safetensors"
%s
[[phase]]
kind = "fsdp_save"
format = "safetensors"
%s
[[phase]]
kind = "fsdp_load"
format = "safetensors"
mmap = false
%s
[[phase]]
kind = "rl_load"
format = "safetensors"
%s`, big, big, big, big, big)},
		{"reshard-2to3", 3, fmt.Sprintf(`
[[phase]]
kind = "fsdp_save"
ranks = 2
%s
[[phase]]
kind = "fsdp_load"
%s`, big, big)},
		{"mlperf-2ranks", 2, `
[[phase]]
kind = "mlperf_checkpoint"
scale = 0.00002
processes = 8
num_checkpoints_write = 2
num_checkpoints_read = 3
time_between_checkpoints = "0s"
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg, of := instances()
			res := phasestest.Run(t, reg, tc.plan, phasestest.Ranks(tc.ranks), phasestest.File("ckpt.toml"),
				phasestest.Progress(phases.ProgressLine, time.Hour))
			for _, ph := range res.Manifest.Phases {
				if ph.Status != report.StatusPassed {
					t.Fatalf("%s: %s: %s", ph.Name, ph.Status, ph.Error)
				}
				inst := of(ph.Name)
				if len(inst) != tc.ranks {
					t.Fatalf("%s: %d instances decoded, want one per rank (%d)", ph.Name, len(inst), tc.ranks)
				}
				iters := int64(len(ph.Iterations))
				var total int64
				for _, pr := range ph.PerRank.All() {
					want := inst[pr.Rank].(phases.OpCounter).ExpectedOps()
					if pr.Ops != iters*want {
						t.Errorf("%s rank %d: %d ops recorded in %d iterations, ExpectedOps %d per iteration", ph.Name, pr.Rank, pr.Ops, iters, want)
					}
					total += want
				}
				if total == 0 {
					t.Errorf("%s: ExpectedOps is 0 on every rank: nothing checked", ph.Name)
				}
				// Rank 0's last progress line of each Run sums every rank's
				// own count, as each reported it (not rank 0's times the
				// ranks).
				done := regexp.MustCompile(`\] ` + ph.Name + `( iter \d+/\d+| warm-up \d+/\d+)?: done, (\d+) ops \((\S+)% of (\d+)\)`)
				lines := done.FindAllStringSubmatch(res.Stderr, -1)
				if len(lines) != ph.WarmupIterations+len(ph.Iterations) {
					t.Errorf("%s: %d progress lines ending a Run, want %d:\n%s", ph.Name, len(lines), ph.WarmupIterations+len(ph.Iterations), res.Stderr)
				}
				for _, l := range lines {
					if l[2] != fmt.Sprint(total) || l[3] != "100.0" || l[4] != fmt.Sprint(total) {
						t.Errorf("%s: progress %q, want %d ops, 100.0%% of %d", ph.Name, l[0], total, total)
					}
				}
			}
		})
	}
}
