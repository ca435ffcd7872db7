package metadata

import (
	"fmt"
	"testing"

	"github.com/prism-hpc/prism/phases/phasestest"
	"github.com/prism-hpc/prism/report"
)

// The storm on two ranks, in private and in shared directories: every op
// happens once per file, every rank's row counts its own files, and the
// tree phase counts each of its four ops.
func TestMetadataStormOnTwoRanks(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared_dir=%v", shared), func(t *testing.T) {
			plan := ""
			for _, k := range []string{"create_files", "list_files", "move_files", "delete_files"} {
				plan += fmt.Sprintf("[[phase]]\nkind = %q\ncount = 300\nshared_dir = %v\n", k, shared)
			}
			plan += "[[phase]]\nkind = \"folder_bench\"\ndepth = 2\nbreadth = 3\nfiles_per_dir = 2\n"
			res := phasestest.Run(t, registry(), plan, phasestest.Ranks(2))
			for kind, op := range map[string]string{"create_files": "create", "list_files": "stat", "move_files": "rename", "delete_files": "unlink"} {
				ph := res.Phase(t, kind)
				if ph.Status != report.StatusPassed {
					t.Fatalf("%s: %s: %s", kind, ph.Status, ph.Error)
				}
				want := int64(600)
				if kind == "list_files" && shared {
					want = 1200 // each rank lists and stats the whole shared directory
				}
				if got := ph.OpsByType[op].Ops; got != want {
					t.Errorf("%s: %d %s ops, want %d (300 files per rank)", kind, got, op, want)
				}
				for _, row := range ph.PerRank.All() {
					if row.Errors != 0 {
						t.Errorf("%s: rank %d: %d errors", kind, row.Rank, row.Errors)
					}
				}
			}
			if n := res.Phase(t, "list_files").OpsByType["readdir"].Ops; n != 2 {
				t.Errorf("list_files: %d readdirs, want one per rank", n)
			}
			// depth 2, breadth 3: 3 + 9 directories, 2 files in each, per rank.
			tree := res.Phase(t, "folder_bench")
			for op, want := range map[string]int64{"mkdir": 24, "create": 48, "unlink": 48, "rmdir": 24} {
				if got := tree.OpsByType[op].Ops; got != want {
					t.Errorf("folder_bench: %d %s ops, want %d", got, op, want)
				}
			}
		})
	}
}
