package ckpt

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/internal/stracelog"
	"github.com/prism-hpc/prism/internal/torchtest"
)

var (
	rankMark = regexp.MustCompile(`^(\d+)\s+openat\(.*"[^"]*/rank(\d+)", O_WRONLY`)
	tidLine  = regexp.MustCompile(`^(\d+)\s+(\w+)\((\d+)<([^>]*)>(.*)\)\s+=\s+(-?\d+)`)
)

// tracedByRank reads an `strace -f -y` log of processes that each marked
// themselves by creating a file rank<r>: the calls each rank's thread made
// on files below dir, by rank and path, rendered as tracedCalls renders
// them (lseeks that do not move left out).
func tracedByRank(t *testing.T, log, dir string) map[int]map[string][]string {
	t.Helper()
	rankOf := map[string]int{}
	type key struct {
		tid, path string
	}
	calls := map[key][]string{}
	pos := map[key]int64{}
	var tids []string // in the order the ranks marked themselves
	stracelog.Read(t, log, func(_ int, line string) {
		if m := rankMark.FindStringSubmatch(line); m != nil {
			r, _ := strconv.Atoi(m[2])
			rankOf[m[1]] = r
			tids = append(tids, m[1])
			return
		}
		m := tidLine.FindStringSubmatch(line)
		if m == nil || !strings.HasPrefix(m[4], dir+"/") {
			return
		}
		k := key{m[1], m[4]}
		ret, _ := strconv.ParseInt(m[6], 10, 64)
		args := m[5]
		switch m[2] {
		case "read":
			calls[k] = append(calls[k], "read "+strings.TrimSpace(args[strings.LastIndexByte(args, ',')+1:]))
			pos[k] += ret
		case "lseek":
			if ret != pos[k] {
				calls[k] = append(calls[k], "lseek "+m[6])
				pos[k] = ret
			}
		}
	})
	out := map[int]map[string][]string{}
	for _, tid := range tids {
		out[rankOf[tid]] = map[string][]string{}
	}
	for k, cs := range calls {
		r, ok := rankOf[k.tid]
		if !ok {
			continue // the parent's whole loads, or another thread
		}
		out[r][k.path] = cs
	}
	return out
}

// TestReshardReadsAsDCP: real DCP (torch 1.13, gloo) loading prism's
// checkpoint at another world size than it was saved at (4 -> 3, one
// file per rank and one per item), each process filling its
// torch.chunk of every tensor as a ShardedTensor as FSDP shards, reads on
// every file exactly the calls DCPLoadPlan and EntryReadCalls give for
// its rank (the saved chunks its new rows overlap, whole, in
// FileSystemReader's order) and .metadata's ReadCalls, as strace sees
// them; and the rows each process loaded are those rows of the whole
// tensor. So a resharding fsdp_load, which issues those calls, reads
// what DCP reads when the world size changes.
func TestReshardReadsAsDCP(t *testing.T) {
	py := torchtest.Python(t)
	strace := torchtest.Strace(t)
	// 25-row tensors: 2, 3 and 4 ranks chunk them unevenly.
	m := mustBuild(t, "synthetic", Synthetic(2, 40, 25, F32), OptAdam, 1)
	spec := writeSpec(t, m, 2, 40, 25)
	o := CallOptions{BlockSize: 4096}
	// Saved at 4 ranks (rows [0,7) [7,14) [14,21) [21,25)), loaded at 3
	// ([0,9) [9,18) [18,25)): every new rank overlaps two saved chunks,
	// none in full. One world size: each costs a torch import per rank.
	for _, tc := range []struct{ saved, world int }{{4, 3}} {
		t.Run(fmt.Sprintf("%d-to-%d", tc.saved, tc.world), func(t *testing.T) {
			type ck struct {
				l   *Layout
				dir string
				per bool
			}
			var cks []ck
			marks := t.TempDir()
			args := []string{"-f", "-y", "-s", "4", "-e", "trace=openat,read,lseek", "-o", filepath.Join(marks, "strace.log"),
				py, filepath.Join("testdata", "torch_oracle.py"), "dcp-load-dist", spec, strconv.Itoa(tc.world), marks}
			for _, per := range []bool{false, true} {
				l := NewDCPState(m.State(Torch113, true), 5, tc.saved, DCPOptions{FilePerTensor: per, Version: Torch113})
				dir := t.TempDir()
				writeLayout(t, dir, l, NewPool(5, 64<<10, 8<<10), 3)
				if b, err := os.ReadFile(filepath.Join(dir, ".metadata")); err != nil || len(b) == 0 {
					t.Fatalf(".metadata: %v", err)
				}
				cks = append(cks, ck{l, dir, per})
				args = append(args, dir)
			}
			cmd := exec.Command(strace, args...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("dcp-load-dist under strace: %v\n%s", err, stderr.String())
			}
			var got map[string]struct {
				Mismatches []string `json:"mismatches"`
				Items      int      `json:"items"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, c := range cks {
				t.Run(fmt.Sprintf("file_per_tensor=%v", c.per), func(t *testing.T) {
					g := got[c.dir]
					if g.Items == 0 || len(g.Mismatches) > 0 {
						t.Errorf("%d items loaded; rows that differ from the whole load: %v", g.Items, g.Mismatches)
					}
					tr := tracedByRank(t, filepath.Join(marks, "strace.log"), c.dir)
					if len(tr) != tc.world {
						t.Fatalf("strace saw %d ranks mark themselves, want %d", len(tr), tc.world)
					}
					ents := c.l.DCPEntries()
					compared := 0
					defer func() { t.Logf("%d reads and seeks of %d ranks compared", compared, tc.world) }()
					for r := 0; r < tc.world; r++ {
						want := map[string][]Call{}
						for _, e := range c.l.DCPLoadPlan(tc.world, r) {
							name := c.l.Files[ents[e].File].Name
							want[name] = append(want[name], c.l.EntryReadCalls(e)...)
						}
						for i, f := range c.l.Files {
							if f.Final {
								want[f.Name] = c.l.ReadCalls(i, o)
							}
						}
						for i, f := range c.l.Files {
							path := filepath.Join(c.dir, f.Name)
							w := shape(want[f.Name], c.l.Files[i].Size)
							g := tr[r][path]
							compared += len(g)
							if strings.Join(g, "\n") != strings.Join(w, "\n") {
								j := 0
								for j < min(len(g), len(w)) && g[j] == w[j] {
									j++
								}
								t.Errorf("rank %d of %d, %s: DCP made %d reads and seeks, prism's plan %d; first difference at %d: %q vs %q",
									r, tc.world, f.Name, len(g), len(w), j, at(g, j), at(w, j))
							}
						}
					}
				})
			}
		})
	}
}
