package ckpt

import (
	"fmt"
	"reflect"
	"testing"
)

// TestDCPLoadPlan: the entries a DCP load reads, as FileSystemReader
// reads them. At the world size of the save a rank reads its own chunks
// and rank 0's scalars and bytes items; at world size 1 every entry, and
// each shard file's entries' EntryReadCalls put together are its
// ReadCalls; at another size each rank reads exactly the saved chunks its
// torch.chunk of the rows overlaps (25 rows: saved [0,13) [13,25); new
// [0,9) [9,18) [18,25)). Files come in the order the plan first names
// them, each file's entries in state-dict order.
func TestDCPLoadPlan(t *testing.T) {
	m := mustBuild(t, "synthetic", Synthetic(2, 40, 25, F32), OptAdam, 1)
	for _, per := range []bool{false, true} {
		t.Run(fmt.Sprintf("file_per_tensor=%v", per), func(t *testing.T) {
			l := NewDCPState(m.State(Torch113, true), 1, 2, DCPOptions{FilePerTensor: per, Version: Torch113})
			ents := l.DCPEntries()
			for r := 0; r < 2; r++ {
				var want []int
				for i, e := range ents {
					if e.Rank == r || !e.Sharded {
						want = append(want, i)
					}
				}
				got := l.DCPLoadPlan(2, r)
				if !sameSet(got, want) {
					t.Errorf("rank %d of 2 reads entries %v, want %v", r, got, want)
				}
			}
			all := l.DCPLoadPlan(1, 0)
			if len(all) != len(ents) {
				t.Errorf("a load at world size 1 reads %d of %d entries", len(all), len(ents))
			}
			seen := map[int]bool{}
			last := -1
			for _, e := range all {
				f := ents[e].File
				if f != last && seen[f] {
					t.Fatalf("file %s comes back after another file", l.Files[f].Name)
				}
				seen[f], last = true, f
			}
			for f := range l.Files {
				if l.Files[f].Final {
					continue
				}
				var calls []Call
				for _, e := range all {
					if ents[e].File == f {
						calls = append(calls, l.EntryReadCalls(e)...)
					}
				}
				if !reflect.DeepEqual(calls, l.ReadCalls(f, CallOptions{})) {
					t.Errorf("%s: the entries' calls differ from the file's ReadCalls", l.Files[f].Name)
				}
			}
			w := "model.layers.0.weight"
			for r, rows := range [][]int64{{0}, {0, 13}, {13}} {
				var got []int64
				for _, e := range l.DCPLoadPlan(3, r) {
					if ents[e].FQN == w {
						got = append(got, ents[e].Row)
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(rows) {
					t.Errorf("rank %d of 3 reads the saved chunks of %s at rows %v, want %v", r, w, got, rows)
				}
			}
		})
	}
}

func sameSet(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	in := map[int]int{}
	for _, x := range a {
		in[x]++
	}
	for _, x := range b {
		in[x]--
	}
	for _, n := range in {
		if n != 0 {
			return false
		}
	}
	return true
}
