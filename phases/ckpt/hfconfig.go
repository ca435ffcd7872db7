package ckpt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// hfConfig holds the config.json keys prism reads; pointers tell a missing
// key from a zero. Every other key is ignored.
type hfConfig struct {
	ModelType    *string `json:"model_type"`
	Hidden       *int64  `json:"hidden_size"`
	FFN          *int64  `json:"intermediate_size"`
	Layers       *int64  `json:"num_hidden_layers"`
	Heads        *int64  `json:"num_attention_heads"`
	KVHeads      *int64  `json:"num_key_value_heads"`
	HeadDim      *int64  `json:"head_dim"`
	Vocab        *int64  `json:"vocab_size"`
	Tie          *bool   `json:"tie_word_embeddings"`
	MaxPositions *int64  `json:"max_position_embeddings"`
	TypeVocab    *int64  `json:"type_vocab_size"`
	TorchDType   *string `json:"torch_dtype"`
	DType        *string `json:"dtype"` // transformers >= 4.56 writes this instead of torch_dtype
	// gpt2
	NEmbd      *int64 `json:"n_embd"`
	NLayer     *int64 `json:"n_layer"`
	NHead      *int64 `json:"n_head"`
	NPositions *int64 `json:"n_positions"`
	NInner     *int64 `json:"n_inner"`
}

// HFModelTypes are the config.json model_type values prism understands.
var HFModelTypes = []string{"llama", "mistral", "qwen2", "gpt2", "bert"}

// ParseHFConfig reads a HuggingFace config.json into an architecture whose
// Tensors are the names and shapes the model's safetensors files hold.
// It is external input: every error says which key is wrong.
func ParseHFConfig(b []byte) (Arch, error) {
	var c hfConfig
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&c); err != nil {
		return Arch{}, fmt.Errorf("ckpt: config.json: %w", err)
	}
	if c.ModelType == nil {
		return Arch{}, fmt.Errorf("ckpt: config.json: no model_type (supported: %s)", strings.Join(HFModelTypes, ", "))
	}
	var missing []string
	need := func(key string, p *int64) int64 {
		if p == nil {
			missing = append(missing, key)
			return 0
		}
		return *p
	}
	or := func(p *int64, def int64) int64 {
		if p == nil {
			return def
		}
		return *p
	}
	a := Arch{ModelType: *c.ModelType, DType: F32}
	switch a.ModelType {
	case "llama", "mistral", "qwen2":
		a.Family = FamilyLlama
		a.Hidden = need("hidden_size", c.Hidden)
		a.FFN = need("intermediate_size", c.FFN)
		a.Layers = need("num_hidden_layers", c.Layers)
		a.Heads = need("num_attention_heads", c.Heads)
		a.Vocab = need("vocab_size", c.Vocab)
		a.KVHeads = or(c.KVHeads, a.Heads)
		a.Positions = or(c.MaxPositions, 0)
		a.QKVBias = a.ModelType == "qwen2"
		if c.Tie != nil {
			a.Tie = *c.Tie
		}
		if a.Heads > 0 {
			a.HeadDim = or(c.HeadDim, a.Hidden/a.Heads)
			if c.HeadDim == nil && a.Hidden%a.Heads != 0 {
				return Arch{}, archErr("hidden_size %d is not a multiple of num_attention_heads %d and config.json gives no head_dim", a.Hidden, a.Heads)
			}
		}
	case "gpt2":
		a.Family = FamilyGPT2
		a.Hidden = or(c.NEmbd, 768)
		a.Layers = or(c.NLayer, 12)
		a.Heads = or(c.NHead, 12)
		a.KVHeads = a.Heads
		a.Vocab = or(c.Vocab, 50257)
		a.Positions = or(c.NPositions, 1024)
		a.FFN = or(c.NInner, 4*a.Hidden)
		a.Tie = true
		if a.Heads > 0 {
			a.HeadDim = a.Hidden / a.Heads
		}
	case "bert":
		a.Family = FamilyBert
		a.Hidden = or(c.Hidden, 768)
		a.FFN = or(c.FFN, 3072)
		a.Layers = or(c.Layers, 12)
		a.Heads = or(c.Heads, 12)
		a.KVHeads = a.Heads
		a.Vocab = or(c.Vocab, 30522)
		a.Positions = or(c.MaxPositions, 512)
		a.TypeVocab = or(c.TypeVocab, 2)
		if a.Heads > 0 {
			a.HeadDim = a.Hidden / a.Heads
		}
	default:
		return Arch{}, fmt.Errorf("ckpt: config.json: model_type %q not supported (supported: %s)", a.ModelType, strings.Join(HFModelTypes, ", "))
	}
	if len(missing) > 0 {
		return Arch{}, fmt.Errorf("ckpt: config.json: model_type %s needs %s", a.ModelType, strings.Join(missing, ", "))
	}
	dt := c.TorchDType
	if dt == nil {
		dt = c.DType
	}
	if dt != nil {
		d, err := ParseDType(*dt)
		if err != nil {
			return Arch{}, fmt.Errorf("ckpt: config.json: torch_dtype: %w", err)
		}
		a.DType = d
	}
	if err := a.Validate(); err != nil {
		return Arch{}, fmt.Errorf("ckpt: config.json: %w", err)
	}
	return a, nil
}
