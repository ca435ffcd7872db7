package checkpoint

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/ckpt"
	"github.com/prism-hpc/prism/spmd"
)

// Register adds the checkpoint family's kinds to r.
func Register(r *phases.Registry) {
	r.Register(phases.Kind{Name: "ddp_save", Family: "checkpoint",
		Summary: "DDP save: rank 0 writes model (+ optimizer) state to one file as torch.save does (a zip; one writev of the buffered headers with each tensor), or safetensors; the others wait; ops open, write, write_header, fsync (if on), close, save_file",
		New:     func() phases.Phase { return &ckptSave{kind: "ddp", cfg: newSaveConfig("ddp", ckpt.FormatTorch)} },
		Sample:  sampleModel})
	r.Register(phases.Kind{Name: "ddp_load", Family: "checkpoint",
		Summary: "DDP load: every rank reads the whole file of the latest ddp_save of the model (or one written untimed in setup) as torch.load does (st_blksize buffered reads of the zip records, one read per tensor, lseeks), or maps it (safetensors, mmap = true), and verifies every tensor; ops open, read, read_header, lseek, mmap, close, load_file",
		New:     func() phases.Phase { return &ckptLoad{kind: "ddp", cfg: newLoadConfig("ddp", ckpt.FormatTorch)} },
		Sample:  sampleModel})
	r.Register(phases.Kind{Name: "fsdp_save", Family: "checkpoint",
		Summary: "FSDP save: every rank writes its shard as DCP's FileSystemWriter does (__<rank>_0.distcp, buffered writes, one per tensor, fsync; .metadata pickled by rank 0), or model-0000R-of-0000N.safetensors + index; ops open, write, write_header, lseek, fsync, close, rename, save_file",
		New:     func() phases.Phase { return &ckptSave{kind: "fsdp", cfg: newSaveConfig("fsdp", ckpt.FormatDCP)} },
		Sample:  sampleModel})
	r.Register(phases.Kind{Name: "fsdp_load", Family: "checkpoint",
		Summary: "FSDP load: every rank reads the metadata and its shard of the latest fsdp_save as DCP's FileSystemReader does (8KiB buffered reads per item; written at another rank count, every saved chunk its new rows overlap: resharding), or maps safetensors, and verifies it; ops open, read, read_header, lseek, mmap, close, load_file",
		New:     func() phases.Phase { return &ckptLoad{kind: "fsdp", cfg: newLoadConfig("fsdp", ckpt.FormatDCP)} },
		Sample:  sampleModel})
	r.Register(phases.Kind{Name: "rl_load", Family: "checkpoint",
		Summary: "RL consolidation: each of the first `readers` ranks loads the whole state of the latest fsdp_save, as a DCP load at world size 1 reads it (file by file, every item) or every safetensors shard in turn; ops open, read, read_header, lseek, mmap, close, load_state",
		New:     func() phases.Phase { return &ckptLoad{kind: "rl", cfg: newLoadConfig("rl", ckpt.FormatDCP)} },
		Sample:  sampleModel})
	registerMLPerf(r)
}

// sampleModel is a ~0.5 MiB synthetic model, the conformance suite's.
const sampleModel = "layers = 2\ninput_dim = 64\nhidden_dim = 256"

// ModelKeys are the keys that choose a checkpoint's content, shared by
// every checkpoint phase (exported so `prism list` shows the embedded keys).
type ModelKeys struct {
	Model        string      `toml:"model" doc:"synthetic | gpt2 | bert-base | llama3-8b | llama3-70b | llama3-405b | llama3-1t (ignored when model_config is set)"`
	ModelConfig  string      `toml:"model_config" doc:"path of a HuggingFace config.json (llama, mistral, qwen2, gpt2, bert); rank 0 reads it and broadcasts it"`
	Layers       int         `toml:"layers" doc:"synthetic model: linear layers"`
	InputDim     int         `toml:"input_dim" doc:"synthetic model: input features of the first layer"`
	HiddenDim    int         `toml:"hidden_dim" doc:"synthetic model: width of every layer"`
	DType        string      `toml:"dtype" doc:"fp32 | fp16 | bf16; empty: the model's own (config torch_dtype; bf16 for llama3 presets, fp32 for gpt2, bert-base, synthetic)"`
	Optimizer    string      `toml:"optimizer" doc:"none | adam (torch.optim.Adam: exp_avg and exp_avg_sq in the parameter dtype, a step per parameter, param_groups) | adam_mixed (mixed precision, Megatron-LM's layout: fp32 exp_avg, exp_avg_sq and master weights, 12 bytes per parameter)"`
	TorchVersion string      `toml:"torch_version" doc:"the PyTorch release whose files are written: 1.13 (checked against real torch) | 2.x (torch.save's 2.x records, DCP's 2.x metadata classes, Adam's 2.x param_groups)"`
	Scale        float64     `toml:"scale" doc:"0 < scale <= 1: every tensor's leading dimension is scaled (rounded up), for small machines"`
	Seed         int64       `toml:"seed" doc:"seed of the tensor content"`
	BufferBudget phases.Size `toml:"buffer_budget" doc:"memory per rank for generated write data, and for a load's data checksummed after the timed region"`
	StorageKeys

	arch    ckpt.Arch // resolved by Validate; Family == "" if another rank resolves it
	version ckpt.TorchVersion
}

func defaultModelKeys() ModelKeys {
	return ModelKeys{Model: "synthetic", Layers: 4, InputDim: 1024, HiddenDim: 1024, Optimizer: ckpt.OptNone, TorchVersion: string(ckpt.DefaultTorchVersion),
		Scale: 1, Seed: 1, BufferBudget: 256 << 20, StorageKeys: defaultStorageKeys()}
}

// isRankZero tells Validate whether this process is the one that reads a
// model_config file: plans are decoded on every rank, and only rank 0
// touches the file (the others get it broadcast in Setup).
var isRankZero = func() bool {
	id, err := spmd.Discover(os.Getenv)
	return err != nil || id.Rank == 0
}

func (c *ModelKeys) validate() error {
	if err := c.StorageKeys.validate(); err != nil {
		return err
	}
	switch {
	case c.ModelConfig != "":
		if !isRankZero() {
			c.arch = ckpt.Arch{}
			break
		}
		b, err := readModelConfig(c.ModelConfig)
		if err != nil {
			return &phases.KeyError{Key: "model_config", Msg: fmt.Sprintf("cannot read it: %v", err)}
		}
		a, err := ckpt.ParseHFConfig(b)
		if err != nil {
			return &phases.KeyError{Key: "model_config", Msg: fmt.Sprintf("%s: %v", c.ModelConfig, err)}
		}
		c.arch = a
	case c.Model == "synthetic":
		c.arch = ckpt.Synthetic(int64(c.Layers), int64(c.InputDim), int64(c.HiddenDim), ckpt.F32)
	default:
		a, ok := ckpt.Preset(c.Model)
		if !ok {
			return &phases.KeyError{Key: "model", Msg: fmt.Sprintf("unknown model %q (allowed: synthetic, %s; or model_config = \"path/config.json\")", c.Model, strings.Join(ckpt.PresetNames(), ", "))}
		}
		c.arch = a
	}
	if c.DType != "" {
		d, err := ckpt.ParseDType(c.DType)
		if err != nil {
			return &phases.KeyError{Key: "dtype", Msg: err.Error()}
		}
		c.arch.DType = d
	}
	v, err := ckpt.ParseTorchVersion(c.TorchVersion)
	if err != nil {
		return &phases.KeyError{Key: "torch_version", Msg: fmt.Sprintf("unknown version %q (allowed: 1.13, 2.x)", c.TorchVersion)}
	}
	c.version = v
	switch {
	case !slices.Contains(ckpt.Optimizers, c.Optimizer):
		return &phases.KeyError{Key: "optimizer", Msg: fmt.Sprintf("unknown optimizer %q (allowed: %s)", c.Optimizer, strings.Join(ckpt.Optimizers, ", "))}
	case !(c.Scale > 0 && c.Scale <= 1):
		return &phases.KeyError{Key: "scale", Msg: fmt.Sprintf("%v out of range (0 < scale <= 1)", c.Scale)}
	case c.BufferBudget < 1<<20 || c.BufferBudget > 1<<40:
		return &phases.KeyError{Key: "buffer_budget", Msg: fmt.Sprintf("%s out of range (1MiB .. 1TiB)", c.BufferBudget)}
	}
	if c.arch.Family == "" {
		return nil
	}
	if _, err := ckpt.Build(c.name(), c.arch, c.Optimizer, c.Scale); err != nil {
		key := "model"
		switch {
		case c.ModelConfig != "":
			key = "model_config"
		case c.Model == "synthetic":
			key = "layers"
		}
		return &phases.KeyError{Key: key, Msg: err.Error()}
	}
	return nil
}

// readModelConfig reads a config.json: a regular file of sane size, read
// with a deadline (a plan naming /dev/zero or /proc/kmsg must not hang or
// exhaust the decoder).
func readModelConfig(path string) ([]byte, error) {
	return pio.ReadInput(path, pio.MaxInput, pio.InputTimeout)
}

func (c *ModelKeys) name() string {
	if c.ModelConfig != "" {
		return c.ModelConfig
	}
	return c.Model
}

// model returns the resolved model, or nil when this rank has not seen the
// model_config file (Footprint then has nothing to say).
func (c *ModelKeys) model() *ckpt.Model {
	if c.arch.Family == "" {
		return nil
	}
	m, err := ckpt.Build(c.name(), c.arch, c.Optimizer, c.Scale)
	if err != nil {
		return nil
	}
	return m
}

// resolve returns the model on every rank: with model_config, rank 0
// reads the file and broadcasts its bytes (the paper's "rank 0 downloads,
// the others wait" pattern), and every rank parses the same bytes.
func (c *ModelKeys) resolve(ctx context.Context, env *phases.Env) (*ckpt.Model, error) {
	a := c.arch
	if c.ModelConfig != "" {
		var msg []byte
		if env.Rank == 0 {
			b, err := readModelConfig(c.ModelConfig)
			if err != nil {
				msg = append([]byte{1}, err.Error()...)
			} else {
				msg = append([]byte{0}, b...)
			}
		}
		got, err := env.Comm.Bcast(ctx, 0, msg)
		if err != nil {
			return nil, err
		}
		if len(got) == 0 || got[0] != 0 {
			return nil, env.Errorf("model_config %s: rank 0 could not read it: %s", c.ModelConfig, got[min(1, len(got)):])
		}
		if a, err = ckpt.ParseHFConfig(got[1:]); err != nil {
			return nil, env.Errorf("model_config %s: %w", c.ModelConfig, err)
		}
		if c.DType != "" {
			a.DType, _ = ckpt.ParseDType(c.DType)
		}
	}
	m, err := ckpt.Build(c.name(), a, c.Optimizer, c.Scale)
	if err != nil {
		return nil, env.Errorf("%w", err)
	}
	return m, nil
}

// autoBool is a boolean key whose default depends on other keys: "auto"
// until Validate resolves it to "true" or "false".
type autoBool string

func (b *autoBool) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case bool:
		*b = autoBool(fmt.Sprint(x))
	case string:
		if x != "auto" && x != "true" && x != "false" {
			return fmt.Errorf("want true, false or \"auto\", not %q", x)
		}
		*b = autoBool(x)
	default:
		return fmt.Errorf("want true or false, not %T", v)
	}
	return nil
}

func (b autoBool) String() string { return string(b) }

// ParamValue records a resolved autoBool in the manifest as a boolean.
func (b autoBool) ParamValue() any {
	switch b {
	case "true":
		return true
	case "false":
		return false
	}
	return string(b)
}

// SaveKeys are the keys of ddp_save and fsdp_save.
type SaveKeys struct {
	Format    string      `toml:"format" doc:"ddp_save: torch (a torch.save zip) | safetensors (one model.safetensors); fsdp_save: dcp (PyTorch distributed checkpoint) | safetensors (a shard per rank + index)"`
	Fsync     autoBool    `toml:"fsync" doc:"fsync every file written: true | false (default: true for dcp, as FileSystemWriter fsyncs every file; false for torch and safetensors, as torch.save and the safetensors library do not)"`
	WriteSize phases.Size `toml:"write_size" doc:"0: the write calls the framework makes (torch.save: a writev of the buffered headers with each tensor of 1KiB or more; DCP: Python's buffered writes, each tensor in one; safetensors: header, then one write per tensor); else bytes per pwrite(2) of tensor data, a multiple of 4KiB, each header in a pwrite of its own"`
}

// saveCfg is the config of ddp_save or fsdp_save.
type saveCfg interface {
	phases.Validator
	keys() (*ModelKeys, *SaveKeys, bool)
}

type ddpSaveConfig struct {
	ModelKeys
	SaveKeys
}

func (c *ddpSaveConfig) keys() (*ModelKeys, *SaveKeys, bool) { return &c.ModelKeys, &c.SaveKeys, false }

// Validate checks the keys and resolves fsync's default from the format.
func (c *ddpSaveConfig) Validate() error {
	return validateSave("ddp", &c.ModelKeys, &c.SaveKeys, false)
}

type fsdpSaveConfig struct {
	ModelKeys
	SaveKeys
	DCPFilePerTensor bool `toml:"dcp_file_per_tensor" doc:"with format = \"dcp\": one __<rank>_<i>.distcp per tensor (single_file_per_rank = False) instead of one per rank"`
}

func (c *fsdpSaveConfig) keys() (*ModelKeys, *SaveKeys, bool) {
	return &c.ModelKeys, &c.SaveKeys, c.DCPFilePerTensor
}

// Validate checks the keys and resolves fsync's default from the format.
func (c *fsdpSaveConfig) Validate() error {
	return validateSave("fsdp", &c.ModelKeys, &c.SaveKeys, c.DCPFilePerTensor)
}

func newSaveConfig(kind, format string) saveCfg {
	sk := SaveKeys{Format: format, Fsync: "auto"}
	if kind == "ddp" {
		return &ddpSaveConfig{ModelKeys: defaultModelKeys(), SaveKeys: sk}
	}
	return &fsdpSaveConfig{ModelKeys: defaultModelKeys(), SaveKeys: sk}
}

func validateSave(kind string, m *ModelKeys, s *SaveKeys, perTensor bool) error {
	if err := m.validate(); err != nil {
		return err
	}
	if err := validateFormat(kind, s.Format); err != nil {
		return err
	}
	if s.Fsync == "auto" || s.Fsync == "" {
		s.Fsync = autoBool(fmt.Sprint(fsyncFor(s.Format)))
	}
	if perTensor && s.Format != ckpt.FormatDCP {
		return &phases.KeyError{Key: "dcp_file_per_tensor", Msg: "applies to format = \"dcp\""}
	}
	return checkIOSize("write_size", s.WriteSize)
}

// checkIOSize accepts 0 (the framework's calls) or an I/O size.
func checkIOSize(key string, s phases.Size) error {
	if s == 0 {
		return nil
	}
	return phases.CheckIOSize(key, s)
}

func validateFormat(kind, format string) error {
	allowed := []string{ckpt.FormatTorch, ckpt.FormatSafetensors}
	if kind != "ddp" {
		allowed = []string{ckpt.FormatDCP, ckpt.FormatSafetensors}
	}
	if !slices.Contains(allowed, format) {
		return &phases.KeyError{Key: "format", Msg: fmt.Sprintf("unknown format %q (allowed: %s)", format, strings.Join(allowed, ", "))}
	}
	return nil
}

// fsyncFor is the default of fsync for a format: what the framework
// does (only DCP's FileSystemWriter fsyncs).
func fsyncFor(format string) bool { return format == ckpt.FormatDCP }

// writeSpec is what a checkpoint of these keys looks like on disk and
// how it is written.
type writeSpec struct {
	kind      string // ddp | fsdp
	format    string
	version   ckpt.TorchVersion
	fsync     bool
	writeSize int64 // 0: the framework's calls
	perTensor bool
}

func saveSpec(kind string, c saveCfg) writeSpec {
	m, s, per := c.keys()
	return writeSpec{kind: kind, format: s.Format, version: m.version, fsync: s.Fsync == "true", writeSize: int64(s.WriteSize), perTensor: per}
}

// LoadKeys are the keys of ddp_load, fsdp_load and rl_load.
type LoadKeys struct {
	Format   string      `toml:"format" doc:"format of the checkpoint this phase writes (untimed, in setup) when no earlier save of the model left one (ddp_load: torch | safetensors; fsdp_load, rl_load: dcp | safetensors); one a save left is read in its own format"`
	ReadSize phases.Size `toml:"read_size" doc:"0: the read calls the framework makes (torch.load: st_blksize buffered reads of the zip records, one read per tensor, lseeks; DCP: FileSystemReader's 8KiB buffered reads, item by item); else bytes per pread(2) of tensor data, a multiple of 4KiB, each header in one pread"`
	Direct   bool        `toml:"direct" doc:"O_DIRECT preads in aligned read_size chunks (4MiB when read_size is 0; the page cache is bypassed; not on tmpfs)"`
	Mmap     autoBool    `toml:"mmap" doc:"map each file and touch every page of what is loaded, as safetensors' safe_open and torch.load(mmap=True) do: true | false (default: true for safetensors, false for torch and dcp; not with dcp, whose reader reads, nor with direct)"`
}

// loadCfg is the config of ddp_load, fsdp_load or rl_load.
type loadCfg interface {
	phases.Validator
	keys() (*ModelKeys, *LoadKeys, int)
}

type loadConfig struct {
	ModelKeys
	LoadKeys

	kind string // ddp | fsdp
}

func (c *loadConfig) keys() (*ModelKeys, *LoadKeys, int) { return &c.ModelKeys, &c.LoadKeys, 0 }

// Validate checks the keys.
func (c *loadConfig) Validate() error { return validateLoad(c.kind, &c.ModelKeys, &c.LoadKeys) }

type rlLoadConfig struct {
	ModelKeys
	LoadKeys
	Readers int `toml:"readers" doc:"ranks that each read the whole checkpoint (0 = all); the others wait"`
}

func (c *rlLoadConfig) keys() (*ModelKeys, *LoadKeys, int) {
	return &c.ModelKeys, &c.LoadKeys, c.Readers
}

// Validate checks the keys.
func (c *rlLoadConfig) Validate() error {
	if c.Readers < 0 || c.Readers > 1<<24 {
		return &phases.KeyError{Key: "readers", Msg: fmt.Sprintf("%d out of range (0 = all ranks)", c.Readers)}
	}
	return validateLoad("fsdp", &c.ModelKeys, &c.LoadKeys)
}

func newLoadConfig(kind, format string) loadCfg {
	lk := LoadKeys{Format: format, Mmap: "auto"}
	if kind == "rl" {
		return &rlLoadConfig{ModelKeys: defaultModelKeys(), LoadKeys: lk}
	}
	return &loadConfig{ModelKeys: defaultModelKeys(), LoadKeys: lk, kind: kind}
}

func validateLoad(saveKind string, m *ModelKeys, l *LoadKeys) error {
	if err := m.validate(); err != nil {
		return err
	}
	if err := validateFormat(saveKind, l.Format); err != nil {
		return err
	}
	if l.Mmap == "" {
		l.Mmap = "auto"
	}
	if l.Mmap == "true" && l.Direct {
		return &phases.KeyError{Key: "mmap", Msg: "a mapped load cannot also be direct = true"}
	}
	return checkIOSize("read_size", l.ReadSize)
}

// mmapFor resolves mmap for a checkpoint of format: as asked, or by
// default as the format's loader reads (safetensors maps).
func mmapFor(m autoBool, format string) bool {
	if m == "true" || m == "false" {
		return m == "true"
	}
	return format == ckpt.FormatSafetensors
}
