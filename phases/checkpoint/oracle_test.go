package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/internal/torchtest"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/ckpt"
	"github.com/prism-hpc/prism/phases/phasestest"
	"github.com/prism-hpc/prism/report"
)

// Real PyTorch is the oracle of prism's own output, through phases/ckpt's
// testdata/torch_oracle.py (internal/torchtest finds it, and strace, or
// says why the test skips or, in CI, fails).

// capture is a test phase that writes what the latest checkpoint holds
// to a JSON file, for the oracle to compare with what torch read: its
// directory and the CRC-32 of every tensor, by the key a loader sees
// (DCP's flattened FQN, else the tensor's name).
type capture struct {
	cfg struct {
		Out string `toml:"out" doc:"the JSON file to write"`
	}
}

type captured struct {
	Dir  string            `json:"dir"`
	CRCs map[string]uint32 `json:"crcs"`
}

func (c *capture) Config() any                                 { return &c.cfg }
func (c *capture) Setup(context.Context, *phases.Env) error    { return nil }
func (c *capture) Verify(context.Context, *phases.Env) error   { return nil }
func (c *capture) Teardown(context.Context, *phases.Env) error { return nil }
func (c *capture) Run(ctx context.Context, env *phases.Env) error {
	st := store(env)
	rec := st.recs[len(st.recs)-1]
	l := rec.layout
	crcs := tensorCRCs(l)
	out := captured{Dir: rec.dir, CRCs: map[string]uint32{}}
	if ents := l.DCPEntries(); ents != nil {
		for _, e := range ents {
			if e.Tensor >= 0 {
				out.CRCs[e.FQN] = crcs[e.Tensor]
			}
		}
	} else {
		for i, tn := range l.Tensors {
			out.CRCs[tn.Name] = crcs[i]
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	return os.WriteFile(c.cfg.Out, b, 0o644)
}

// tensorCRCs is every tensor's CRC-32 from the layout's pieces, combined
// in row order, or of its literal value.
func tensorCRCs(l *ckpt.Layout) []uint32 {
	byTensor := make([][]ckpt.Piece, len(l.Tensors))
	for _, p := range l.Pieces {
		byTensor[p.Tensor] = append(byTensor[p.Tensor], p)
	}
	out := make([]uint32, len(l.Tensors))
	for i, tn := range l.Tensors {
		if tn.Value != nil {
			out[i] = crc32.ChecksumIEEE(tn.Value)
			continue
		}
		ps := byTensor[i]
		sort.Slice(ps, func(a, b int) bool { return ps[a].Lo < ps[b].Lo })
		for k, p := range ps {
			if k == 0 {
				out[i] = p.CRC
			} else {
				out[i] = ckpt.Combine(out[i], p.CRC, p.Len())
			}
		}
	}
	return out
}

// oracleSpec is a synthetic model as torch_oracle.py rebuilds it from
// torch's nn.Linear and torch.optim.Adam.
type oracleSpec struct {
	Layers    int    `json:"layers"`
	Input     int    `json:"input"`
	Hidden    int    `json:"hidden"`
	DType     string `json:"dtype"`
	Optimizer string `json:"optimizer"`
	Step      int64  `json:"step"`
}

func (s oracleSpec) keys() string {
	dt := map[string]string{"float32": "fp32", "bfloat16": "bf16"}[s.DType]
	return fmt.Sprintf("layers = %d\ninput_dim = %d\nhidden_dim = %d\ndtype = %q\noptimizer = %q\n", s.Layers, s.Input, s.Hidden, dt, s.Optimizer)
}

// oracleCkpt is one checkpoint prism writes for the oracle.
type oracleCkpt struct {
	name  string
	ranks int // of the run that writes it
	kind  string
	keys  string // format and layout keys
	spec  oracleSpec
}

func spec(layers int, dt, opt string) oracleSpec {
	return oracleSpec{Layers: layers, Input: 512, Hidden: 512, DType: dt, Optimizer: opt, Step: ckpt.DefaultStep}
}

// The checkpoints: each model different, so no save replaces another's.
var oracleCkpts = []oracleCkpt{
	{"torch-adam", 1, "ddp_save", "", spec(4, "float32", "adam")},
	{"torch-none", 1, "ddp_save", "", spec(3, "bfloat16", "none")},
	{"torch-mixed", 1, "ddp_save", "", spec(2, "bfloat16", "adam_mixed")},
	{"st-ddp", 1, "ddp_save", "format = \"safetensors\"\n", spec(5, "bfloat16", "adam")},
	{"dcp2-rank", 2, "fsdp_save", "", spec(4, "float32", "adam")},
	{"dcp2-item", 2, "fsdp_save", "dcp_file_per_tensor = true\n", spec(5, "float32", "adam")},
	{"st-fsdp2", 2, "fsdp_save", "format = \"safetensors\"\n", spec(6, "float32", "adam")},
	{"dcp4-rank", 4, "fsdp_save", "", spec(4, "bfloat16", "adam")},
	{"dcp4-item", 4, "fsdp_save", "dcp_file_per_tensor = true\n", spec(5, "bfloat16", "none")},
}

// writeStats is what strace saw written into one checkpoint directory.
type writeStats struct {
	files, calls, fsyncs int
	bytes                int64
}

func dirStats(tr map[string][]tracedCall, dir string) writeStats {
	var s writeStats
	for path, cs := range tr {
		if filepath.Dir(path) != dir {
			continue
		}
		opened := false
		for _, c := range cs {
			switch c.op {
			case "open_w":
				opened = true
			case "write", "writev", "pwrite64":
				s.calls++
				s.bytes += c.ret
			case "fsync", "fdatasync":
				s.fsyncs++
			}
		}
		if opened {
			s.files++
		}
	}
	return s
}

// TestTorchOracle puts prism's own output through real PyTorch (1.13):
// torch.load (weights_only where 1.13 allows it) and a fresh
// torch.optim.Adam's load_state_dict accept ddp_save's files, and
// torch.save of the values they hold writes the same bytes; DCP's
// FileSystemReader and load_state_dict (no_dist, world size 1) read
// fsdp_save's checkpoints written at 2 and 4 ranks in both file layouts,
// every tensor with prism's CRC and every value what torch's own Adam
// holds; every safetensors file passes the format's checks and
// torch.frombuffer reads each tensor with prism's CRC. Under strace,
// prism's saves and torch's (torch.save; DCP's FileSystemWriter from 2
// gloo processes) of the same state write the same files with the same
// fsyncs, write calls within 10% and bytes within 1%.
func TestTorchOracle(t *testing.T) {
	if os.Getenv("PRISM_ORACLE_CHILD") != "" {
		oracleChild(t, os.Getenv("PRISM_ORACLE_WORK"))
		return
	}
	py := torchtest.Python(t)
	strace := torchtest.Strace(t)
	work := t.TempDir()
	traceArgs := []string{"-f", "-y", "-s", "4", "-e", "trace=openat,write,writev,pwrite64,fsync,fdatasync"}
	// prism's saves, traced.
	plog := filepath.Join(work, "prism.strace")
	cmd := exec.Command(strace, append(traceArgs, "-o", plog, os.Args[0], "-test.run=^TestTorchOracle$", "-test.count=1")...)
	cmd.Env = append(os.Environ(), "PRISM_ORACLE_CHILD=1", "PRISM_ORACLE_WORK="+work)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("prism's saves under strace: %v\n%s", err, b)
	}
	got := map[string]captured{}
	for _, c := range oracleCkpts {
		var cp captured
		b, err := os.ReadFile(filepath.Join(work, c.name+".json"))
		if err == nil {
			err = json.Unmarshal(b, &cp)
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got[c.name] = cp
	}
	// torch's checks of prism's files, and torch's own saves, in one
	// interpreter, traced.
	ref := filepath.Join(work, "torch")
	type job struct {
		Cmd  string      `json:"cmd"`
		Spec *oracleSpec `json:"spec,omitempty"`
		Args []string    `json:"args"`
	}
	var jobs []job
	for i := range oracleCkpts {
		c := &oracleCkpts[i]
		dir := got[c.name].Dir
		switch {
		case c.kind == "ddp_save" && c.keys == "":
			jobs = append(jobs, job{"torch", &c.spec, []string{filepath.Join(dir, "checkpoint.pt"), filepath.Join(ref, c.name, "checkpoint.pt")}})
		case strings.Contains(c.keys, "safetensors"):
			names, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
			jobs = append(jobs, job{"safetensors", nil, names})
		default:
			jobs = append(jobs, job{"dcp-load", &c.spec, []string{dir}})
		}
		if c.kind == "fsdp_save" && c.ranks == 2 && c.keys != "format = \"safetensors\"\n" {
			per := "0"
			if strings.Contains(c.keys, "per_tensor") {
				per = "1"
			}
			jobs = append(jobs, job{"dcp-save-dist", &c.spec, []string{dir, filepath.Join(ref, c.name), "2", per}})
		}
	}
	for _, c := range oracleCkpts {
		if c.kind == "ddp_save" {
			os.MkdirAll(filepath.Join(ref, c.name), 0o755)
		}
	}
	jb, _ := json.Marshal(jobs)
	jf := filepath.Join(work, "jobs.json")
	if err := os.WriteFile(jf, jb, 0o644); err != nil {
		t.Fatal(err)
	}
	tlog := filepath.Join(work, "torch.strace")
	cmd = exec.Command(strace, append(traceArgs, "-o", tlog, py, filepath.Join("testdata", "oracle_batch.py"), jf)...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join("..", "ckpt", "testdata"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle_batch.py: %v\n%s", err, stderr.String())
	}
	var answers []json.RawMessage
	if err := json.Unmarshal(out, &answers); err != nil || len(answers) != len(jobs) {
		t.Fatalf("oracle_batch.py: %d answers for %d jobs (%v)\n%s", len(answers), len(jobs), err, out)
	}
	byName := map[string]*oracleCkpt{}
	for i := range oracleCkpts {
		byName[got[oracleCkpts[i].name].Dir] = &oracleCkpts[i]
	}
	for i, j := range jobs {
		switch j.Cmd {
		case "torch":
			c := byName[filepath.Dir(j.Args[0])]
			t.Run("torch.load/"+c.name, func(t *testing.T) { checkTorchLoad(t, c, j.Args[0], j.Args[1], answers[i]) })
		case "dcp-load":
			c := byName[j.Args[0]]
			t.Run("dcp-load/"+c.name, func(t *testing.T) { checkDCPLoad(t, got[c.name], answers[i]) })
		case "safetensors":
			c := byName[filepath.Dir(j.Args[0])]
			t.Run("safetensors/"+c.name, func(t *testing.T) { checkSafetensors(t, got[c.name], answers[i]) })
		}
	}
	ptr, ttr := traceLog(t, plog, work), traceLog(t, tlog, ref)
	for _, c := range oracleCkpts {
		mineDir := got[c.name].Dir
		theirs := filepath.Join(ref, c.name)
		if _, err := os.Stat(theirs); err != nil || strings.Contains(c.keys, "safetensors") || c.ranks == 4 {
			continue
		}
		t.Run("strace/"+c.name, func(t *testing.T) {
			a, b := dirStats(ptr, mineDir), dirStats(ttr, theirs)
			t.Logf("prism: %d files, %d write calls, %d bytes, %d fsyncs; torch: %d files, %d write calls, %d bytes, %d fsyncs",
				a.files, a.calls, a.bytes, a.fsyncs, b.files, b.calls, b.bytes, b.fsyncs)
			if b.files == 0 {
				t.Fatalf("strace saw torch write nothing in %s", theirs)
			}
			if a.files != b.files || a.fsyncs != b.fsyncs {
				t.Errorf("files %d, fsyncs %d; torch: files %d, fsyncs %d", a.files, a.fsyncs, b.files, b.fsyncs)
			}
			if d := math.Abs(float64(a.calls-b.calls)) / float64(b.calls); d > 0.10 {
				t.Errorf("%d write calls, torch %d: %.1f%% apart (want within 10%%)", a.calls, b.calls, 100*d)
			}
			if d := math.Abs(float64(a.bytes-b.bytes)) / float64(b.bytes); d > 0.01 {
				t.Errorf("%d bytes written, torch %d: %.2f%% apart (want within 1%%)", a.bytes, b.bytes, 100*d)
			}
		})
	}
}

// oracleChild writes every checkpoint of oracleCkpts (keep = true), one
// run per rank count, capturing each one's CRCs.
func oracleChild(t *testing.T, work string) {
	reg := registry()
	reg.Register(phases.Kind{Name: "capture", Family: "test", New: func() phases.Phase { return &capture{} }})
	for _, ranks := range []int{1, 2, 4} {
		plan := "[plan]\nkeep = true\ndrop_caches = \"none\"\n"
		for _, c := range oracleCkpts {
			if c.ranks != ranks {
				continue
			}
			plan += fmt.Sprintf("[[phase]]\nname = %q\nkind = %q\n%s%s[[phase]]\nkind = \"capture\"\nname = \"capture-%s\"\nranks = 1\nout = %q\n",
				c.name, c.kind, c.keys, c.spec.keys(), c.name, filepath.Join(work, c.name+".json"))
		}
		wd := filepath.Join(work, fmt.Sprintf("prism%d", ranks))
		if err := os.MkdirAll(wd, 0o755); err != nil {
			t.Fatal(err)
		}
		res := phasestest.Run(t, reg, plan, phasestest.Ranks(ranks), phasestest.Workdir(wd))
		if res.Outcome.Status != report.StatusPassed {
			for _, ph := range res.Manifest.Phases {
				t.Logf("%s: %s %s", ph.Name, ph.Status, ph.Error)
			}
			t.Fatalf("%d ranks: %s", ranks, res.Outcome.Status)
		}
	}
}

func checkTorchLoad(t *testing.T, c *oracleCkpt, mine, theirs string, raw json.RawMessage) {
	var res struct {
		WeightsOnly  bool             `json:"weights_only"`
		Steps        []float64        `json:"steps"`
		StepDTypes   []string         `json:"step_dtypes"`
		StateDTypes  []string         `json:"state_dtypes"`
		ParamGroups  []map[string]any `json:"param_groups"`
		AdamDefaults []map[string]any `json:"adam_defaults"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if res.WeightsOnly != (c.spec.Optimizer == ckpt.OptNone) {
		t.Errorf("weights_only %v: torch 1.13 reads a model-only file with weights_only=True", res.WeightsOnly)
	}
	if c.spec.Optimizer != ckpt.OptNone {
		if len(res.Steps) != 2*c.spec.Layers {
			t.Errorf("Adam loaded %d parameter states, the model has %d parameters", len(res.Steps), 2*c.spec.Layers)
		}
		for _, s := range res.Steps {
			if s != float64(c.spec.Step) {
				t.Errorf("step %v, prism wrote %d", s, c.spec.Step)
				break
			}
		}
		want := c.spec.DType
		if c.spec.Optimizer == ckpt.OptAdamMixed {
			want = "float32"
		}
		if fmt.Sprint(res.StepDTypes) != "[torch.float32]" || fmt.Sprint(res.StateDTypes) != "[torch."+want+"]" {
			t.Errorf("step dtypes %v, state dtypes %v: torch.optim.Adam keeps a float32 step and %s moments", res.StepDTypes, res.StateDTypes, want)
		}
		if g, d := fmt.Sprint(res.ParamGroups), fmt.Sprint(res.AdamDefaults); g != d {
			t.Errorf("param_groups %s, torch's Adam has %s", g, d)
		}
	}
	a, _ := os.ReadFile(mine)
	b, _ := os.ReadFile(theirs)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Errorf("torch.save of the values torch loaded from prism's file (%d bytes) writes %d different bytes", len(a), len(b))
	}
}

type oracleItem struct {
	CRC   *uint32 `json:"crc"`
	Value *string `json:"value"`
}

func checkDCPLoad(t *testing.T, cp captured, raw json.RawMessage) {
	var res struct {
		Items    map[string]oracleItem `json:"items"`
		Expected map[string]string     `json:"expected"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Items) != len(cp.CRCs)+len(res.Expected) {
		t.Errorf("torch loaded %d items; prism wrote %d tensors, torch's state has %d other values", len(res.Items), len(cp.CRCs), len(res.Expected))
	}
	for k, want := range cp.CRCs {
		g := res.Items[k]
		if g.CRC == nil || *g.CRC != want {
			t.Errorf("%s: torch loaded CRC %v, prism wrote %08x", k, g.CRC, want)
		}
	}
	t.Logf("%d tensors and %d other values compared", len(cp.CRCs), len(res.Expected))
	for k, want := range res.Expected {
		g := res.Items[k]
		if g.Value == nil || *g.Value != want {
			t.Errorf("%s: torch loaded %v from prism's checkpoint; torch's Adam holds %s", k, g.Value, want)
		}
	}
}

func checkSafetensors(t *testing.T, cp captured, raw json.RawMessage) {
	var res map[string]struct {
		CRC uint32 `json:"crc"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if len(res) != len(cp.CRCs) {
		t.Errorf("torch read %d tensors, prism wrote %d", len(res), len(cp.CRCs))
	}
	for name, want := range cp.CRCs {
		if g, ok := res[name]; !ok || g.CRC != want {
			t.Errorf("%s: torch.frombuffer read CRC %08x (found %v), prism wrote %08x", name, g.CRC, ok, want)
		}
	}
}
