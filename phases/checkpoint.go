package phases

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases/ckpt"
	"github.com/prism-hpc/prism/report"
	"github.com/prism-hpc/prism/spmd"
)

// The checkpoint family (PRISM §3.1.4, MLPerf Storage checkpointing):
// DDP saves (rank 0 writes one torch.save file) and loads (every rank reads
// it), FSDP saves and loads (every rank its shard: PyTorch distributed
// checkpoint or sharded safetensors), and the RL consolidation load
// (readers read every shard). Models have the exact tensor lists of real
// architectures (package ckpt), the files are what the real tools write,
// and every load checks every tensor's CRC-32 against the one computed at
// save time, so storage that returns wrong bytes fails the phase with the
// tensor and the file named.
//
// Memory: no checkpoint is ever held whole. Writes are cut, write_size at
// a time, from a pool of at most buffer_budget bytes generated before the
// timed region and stamped per 4 KiB (ckpt.Pool): nothing is generated
// between two clock reads, and no 4 KiB block repeats. Loads read into one
// buffer of the whole share when it fits buffer_budget and checksum it in
// Verify, outside the timed region; a larger share is read through one
// read_size buffer and checksummed as it arrives (metrics.verify_inline_ranks
// counts the ranks that did; CRC-32 runs at ~25 GB/s per core, a fraction
// of a storage read).

func registerCheckpoint(r *Registry) {
	r.Register(Kind{Name: "ddp_save", Family: "checkpoint",
		Summary: "DDP save: rank 0 writes model (+ optimizer) state to one file (torch.save zip, or safetensors), the others wait; ops open, write, write_header, fsync, close, save_file",
		New:     func() Phase { return &ckptSave{kind: "ddp", cfg: newSaveConfig("ddp", ckpt.FormatTorch, 4<<20)} }})
	r.Register(Kind{Name: "ddp_load", Family: "checkpoint",
		Summary: "DDP load: every rank reads the whole file of the latest ddp_save of the model (or one written untimed in setup) and verifies every tensor; ops open, read, read_header, close, load_file",
		New:     func() Phase { return &ckptLoad{kind: "ddp", cfg: newLoadConfig("ddp", ckpt.FormatTorch, 4<<20)} }})
	r.Register(Kind{Name: "fsdp_save", Family: "checkpoint",
		Summary: "FSDP save: every rank writes its shard (PyTorch DCP __<rank>_0.distcp + .metadata by rank 0, or model-0000R-of-0000N.safetensors + index); ops open, write, write_header, fsync, close, rename, save_file",
		New:     func() Phase { return &ckptSave{kind: "fsdp", cfg: newSaveConfig("fsdp", ckpt.FormatDCP, 2<<20)} }})
	r.Register(Kind{Name: "fsdp_load", Family: "checkpoint",
		Summary: "FSDP load: every rank reads the metadata and its own shard of the latest fsdp_save at the same rank count, and verifies it; ops open, read, read_header, close, load_file",
		New:     func() Phase { return &ckptLoad{kind: "fsdp", cfg: newLoadConfig("fsdp", ckpt.FormatDCP, 2<<20)} }})
	r.Register(Kind{Name: "rl_load", Family: "checkpoint",
		Summary: "RL consolidation: each of the first `readers` ranks reads every shard of the latest fsdp_save, tensor by tensor across the shard files, rebuilding the full state; ops open, read, read_header, close, load_state",
		New:     func() Phase { return &ckptLoad{kind: "rl", cfg: newLoadConfig("rl", ckpt.FormatDCP, 2<<20)} }})
	registerMLPerf(r)
}

// ModelKeys are the keys that choose a checkpoint's content, shared by
// every checkpoint phase (exported so `prism list` shows the embedded keys).
type ModelKeys struct {
	Model        string  `toml:"model" doc:"synthetic | gpt2 | bert-base | llama3-8b | llama3-70b | llama3-405b | llama3-1t (ignored when model_config is set)"`
	ModelConfig  string  `toml:"model_config" doc:"path of a HuggingFace config.json (llama, mistral, qwen2, gpt2, bert); rank 0 reads it and broadcasts it"`
	Layers       int     `toml:"layers" doc:"synthetic model: linear layers"`
	InputDim     int     `toml:"input_dim" doc:"synthetic model: input features of the first layer"`
	HiddenDim    int     `toml:"hidden_dim" doc:"synthetic model: width of every layer"`
	DType        string  `toml:"dtype" doc:"fp32 | fp16 | bf16; empty: the model's own (config torch_dtype; bf16 for llama3 presets, fp32 for gpt2, bert-base, synthetic)"`
	Optimizer    string  `toml:"optimizer" doc:"none | adam (adds fp32 master weights, exp_avg, exp_avg_sq: 12 bytes per parameter)"`
	Scale        float64 `toml:"scale" doc:"0 < scale <= 1: every tensor's leading dimension is scaled (rounded up), for small machines"`
	Seed         int64   `toml:"seed" doc:"seed of the tensor content"`
	BufferBudget Size    `toml:"buffer_budget" doc:"memory per rank for generated write data, and for a load's data checksummed after the timed region"`

	arch ckpt.Arch // resolved by Validate; Family == "" if another rank resolves it
}

func defaultModelKeys() ModelKeys {
	return ModelKeys{Model: "synthetic", Layers: 4, InputDim: 1024, HiddenDim: 1024, Optimizer: "none", Scale: 1, Seed: 1, BufferBudget: 256 << 20}
}

// isRankZero tells Validate whether this process is the one that reads a
// model_config file: plans are decoded on every rank, and only rank 0
// touches the file (the others get it broadcast in Setup).
var isRankZero = func() bool {
	id, err := spmd.Discover(os.Getenv)
	return err != nil || id.Rank == 0
}

func (c *ModelKeys) validate() error {
	switch {
	case c.ModelConfig != "":
		if !isRankZero() {
			c.arch = ckpt.Arch{}
			break
		}
		b, err := readModelConfig(c.ModelConfig)
		if err != nil {
			return &KeyError{Key: "model_config", Msg: fmt.Sprintf("cannot read it: %v", err)}
		}
		a, err := ckpt.ParseHFConfig(b)
		if err != nil {
			return &KeyError{Key: "model_config", Msg: fmt.Sprintf("%s: %v", c.ModelConfig, err)}
		}
		c.arch = a
	case c.Model == "synthetic":
		c.arch = ckpt.Synthetic(int64(c.Layers), int64(c.InputDim), int64(c.HiddenDim), ckpt.F32)
	default:
		a, ok := ckpt.Preset(c.Model)
		if !ok {
			return &KeyError{Key: "model", Msg: fmt.Sprintf("unknown model %q (allowed: synthetic, %s; or model_config = \"path/config.json\")", c.Model, strings.Join(ckpt.PresetNames(), ", "))}
		}
		c.arch = a
	}
	if c.DType != "" {
		d, err := ckpt.ParseDType(c.DType)
		if err != nil {
			return &KeyError{Key: "dtype", Msg: err.Error()}
		}
		c.arch.DType = d
	}
	switch {
	case c.Optimizer != "none" && c.Optimizer != "adam":
		return &KeyError{Key: "optimizer", Msg: fmt.Sprintf("unknown optimizer %q (allowed: none, adam)", c.Optimizer)}
	case !(c.Scale > 0 && c.Scale <= 1):
		return &KeyError{Key: "scale", Msg: fmt.Sprintf("%v out of range (0 < scale <= 1)", c.Scale)}
	case c.BufferBudget < 1<<20 || c.BufferBudget > 1<<40:
		return &KeyError{Key: "buffer_budget", Msg: fmt.Sprintf("%s out of range (1MiB .. 1TiB)", c.BufferBudget)}
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
		return &KeyError{Key: key, Msg: err.Error()}
	}
	return nil
}

// readModelConfig reads a config.json: a regular file of sane size (a
// plan naming /dev/zero must not hang the decoder).
func readModelConfig(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > 16<<20 {
		return nil, fmt.Errorf("%s is not a regular file of at most 16MiB", path)
	}
	return os.ReadFile(path)
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
func (c *ModelKeys) resolve(ctx context.Context, env *Env) (*ckpt.Model, error) {
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

// SaveKeys are the keys of ddp_save and fsdp_save.
type SaveKeys struct {
	Format    string   `toml:"format" doc:"ddp_save: torch (a torch.save zip) | safetensors (one model.safetensors); fsdp_save: dcp (PyTorch distributed checkpoint) | safetensors (a shard per rank + index)"`
	Fsync     autoBool `toml:"fsync" doc:"fsync every file written: true | false (default: false for torch, as torch.save does not; true for dcp and safetensors, as DCP does)"`
	WriteSize Size     `toml:"write_size" doc:"bytes per write(2) of tensor data, a multiple of 4KiB (torch.save: 4MiB chunks, DCP: 2MiB)"`
}

// saveCfg is the config of ddp_save or fsdp_save.
type saveCfg interface {
	Validator
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

func newSaveConfig(kind, format string, ws Size) saveCfg {
	sk := SaveKeys{Format: format, Fsync: "auto", WriteSize: ws}
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
		return &KeyError{Key: "dcp_file_per_tensor", Msg: "applies to format = \"dcp\""}
	}
	return validateIOSize("write_size", s.WriteSize)
}

func validateFormat(kind, format string) error {
	allowed := []string{ckpt.FormatTorch, ckpt.FormatSafetensors}
	if kind != "ddp" {
		allowed = []string{ckpt.FormatDCP, ckpt.FormatSafetensors}
	}
	if !contains(allowed, format) {
		return &KeyError{Key: "format", Msg: fmt.Sprintf("unknown format %q (allowed: %s)", format, strings.Join(allowed, ", "))}
	}
	return nil
}

func validateIOSize(key string, s Size) error {
	if s < 4096 || s%4096 != 0 || s > 1<<30 {
		return &KeyError{Key: key, Msg: fmt.Sprintf("%s: want a multiple of 4KiB between 4KiB and 1GiB", s)}
	}
	return nil
}

// fsyncFor is the default of fsync for a format.
func fsyncFor(format string) bool { return format != ckpt.FormatTorch }

// savePlanFor is what a checkpoint of these keys looks like on disk.
type writeSpec struct {
	kind      string // ddp | fsdp
	format    string
	fsync     bool
	writeSize int64
	perTensor bool
}

func saveSpec(kind string, c saveCfg) writeSpec {
	_, s, per := c.keys()
	return writeSpec{kind: kind, format: s.Format, fsync: s.Fsync == "true", writeSize: int64(s.WriteSize), perTensor: per}
}

// LoadKeys are the keys of ddp_load, fsdp_load and rl_load.
type LoadKeys struct {
	Format   string `toml:"format" doc:"format of the checkpoint this phase writes (untimed, in setup) when no earlier save of the model left one (ddp_load: torch | safetensors; fsdp_load, rl_load: dcp | safetensors); one a save left is read in its own format"`
	ReadSize Size   `toml:"read_size" doc:"bytes per read(2) of tensor data, a multiple of 4KiB (torch.load reads ~4MiB)"`
	Direct   bool   `toml:"direct" doc:"O_DIRECT reads in aligned read_size chunks (the page cache is bypassed; not on tmpfs)"`
}

// loadCfg is the config of ddp_load, fsdp_load or rl_load.
type loadCfg interface {
	Validator
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
		return &KeyError{Key: "readers", Msg: fmt.Sprintf("%d out of range (0 = all ranks)", c.Readers)}
	}
	return validateLoad("fsdp", &c.ModelKeys, &c.LoadKeys)
}

func newLoadConfig(kind, format string, rs Size) loadCfg {
	lk := LoadKeys{Format: format, ReadSize: rs}
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
	return validateIOSize("read_size", l.ReadSize)
}

// checkpointRecord is what a save leaves in Env.State for the loads after
// it: where the checkpoint is and the CRC of every piece, computed when it
// was written.
type checkpointRecord struct {
	kind   string // ddp | fsdp
	spec   writeSpec
	dir    string
	ranks  int
	gen    uint64
	seq    int
	model  *ckpt.Model
	layout *ckpt.Layout // CRCs of every piece
	own    []string     // files this rank created (removed when a newer save replaces it)
}

const stateCheckpoints = "prism.checkpoints"

type checkpointStore struct {
	recs []*checkpointRecord
	seq  int
}

func store(env *Env) *checkpointStore {
	s, _ := env.State[stateCheckpoints].(*checkpointStore)
	if s == nil {
		s = &checkpointStore{}
		env.State[stateCheckpoints] = s
	}
	return s
}

// latest returns the newest checkpoint of model m of the given kind that
// ok accepts.
func (s *checkpointStore) latest(m *ckpt.Model, kind string, ok func(*checkpointRecord) bool) *checkpointRecord {
	var best *checkpointRecord
	for _, r := range s.recs {
		if r.model.ID() == m.ID() && r.kind == kind && (ok == nil || ok(r)) && (best == nil || r.seq > best.seq) {
			best = r
		}
	}
	return best
}

// add records r, removing (this rank's files of) any older checkpoint of
// the same model, kind and rank count, which no load can want any more.
func (s *checkpointStore) add(r *checkpointRecord) {
	s.seq++
	r.seq = s.seq
	keep := s.recs[:0]
	for _, o := range s.recs {
		if o.model.ID() == r.model.ID() && o.kind == r.kind && o.ranks == r.ranks && o.dir != r.dir {
			for _, f := range o.own {
				os.Remove(f)
			}
			continue
		}
		if o.dir == r.dir {
			continue // overwritten in place
		}
		keep = append(keep, o)
	}
	s.recs = append(keep, r)
}

// pool returns the rank's content pool for (seed, size), generating it
// (untimed) on first use and keeping it for later phases and iterations.
func pool(env *Env, seed uint64, size, chunk int64) *ckpt.Pool {
	key := fmt.Sprintf("prism.ckpt.pool/%d/%d", seed, size)
	if p, ok := env.State[key].(*ckpt.Pool); ok {
		if _, w := p.Size(); w >= chunk {
			return p
		}
	}
	for k := range env.State {
		if strings.HasPrefix(k, "prism.ckpt.pool/") {
			delete(env.State, k) // one pool per rank at a time
		}
	}
	p := ckpt.NewPool(seed, size, chunk)
	env.State[key] = p
	return p
}

// poolSize is the pool for a model: the budget, or less when the whole
// checkpoint fits. Every rank computes the same size, so every rank has
// the same pool bytes and can compute any piece's CRC.
func poolSize(m *ckpt.Model, budget int64) int64 {
	return min(budget, (m.Bytes()+ckpt.StampEvery-1)/ckpt.StampEvery*ckpt.StampEvery)
}

func generation(env *Env, salt string) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range []byte(fmt.Sprintf("%s/%s/%d", env.Name, salt, env.Iteration)) {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// ioRecs are the recorders of a checkpoint's ops: the rank's, or a
// simulated process's own (mlperf_checkpoint runs several per rank).
// Each is created before the loop that times it, and only for the ops the
// phase performs, so its manifest lists no empty ops.
type ioRecs struct {
	op                                                  func(string) *report.Recorder
	open, write, header, fsync, close, rename, saveFile *report.Recorder
	read, readHeader, loadFile, loadState               *report.Recorder
}

func newIORecs(op func(string) *report.Recorder) ioRecs { return ioRecs{op: op} }

func (r *ioRecs) get(p **report.Recorder, name string) {
	if *p == nil {
		*p = r.op(name)
	}
}

// forWrite makes the recorders of a save; fsync and rename only when the
// save does them.
func (r *ioRecs) forWrite(fsync, rename bool) {
	r.get(&r.open, "open")
	r.get(&r.write, "write")
	r.get(&r.header, "write_header")
	r.get(&r.close, "close")
	r.get(&r.saveFile, "save_file")
	if fsync {
		r.get(&r.fsync, "fsync")
	}
	if rename {
		r.get(&r.rename, "rename")
	}
}

// forRead makes the recorders of a load; whole is the op timing a whole
// file (load_file) or a whole consolidation (load_state).
func (r *ioRecs) forRead(whole string) {
	r.get(&r.open, "open")
	r.get(&r.read, "read")
	r.get(&r.readHeader, "read_header")
	r.get(&r.close, "close")
	if whole == "load_state" {
		r.get(&r.loadState, whole)
	} else {
		r.get(&r.loadFile, whole)
	}
}

// writer writes one checkpoint: the files of this rank, then, on rank 0,
// the final files once every rank is done.
type writer struct {
	spec    writeSpec
	model   *ckpt.Model
	layout  *ckpt.Layout
	dir     string
	gen     uint64
	pool    *ckpt.Pool
	files   []int // this rank's files, then (rank 0) the final ones
	nFinal  int
	paths   []pio.Path // by layout file; set for the files this rank writes
	tmp     []pio.Path
	made    []string
	headerB int64
	recs    *ioRecs // nil: the rank's recorders
}

func newLayout(m *ckpt.Model, spec writeSpec, ranks int, seed uint64) *ckpt.Layout {
	switch {
	case spec.kind == "ddp" && spec.format == ckpt.FormatTorch:
		return ckpt.NewTorch(m.Tensors, seed, "checkpoint.pt")
	case spec.kind == "ddp":
		return ckpt.NewSafetensors(m.Tensors, seed, 1, false)
	case spec.format == ckpt.FormatSafetensors:
		return ckpt.NewSafetensors(m.Tensors, seed, ranks, true)
	}
	return ckpt.NewDCP(m.Tensors, seed, ranks, spec.perTensor)
}

// prepare lays the checkpoint out, computes the CRCs of this rank's
// pieces, builds its files' headers and paths. Untimed.
func (w *writer) prepare(env *Env, seed uint64, budget int64) error {
	ranks := env.Size
	if w.spec.kind == "ddp" {
		ranks = 1
	}
	w.layout = newLayout(w.model, w.spec, ranks, seed)
	w.files = nil
	if w.spec.kind == "fsdp" || env.Rank == 0 {
		w.files = w.layout.FilesOf(env.Rank)
	}
	var mine []int
	for _, f := range w.files {
		mine = append(mine, w.layout.PiecesOf(f)...)
	}
	if len(mine) > 0 {
		w.pool = pool(env, seed, poolSize(w.model, budget), w.spec.writeSize)
		w.layout.Checksum(w.pool, w.gen, mine)
	}
	for _, f := range w.files {
		w.layout.Build(f, true)
	}
	w.nFinal = 0
	if env.Rank == 0 {
		for _, f := range w.layout.FinalFiles() {
			w.layout.Build(f, true)
			w.files = append(w.files, f)
			w.nFinal++
		}
	}
	w.setPaths()
	if env.Rank == 0 || w.spec.kind == "fsdp" {
		if err := os.MkdirAll(w.dir, 0o755); err != nil {
			return env.Errorf("mkdir %s: %w%s", w.dir, err, pio.Remedy(err))
		}
	}
	return nil
}

// setPaths prepares the paths of the files this rank writes.
func (w *writer) setPaths() {
	w.paths = make([]pio.Path, len(w.layout.Files))
	w.tmp = make([]pio.Path, len(w.layout.Files))
	for _, f := range w.files {
		lf := w.layout.Files[f]
		w.paths[f] = pio.MustPath(filepath.Join(w.dir, lf.Name))
		if lf.Tmp != "" {
			w.tmp[f] = pio.MustPath(filepath.Join(w.dir, lf.Tmp))
		}
	}
}

// write is the timed part: this rank's files, an agreement that every
// rank finished (so no rank waits forever on one that failed), then rank
// 0's final files.
func (w *writer) write(ctx context.Context, env *Env) error {
	shards := w.files[:len(w.files)-w.nFinal]
	var local error
	for _, f := range shards {
		if local = w.writeFile(ctx, env, f); local != nil {
			break
		}
	}
	flag := []int64{0}
	if local != nil {
		flag[0] = 1
	}
	if err := env.Comm.AllreduceInt64(ctx, spmd.Max, flag); err != nil {
		return firstErr(local, err)
	}
	if local != nil {
		return local
	}
	if flag[0] != 0 {
		return errStopped
	}
	for _, f := range w.files[len(w.files)-w.nFinal:] {
		if err := w.writeFile(ctx, env, f); err != nil {
			return err
		}
	}
	return nil
}

func (w *writer) writeFile(ctx context.Context, env *Env, f int) error {
	lf := &w.layout.Files[f]
	path, final := &w.paths[f], &w.paths[f]
	if lf.Tmp != "" {
		path = &w.tmp[f]
	}
	target := path.Name()
	if w.recs == nil {
		rs := newIORecs(env.Recorder)
		w.recs = &rs
	}
	w.recs.forWrite(w.spec.fsync, lf.Tmp != "")
	recOpen, recWrite, recHdr := w.recs.open, w.recs.write, w.recs.header
	recSync, recClose, recFile := w.recs.fsync, w.recs.close, w.recs.saveFile
	done := ctx.Done()
	fileStart := recOpen.BeginOn(target)
	fd, err := pio.Open(unix.AT_FDCWD, *path, unix.O_CREAT|unix.O_WRONLY|unix.O_TRUNC, 0o644)
	recOpen.Observe(fileStart, 0, err)
	if err != nil {
		return env.Errorf("create %s: %w%s", path, err, pio.Remedy(err))
	}
	w.made = append(w.made, path.String())
	chunk := w.spec.writeSize
	if w.pool != nil {
		_, pw := w.pool.Size()
		chunk = min(chunk, pw)
	}
	var werr error
	var at int64
	for _, s := range lf.Segs {
		select {
		case <-done:
			pio.Close(fd)
			return ctx.Err()
		default:
		}
		if s.Piece < 0 {
			start := recHdr.BeginOn(target)
			_, werr = pio.PwriteFull(fd, s.Lit, s.Off)
			recHdr.Observe(start, 0, werr)
			if werr != nil {
				at = s.Off
				break
			}
			w.headerB += s.Len
			continue
		}
		p := &w.layout.Pieces[s.Piece]
		for off, k := int64(0), 0; off < s.Len; off, k = off+chunk, k+1 {
			if k&15 == 15 && ctx.Err() != nil {
				pio.Close(fd)
				return ctx.Err()
			}
			n := min(chunk, s.Len-off)
			buf := w.pool.Chunk(p.Key, w.gen, off, n)
			start := recWrite.BeginOn(target)
			_, werr = pio.PwriteFull(fd, buf, s.Off+off)
			recWrite.Observe(start, int(n), werr)
			w.pool.Release()
			if werr != nil {
				at = s.Off + off
				break
			}
		}
		if werr != nil {
			break
		}
	}
	if werr != nil {
		pio.Close(fd)
		return env.Errorf("write %s@%d: %w%s", path, at, werr, pio.Remedy(werr))
	}
	if w.spec.fsync {
		start := recSync.BeginOn(target)
		err := pio.Fsync(fd)
		recSync.Observe(start, 0, err)
		if err != nil {
			pio.Close(fd)
			return env.Errorf("fsync %s: %w%s", path, err, pio.Remedy(err))
		}
	}
	start := recClose.BeginOn(target)
	err = pio.Close(fd)
	recClose.Observe(start, 0, err)
	if err == nil && path != final {
		start = w.recs.rename.BeginOn(target)
		err = pio.Rename(*path, *final)
		w.recs.rename.Observe(start, 0, err)
		if err == nil {
			w.made[len(w.made)-1] = final.String()
		}
	}
	recFile.Observe(fileStart, 0, err) // the whole file: not an op the watchdog tracks
	if err != nil {
		return env.Errorf("close/rename %s: %w%s", path, err, pio.Remedy(err))
	}
	return nil
}

// finish runs after the timed write on every rank: it checks this rank's
// files have their sizes, gathers every piece's CRC so every rank holds
// all of them (a load on any rank count can verify any file), and records
// the checkpoint in Env.State.
func (w *writer) finish(ctx context.Context, env *Env) (*checkpointRecord, error) {
	for _, f := range w.files {
		lf := w.layout.Files[f]
		st, err := os.Stat(filepath.Join(w.dir, lf.Name))
		if err != nil {
			return nil, env.Errorf("verify: %w", err)
		}
		if st.Size() != lf.Size {
			return nil, env.Errorf("verify: %s is %d bytes after the save, want %d", filepath.Join(w.dir, lf.Name), st.Size(), lf.Size)
		}
	}
	var mine []byte
	for _, f := range w.files {
		for _, p := range w.layout.PiecesOf(f) {
			mine = binary.LittleEndian.AppendUint32(mine, uint32(p))
			mine = binary.LittleEndian.AppendUint32(mine, w.layout.Pieces[p].CRC)
		}
	}
	all, err := env.Comm.Gather(ctx, 0, mine)
	if err != nil {
		return nil, err
	}
	var crcs []byte
	if env.Rank == 0 {
		crcs = make([]byte, 4*len(w.layout.Pieces))
		for _, b := range all {
			for ; len(b) >= 8; b = b[8:] {
				p := binary.LittleEndian.Uint32(b)
				if int(p) < len(w.layout.Pieces) {
					copy(crcs[4*p:], b[4:8])
				}
			}
		}
	}
	if crcs, err = env.Comm.Bcast(ctx, 0, crcs); err != nil {
		return nil, err
	}
	if len(crcs) != 4*len(w.layout.Pieces) {
		return nil, env.Errorf("verify: got %d checksum bytes from rank 0, want %d", len(crcs), 4*len(w.layout.Pieces))
	}
	for i := range w.layout.Pieces {
		w.layout.Pieces[i].CRC = binary.LittleEndian.Uint32(crcs[4*i:])
	}
	// Headers of files this rank did not build are rebuilt by loads with
	// the CRCs now known; drop the rest of the bytes.
	for i := range w.layout.Files {
		w.layout.Files[i].Segs = nil
	}
	rec := &checkpointRecord{kind: w.spec.kind, spec: w.spec, dir: w.dir, ranks: w.layout.Ranks, gen: w.gen, model: w.model, layout: w.layout, own: w.made}
	if w.spec.kind == "ddp" {
		rec.ranks = env.Size
	}
	store(env).add(rec)
	return rec, nil
}

// removeMade deletes the files this writer created (a failed run, or a new
// iteration about to write them again).
func (w *writer) removeMade() error {
	var first error
	for _, p := range w.made {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) && first == nil {
			first = err
		}
	}
	w.made = nil
	return first
}

// ckptSave is ddp_save and fsdp_save.
type ckptSave struct {
	kind  string
	cfg   saveCfg
	model *ckpt.Model
	w     *writer
	ok    bool
}

func (p *ckptSave) Config() any { return p.cfg }

func (p *ckptSave) Footprint(ranks int) Footprint {
	mk, _, _ := p.cfg.keys()
	m := mk.model()
	if m == nil {
		return Footprint{}
	}
	spec := saveSpec(p.kind, p.cfg)
	if p.kind == "ddp" {
		// Rank 0 writes it all; spread over the ranks so totals add up.
		return Footprint{Files: 1, Bytes: (m.Bytes() + int64(ranks) - 1) / int64(ranks)}
	}
	l := newLayout(m, spec, ranks, 0)
	return Footprint{Files: int64((len(l.Files) + ranks - 1) / ranks), Bytes: (l.Payload() + int64(ranks) - 1) / int64(ranks)}
}

func (p *ckptSave) Setup(ctx context.Context, env *Env) error {
	mk, _, _ := p.cfg.keys()
	if p.model == nil {
		m, err := mk.resolve(ctx, env)
		if err != nil {
			return err
		}
		p.model = m
	}
	dir := filepath.Join(env.Dir, "checkpoint")
	if p.w != nil && p.w.dir == dir {
		// The previous iteration's checkpoint: every iteration creates its
		// files afresh, as a training job's next save does. (A sweep's
		// other sizes write elsewhere, and their checkpoints stay for the
		// loads of the same size.)
		if err := p.w.removeMade(); err != nil {
			return env.Errorf("setup: remove the previous iteration's checkpoint: %w", err)
		}
	}
	p.ok = false
	p.w = &writer{spec: saveSpec(p.kind, p.cfg), model: p.model, dir: dir, gen: generation(env, "save")}
	return p.w.prepare(env, uint64(mk.Seed), int64(mk.BufferBudget))
}

func (p *ckptSave) Run(ctx context.Context, env *Env) error {
	if err := p.w.write(ctx, env); err != nil {
		return err
	}
	p.ok = true
	// Metrics are summed over ranks: per-checkpoint figures come from rank 0.
	if env.Rank == 0 {
		env.SetMetric("checkpoint_bytes", float64(p.model.Bytes()))
		env.SetMetric("model_params", float64(p.model.Params))
		env.SetMetric("fsync", b2f(p.w.spec.fsync))
	}
	env.SetMetric("header_bytes", float64(p.w.headerB))
	env.SetMetric("files", float64(len(p.w.files)))
	return nil
}

// Verify checks the files' sizes and shares every piece's CRC with every
// rank, recording the checkpoint for the loads after it.
func (p *ckptSave) Verify(ctx context.Context, env *Env) error {
	_, err := p.w.finish(ctx, env)
	return err
}

// Teardown removes a partial checkpoint; a complete one stays for the
// load phases after it (the run directory's cleanup removes it).
func (p *ckptSave) Teardown(ctx context.Context, env *Env) error {
	if p.w != nil && !p.ok {
		return p.w.removeMade()
	}
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// agreeRecord makes every rank of the phase load the same checkpoint, or
// all write one: a rank that sat out an earlier phase (a sweep size, a
// rank subset) has not seen that phase's save.
func agreeRecord(ctx context.Context, env *Env, rec *checkpointRecord) (*checkpointRecord, error) {
	var dir []byte
	if env.Rank == 0 && rec != nil {
		dir = []byte(rec.dir)
	}
	got, err := env.Comm.Bcast(ctx, 0, dir)
	if err != nil {
		return nil, err
	}
	same := []int64{1}
	if rec == nil || string(got) != rec.dir {
		same[0] = 0
	}
	if err := env.Comm.AllreduceInt64(ctx, spmd.Min, same); err != nil {
		return nil, err
	}
	if same[0] == 0 {
		return nil, nil
	}
	return rec, nil
}

// ckptLoad is ddp_load, fsdp_load and rl_load.
type ckptLoad struct {
	kind     string // ddp | fsdp | rl
	cfg      loadCfg
	model    *ckpt.Model
	rec      *checkpointRecord
	fallback *writer
	rd       *reader
}

func (p *ckptLoad) Config() any    { return p.cfg }
func (p *ckptLoad) Fadvises() bool { return true }

func (p *ckptLoad) saveKind() string {
	if p.kind == "ddp" {
		return "ddp"
	}
	return "fsdp"
}

// Footprint of a load is what each rank reads (it writes nothing unless no
// save phase left a checkpoint of its model).
func (p *ckptLoad) Footprint(ranks int) Footprint {
	mk, lk, _ := p.cfg.keys()
	m := mk.model()
	if m == nil {
		return Footprint{}
	}
	switch p.kind {
	case "ddp":
		return Footprint{Files: 1, Bytes: m.Bytes()}
	case "rl":
		readers := p.readers(ranks)
		l := newLayout(m, writeSpec{kind: "fsdp", format: lk.Format}, ranks, 0)
		return Footprint{Files: int64(len(l.Files) * readers / ranks), Bytes: m.Bytes() * int64(readers) / int64(ranks)}
	}
	return Footprint{Files: 2, Bytes: (m.Bytes() + int64(ranks) - 1) / int64(ranks)}
}

func (p *ckptLoad) readers(size int) int {
	_, _, n := p.cfg.keys()
	if n == 0 || n > size {
		return size
	}
	return n
}

func (p *ckptLoad) Setup(ctx context.Context, env *Env) error {
	mk, lk, _ := p.cfg.keys()
	if p.model == nil {
		m, err := mk.resolve(ctx, env)
		if err != nil {
			return err
		}
		p.model = m
	}
	st := store(env)
	var ok func(*checkpointRecord) bool
	if p.kind == "fsdp" {
		ok = func(r *checkpointRecord) bool { return r.ranks == env.Size }
	}
	rec, err := agreeRecord(ctx, env, st.latest(p.model, p.saveKind(), ok))
	if err != nil {
		return err
	}
	p.rec, p.fallback = rec, nil
	if p.rec == nil {
		// No earlier save of this model to load: write one now, untimed.
		spec := writeSpec{kind: p.saveKind(), format: lk.Format, fsync: fsyncFor(lk.Format), writeSize: int64(lk.ReadSize)}
		untimed := newIORecs(report.NewSet().Op) // setup's writes are not measured
		w := &writer{spec: spec, model: p.model, dir: filepath.Join(env.Dir, "checkpoint"), gen: generation(env, "load-setup"), recs: &untimed}
		if err := w.prepare(env, uint64(mk.Seed), int64(mk.BufferBudget)); err != nil {
			return err
		}
		if err := w.write(ctx, env); err != nil {
			w.removeMade()
			return err
		}
		// Barrier before reading back: rank 0's final files must exist.
		if err := env.Comm.Barrier(ctx); err != nil {
			return err
		}
		rec, err := w.finish(ctx, env)
		if err != nil {
			return err
		}
		p.rec, p.fallback = rec, w
		if env.Rank == 0 {
			fmt.Fprintf(env.Log, "prism: %s %q: no earlier %s save of %s that all %d ranks of this phase took part in; wrote a checkpoint in setup (untimed): %s\n",
				env.Kind, env.Name, p.saveKind(), p.model.Name, env.Size, rec.dir)
		}
	}
	readers := p.readers(env.Size)
	rd, err := newReader(env, p.rec, p.kind, env.Rank < readers, int64(lk.ReadSize), lk.Direct, int64(mk.BufferBudget))
	if err != nil {
		return err
	}
	p.rd = rd
	if env.Cache == "fadvise" {
		if err := rd.evict(env); err != nil {
			return err
		}
	}
	return nil
}

func (p *ckptLoad) Run(ctx context.Context, env *Env) error {
	if err := p.rd.run(ctx, env, p.kind); err != nil {
		return err
	}
	if env.Rank == 0 {
		env.SetMetric("checkpoint_bytes", float64(p.model.Bytes()))
		env.SetMetric("model_params", float64(p.model.Params))
		env.SetMetric("fsync", b2f(p.rec.spec.fsync))
		env.SetMetric("written_in_setup", b2f(p.fallback != nil))
		if p.kind == "rl" {
			env.SetMetric("readers", float64(p.readers(env.Size)))
		}
	}
	env.SetMetric("header_bytes", float64(p.rd.headerB))
	if p.rd.inline && len(p.rd.ops) > 0 {
		env.SetMetric("verify_inline_ranks", 1)
	}
	return nil
}

// Verify checks every byte Run read that was not checked inline.
func (p *ckptLoad) Verify(ctx context.Context, env *Env) error { return p.rd.verify(env) }

func (p *ckptLoad) Teardown(ctx context.Context, env *Env) error {
	if p.rd != nil {
		p.rd.closeAll()
	}
	return nil
}

// readOp is one timed read.
type readOp struct {
	slot     int   // file slot
	off, n   int64 // file range read
	feedLo   int64 // part of it the verifier checks: [feedLo, feedHi)
	feedHi   int64
	pos      int64 // arena position
	payload  int64 // tensor bytes among the checked part
	openIt   bool  // open the slot's file before this op
	closeIt  bool  // close it after
	nHeaders int64
}

// reader executes a rank's reads of a checkpoint and verifies them.
type reader struct {
	l       *ckpt.Layout
	dir     string
	files   []int // layout file of each slot
	slotOf  map[int]int
	paths   []pio.Path
	fds     []int
	opened  []time.Time
	ops     []readOp
	direct  bool
	align   int64
	arena   []byte
	buf     []byte
	inline  bool
	checks  map[int]*fileCheck
	headerB int64
	recs    *ioRecs // nil: the rank's recorders
}

// newReader plans this rank's reads: for ddp, the whole file, zip trailer
// first as torch.load reads it; for fsdp, the metadata (DCP .metadata or
// the safetensors index) then this rank's shard files; for rl, the
// metadata then, tensor by tensor, every shard's piece of it (a DCP
// item, or a safetensors tensor after its file's header).
func newReader(env *Env, rec *checkpointRecord, kind string, active bool, readSize int64, direct bool, budget int64) (*reader, error) {
	r := &reader{l: rec.layout, dir: rec.dir, direct: direct, align: 1, checks: map[int]*fileCheck{}}
	if !active {
		r.plan(budget)
		return r, nil
	}
	if direct {
		if _, err := pio.CheckDirect(rec.dir); err != nil {
			return nil, env.Errorf("setup: %w", err)
		}
		a, err := pio.AlignmentOf(rec.dir)
		if err != nil {
			return nil, env.Errorf("setup: %w", err)
		}
		r.align = int64(a.Bytes)
		if readSize%r.align != 0 {
			return nil, env.Errorf("setup: read_size %d is not a multiple of the O_DIRECT alignment %d (%s)", readSize, r.align, a.Source)
		}
	}
	l := r.l
	finals := l.FinalFiles()
	switch {
	case kind == "ddp":
		s := r.use(0)
		segs := l.Files[0].Segs
		if rec.spec.format == ckpt.FormatTorch && !direct && len(segs) > 1 {
			last := segs[len(segs)-1]
			r.addRange(s, last.Off, last.Off+last.Len, readSize)
			r.addRange(s, 0, last.Off, readSize)
		} else {
			r.whole(0, readSize)
		}
	case kind == "fsdp":
		for _, f := range finals {
			r.whole(f, readSize)
		}
		for _, f := range l.FilesOf(env.Rank) {
			r.whole(f, readSize)
		}
	default: // rl
		for _, f := range finals {
			r.whole(f, readSize)
		}
		byTensor := make([][]int, len(l.Tensors))
		for i, pc := range l.Pieces {
			byTensor[pc.Tensor] = append(byTensor[pc.Tensor], i)
		}
		headerDone := map[int]bool{}
		for _, pcs := range byTensor {
			sort.Slice(pcs, func(a, b int) bool { return l.Files[l.Pieces[pcs[a]].File].Rank < l.Files[l.Pieces[pcs[b]].File].Rank })
			for _, i := range pcs {
				pc := l.Pieces[i]
				s := r.use(pc.File)
				if l.Format == ckpt.FormatDCP {
					r.addRange(s, pc.ItemOff, pc.ItemOff+pc.ItemLen, readSize)
					continue
				}
				if !headerDone[pc.File] {
					h := l.Files[pc.File].Segs[0]
					r.addRange(s, h.Off, h.Off+h.Len, readSize)
					headerDone[pc.File] = true
				}
				r.addRange(s, pc.Off, pc.Off+pc.Len(), readSize)
			}
		}
		// Shard files with no piece (more ranks than rows) are opened and
		// closed, as a loader walking the metadata's file list would.
		for f := range l.Files {
			if !l.Files[f].Final && len(l.PiecesOf(f)) == 0 {
				r.use(f)
			}
		}
	}
	r.plan(budget)
	return r, nil
}

// use returns the slot of layout file f, adding it (with its literal bytes
// laid out, for checking) on first use.
func (r *reader) use(f int) int {
	if s, ok := r.slotOf[f]; ok {
		return s
	}
	if r.slotOf == nil {
		r.slotOf = map[int]int{}
	}
	r.slotOf[f] = len(r.files)
	if !built(r.l, f) {
		r.l.Build(f, true)
	}
	r.files = append(r.files, f)
	r.paths = append(r.paths, pio.MustPath(filepath.Join(r.dir, r.l.Files[f].Name)))
	c := newFileCheck(r.l, f)
	c.path = filepath.Join(r.dir, r.l.Files[f].Name)
	r.checks[f] = c
	return len(r.files) - 1
}

// whole plans reading file f from start to end.
func (r *reader) whole(f int, readSize int64) { r.addRange(r.use(f), 0, r.l.Files[f].Size, readSize) }

// plan marks where each file is opened and closed and sets up the
// buffers: one arena holding every read when it fits budget (checksummed
// in Verify), else one buffer reused by every read (checksummed inline).
func (r *reader) plan(budget int64) {
	total, maxN := r.markOps()
	align := int(max(r.align, pio.DirectAlign))
	if total <= budget {
		r.arena = pio.AlignedBuffer(int(total), align)
		return
	}
	r.inline = true
	r.buf = pio.AlignedBuffer(int(maxN), align)
}

// planWith is plan with a buffer the caller owns: the arena (inline
// false, len(buf) >= every read together) or the one read buffer.
func (r *reader) planWith(inline bool, buf []byte) {
	r.markOps()
	r.inline = inline
	if inline {
		r.buf = buf
	} else {
		r.arena = buf
	}
}

// markOps places each read in the arena and marks each file's first and
// last read, where it is opened and closed; it returns the bytes of all
// reads and of the largest.
func (r *reader) markOps() (total, maxN int64) {
	first, last := map[int]int{}, map[int]int{}
	for i, op := range r.ops {
		if _, ok := first[op.slot]; !ok {
			first[op.slot] = i
		}
		last[op.slot] = i
		r.ops[i].pos = total
		total += op.n
		maxN = max(maxN, op.n)
	}
	for s := range r.files {
		if i, ok := first[s]; ok {
			r.ops[i].openIt = true
			r.ops[last[s]].closeIt = true
		} else {
			r.ops = append(r.ops, readOp{slot: s, openIt: true, closeIt: true})
		}
	}
	r.fds = make([]int, len(r.files))
	for i := range r.fds {
		r.fds[i] = -1
	}
	r.opened = make([]time.Time, len(r.files))
	return total, maxN
}

// built reports whether file f is laid out with its literal bytes.
func built(l *ckpt.Layout, f int) bool {
	segs := l.Files[f].Segs
	if segs == nil {
		return false
	}
	for _, s := range segs {
		if s.Piece < 0 && s.Lit == nil {
			return false
		}
	}
	return true
}

// addRange plans reads of [lo, hi) of a slot's file: a literal segment in
// one read, tensor data in read_size chunks (with direct, aligned chunks
// around the range, of which only [lo, hi) is checked).
func (r *reader) addRange(slot int, lo, hi, readSize int64) {
	if hi <= lo {
		return
	}
	f := r.files[slot]
	segs := r.l.Files[f].Segs
	size := r.l.Files[f].Size
	payloadIn := func(a, b int64) (pay, hdr int64) {
		for _, s := range segs {
			x, y := max(a, s.Off), min(b, s.Off+s.Len)
			if x < y {
				if s.Piece >= 0 {
					pay += y - x
				} else {
					hdr += y - x
				}
			}
		}
		return
	}
	if r.direct {
		a := lo / r.align * r.align
		b := (hi + r.align - 1) / r.align * r.align
		for off := a; off < b; off += readSize {
			n := min(readSize, b-off)
			fl, fh := max(off, lo), min(off+n, hi, size)
			pay, hdr := payloadIn(fl, fh)
			r.ops = append(r.ops, readOp{slot: slot, off: off, n: n, feedLo: fl, feedHi: fh, payload: pay, nHeaders: hdr})
		}
		return
	}
	for _, s := range segs {
		x, y := max(lo, s.Off), min(hi, s.Off+s.Len)
		if x >= y {
			continue
		}
		step := readSize
		if s.Piece < 0 {
			step = y - x // headers and metadata: one read each
		}
		for off := x; off < y; off += step {
			n := min(step, y-off)
			op := readOp{slot: slot, off: off, n: n, feedLo: off, feedHi: off + n}
			if s.Piece >= 0 {
				op.payload = n
			} else {
				op.nHeaders = n
			}
			r.ops = append(r.ops, op)
		}
	}
}

// evict drops the cached pages of every file this rank will read
// (drop_caches = "fadvise"), untimed.
func (r *reader) evict(env *Env) error {
	for i, p := range r.paths {
		fd, err := pio.Open(unix.AT_FDCWD, p, unix.O_RDONLY, 0)
		if err != nil {
			return env.Errorf("setup: open %s: %w%s", p, err, pio.Remedy(err))
		}
		err = pio.Evict(fd)
		pio.Close(fd)
		if err != nil {
			return env.Errorf("setup: fadvise DONTNEED %s (file %d): %w", p, i, err)
		}
	}
	return nil
}

func (r *reader) run(ctx context.Context, env *Env, kind string) error {
	if r.recs == nil {
		rs := newIORecs(env.Recorder)
		r.recs = &rs
	}
	if len(r.ops) == 0 {
		return nil
	}
	whole := "load_file"
	if kind == "rl" {
		whole = "load_state"
	}
	r.recs.forRead(whole)
	recOpen, recRead, recHdr := r.recs.open, r.recs.read, r.recs.readHeader
	recClose, recFile, recState := r.recs.close, r.recs.loadFile, r.recs.loadState
	r.headerB = 0
	for f, c := range r.checks {
		r.checks[f] = c.reset()
	}
	flags := unix.O_RDONLY
	done := ctx.Done()
	begin := time.Now()
	for i := range r.ops {
		op := &r.ops[i]
		if i%64 == 0 {
			select {
			case <-done:
				return ctx.Err()
			default:
			}
		}
		target := r.paths[op.slot].Name()
		if op.openIt {
			start := recOpen.BeginOn(target)
			var fd int
			var err error
			if r.direct {
				fd, err = pio.OpenDirect(r.paths[op.slot], flags, 0)
			} else {
				fd, err = pio.Open(unix.AT_FDCWD, r.paths[op.slot], flags, 0)
			}
			recOpen.Observe(start, 0, err)
			if err != nil {
				return env.Errorf("open %s: %w%s", r.paths[op.slot], err, pio.Remedy(err))
			}
			r.fds[op.slot], r.opened[op.slot] = fd, start
		}
		if op.n > 0 {
			var b []byte
			if r.inline {
				b = r.buf[:op.n]
			} else {
				b = r.arena[op.pos : op.pos+op.n]
			}
			rec := recRead
			if op.payload == 0 {
				rec = recHdr
			}
			start := rec.BeginOn(target)
			n, err := pio.PreadFull(r.fds[op.slot], b, op.off)
			if err == pio.ErrShortIO && r.direct && int64(n) >= op.feedHi-op.off {
				err = nil // O_DIRECT's last aligned read ends past EOF
			}
			rec.Observe(start, int(op.payload), err)
			if err != nil {
				return env.Errorf("read %s@%d: %w%s", r.paths[op.slot], op.off, err, pio.Remedy(err))
			}
			r.headerB += op.nHeaders
			if r.inline {
				if err := r.feed(op, b); err != nil {
					return env.Errorf("%w", err)
				}
			}
		}
		if op.closeIt {
			start := recClose.BeginOn(target)
			err := pio.Close(r.fds[op.slot])
			recClose.Observe(start, 0, err)
			r.fds[op.slot] = -1
			if kind != "rl" {
				recFile.Observe(r.opened[op.slot], 0, err)
			}
			if err != nil {
				return env.Errorf("close %s: %w", r.paths[op.slot], err)
			}
		}
	}
	if kind == "rl" && len(r.ops) > 0 {
		recState.Observe(begin, 0, nil)
	}
	return nil
}

func (r *reader) feed(op *readOp, b []byte) error {
	lo := op.feedLo - op.off
	return r.checks[r.files[op.slot]].feed(r.l, op.feedLo, b[lo:lo+op.feedHi-op.feedLo])
}

// verify checks what Run read: from the arena (deferred), and that every
// segment of every file read was seen whole.
func (r *reader) verify(env *Env) error {
	if !r.inline {
		for i := range r.ops {
			op := &r.ops[i]
			if op.n == 0 {
				continue
			}
			if err := r.feed(op, r.arena[op.pos:op.pos+op.n]); err != nil {
				return env.Errorf("verify: %w", err)
			}
		}
	}
	for _, f := range r.files {
		if err := r.checks[f].complete(r.l); err != nil {
			return env.Errorf("verify: %w", err)
		}
	}
	return nil
}

func (r *reader) closeAll() {
	for i, fd := range r.fds {
		if fd >= 0 {
			pio.Close(fd)
			r.fds[i] = -1
		}
	}
}

// fileCheck verifies one file as its bytes arrive: literal segments
// (headers, metadata) byte for byte, tensor pieces by CRC-32 against the
// one computed when they were written. Each segment's bytes must arrive in
// order; bytes seen again (overlapping direct reads) are skipped.
type fileCheck struct {
	file int
	path string
	segs []ckpt.Seg
	done []int64
	crc  []uint32
	cur  int
}

func newFileCheck(l *ckpt.Layout, f int) *fileCheck {
	segs := l.Files[f].Segs
	return &fileCheck{file: f, path: l.Files[f].Name, segs: segs, done: make([]int64, len(segs)), crc: make([]uint32, len(segs))}
}

func (c *fileCheck) reset() *fileCheck {
	clear(c.done)
	clear(c.crc)
	c.cur = 0
	return c
}

func (c *fileCheck) seg(off int64) int {
	if c.cur < len(c.segs) {
		s := c.segs[c.cur]
		if off >= s.Off && off < s.Off+s.Len {
			return c.cur
		}
	}
	i := sort.Search(len(c.segs), func(i int) bool { return c.segs[i].Off+c.segs[i].Len > off })
	c.cur = i
	return i
}

func (c *fileCheck) feed(l *ckpt.Layout, off int64, b []byte) error {
	for len(b) > 0 {
		i := c.seg(off)
		if i >= len(c.segs) {
			return fmt.Errorf("%s: %d bytes read at offset %d, past the end of the file as written (%d bytes)", c.path, len(b), off, l.Files[c.file].Size)
		}
		s := c.segs[i]
		rel := off - s.Off
		n := min(int64(len(b)), s.Len-rel)
		part := b[:n]
		off += n
		b = b[n:]
		if rel < c.done[i] {
			k := min(n, c.done[i]-rel)
			part, rel = part[k:], rel+k
		}
		if len(part) == 0 {
			continue
		}
		if rel > c.done[i] {
			return fmt.Errorf("%s: internal: bytes at %d arrived before %d", c.path, s.Off+rel, s.Off+c.done[i])
		}
		if s.Piece < 0 {
			want := s.Lit[rel : rel+int64(len(part))]
			if !bytes.Equal(part, want) {
				k := 0
				for k < len(part) && part[k] == want[k] {
					k++
				}
				return fmt.Errorf("%s: byte %d (header/metadata bytes [%d,%d)) is %#02x, written %#02x: the storage returned different bytes than were written",
					c.path, s.Off+rel+int64(k), s.Off, s.Off+s.Len, part[k], want[k])
			}
		} else {
			c.crc[i] = crc32.Update(c.crc[i], crc32.IEEETable, part)
		}
		c.done[i] += int64(len(part))
		if s.Piece >= 0 && c.done[i] == s.Len {
			pc := l.Pieces[s.Piece]
			if c.crc[i] != pc.CRC {
				t := l.Tensors[pc.Tensor]
				return fmt.Errorf("tensor %s (bytes [%d,%d) of %d) in %s at offset %d: CRC-32 %08x, written %08x: the storage returned different bytes than were written",
					t.Name, pc.Lo, pc.Hi, t.Bytes(), c.path, s.Off, c.crc[i], pc.CRC)
			}
		}
	}
	return nil
}

// complete reports a segment of a read file that was not read whole.
func (c *fileCheck) complete(l *ckpt.Layout) error {
	for i, s := range c.segs {
		if c.done[i] != s.Len {
			what := "header/metadata"
			if s.Piece >= 0 {
				what = "tensor " + l.Tensors[l.Pieces[s.Piece].Tensor].Name
			}
			return fmt.Errorf("%s: only %d of %d bytes of %s at offset %d were read", c.path, c.done[i], s.Len, what, s.Off)
		}
	}
	return nil
}
