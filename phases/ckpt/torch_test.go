package ckpt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/internal/torchtest"
)

// The tests in this file use real PyTorch as the oracle, running
// testdata/torch_oracle.py (internal/torchtest finds it, or says why the
// test skips or, in CI, fails).

// oracle runs torch_oracle.py and decodes its JSON answer into v.
func oracle(t *testing.T, v any, args ...string) {
	t.Helper()
	py := torchtest.Python(t)
	cmd := exec.Command(py, append([]string{filepath.Join("testdata", "torch_oracle.py")}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("torch_oracle.py %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("torch_oracle.py %s: %v\n%s", args[0], err, out)
	}
}

// oracleModel is a synthetic model torch_oracle.py rebuilds from nn.Linear
// layers: more than ten tensors, so torch's record order (lexicographic
// keys in 1.13) differs from numeric.
type oracleModel struct {
	Layers    int64  `json:"layers"`
	Input     int64  `json:"input"`
	Hidden    int64  `json:"hidden"`
	DType     string `json:"dtype"`
	Optimizer string `json:"optimizer"`
	Step      int64  `json:"step"`
}

var pyDType = map[DType]string{F32: "float32", BF16: "bfloat16", F16: "float16"}

func newOracleModel(t *testing.T, layers int64, dt DType, opt string) (*Model, string) {
	t.Helper()
	m := mustBuild(t, "synthetic", Synthetic(layers, 40, 24, dt), opt, 1)
	return m, writeSpec(t, m, layers, 40, 24)
}

// writeSpec writes the oracle's description of a synthetic model.
func writeSpec(t *testing.T, m *Model, layers, input, hidden int64) string {
	t.Helper()
	spec := oracleModel{Layers: layers, Input: input, Hidden: hidden, DType: pyDType[m.Arch.DType], Optimizer: m.Optimizer, Step: m.Step}
	b, _ := json.Marshal(spec)
	path := filepath.Join(t.TempDir(), "spec.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// tensorCRCs is every tensor's CRC-32 as the layout's content makes it:
// pieces combined in row order, or the literal value.
func tensorCRCs(l *Layout) map[string]uint32 {
	byTensor := map[int][]Piece{}
	for _, p := range l.Pieces {
		byTensor[p.Tensor] = append(byTensor[p.Tensor], p)
	}
	out := map[string]uint32{}
	for i, t := range l.Tensors {
		if t.Value != nil {
			out[t.Name] = crcOf(t.Value)
			continue
		}
		ps := byTensor[i]
		sort.Slice(ps, func(a, b int) bool { return ps[a].Lo < ps[b].Lo })
		var c uint32
		for k, p := range ps {
			if k == 0 {
				c = p.CRC
			} else {
				c = Combine(c, p.CRC, p.Len())
			}
		}
		out[t.Name] = c
	}
	return out
}

// pyRepr is Python's repr of the plain values a checkpoint holds.
func pyRepr(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int:
		return strconv.Itoa(x)
	case float64:
		s := strconv.FormatFloat(x, 'g', -1, 64)
		if !strings.ContainsAny(s, ".e") {
			s += ".0"
		}
		return s
	case string:
		return "'" + x + "'"
	case pyTuple:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pyRepr(e)
		}
		if len(x) == 1 {
			return "(" + parts[0] + ",)"
		}
		return "(" + strings.Join(parts, ", ") + ")"
	case stateList:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pyRepr(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprintf("<%T>", v)
}

type oracleItem struct {
	CRC   *uint32 `json:"crc"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	Value *string `json:"value"`
}

// checkItems compares what torch loaded from a DCP checkpoint with the
// layout's content, item by item.
func checkItems(t *testing.T, l *Layout, st *State, got map[string]oracleItem) {
	t.Helper()
	crcs := tensorCRCs(l)
	items := st.Items()
	if len(got) != len(items) {
		t.Errorf("torch loaded %d items, the layout has %d", len(got), len(items))
	}
	for _, it := range items {
		g, ok := got[it.FQN]
		if !ok {
			t.Errorf("torch's state has no key %s", it.FQN)
			continue
		}
		if it.Tensor < 0 {
			if g.Value == nil || *g.Value != pyRepr(it.value) {
				t.Errorf("%s: torch loaded %v, prism wrote %s", it.FQN, g.Value, pyRepr(it.value))
			}
			continue
		}
		tn := st.Tensors[it.Tensor]
		if g.CRC == nil || *g.CRC != crcs[tn.Name] {
			t.Errorf("%s: torch loaded bytes with CRC %v, prism wrote %08x", it.FQN, g.CRC, crcs[tn.Name])
		}
		if g.DType != "torch."+pyDType[tn.DType] || fmt.Sprint(g.Shape) != fmt.Sprint(tn.Shape) {
			t.Errorf("%s: torch sees %s %v, prism wrote %s %v", it.FQN, g.DType, g.Shape, tn.DType, tn.Shape)
		}
	}
}

// TestTorchSaveMatchesTorch: torch.load reads prism's torch.save file,
// a fresh torch.optim.Adam accepts its optimizer state with the step and
// hyperparameters prism wrote, and torch.save of the same values held by
// a real model and a real Adam writes the very same bytes.
func TestTorchSaveMatchesTorch(t *testing.T) {
	for _, tc := range []struct {
		dt  DType
		opt string
	}{{F32, OptNone}, {BF16, OptNone}, {F32, OptAdam}, {BF16, OptAdam}, {BF16, OptAdamMixed}} {
		t.Run(fmt.Sprintf("%s/%s", tc.dt, tc.opt), func(t *testing.T) {
			m, spec := newOracleModel(t, 6, tc.dt, tc.opt)
			l := NewTorchState(m.State(Torch113, false), 11, "checkpoint.pt", Torch113)
			dir, ref := t.TempDir(), t.TempDir()
			writeLayout(t, dir, l, NewPool(11, 64<<10, 8<<10), 2)
			var res struct {
				ModelKeys     []string         `json:"model_keys"`
				ModelMetadata []string         `json:"model_metadata"`
				Steps         []float64        `json:"steps"`
				StepDTypes    []string         `json:"step_dtypes"`
				StateDTypes   []string         `json:"state_dtypes"`
				ParamGroups   []map[string]any `json:"param_groups"`
				AdamDefaults  []map[string]any `json:"adam_defaults"`
			}
			oracle(t, &res, "torch", spec, filepath.Join(dir, "checkpoint.pt"), filepath.Join(ref, "checkpoint.pt"))
			var names []string
			for _, tn := range m.Tensors[:m.nparams] {
				names = append(names, tn.Name)
			}
			if fmt.Sprint(res.ModelKeys) != fmt.Sprint(names) {
				t.Errorf("state_dict keys %v, want %v", res.ModelKeys, names)
			}
			if fmt.Sprint(res.ModelMetadata) != fmt.Sprint(modulePaths(names)) {
				t.Errorf("_metadata modules %v, want %v", res.ModelMetadata, modulePaths(names))
			}
			if tc.opt != OptNone {
				if len(res.Steps) != m.nparams {
					t.Fatalf("%d optimizer states, want %d", len(res.Steps), m.nparams)
				}
				for _, s := range res.Steps {
					if s != float64(m.Step) {
						t.Fatalf("step %v, prism wrote %d", s, m.Step)
					}
				}
				want := pyDType[tc.dt]
				if tc.opt == OptAdamMixed {
					want = "float32"
				}
				if fmt.Sprint(res.StepDTypes) != "[torch.float32]" || fmt.Sprint(res.StateDTypes) != "[torch."+want+"]" {
					t.Errorf("step dtypes %v, state dtypes %v, want float32 and %s", res.StepDTypes, res.StateDTypes, want)
				}
				g, d := fmt.Sprint(res.ParamGroups), fmt.Sprint(res.AdamDefaults)
				if g != d {
					t.Errorf("param_groups %s, torch's Adam has %s", g, d)
				}
			}
			mine, _ := os.ReadFile(filepath.Join(dir, "checkpoint.pt"))
			theirs, _ := os.ReadFile(filepath.Join(ref, "checkpoint.pt"))
			if !bytes.Equal(mine, theirs) {
				t.Fatalf("prism's file (%d bytes) differs from torch.save's (%d bytes) at byte %d", len(mine), len(theirs), firstDiff(mine, theirs))
			}
		})
	}
}

func crcOf(b []byte) uint32 { return crc32.ChecksumIEEE(b) }

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestDCPLoadsInTorch: torch 1.13's FileSystemReader and load_state_dict
// read prism's DCP checkpoint, written as if by 1, 2 and 4 ranks in both
// file layouts, into full tensors (world size 1) under the keys torch's
// own model and Adam flatten to (no optimizer, torch.optim.Adam, and the
// mixed-precision layout with fp32 masters); every tensor's bytes and
// every value are what prism wrote.
func TestDCPLoadsInTorch(t *testing.T) {
	for _, opt := range []string{OptNone, OptAdam, OptAdamMixed} {
		t.Run(opt, func(t *testing.T) {
			m, spec := newOracleModel(t, 6, BF16, opt)
			type run struct {
				name string
				l    *Layout
				st   *State
				dir  string
			}
			var runs []run
			args := []string{"dcp-load", spec}
			for _, ranks := range []int{1, 2, 4} {
				for _, per := range []bool{false, true} {
					st := m.State(Torch113, true)
					l := NewDCPState(st, 5, ranks, DCPOptions{FilePerTensor: per, Version: Torch113})
					dir := t.TempDir()
					writeLayout(t, dir, l, NewPool(5, 64<<10, 8<<10), 3)
					runs = append(runs, run{fmt.Sprintf("ranks=%d/file_per_tensor=%v", ranks, per), l, st, dir})
					args = append(args, dir)
				}
			}
			var got map[string]map[string]oracleItem
			oracle(t, &got, args...) // one torch import for all
			for _, r := range runs {
				t.Run(r.name, func(t *testing.T) { checkItems(t, r.l, r.st, got[r.dir]) })
			}
		})
	}
}

// TestDCPMatchesTorchSave: what torch 1.13's FileSystemWriter writes for
// the state prism's checkpoint loads into is prism's checkpoint, file for
// file and byte for byte, .metadata included (one process, no_dist).
func TestDCPMatchesTorchSave(t *testing.T) {
	for _, tc := range []struct {
		opt    string
		layers int64
		per    []bool
	}{
		{OptNone, 6, []bool{false, true}},
		{OptAdam, 6, []bool{false, true}},
		// 2059 items: a .metadata of several 64 KiB pickle frames and
		// dicts of more than one 1000-item batch.
		{OptAdam, 256, []bool{false}},
	} {
		opt := tc.opt
		m, spec := newOracleModel(t, tc.layers, F32, opt)
		for _, per := range tc.per {
			t.Run(fmt.Sprintf("%s/layers=%d/file_per_tensor=%v", opt, tc.layers, per), func(t *testing.T) {
				l := NewDCPState(m.State(Torch113, true), 5, 1, DCPOptions{FilePerTensor: per, Version: Torch113})
				dir, ref := t.TempDir(), filepath.Join(t.TempDir(), "ref")
				writeLayout(t, dir, l, NewPool(5, 64<<10, 8<<10), 3)
				var res struct{ Files []string }
				flag := "0"
				if per {
					flag = "1"
				}
				oracle(t, &res, "dcp-save", spec, dir, ref, flag)
				var names []string
				for _, f := range l.Files {
					names = append(names, f.Name)
				}
				sort.Strings(names)
				if fmt.Sprint(names) != fmt.Sprint(res.Files) {
					t.Fatalf("prism writes %v, torch %v", names, res.Files)
				}
				for _, n := range names {
					mine, _ := os.ReadFile(filepath.Join(dir, n))
					theirs, _ := os.ReadFile(filepath.Join(ref, n))
					if !bytes.Equal(mine, theirs) {
						t.Errorf("%s: prism's %d bytes differ from torch's %d at byte %d", n, len(mine), len(theirs), firstDiff(mine, theirs))
					}
				}
			})
		}
	}
}

// TestDCP2Metadata: a 2.x .metadata unpickles with classes that mirror
// torch 2.x's metadata.py and filesystem.py (real 2.x is not available
// here), holds the fields 2.x writes, and its storage data locate every
// item: converted to 1.13's classes, torch 1.13 loads the checkpoint with
// every tensor's bytes as prism wrote them.
func TestDCP2Metadata(t *testing.T) {
	m, spec := newOracleModel(t, 6, BF16, OptAdam)
	for _, per := range []bool{false, true} {
		t.Run(fmt.Sprintf("file_per_tensor=%v", per), func(t *testing.T) {
			st := m.State(Torch2, true)
			dir := t.TempDir()
			l := NewDCPState(st, 5, 2, DCPOptions{FilePerTensor: per, Version: Torch2, CheckpointID: dir})
			writeLayout(t, dir, l, NewPool(5, 64<<10, 8<<10), 3)
			var res struct {
				Class       string
				Fields      []string
				Version     string
				StorageMeta map[string]any   `json:"storage_meta"`
				PlannerData map[string][]any `json:"planner_data"`
				Items       map[string]oracleItem
			}
			oracle(t, &res, "dcp2", spec, dir)
			if res.Class != "torch.distributed.checkpoint.metadata.Metadata" || res.Version != "1.0.0" ||
				fmt.Sprint(res.Fields) != "[state_dict_metadata planner_data storage_data storage_meta version]" {
				t.Errorf("class %s, version %q, fields %v", res.Class, res.Version, res.Fields)
			}
			sm := res.StorageMeta
			if sm["checkpoint_id"] != "Path:"+dir || sm["load_id"] != nil || fmt.Sprint(sm["modules"]) != "[]" ||
				len(fmt.Sprint(sm["save_id"])) != 36 || fmt.Sprint(sm["save_id"])[14] != '4' {
				t.Errorf("storage_meta %v", sm)
			}
			items := st.Items()
			if len(res.PlannerData) != len(items) {
				t.Errorf("planner_data has %d keys, %d items", len(res.PlannerData), len(items))
			}
			if p := res.PlannerData["optimizer.param_groups.0.lr"]; fmt.Sprint(p) != "[optimizer param_groups 0 lr]" {
				t.Errorf("planner_data[optimizer.param_groups.0.lr] = %v", p)
			}
			if p := res.PlannerData["model.layers.0.weight"]; fmt.Sprint(p) != "[model layers.0.weight]" {
				t.Errorf("planner_data[model.layers.0.weight] = %v", p)
			}
			checkItems(t, l, st, res.Items)
		})
	}
}

// TestSafetensorsInTorch: every safetensors file prism writes, one file
// or sharded over 3 ranks, with Adam's state, passes the format's checks
// (8-byte aligned header, contiguous ordered data_offsets covering the
// data) and torch.frombuffer reads each tensor with prism's bytes, dtype
// and shape; the index maps every tensor to the file that holds it.
func TestSafetensorsInTorch(t *testing.T) {
	m := mustBuild(t, "synthetic", Synthetic(3, 40, 24, BF16), OptAdam, 1)
	for _, ranks := range []int{1, 3} {
		t.Run(fmt.Sprintf("ranks=%d", ranks), func(t *testing.T) {
			l := NewSafetensors(m.Tensors, 1, ranks, ranks > 1)
			dir := t.TempDir()
			writeLayout(t, dir, l, NewPool(1, 64<<10, 8<<10), 1)
			args := []string{"safetensors"}
			for _, f := range l.Files {
				if !f.Final {
					args = append(args, filepath.Join(dir, f.Name))
				}
			}
			var got map[string]struct {
				File  string
				CRC   uint32
				DType string
				Shape []int64
			}
			oracle(t, &got, args...)
			crcs := tensorCRCs(l)
			if len(got) != len(m.Tensors) {
				t.Fatalf("torch read %d tensors, prism wrote %d", len(got), len(m.Tensors))
			}
			for _, tn := range m.Tensors {
				g := got[tn.Name]
				if g.CRC != crcs[tn.Name] || g.DType != string(tn.DType) || fmt.Sprint(g.Shape) != fmt.Sprint(tn.Shape) {
					t.Errorf("%s: torch read %s %v crc %08x, prism wrote %s %v crc %08x", tn.Name, g.DType, g.Shape, g.CRC, tn.DType, tn.Shape, crcs[tn.Name])
				}
			}
			if ranks > 1 {
				var idx struct {
					WeightMap map[string]string `json:"weight_map"`
					Metadata  struct {
						TotalSize int64 `json:"total_size"`
					}
				}
				b, _ := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
				if err := json.Unmarshal(b, &idx); err != nil {
					t.Fatal(err)
				}
				for name, g := range got {
					if idx.WeightMap[name] != g.File {
						t.Errorf("index maps %s to %s, %s holds it", name, idx.WeightMap[name], g.File)
					}
				}
				if idx.Metadata.TotalSize != m.TensorBytes() {
					t.Errorf("index total_size %d, tensors %d", idx.Metadata.TotalSize, m.TensorBytes())
				}
			}
		})
	}
}

// TestDCPMatchesTorchSaveDist: 2 and 4 processes of torch 1.13 (gloo),
// each holding its torch.chunk of every tensor as a ShardedTensor, as
// FSDP shards them, save what prism's checkpoint holds: the same files,
// each shard file byte for byte, and a .metadata that unpickles to an
// equal Metadata (its bytes may differ: gathering plans through pickle
// copies strings that one process shares).
func TestDCPMatchesTorchSaveDist(t *testing.T) {
	m, spec := newOracleModel(t, 3, F32, OptAdam)
	for _, ranks := range []int{2, 4} {
		for _, per := range []bool{false, true} {
			t.Run(fmt.Sprintf("ranks=%d/file_per_tensor=%v", ranks, per), func(t *testing.T) {
				l := NewDCPState(m.State(Torch113, true), 5, ranks, DCPOptions{FilePerTensor: per, Version: Torch113})
				dir, ref := t.TempDir(), filepath.Join(t.TempDir(), "ref")
				writeLayout(t, dir, l, NewPool(5, 64<<10, 8<<10), 3)
				var res struct {
					Files         []string
					MetadataEqual bool     `json:"metadata_equal"`
					SDMDiff       []string `json:"state_dict_metadata_diff"`
					StorageDiff   []string `json:"storage_data_diff"`
				}
				oracle(t, &res, "dcp-save-dist", spec, dir, ref, strconv.Itoa(ranks), map[bool]string{false: "0", true: "1"}[per])
				var names []string
				for _, f := range l.Files {
					names = append(names, f.Name)
				}
				sort.Strings(names)
				if fmt.Sprint(names) != fmt.Sprint(res.Files) {
					t.Fatalf("prism writes %d files %v, torch %d %v", len(names), names, len(res.Files), res.Files)
				}
				t.Logf("%d files, as torch writes", len(res.Files))
				if !res.MetadataEqual {
					t.Errorf("Metadata differs: state_dict_metadata %v, storage_data %v", res.SDMDiff, res.StorageDiff)
				}
				for _, f := range l.Files {
					if f.Final {
						continue
					}
					mine, _ := os.ReadFile(filepath.Join(dir, f.Name))
					theirs, _ := os.ReadFile(filepath.Join(ref, f.Name))
					if !bytes.Equal(mine, theirs) {
						t.Errorf("%s: prism's %d bytes differ from torch's %d at byte %d", f.Name, len(mine), len(theirs), firstDiff(mine, theirs))
					}
				}
			})
		}
	}
}
