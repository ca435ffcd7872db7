package phases

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/phases/ckpt"
	"github.com/prism-hpc/prism/report"
	"github.com/prism-hpc/prism/spmd"
)

// A tiny model: 4 layers of 1024x1024 would be the default; these keys
// make a ~100 KiB synthetic model (+ adam: ~700 KiB).
const tinyModel = `layers = 2
input_dim = 32
hidden_dim = 96
`

func runPlan(t *testing.T, reg *Registry, plan string) (*Outcome, string) {
	t.Helper()
	p, err := DecodePlan(reg, "ckpt.toml", []byte(plan))
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	work := t.TempDir()
	out, err := Execute(context.Background(), Options{Plan: p, Comm: spmd.NewSingle(), Workdir: work, Results: t.TempDir(), Stdout: io.Discard, Stderr: &stderr, Version: "test"})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	return out, work
}

func tinyBytes(t *testing.T, optimizer string) int64 {
	m, err := ckpt.Build("synthetic", ckpt.Synthetic(2, 32, 96, ckpt.F32), optimizer, 1)
	if err != nil {
		t.Fatal(err)
	}
	return m.Bytes()
}

// TestCheckpointEngine runs every checkpoint phase through the engine:
// each passes, moves exactly the model's bytes (times the readers for
// loads), and records its metrics; mlperf_checkpoint's [METRIC] lines come
// out of its manifest entry.
func TestCheckpointEngine(t *testing.T) {
	plan := `[plan]
drop_caches = "none"
[[phase]]
kind = "ddp_save"
optimizer = "adam"
` + tinyModel + `
[[phase]]
kind = "ddp_load"
optimizer = "adam"
drop_caches = "fadvise"
` + tinyModel + `
[[phase]]
kind = "fsdp_save"
iterations = 2
` + tinyModel + `
[[phase]]
kind = "fsdp_load"
` + tinyModel + `
[[phase]]
kind = "rl_load"
buffer_budget = "1MiB"
` + tinyModel + `
[[phase]]
kind = "ddp_save"
name = "st"
format = "safetensors"
` + tinyModel + `
[[phase]]
kind = "ddp_load"
name = "st-load"
` + tinyModel + `
[[phase]]
kind = "mlperf_checkpoint"
scale = 0.00002
num_checkpoints_write = 2
num_checkpoints_read = 3
`
	out, _ := runPlan(t, Default(), plan)
	if out.Status != report.StatusPassed {
		for _, ph := range out.Manifest.Phases {
			t.Logf("%s: %s %s", ph.Name, ph.Status, ph.Error)
		}
		t.Fatalf("status %s", out.Status)
	}
	adam, plain := tinyBytes(t, "adam"), tinyBytes(t, "none")
	want := map[string]int64{"ddp_save": adam, "ddp_load": adam, "fsdp_save": 2 * plain, "fsdp_load": plain, "rl_load": plain, "st": plain, "st-load": plain}
	for _, ph := range out.Manifest.Phases {
		if w, ok := want[ph.Name]; ok && ph.Bytes != w {
			t.Errorf("%s: %d bytes, want %d", ph.Name, ph.Bytes, w)
		}
		if ph.Metrics["checkpoint_bytes"] == 0 {
			t.Errorf("%s: no checkpoint_bytes metric: %v", ph.Name, ph.Metrics)
		}
	}
	ph := out.Manifest.Phases
	if ph[0].Metrics["fsync"] != 0 || ph[2].Metrics["fsync"] != 1 || ph[5].Metrics["fsync"] != 1 {
		t.Errorf("fsync metrics: torch %v, dcp %v, safetensors %v", ph[0].Metrics["fsync"], ph[2].Metrics["fsync"], ph[5].Metrics["fsync"])
	}
	if ph[1].Cache.Applied != "fadvise" || ph[1].Metrics["written_in_setup"] != 0 {
		t.Errorf("ddp_load: cache %+v, written_in_setup %v", ph[1].Cache, ph[1].Metrics["written_in_setup"])
	}
	if ph[4].Metrics["verify_inline_ranks"] != 0 {
		t.Errorf("rl_load checked inline with a budget larger than the checkpoint")
	}
	if ph[2].OpsByType["fsync"].Ops != 2*2 || ph[2].OpsByType["rename"].Ops != 2 {
		t.Errorf("fsdp_save: %d fsyncs, %d renames over 2 iterations, want 4 and 2", ph[2].OpsByType["fsync"].Ops, ph[2].OpsByType["rename"].Ops)
	}
	ml := ph[7]
	m := ckpt.MLPerfModels["llama3-8b"]
	size, _ := m.CheckpointBytes(8, 0.00002)
	if ml.Bytes != 5*size || ml.Metrics["simulated_accelerators"] != 8 || ml.Metrics["save_checkpoints"] != 2 || ml.Metrics["load_checkpoints"] != 3 {
		t.Errorf("mlperf: %d bytes (want %d), metrics %v", ml.Bytes, 5*size, ml.Metrics)
	}
	lines := (&mlperfCheckpoint{}).MetricLines(&ml)
	pat := []string{
		`^\[METRIC\] =+$`,
		`^\[METRIC\] Number of Simulated Accelerators: 8$`,
		`^\[METRIC\] Checkpoint save duration \(seconds\): \d+\.\d{4} \(\d+\.\d{4}\)$`,
		`^\[METRIC\] Checkpoint save I/O Throughput \(GiB/second\): \d+\.\d{4} \(\d+\.\d{4}\)$`,
		`^\[METRIC\] Checkpoint load duration \(seconds\): \d+\.\d{4} \(\d+\.\d{4}\)$`,
		`^\[METRIC\] Checkpoint load I/O Throughput \(GiB/second\): \d+\.\d{4} \(\d+\.\d{4}\)$`,
		`^\[METRIC\] =+$`,
	}
	if len(lines) != len(pat) {
		t.Fatalf("MetricLines:\n%s", strings.Join(lines, "\n"))
	}
	for i, p := range pat {
		if !regexp.MustCompile(p).MatchString(lines[i]) {
			t.Errorf("line %d %q does not match %s", i, lines[i], p)
		}
	}
}

// The engine prints these lines after the summary.
var _ MetricLiner = (*mlperfCheckpoint)(nil)

func TestMLPerfMetricLines(t *testing.T) {
	res := &report.PhaseResult{Metrics: map[string]float64{
		"checkpoint_bytes": 10 << 30, "simulated_accelerators": 8, "save_checkpoints": 2,
		"save_ckpt_000_seconds": 4, "save_ckpt_001_seconds": 6,
	}}
	got := strings.Join(mlperfMetricLines(res), "\n")
	want := `[METRIC] ==========================================================
[METRIC] Number of Simulated Accelerators: 8
[METRIC] Checkpoint save duration (seconds): 5.0000 (1.0000)
[METRIC] Checkpoint save I/O Throughput (GiB/second): 2.0833 (0.4167)
[METRIC] ==========================================================`
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// corrupter is a test phase that flips one byte of the latest checkpoint:
// in a tensor, or in a header.
type corrupter struct {
	cfg struct {
		Where string `toml:"where" doc:"tensor | header"`
	}
}

func (c *corrupter) Config() any                          { return &c.cfg }
func (c *corrupter) Setup(context.Context, *Env) error    { return nil }
func (c *corrupter) Verify(context.Context, *Env) error   { return nil }
func (c *corrupter) Teardown(context.Context, *Env) error { return nil }
func (c *corrupter) Run(ctx context.Context, env *Env) error {
	st := store(env)
	rec := st.recs[len(st.recs)-1]
	l := rec.layout
	var path string
	var off int64
	if c.cfg.Where == "header" {
		f := l.FilesOf(0)[0]
		path, off = l.Files[f].Name, 10
	} else {
		p := l.Pieces[len(l.Pieces)/2]
		path, off = l.Files[p.File].Name, p.Off+p.Len()/2
	}
	f, err := os.OpenFile(filepath.Join(rec.dir, path), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		return err
	}
	b[0] ^= 0x40
	_, err = f.WriteAt(b, off)
	return err
}

// TestCorruptedCheckpointFails: storage that returns other bytes than
// were written fails the load, naming the tensor and the file.
func TestCorruptedCheckpointFails(t *testing.T) {
	reg := Default()
	reg.Register(Kind{Name: "corrupt", Family: "test", New: func() Phase { return &corrupter{} }})
	big := "layers = 2\ninput_dim = 512\nhidden_dim = 512\nbuffer_budget = \"1MiB\"\n" // 2.1 MB: checked inline
	for _, tc := range []struct {
		name, save, load, where, model, extra string
		want                                  []string
	}{
		{"dcp tensor", "fsdp_save", "fsdp_load", "tensor", tinyModel, "", []string{"tensor layers.", "__0_0.distcp", "CRC-32", "different bytes"}},
		{"dcp tensor inline", "fsdp_save", "fsdp_load", "tensor", big, "", []string{"tensor layers.", "__0_0.distcp"}},
		{"torch tensor", "ddp_save", "ddp_load", "tensor", tinyModel, "", []string{"tensor layers.", "checkpoint.pt"}},
		{"torch header", "ddp_save", "ddp_load", "header", tinyModel, "", []string{"checkpoint.pt: byte 10", "header/metadata"}},
		{"safetensors header", "fsdp_save", "rl_load", "header", tinyModel, "format = \"safetensors\"\n", []string{"model-00001-of-00001.safetensors: byte 10"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := fmt.Sprintf("[plan]\ndrop_caches = \"none\"\n[[phase]]\nkind = %q\n%s%s[[phase]]\nkind = \"corrupt\"\nwhere = %q\n[[phase]]\nkind = %q\n%s%s",
				tc.save, tc.model, tc.extra, tc.where, tc.load, tc.model, tc.extra)
			out, _ := runPlan(t, reg, plan)
			ph := out.Manifest.Phases
			if out.Status != report.StatusFailed || ph[0].Status != report.StatusPassed || ph[2].Status != report.StatusFailed {
				t.Fatalf("status %s; phases %s %s %s (%s)", out.Status, ph[0].Status, ph[1].Status, ph[2].Status, ph[2].Error)
			}
			for _, w := range tc.want {
				if !strings.Contains(ph[2].Error, w) {
					t.Errorf("error %q does not contain %q", ph[2].Error, w)
				}
			}
		})
	}
}

// TestLoadWithoutSave: a load with no save of its model before it writes
// a checkpoint in setup (untimed) and then measures only the reads.
func TestLoadWithoutSave(t *testing.T) {
	out, _ := runPlan(t, Default(), "[plan]\ndrop_caches = \"none\"\n[[phase]]\nkind = \"rl_load\"\nformat = \"safetensors\"\n"+tinyModel+
		"[[phase]]\nkind = \"ddp_load\"\nbuffer_budget = \"1MiB\"\nlayers = 4\nhidden_dim = 600\ninput_dim = 600\n")
	ph := out.Manifest.Phases
	if out.Status != report.StatusPassed {
		t.Fatalf("%s: %s / %s", out.Status, ph[0].Error, ph[1].Error)
	}
	if ph[0].Metrics["written_in_setup"] != 1 || ph[0].OpsByType["write"].Ops != 0 || ph[0].Bytes != tinyBytes(t, "none") {
		t.Errorf("rl_load: metrics %v, ops %v, bytes %d", ph[0].Metrics, ph[0].OpsByType, ph[0].Bytes)
	}
	if ph[1].Metrics["verify_inline_ranks"] != 1 {
		t.Errorf("ddp_load of a 5.8 MB checkpoint with a 1 MiB budget did not verify inline: %v", ph[1].Metrics)
	}
}

func TestCheckpointPlanErrors(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(cfg, []byte(`{"model_type": "llama", "hidden_size": 64}`), 0o644)
	for _, tc := range []struct{ body, want string }{
		{"kind = \"fsdp_save\"\nmodel_config = \"/nonexistent/config.json\"", "model_config: cannot read it"},
		{"kind = \"fsdp_save\"\nmodel_config = \"" + cfg + "\"", "model_config: " + cfg + ": ckpt: config.json: model_type llama needs intermediate_size"},
		{"kind = \"ddp_save\"\nmodel = \"llama3-9b\"", "unknown model \"llama3-9b\""},
		{"kind = \"ddp_save\"\nformat = \"dcp\"", "unknown format \"dcp\" (allowed: torch, safetensors)"},
		{"kind = \"fsdp_save\"\nformat = \"torch\"", "(allowed: dcp, safetensors)"},
		{"kind = \"fsdp_save\"\nwrite_size = \"1000\"", "write_size: 1000: want a multiple of 4KiB"},
		{"kind = \"fsdp_save\"\nformat = \"safetensors\"\ndcp_file_per_tensor = true", "dcp_file_per_tensor: applies to format = \"dcp\""},
		{"kind = \"ddp_save\"\ndcp_file_per_tensor = true", "unknown key"},
		{"kind = \"fsdp_load\"\nreaders = 2", "unknown key"},
		{"kind = \"ddp_save\"\nfsync = \"sometimes\"", "fsync"},
		{"kind = \"ddp_save\"\nscale = 0", "scale: 0 out of range"},
		{"kind = \"ddp_load\"\ndtype = \"int4\"", "dtype"},
		{"kind = \"mlperf_checkpoint\"\nmodel = \"llama3-405b\"\nprocesses = 8", "processes: 8: want a multiple of llama3-405b's TP x PP = 256"},
		{"kind = \"mlperf_checkpoint\"\nnum_checkpoints_write = 0\nnum_checkpoints_read = 0", "nothing to do"},
	} {
		_, err := DecodePlan(Default(), "p.toml", []byte("[[phase]]\n"+tc.body+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n error %v\n want %q", tc.body, err, tc.want)
		}
	}
	p, err := DecodePlan(Default(), "p.toml", []byte("[[phase]]\nkind = \"ddp_save\"\nformat = \"safetensors\"\n[[phase]]\nkind = \"ddp_save\"\nfsync = false\nformat = \"safetensors\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Phases[0].Phase.Config().(*ddpSaveConfig).Fsync; got != "true" {
		t.Errorf("safetensors fsync default %q, want true", got)
	}
	if got := p.Phases[1].Phase.Config().(*ddpSaveConfig).Fsync; got != "false" {
		t.Errorf("fsync = false became %q", got)
	}
}

// llamaConfig is a small HuggingFace llama config.json.
const llamaConfig = `{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
 "tie_word_embeddings": false, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-05}`

// pySafetensors checks safetensors files with nothing but Python's json and
// struct, against the tensor list transformers' LlamaForCausalLM has for
// the config: names, shapes, dtypes; data offsets that tile each file's
// data section exactly; an index that names every tensor's file.
const pySafetensors = `
import json, struct, sys, os
d, cfgp = sys.argv[1], sys.argv[2]
cfg = json.load(open(cfgp))
h, L, V, ffn = cfg['hidden_size'], cfg['num_hidden_layers'], cfg['vocab_size'], cfg['intermediate_size']
nh, kv = cfg['num_attention_heads'], cfg['num_key_value_heads']
hd = h // nh
want = {'model.embed_tokens.weight': [V, h], 'model.norm.weight': [h], 'lm_head.weight': [V, h]}
for i in range(L):
    p = 'model.layers.%d.' % i
    want.update({p+'self_attn.q_proj.weight': [nh*hd, h], p+'self_attn.k_proj.weight': [kv*hd, h],
                 p+'self_attn.v_proj.weight': [kv*hd, h], p+'self_attn.o_proj.weight': [h, nh*hd],
                 p+'mlp.gate_proj.weight': [ffn, h], p+'mlp.up_proj.weight': [ffn, h], p+'mlp.down_proj.weight': [h, ffn],
                 p+'input_layernorm.weight': [h], p+'post_attention_layernorm.weight': [h]})
idx = json.load(open(os.path.join(d, 'model.safetensors.index.json')))
seen, total = {}, 0
for f in sorted(set(idx['weight_map'].values())):
    raw = open(os.path.join(d, f), 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    hdr = json.loads(raw[8:8+n])
    data = len(raw) - 8 - n
    spans = []
    for name, ti in hdr.items():
        if name == '__metadata__':
            continue
        assert ti['dtype'] == 'BF16', (name, ti['dtype'])
        b, e = ti['data_offsets']
        el = 1
        for x in ti['shape']: el *= x
        assert e - b == el * 2, (name, b, e, ti['shape'])
        spans.append((b, e, name))
        seen[name] = (f, ti['shape'])
        total += e - b
    spans.sort()
    pos = 0
    for b, e, name in spans:
        assert b == pos, '%s: gap or overlap at %d (tensor %s starts at %d)' % (f, pos, name, b)
        pos = e
    assert pos == data, '%s: tensors end at %d, data section is %d bytes' % (f, pos, data)
assert set(seen) == set(want), (sorted(set(seen) ^ set(want)))
for name, shape in want.items():
    assert seen[name][1] == shape, (name, seen[name][1], shape)
    assert idx['weight_map'][name] == seen[name][0], name
assert idx['metadata']['total_size'] == total, (idx['metadata']['total_size'], total)
print('ok', len(seen), 'tensors', total, 'bytes')
`

func python(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3" // faster to start than a version manager's shim
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed: the independent format checks need it")
	}
	return p
}

// TestSafetensorsFromHFConfig: fsdp_save of a llama config.json writes
// the safetensors files HuggingFace would, checked by a reader
// independent of prism's writer.
func TestSafetensorsFromHFConfig(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(llamaConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	out, work := runPlan(t, Default(), fmt.Sprintf("[plan]\nkeep = true\ndrop_caches = \"none\"\n[[phase]]\nkind = \"fsdp_save\"\nformat = \"safetensors\"\nmodel_config = %q\n[[phase]]\nkind = \"fsdp_load\"\nmodel_config = %q\n", cfg, cfg))
	if out.Status != report.StatusPassed {
		t.Fatalf("%s: %s", out.Status, out.Manifest.Phases[0].Error)
	}
	ckptDir, _ := filepath.Glob(filepath.Join(work, "prism-*", "01-fsdp_save", "checkpoint"))
	if len(ckptDir) != 1 {
		t.Fatalf("checkpoint directory not found under %s", work)
	}
	res, err := exec.Command(py, "-c", pySafetensors, ckptDir[0], cfg).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, res)
	}
	if !strings.HasPrefix(string(res), "ok 21 tensors") {
		t.Fatalf("python: %s", res)
	}
	if out.Manifest.Phases[1].Bytes != out.Manifest.Phases[0].Bytes {
		t.Errorf("load read %d bytes of %d", out.Manifest.Phases[1].Bytes, out.Manifest.Phases[0].Bytes)
	}
}

// TestDCPSyscalls traces a DCP save with strace: one fsync per file
// written (each shard, then .metadata.tmp), and .metadata.tmp renamed to
// .metadata after every shard's fsync.
func TestDCPSyscalls(t *testing.T) {
	if os.Getenv("PRISM_DCP_CHILD") != "" {
		// The traced child: run the save and leave the files.
		perTensor := os.Getenv("PRISM_DCP_CHILD") == "per-tensor"
		p, err := DecodePlan(Default(), "dcp.toml", []byte(fmt.Sprintf("[plan]\nkeep = true\ndrop_caches = \"none\"\n[[phase]]\nkind = \"fsdp_save\"\ndcp_file_per_tensor = %v\n%s", perTensor, tinyModel)))
		if err != nil {
			t.Fatal(err)
		}
		out, err := Execute(context.Background(), Options{Plan: p, Comm: spmd.NewSingle(), Workdir: os.Getenv("PRISM_DCP_WORK"), Results: os.Getenv("PRISM_DCP_WORK"), Stdout: io.Discard, Stderr: io.Discard, Version: "test"})
		if err != nil || out.Status != report.StatusPassed {
			t.Fatalf("%v %v", err, out)
		}
		return
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace not installed (apt-get install strace): the syscall trace test needs it")
	}
	for _, mode := range []string{"per-rank", "per-tensor"} {
		t.Run(mode, func(t *testing.T) {
			work := t.TempDir()
			trace := filepath.Join(work, "trace")
			cmd := exec.Command(strace, "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync,rename,renameat,renameat2", "-o", trace,
				os.Args[0], "-test.run=^TestDCPSyscalls$", "-test.count=1")
			cmd.Env = append(os.Environ(), "PRISM_DCP_CHILD="+mode, "PRISM_DCP_WORK="+work)
			if b, err := cmd.CombinedOutput(); err != nil {
				if strings.Contains(string(b), "PTRACE") || strings.Contains(string(b), "Operation not permitted") {
					t.Skipf("strace cannot trace here: %s", b)
				}
				t.Fatalf("traced child: %v\n%s", err, b)
			}
			f, err := os.Open(trace)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fsyncs := map[string]int{}
			var order []string
			// strace -f splits a call that another thread interrupts into
			// "fsync(5</p> <unfinished ...>" and "<... fsync resumed>) = 0":
			// match the call by its opening, which names the file once.
			re := regexp.MustCompile(`(fsync|fdatasync)\(\d+<([^>]*/checkpoint/[^>]*)>|rename(?:at2?)?\(.*"([^"]*/checkpoint/\.metadata\.tmp)".*"([^"]*/checkpoint/\.metadata)"`)
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				m := re.FindStringSubmatch(sc.Text())
				switch {
				case m == nil:
				case m[2] != "":
					fsyncs[filepath.Base(m[2])]++
					order = append(order, "fsync "+filepath.Base(m[2]))
				default:
					order = append(order, "rename")
				}
			}
			ckptDir, _ := filepath.Glob(filepath.Join(work, "prism-*", "01-fsdp_save", "checkpoint"))
			if len(ckptDir) != 1 {
				t.Fatalf("no checkpoint directory in %s", work)
			}
			ents, _ := os.ReadDir(ckptDir[0])
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
				if e.Name() == ".metadata" {
					continue
				}
				if fsyncs[e.Name()] != 1 {
					t.Errorf("%s: %d fsyncs, want 1", e.Name(), fsyncs[e.Name()])
				}
			}
			if fsyncs[".metadata.tmp"] != 1 {
				t.Errorf(".metadata.tmp: %d fsyncs, want 1 (trace: %v)", fsyncs[".metadata.tmp"], order)
			}
			wantFiles := 2 // __0_0.distcp and .metadata
			if mode == "per-tensor" {
				wantFiles = 4 + 1 // one per tensor
			}
			if len(names) != wantFiles || !strings.HasPrefix(strings.Join(names, " "), ".metadata __0_0.distcp") {
				t.Errorf("files %v, want %d starting with .metadata __0_0.distcp", names, wantFiles)
			}
			if len(order) < 2 || order[len(order)-1] != "rename" || order[len(order)-2] != "fsync .metadata.tmp" {
				t.Errorf("sync order %v: want the shards' fsyncs, then .metadata.tmp's, then the rename", order)
			}
			b, _ := os.ReadFile(filepath.Join(ckptDir[0], ".metadata"))
			var meta map[string]any
			if err := json.Unmarshal(b, &meta); err != nil || meta["format"] != "prism-dcp-metadata/1" {
				t.Errorf(".metadata: %v, format %v", err, meta["format"])
			}
		})
	}
}
