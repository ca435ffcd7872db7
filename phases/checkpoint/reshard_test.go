package checkpoint

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/ckpt"
	"github.com/prism-hpc/prism/phases/phasestest"
	"github.com/prism-hpc/prism/report"
)

// reshardModel has 25-row tensors, which 2, 3 and 4 ranks chunk
// unevenly, with Adam's state.
const reshardModel = "optimizer = \"adam\"\nlayers = 2\ninput_dim = 40\nhidden_dim = 25\n"

// wantReshardBytes is, per new rank, the tensor bytes a load at newRanks
// of a checkpoint saved at saved ranks reads, computed from the model
// alone: DCP reads every saved chunk (torch.chunk of the saved world)
// its new chunk overlaps, whole; safetensors reads exactly its new rows.
// Literal tensors (Adam's steps) are not tensor bytes.
func wantReshardBytes(t *testing.T, format string, saved, newRanks int) []int64 {
	t.Helper()
	m, err := ckpt.Build("synthetic", ckpt.Synthetic(2, 40, 25, ckpt.F32), ckpt.OptAdam, 1)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, newRanks)
	for r := range out {
		for _, tn := range m.Tensors {
			if tn.Value != nil {
				continue
			}
			lo, hi := ckpt.ChunkRows(tn.Rows(), newRanks, r)
			if lo == hi {
				continue
			}
			if format == ckpt.FormatSafetensors {
				out[r] += (hi - lo) * tn.RowBytes()
				continue
			}
			for j := 0; j < saved; j++ {
				a, b := ckpt.ChunkRows(tn.Rows(), saved, j)
				if a < hi && b > lo {
					out[r] += (b - a) * tn.RowBytes()
				}
			}
		}
	}
	return out
}

// TestReshardLoad: fsdp_load of a checkpoint written at another rank
// count (2 -> 3, 4 -> 1; DCP in both file layouts, and sharded
// safetensors) passes its checks, says it resharded, and each rank reads
// exactly the tensor bytes its new shard needs, as the framework reads
// them: the overlapping saved chunks for DCP, its rows for safetensors.
func TestReshardLoad(t *testing.T) {
	for _, tc := range []struct {
		format, extra   string
		saved, newRanks int
		job             int // ranks of the run
	}{
		{ckpt.FormatDCP, "", 2, 3, 3},
		{ckpt.FormatDCP, "dcp_file_per_tensor = true\n", 2, 3, 3},
		{ckpt.FormatSafetensors, "", 2, 3, 3},
		{ckpt.FormatDCP, "", 4, 1, 4},
		{ckpt.FormatSafetensors, "", 4, 1, 4},
	} {
		name := fmt.Sprintf("%s/%d-to-%d", tc.format, tc.saved, tc.newRanks)
		if tc.extra != "" {
			name += "/per-tensor"
		}
		t.Run(name, func(t *testing.T) {
			plan := fmt.Sprintf(`[[phase]]
kind = "fsdp_save"
name = "save"
ranks = %d
format = %q
%s%s
[[phase]]
kind = "fsdp_load"
name = "load"
ranks = %d
format = %q
%s`, tc.saved, tc.format, tc.extra, reshardModel, tc.newRanks, tc.format, reshardModel)
			res := phasestest.Run(t, registry(), plan, phasestest.Ranks(tc.job))
			ld := res.Phase(t, "load")
			if ld.Status != report.StatusPassed {
				t.Fatalf("load %s: %s", ld.Status, ld.Error)
			}
			if ld.Metrics["resharded"] != 1 || ld.Metrics["saved_ranks"] != float64(tc.saved) || ld.Metrics["written_in_setup"] != 0 {
				t.Errorf("metrics %v: want resharded 1 from %d ranks, not written in setup", ld.Metrics, tc.saved)
			}
			want := wantReshardBytes(t, tc.format, tc.saved, tc.newRanks)
			if ld.PerRank.Len() != tc.newRanks {
				t.Fatalf("%d ranks in the load, want %d", ld.PerRank.Len(), tc.newRanks)
			}
			for _, pr := range ld.PerRank.All() {
				if pr.Bytes != want[pr.Rank] {
					t.Errorf("rank %d read %d tensor bytes, its new shard needs %d", pr.Rank, pr.Bytes, want[pr.Rank])
				}
			}
		})
	}
}

// TestReshardLoadChecksWhatItReads: a byte flipped in rows only the new
// rank 2 of 3 takes (layers.0.weight rows [18, 25)) fails that rank
// alone, naming the tensor and the bytes it read of it; ranks 0 and 1
// never read those bytes (safetensors), while DCP's rank 1 reads the
// whole saved chunk that holds them and fails too.
func TestReshardLoadChecksWhatItReads(t *testing.T) {
	reg := registry()
	reg.Register(phases.Kind{Name: "corrupt", Family: "test", New: func() phases.Phase { return &corrupter{} }})
	for _, tc := range []struct {
		format string
		failed []bool // by new rank
	}{
		{ckpt.FormatSafetensors, []bool{false, false, true}},
		{ckpt.FormatDCP, []bool{false, true, true}},
	} {
		t.Run(tc.format, func(t *testing.T) {
			plan := fmt.Sprintf(`[[phase]]
kind = "fsdp_save"
ranks = 2
format = %q
%s
[[phase]]
kind = "corrupt"
ranks = 1
tensor = "layers.0.weight"
row = 20
[[phase]]
kind = "fsdp_load"
name = "load"
format = %q
%s`, tc.format, reshardModel, tc.format, reshardModel)
			res := phasestest.Run(t, reg, plan, phasestest.Ranks(3))
			ld := res.Phase(t, "load")
			if ld.Status != report.StatusFailed {
				t.Fatalf("load %s, want failed", ld.Status)
			}
			for _, pr := range ld.PerRank.All() {
				failed := strings.Contains(pr.Error, "CRC-32")
				if failed != tc.failed[pr.Rank] {
					t.Errorf("rank %d: error %q; want a CRC failure: %v", pr.Rank, pr.Error, tc.failed[pr.Rank])
				}
				if failed && !strings.Contains(pr.Error, "tensor layers.0.weight") {
					t.Errorf("rank %d: error %q does not name the tensor", pr.Rank, pr.Error)
				}
			}
		})
	}
}

// TestSweepLoadsItsOwnSize: after a save sweep, each size of a load sweep
// reads the checkpoint its own size wrote, not the latest (no resharding).
func TestSweepLoadsItsOwnSize(t *testing.T) {
	plan := "[[phase]]\nkind = \"fsdp_save\"\nname = \"save\"\nranks = [1, 2]\n" + reshardModel +
		"[[phase]]\nkind = \"fsdp_load\"\nname = \"load\"\nranks = [1, 2]\n" + reshardModel
	res := phasestest.Run(t, registry(), plan, phasestest.Ranks(2))
	n := 0
	for _, ph := range res.Manifest.Phases {
		if ph.Name != "load" {
			continue
		}
		n++
		if ph.Status != report.StatusPassed || ph.Metrics["resharded"] != 0 || ph.Metrics["saved_ranks"] != float64(ph.Ranks) {
			t.Errorf("load at %d ranks: %s, metrics %v: want its own size's checkpoint", ph.Ranks, ph.Status, ph.Metrics)
		}
	}
	if n != 2 {
		t.Fatalf("%d load entries in the manifest, want 2", n)
	}
}
