package checkpoint

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/internal/torchtest"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/ckpt"
	"github.com/prism-hpc/prism/phases/phasestest"
	"github.com/prism-hpc/prism/report"
)

// A tiny model: 4 layers of 1024x1024 would be the default; these keys
// make a ~100 KiB synthetic model (+ adam: ~700 KiB).
const tinyModel = `layers = 2
input_dim = 32
hidden_dim = 96
`

func runPlan(t *testing.T, reg *phases.Registry, plan string) (*phases.Outcome, string) {
	t.Helper()
	res := phasestest.Run(t, reg, plan, phasestest.File("ckpt.toml"))
	return res.Outcome, res.Workdir
}

// registry is the checkpoint family alone.
func registry() *phases.Registry {
	r := phases.NewRegistry()
	Register(r)
	return r
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
time_between_checkpoints = "0s"
`
	out, _ := runPlan(t, registry(), plan)
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
	if ph[0].Metrics["fsync"] != 0 || ph[2].Metrics["fsync"] != 1 || ph[5].Metrics["fsync"] != 0 {
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
var (
	_ phases.MetricLiner = (*mlperfCheckpoint)(nil)
	_ phases.Headliner   = (*mlperfCheckpoint)(nil) // metric_arrays
)

func TestMLPerfMetricLines(t *testing.T) {
	res := &report.PhaseResult{Metrics: map[string]float64{
		"checkpoint_bytes": 10 << 30, "simulated_accelerators": 8, "save_checkpoints": 2,
	}, MetricArrays: map[string][]float64{"save_ckpt_seconds": {4, 6}}}
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

// corrupter is a test phase that damages the latest checkpoint: it flips
// one byte in a tensor (the middle piece, or row `row` of tensor
// `tensor`), in a header, or in a DCP bytes item, or truncates a file to
// half its size.
type corrupter struct {
	cfg struct {
		Where  string `toml:"where" doc:"tensor | header | item | truncate"`
		Tensor string `toml:"tensor" doc:"with where = tensor: the tensor (default: the middle piece's)"`
		Row    int64  `toml:"row" doc:"with tensor: the row whose second byte is flipped"`
	}
}

func (c *corrupter) Config() any                                 { return &c.cfg }
func (c *corrupter) Setup(context.Context, *phases.Env) error    { return nil }
func (c *corrupter) Verify(context.Context, *phases.Env) error   { return nil }
func (c *corrupter) Teardown(context.Context, *phases.Env) error { return nil }
func (c *corrupter) Run(ctx context.Context, env *phases.Env) error {
	st := store(env)
	rec := st.recs[len(st.recs)-1]
	l := rec.layout
	var path string
	var off int64
	switch c.cfg.Where {
	case "header":
		f := l.FilesOf(0)[0]
		path, off = l.Files[f].Name, 10
	case "truncate":
		f := l.FilesOf(0)[0]
		p := filepath.Join(rec.dir, l.Files[f].Name)
		return os.Truncate(p, l.Files[f].Size/2)
	case "item":
		for _, e := range l.DCPEntries() {
			if e.Tensor < 0 {
				path, off = l.Files[e.File].Name, e.Off+e.Len/2
				break
			}
		}
	default:
		p := l.Pieces[len(l.Pieces)/2]
		if c.cfg.Tensor != "" {
			for _, q := range l.Pieces {
				t := l.Tensors[q.Tensor]
				if t.Name == c.cfg.Tensor && q.Lo <= c.cfg.Row*t.RowBytes() && c.cfg.Row*t.RowBytes() < q.Hi {
					p = q
				}
			}
		}
		at := p.Len() / 2
		if c.cfg.Tensor != "" {
			at = c.cfg.Row*l.Tensors[p.Tensor].RowBytes() - p.Lo + 1
		}
		path, off = l.Files[p.File].Name, p.Off+at
	}
	if path == "" {
		return fmt.Errorf("corrupt: nothing found to corrupt (where = %q)", c.cfg.Where)
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
	reg := registry()
	reg.Register(phases.Kind{Name: "corrupt", Family: "test", New: func() phases.Phase { return &corrupter{} }})
	big := "layers = 2\ninput_dim = 512\nhidden_dim = 512\nbuffer_budget = \"1MiB\"\n" // 2.1 MB: checked inline
	for _, tc := range []struct {
		name, save, load, where, model, extra, lx string
		want                                      []string
	}{
		{"dcp tensor", "fsdp_save", "fsdp_load", "tensor", tinyModel, "", "", []string{"tensor layers.", "__0_0.distcp", "CRC-32", "different bytes"}},
		{"dcp tensor inline", "fsdp_save", "fsdp_load", "tensor", big, "", "", []string{"tensor layers.", "__0_0.distcp"}},
		{"torch tensor", "ddp_save", "ddp_load", "tensor", tinyModel, "", "", []string{"tensor layers.", "checkpoint.pt"}},
		{"torch header", "ddp_save", "ddp_load", "header", tinyModel, "", "", []string{"checkpoint.pt: byte 10", "header/metadata"}},
		{"safetensors header", "fsdp_save", "rl_load", "header", tinyModel, "format = \"safetensors\"\n", "", []string{"model-00001-of-00001.safetensors: byte 10"}},
		{"safetensors tensor mmap", "ddp_save", "ddp_load", "tensor", tinyModel, "format = \"safetensors\"\n", "", []string{"tensor layers.", "model.safetensors", "CRC-32"}},
		{"torch tensor mmap", "ddp_save", "ddp_load", "tensor", tinyModel, "", "mmap = true\n", []string{"tensor layers.", "checkpoint.pt", "CRC-32"}},
		{"torch tensor read_size", "ddp_save", "ddp_load", "tensor", tinyModel, "", "read_size = \"4KiB\"\n", []string{"tensor layers.", "checkpoint.pt", "CRC-32"}},
		{"dcp bytes item rl", "fsdp_save", "rl_load", "item", tinyModel + "optimizer = \"adam\"\n", "", "", []string{"__0_0.distcp: byte", "header/metadata"}},
		{"dcp truncated", "fsdp_save", "fsdp_load", "truncate", tinyModel, "", "", []string{"__0_0.distcp", "short transfer"}},
		{"safetensors truncated mmap", "ddp_save", "ddp_load", "truncate", tinyModel, "format = \"safetensors\"\n", "", []string{"model.safetensors is", "bytes, written", "lost the end"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := fmt.Sprintf("[plan]\ndrop_caches = \"none\"\n[[phase]]\nkind = %q\n%s%s[[phase]]\nkind = \"corrupt\"\nwhere = %q\n[[phase]]\nkind = %q\n%s%s%s",
				tc.save, tc.model, tc.extra, tc.where, tc.load, tc.model, tc.extra, tc.lx)
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

// TestMmapOfDCPFails: mmap = true on a DCP checkpoint (which
// FileSystemReader reads) fails the load in setup, saying why.
func TestMmapOfDCPFails(t *testing.T) {
	out, _ := runPlan(t, registry(), "[plan]\ndrop_caches = \"none\"\n[[phase]]\nkind = \"fsdp_save\"\n"+tinyModel+"[[phase]]\nkind = \"fsdp_load\"\nmmap = true\n"+tinyModel)
	ph := out.Manifest.Phases
	if ph[1].Status != report.StatusFailed || !strings.Contains(ph[1].Error, "is DCP, which FileSystemReader reads with read(2)") {
		t.Errorf("fsdp_load mmap = true of DCP: %s %q", ph[1].Status, ph[1].Error)
	}
}

// TestLoadWithoutSave: a load with no save of its model before it writes
// a checkpoint in setup (untimed) and then measures only the reads.
func TestLoadWithoutSave(t *testing.T) {
	out, _ := runPlan(t, registry(), "[plan]\ndrop_caches = \"none\"\n[[phase]]\nkind = \"rl_load\"\nformat = \"safetensors\"\n"+tinyModel+
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
		{"kind = \"ddp_save\"\noptimizer = \"sgd\"", "optimizer: unknown optimizer \"sgd\" (allowed: none, adam, adam_mixed)"},
		{"kind = \"fsdp_save\"\ntorch_version = \"2.1\"", "torch_version: unknown version \"2.1\" (allowed: 1.13, 2.x)"},
		{"kind = \"ddp_load\"\nmmap = true\ndirect = true", "mmap: a mapped load cannot also be direct = true"},
		{"kind = \"ddp_load\"\nmmap = \"maybe\"", "mmap"},
		{"kind = \"fsdp_load\"\nread_size = \"6KiB\"", "read_size: 6KiB: want a multiple of 4KiB"},
		{"kind = \"mlperf_checkpoint\"\ntime_between_checkpoints = \"25h\"", "time_between_checkpoints: 25h0m0s out of range"},
	} {
		_, err := phases.DecodePlan(registry(), "p.toml", []byte("[[phase]]\n"+tc.body+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n error %v\n want %q", tc.body, err, tc.want)
		}
	}
	p, err := phases.DecodePlan(registry(), "p.toml", []byte("[[phase]]\nkind = \"ddp_save\"\nformat = \"safetensors\"\n[[phase]]\nkind = \"ddp_save\"\nfsync = true\nformat = \"safetensors\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Phases[0].Phase.Config().(*ddpSaveConfig).Fsync; got != "false" {
		t.Errorf("safetensors fsync default %q, want false (the safetensors library does not fsync)", got)
	}
	if got := p.Phases[1].Phase.Config().(*ddpSaveConfig).Fsync; got != "true" {
		t.Errorf("fsync = true became %q", got)
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

// TestSafetensorsFromHFConfig: fsdp_save of a llama config.json writes
// the safetensors files HuggingFace would, checked by a reader
// independent of prism's writer.
func TestSafetensorsFromHFConfig(t *testing.T) {
	py := torchtest.Python3(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(llamaConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	out, work := runPlan(t, registry(), fmt.Sprintf("[plan]\nkeep = true\ndrop_caches = \"none\"\n[[phase]]\nkind = \"fsdp_save\"\nformat = \"safetensors\"\nmodel_config = %q\n[[phase]]\nkind = \"fsdp_load\"\nmodel_config = %q\n", cfg, cfg))
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

// TestSplitCalls: with a tensor (2 MiB) larger than the content pool
// (buffer_budget = 1MiB), the save's writev of it goes out as a writev of
// a pool window and writes of the rest, and the load's read of it is
// split to fit its 1 MiB buffer; both say so in their metrics, and the
// load still checks every tensor byte.
func TestSplitCalls(t *testing.T) {
	model := "layers = 2\ninput_dim = 1024\nhidden_dim = 512\nbuffer_budget = \"1MiB\"\n"
	out, _ := runPlan(t, registry(), "[plan]\ndrop_caches = \"none\"\n[[phase]]\nkind = \"ddp_save\"\n"+model+"[[phase]]\nkind = \"ddp_load\"\n"+model)
	ph := out.Manifest.Phases
	if out.Status != report.StatusPassed {
		t.Fatalf("%s: %s / %s", out.Status, ph[0].Error, ph[1].Error)
	}
	m, err := ckpt.Build("synthetic", ckpt.Synthetic(2, 1024, 512, ckpt.F32), ckpt.OptNone, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ph[0].Metrics["split_writes"] < 1 || ph[1].Metrics["split_reads"] < 1 || ph[1].Metrics["verify_inline_ranks"] != 1 {
		t.Errorf("save metrics %v, load metrics %v: want split writes and reads, checked inline", ph[0].Metrics, ph[1].Metrics)
	}
	if ph[0].Bytes != m.Bytes() || ph[1].Bytes != m.Bytes() {
		t.Errorf("saved %d and loaded %d tensor bytes, the model has %d", ph[0].Bytes, ph[1].Bytes, m.Bytes())
	}
}
