package ckpt

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// DType is a tensor element type, named as safetensors names it.
type DType string

// Element types a checkpoint holds.
const (
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
)

// ParseDType reads fp32 | fp16 | bf16 (also float32, float16, bfloat16, and
// the safetensors names).
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "fp32", "float32", "f32", "float":
		return F32, nil
	case "fp16", "float16", "f16", "half":
		return F16, nil
	case "bf16", "bfloat16":
		return BF16, nil
	}
	return "", fmt.Errorf("unknown dtype %q (allowed: fp32, fp16, bf16)", s)
}

// Size is the bytes per element.
func (d DType) Size() int64 {
	if d == F32 {
		return 4
	}
	return 2
}

// storageClass is the torch storage type torch.save pickles for d.
func (d DType) storageClass() string {
	switch d {
	case F32:
		return "FloatStorage"
	case F16:
		return "HalfStorage"
	}
	return "BFloat16Storage"
}

// rank orders dtypes as safetensors orders tensors in a file (larger
// alignment first).
func (d DType) rank() int {
	switch d {
	case F32:
		return 3
	case BF16:
		return 2
	}
	return 1
}

// Tensor is one named tensor of a state dict.
type Tensor struct {
	Name  string
	Shape []int64
	DType DType
	// Value, when set, is the tensor's content (Adam's step count);
	// otherwise its bytes are cut from the pool.
	Value []byte
}

// Elems is the number of elements.
func (t Tensor) Elems() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Bytes is the tensor's size.
func (t Tensor) Bytes() int64 { return t.Elems() * t.DType.Size() }

// Rows is the length of the leading dimension (1 for a scalar).
func (t Tensor) Rows() int64 {
	if len(t.Shape) == 0 {
		return 1
	}
	return t.Shape[0]
}

// RowBytes is the size of one slice along the leading dimension.
func (t Tensor) RowBytes() int64 {
	if t.Rows() == 0 {
		return 0
	}
	return t.Bytes() / t.Rows()
}

// Families of architectures prism knows the tensor names of.
const (
	FamilyLlama     = "llama" // llama, mistral, qwen2
	FamilyGPT2      = "gpt2"
	FamilyBert      = "bert"
	FamilySynthetic = "synthetic"
)

// Arch is a model architecture: enough to name and shape every parameter.
type Arch struct {
	Family    string
	ModelType string // as config.json says (llama, mistral, qwen2, gpt2, bert) or synthetic
	Hidden    int64
	FFN       int64 // intermediate size
	Layers    int64
	Heads     int64
	KVHeads   int64
	HeadDim   int64
	Vocab     int64
	Positions int64 // gpt2 n_positions, bert max_position_embeddings
	TypeVocab int64 // bert type_vocab_size
	Tie       bool  // lm_head shares the embedding (not stored)
	QKVBias   bool  // qwen2: q/k/v projections have biases
	InputDim  int64 // synthetic: input features of the first layer
	DType     DType // the checkpoint's default element type
}

// Presets are the built-in architectures. The llama3 ones follow the
// published HuggingFace configs (Meta-Llama-3-8B, 3.1-70B, 3.1-405B);
// llama3-1t is the model MLPerf Storage defines (there is no published
// HuggingFace model of that size): its 192 heads do not divide the hidden
// size, so its head dimension is 25872/192 rounded down, as MLPerf's
// DLIO configuration computes it.
var presets = map[string]Arch{
	"gpt2": {Family: FamilyGPT2, ModelType: "gpt2", Hidden: 768, FFN: 3072, Layers: 12, Heads: 12, KVHeads: 12, HeadDim: 64,
		Vocab: 50257, Positions: 1024, Tie: true, DType: F32},
	"bert-base": {Family: FamilyBert, ModelType: "bert", Hidden: 768, FFN: 3072, Layers: 12, Heads: 12, KVHeads: 12, HeadDim: 64,
		Vocab: 30522, Positions: 512, TypeVocab: 2, DType: F32},
	"llama3-8b":   llama(32, 4096, 14336, 32, 8),
	"llama3-70b":  llama(80, 8192, 28672, 64, 8),
	"llama3-405b": llama(126, 16384, 53248, 128, 8),
	"llama3-1t":   llama(128, 25872, 98304, 192, 32),
}

func llama(layers, hidden, ffn, heads, kv int64) Arch {
	return Arch{Family: FamilyLlama, ModelType: "llama", Hidden: hidden, FFN: ffn, Layers: layers, Heads: heads,
		KVHeads: kv, HeadDim: hidden / heads, Vocab: 128256, Positions: 131072, DType: BF16}
}

// PresetNames lists the built-in architectures, sorted.
func PresetNames() []string {
	out := make([]string, 0, len(presets))
	for n := range presets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Preset returns a built-in architecture.
func Preset(name string) (Arch, bool) {
	a, ok := presets[name]
	return a, ok
}

// Synthetic is the controlled model of PRISM §3.1.4: layers linear layers
// of width hidden, the first taking input features, each with a bias.
func Synthetic(layers, input, hidden int64, dt DType) Arch {
	return Arch{Family: FamilySynthetic, ModelType: FamilySynthetic, Layers: layers, InputDim: input, Hidden: hidden, DType: dt}
}

// Limits keep every size computation far from int64 overflow, whatever a
// config file says.
const (
	maxDim    = 1 << 20 // hidden, ffn, head dims
	maxVocab  = 1 << 24
	maxLayers = 4096
	maxHeads  = 1 << 14
)

// ErrArch is wrapped by every invalid-architecture error.
var ErrArch = errors.New("ckpt: invalid model architecture")

func archErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrArch, fmt.Sprintf(format, args...))
}

// Validate checks that a names a buildable model of sane size.
func (a Arch) Validate() error {
	inRange := func(name string, v, lo, hi int64) error {
		if v < lo || v > hi {
			return archErr("%s = %d out of range (%d .. %d)", name, v, lo, hi)
		}
		return nil
	}
	var errs []error
	errs = append(errs, inRange("layers", a.Layers, 1, maxLayers), inRange("hidden", a.Hidden, 1, maxDim))
	switch a.Family {
	case FamilySynthetic:
		errs = append(errs, inRange("input_dim", a.InputDim, 1, maxDim))
	case FamilyLlama, FamilyGPT2, FamilyBert:
		errs = append(errs, inRange("intermediate_size", a.FFN, 1, maxDim), inRange("vocab_size", a.Vocab, 1, maxVocab),
			inRange("num_attention_heads", a.Heads, 1, maxHeads), inRange("num_key_value_heads", a.KVHeads, 1, maxHeads),
			inRange("head_dim", a.HeadDim, 1, maxDim))
		if a.Family != FamilyLlama {
			errs = append(errs, inRange("positions", a.Positions, 1, maxVocab))
		}
		if a.Family == FamilyBert {
			errs = append(errs, inRange("type_vocab_size", a.TypeVocab, 1, maxVocab))
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		if a.KVHeads > a.Heads || a.Heads%a.KVHeads != 0 {
			return archErr("num_key_value_heads = %d must divide num_attention_heads = %d", a.KVHeads, a.Heads)
		}
		if a.Heads*a.HeadDim > maxDim {
			return archErr("num_attention_heads x head_dim = %d is too large", a.Heads*a.HeadDim)
		}
		if a.Family != FamilyLlama && a.Heads*a.HeadDim != a.Hidden {
			return archErr("hidden size %d is not a multiple of %d heads", a.Hidden, a.Heads)
		}
	default:
		return archErr("unknown family %q", a.Family)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	switch a.DType {
	case F32, F16, BF16:
	default:
		return archErr("unknown dtype %q", a.DType)
	}
	return nil
}

// Tensors returns the parameter tensors in state-dict (module) order, named
// as HuggingFace transformers names them, with Linear weights shaped
// [out, in] (GPT-2's Conv1D: [in, out]).
func (a Arch) Tensors() []Tensor {
	dt := a.DType
	var out []Tensor
	add := func(name string, shape ...int64) {
		out = append(out, Tensor{Name: name, Shape: shape, DType: dt})
	}
	h := a.Hidden
	switch a.Family {
	case FamilyLlama:
		q, kv := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
		add("model.embed_tokens.weight", a.Vocab, h)
		for i := int64(0); i < a.Layers; i++ {
			p := fmt.Sprintf("model.layers.%d.", i)
			add(p+"self_attn.q_proj.weight", q, h)
			if a.QKVBias {
				add(p+"self_attn.q_proj.bias", q)
			}
			add(p+"self_attn.k_proj.weight", kv, h)
			if a.QKVBias {
				add(p+"self_attn.k_proj.bias", kv)
			}
			add(p+"self_attn.v_proj.weight", kv, h)
			if a.QKVBias {
				add(p+"self_attn.v_proj.bias", kv)
			}
			add(p+"self_attn.o_proj.weight", h, q)
			add(p+"mlp.gate_proj.weight", a.FFN, h)
			add(p+"mlp.up_proj.weight", a.FFN, h)
			add(p+"mlp.down_proj.weight", h, a.FFN)
			add(p+"input_layernorm.weight", h)
			add(p+"post_attention_layernorm.weight", h)
		}
		add("model.norm.weight", h)
		if !a.Tie {
			add("lm_head.weight", a.Vocab, h)
		}
	case FamilyGPT2:
		add("wte.weight", a.Vocab, h)
		add("wpe.weight", a.Positions, h)
		for i := int64(0); i < a.Layers; i++ {
			p := fmt.Sprintf("h.%d.", i)
			add(p+"ln_1.weight", h)
			add(p+"ln_1.bias", h)
			add(p+"attn.c_attn.weight", h, 3*h)
			add(p+"attn.c_attn.bias", 3*h)
			add(p+"attn.c_proj.weight", h, h)
			add(p+"attn.c_proj.bias", h)
			add(p+"ln_2.weight", h)
			add(p+"ln_2.bias", h)
			add(p+"mlp.c_fc.weight", h, a.FFN)
			add(p+"mlp.c_fc.bias", a.FFN)
			add(p+"mlp.c_proj.weight", a.FFN, h)
			add(p+"mlp.c_proj.bias", h)
		}
		add("ln_f.weight", h)
		add("ln_f.bias", h)
	case FamilyBert:
		add("embeddings.word_embeddings.weight", a.Vocab, h)
		add("embeddings.position_embeddings.weight", a.Positions, h)
		add("embeddings.token_type_embeddings.weight", a.TypeVocab, h)
		add("embeddings.LayerNorm.weight", h)
		add("embeddings.LayerNorm.bias", h)
		for i := int64(0); i < a.Layers; i++ {
			p := fmt.Sprintf("encoder.layer.%d.", i)
			for _, m := range []string{"query", "key", "value"} {
				add(p+"attention.self."+m+".weight", h, h)
				add(p+"attention.self."+m+".bias", h)
			}
			add(p+"attention.output.dense.weight", h, h)
			add(p+"attention.output.dense.bias", h)
			add(p+"attention.output.LayerNorm.weight", h)
			add(p+"attention.output.LayerNorm.bias", h)
			add(p+"intermediate.dense.weight", a.FFN, h)
			add(p+"intermediate.dense.bias", a.FFN)
			add(p+"output.dense.weight", h, a.FFN)
			add(p+"output.dense.bias", h)
			add(p+"output.LayerNorm.weight", h)
			add(p+"output.LayerNorm.bias", h)
		}
		add("pooler.dense.weight", h, h)
		add("pooler.dense.bias", h)
	case FamilySynthetic:
		in := a.InputDim
		for i := int64(0); i < a.Layers; i++ {
			add(fmt.Sprintf("layers.%d.weight", i), h, in)
			add(fmt.Sprintf("layers.%d.bias", i), h)
			in = h
		}
	}
	return out
}

// Model is a checkpoint's content: the parameters of an architecture in a
// given dtype, optionally with optimizer state, optionally scaled down.
type Model struct {
	Name      string // preset name, config path or "synthetic"
	Arch      Arch
	Optimizer string  // none | adam | adam_mixed
	Scale     float64 // 1 = full size
	Params    int64   // parameters of the full-size model
	// Tensors are the parameters, in state-dict order, then the
	// optimizer's tensors, parameter by parameter.
	Tensors []Tensor
	Step    int64        // the optimizer's step count (Adam's "step")
	params  []paramState // optimizer state of each parameter
	nparams int
	id      string
}

// Build returns the model's tensors: the parameters, then the optimizer
// state of each parameter, in the order optimizer.state_dict() holds it:
//
//   - adam (torch.optim.Adam): a float32 scalar step, exp_avg and
//     exp_avg_sq in the parameter's dtype (2 x the parameter bytes + 4);
//   - adam_mixed: the step, fp32 exp_avg and exp_avg_sq, then every
//     parameter's fp32 master copy (12 bytes per parameter + 4).
//
// Optimizer tensors are named by the key DCP flattens them to
// (optimizer.state.<param>.exp_avg, optimizer.fp32_from_fp16_params.<param>),
// which also names them in errors. scale (0 < scale <= 1) shrinks every
// tensor's leading dimension, rounding up, so a small machine keeps the
// tensor list and the shape of the I/O at a fraction of the bytes.
func Build(name string, a Arch, optimizer string, scale float64) (*Model, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	if !(scale > 0 && scale <= 1) {
		return nil, fmt.Errorf("ckpt: scale %v out of range (0 < scale <= 1)", scale)
	}
	params := a.Tensors()
	if scale < 1 {
		for i := range params {
			t := &params[i]
			sh := append([]int64(nil), t.Shape...)
			sh[0] = max(1, int64(math.Ceil(float64(sh[0])*scale)))
			t.Shape = sh
		}
	}
	m := &Model{Name: name, Arch: a, Optimizer: optimizer, Scale: scale, Step: DefaultStep}
	for _, t := range a.Tensors() {
		m.Params += t.Elems()
	}
	m.Tensors = params
	switch optimizer {
	case OptNone, "":
		m.Optimizer = OptNone
	case OptAdam, OptAdamMixed:
		stateDT := func(t Tensor) DType {
			if optimizer == OptAdamMixed {
				return F32
			}
			return t.DType
		}
		step := float32Bytes(float32(m.Step))
		for _, t := range params {
			p := "optimizer.state." + t.Name + "."
			ps := paramState{step: len(m.Tensors), master: -1}
			m.Tensors = append(m.Tensors,
				Tensor{Name: p + "step", Shape: []int64{}, DType: F32, Value: step},
				Tensor{Name: p + "exp_avg", Shape: t.Shape, DType: stateDT(t)},
				Tensor{Name: p + "exp_avg_sq", Shape: t.Shape, DType: stateDT(t)})
			ps.expAvg, ps.expAvgSq = ps.step+1, ps.step+2
			m.params = append(m.params, ps)
		}
		if optimizer == OptAdamMixed {
			for i, t := range params {
				m.params[i].master = len(m.Tensors)
				m.Tensors = append(m.Tensors, Tensor{Name: "optimizer.fp32_from_fp16_params." + t.Name, Shape: t.Shape, DType: F32})
			}
		}
	default:
		return nil, fmt.Errorf("ckpt: unknown optimizer %q (allowed: %s)", optimizer, strings.Join(Optimizers, ", "))
	}
	m.nparams = len(params)
	h := sha256.New()
	var b [8]byte
	h.Write([]byte(m.Optimizer))
	for _, t := range m.Tensors {
		h.Write([]byte(t.Name))
		h.Write([]byte{0})
		h.Write([]byte(t.DType))
		for _, d := range t.Shape {
			binary.LittleEndian.PutUint64(b[:], uint64(d))
			h.Write(b[:])
		}
		h.Write(t.Value)
	}
	m.id = hex.EncodeToString(h.Sum(nil)[:12])
	return m, nil
}

func float32Bytes(f float32) []byte {
	return binary.LittleEndian.AppendUint32(nil, math.Float32bits(f))
}

// ID identifies the tensor list (names, shapes, dtypes): two models with
// the same ID have checkpoints of the same layout.
func (m *Model) ID() string { return m.id }

// Bytes is the checkpoint's tensor payload cut from the pool: every
// tensor's bytes except literal values (Adam's steps, 4 bytes per
// parameter tensor, which a layout writes with the headers). A layout's
// Payload is the same figure.
func (m *Model) Bytes() int64 {
	var n int64
	for _, t := range m.Tensors {
		if t.Value == nil {
			n += t.Bytes()
		}
	}
	return n
}

// TensorBytes is every tensor's bytes, literal values included.
func (m *Model) TensorBytes() int64 {
	var n int64
	for _, t := range m.Tensors {
		n += t.Bytes()
	}
	return n
}

// String describes the model for logs and metrics.
func (m *Model) String() string {
	s := fmt.Sprintf("%s (%s, %d params, %s", m.Name, m.Arch.ModelType, m.Params, m.Arch.DType)
	if m.Optimizer != "none" {
		s += ", +" + m.Optimizer
	}
	if m.Scale < 1 {
		s += fmt.Sprintf(", scale %g", m.Scale)
	}
	return s + ")"
}
