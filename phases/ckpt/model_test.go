package ckpt

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mustBuild(t *testing.T, name string, a Arch, opt string, scale float64) *Model {
	t.Helper()
	m, err := Build(name, a, opt, scale)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPresetParams checks parameter counts against published figures.
func TestPresetParams(t *testing.T) {
	for _, tc := range []struct {
		name string
		want int64
	}{
		{"gpt2", 124_439_808},        // HF gpt2: 124,439,808 parameters
		{"bert-base", 109_482_240},   // bert-base-uncased BertModel with pooler: 109.48M
		{"llama3-8b", 8_030_261_248}, // Meta-Llama-3-8B: 8.03B
		{"llama3-70b", 70_553_706_496},
		{"llama3-405b", 405_853_388_800},
	} {
		a, ok := Preset(tc.name)
		if !ok {
			t.Fatalf("no preset %s", tc.name)
		}
		m := mustBuild(t, tc.name, a, "none", 1)
		if m.Params != tc.want {
			t.Errorf("%s: %d parameters, want %d", tc.name, m.Params, tc.want)
		}
		if m.Bytes() != tc.want*a.DType.Size() {
			t.Errorf("%s: %d bytes, want %d", tc.name, m.Bytes(), tc.want*a.DType.Size())
		}
	}
}

func TestPresetNames(t *testing.T) {
	a, _ := Preset("llama3-8b")
	ts := a.Tensors()
	if ts[0].Name != "model.embed_tokens.weight" || ts[len(ts)-1].Name != "lm_head.weight" {
		t.Fatalf("first/last tensors %s, %s", ts[0].Name, ts[len(ts)-1].Name)
	}
	want := map[string][]int64{
		"model.layers.0.self_attn.q_proj.weight": {4096, 4096},
		"model.layers.0.self_attn.k_proj.weight": {1024, 4096},
		"model.layers.31.mlp.down_proj.weight":   {4096, 14336},
		"model.norm.weight":                      {4096},
	}
	found := 0
	for _, tn := range ts {
		if w, ok := want[tn.Name]; ok {
			found++
			if !equalShape(tn.Shape, w) {
				t.Errorf("%s: shape %v, want %v", tn.Name, tn.Shape, w)
			}
		}
	}
	if found != len(want) || len(ts) != 32*9+3 {
		t.Fatalf("found %d of %d named tensors, %d tensors in all", found, len(want), len(ts))
	}
	g, _ := Preset("gpt2")
	if ts := g.Tensors(); ts[4].Name != "h.0.attn.c_attn.weight" || !equalShape(ts[4].Shape, []int64{768, 2304}) {
		t.Fatalf("gpt2 tensor 4: %s %v", ts[4].Name, ts[4].Shape)
	}
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestBuildOptimizerAndScale(t *testing.T) {
	a := Synthetic(2, 16, 32, F16)
	// params: 32*16+32 + 32*32+32 = 1600 in 4 tensors.
	for _, tc := range []struct {
		opt     string
		tensors int
		bytes   int64
	}{
		{OptNone, 4, 1600 * 2},
		// torch.optim.Adam: exp_avg, exp_avg_sq in fp16, a float32 step per tensor.
		{OptAdam, 4 * 4, 1600*2*3 + 4*4},
		// mixed precision: fp32 exp_avg, exp_avg_sq and master: 12 bytes/param.
		{OptAdamMixed, 4 * 5, 1600*(2+12) + 4*4},
	} {
		m := mustBuild(t, "synthetic", a, tc.opt, 1)
		if m.Params != 1600 || len(m.Tensors) != tc.tensors || m.TensorBytes() != tc.bytes {
			t.Errorf("%s: params %d, %d tensors, %d bytes; want 1600, %d, %d", tc.opt, m.Params, len(m.Tensors), m.TensorBytes(), tc.tensors, tc.bytes)
		}
		// The steps are literal values: the pool-cut payload leaves them out.
		payload := tc.bytes
		if tc.opt != OptNone {
			payload -= 4 * 4 // four float32 steps
		}
		if m.Bytes() != payload {
			t.Errorf("%s: payload %d bytes, want %d", tc.opt, m.Bytes(), payload)
		}
	}
	m := mustBuild(t, "synthetic", a, OptAdam, 1)
	if m.Tensors[4].Name != "optimizer.state.layers.0.weight.step" || m.Tensors[4].DType != F32 || len(m.Tensors[4].Shape) != 0 ||
		m.Tensors[5].DType != F16 || m.Tensors[5].Name != "optimizer.state.layers.0.weight.exp_avg" {
		t.Fatalf("adam tensors: %+v %+v", m.Tensors[4], m.Tensors[5])
	}
	s := mustBuild(t, "synthetic", a, OptAdam, 0.1)
	if s.Tensors[0].Shape[0] != 4 || s.Tensors[0].Shape[1] != 16 || s.Tensors[5].Shape[0] != 4 { // ceil(32*0.1)
		t.Fatalf("scaled shapes %v, %v", s.Tensors[0].Shape, s.Tensors[5].Shape)
	}
	if s.ID() == m.ID() || mustBuild(t, "synthetic", a, OptAdamMixed, 1).ID() == m.ID() {
		t.Fatal("a scaled model, or another optimizer, has the same ID")
	}
	if _, err := Build("x", a, "sgd", 1); err == nil || !strings.Contains(err.Error(), "adam_mixed") {
		t.Fatalf("unknown optimizer: %v", err)
	}
	if _, err := Build("x", a, "none", 0); err == nil {
		t.Fatal("scale 0 accepted")
	}
}

func TestParseHFConfig(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		params     int64
		check      func(t *testing.T, ts []Tensor)
	}{
		{"llama", `{"model_type":"llama","hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"vocab_size":128256,"tie_word_embeddings":false,"torch_dtype":"bfloat16"}`, 8_030_261_248, nil},
		{"qwen2 tied with biases", `{"model_type":"qwen2","hidden_size":896,"intermediate_size":4864,"num_hidden_layers":24,"num_attention_heads":14,"num_key_value_heads":2,"vocab_size":151936,"tie_word_embeddings":true,"torch_dtype":"bfloat16"}`,
			494_032_768, // Qwen2-0.5B
			func(t *testing.T, ts []Tensor) {
				if ts[2].Name != "model.layers.0.self_attn.q_proj.bias" || ts[len(ts)-1].Name != "model.norm.weight" {
					t.Errorf("qwen2 names: %s ... %s", ts[2].Name, ts[len(ts)-1].Name)
				}
			}},
		{"gpt2", `{"model_type":"gpt2","n_embd":768,"n_layer":12,"n_head":12,"n_positions":1024,"vocab_size":50257}`, 124_439_808, nil},
		{"bert", `{"model_type":"bert","hidden_size":768,"num_hidden_layers":12,"num_attention_heads":12,"intermediate_size":3072,"vocab_size":30522,"max_position_embeddings":512,"type_vocab_size":2}`, 109_482_240, nil},
		{"mistral head_dim", `{"model_type":"mistral","hidden_size":5120,"intermediate_size":14336,"num_hidden_layers":40,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,"vocab_size":131072,"dtype":"bfloat16"}`,
			12_247_782_400, nil}, // Mistral-Nemo-12B
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseHFConfig([]byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			m := mustBuild(t, tc.name, a, "none", 1)
			if m.Params != tc.params {
				t.Errorf("%d params, want %d", m.Params, tc.params)
			}
			if tc.check != nil {
				tc.check(t, m.Tensors)
			}
		})
	}
	for _, bad := range []struct{ json, want string }{
		{`{`, "config.json"},
		{`{"hidden_size": 8}`, "no model_type"},
		{`{"model_type":"t5"}`, "not supported"},
		{`{"model_type":"llama","hidden_size":64}`, "needs intermediate_size"},
		{`{"model_type":"llama","hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":3,"vocab_size":8}`, "not a multiple"},
		{`{"model_type":"llama","hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":3,"vocab_size":8}`, "must divide"},
		{`{"model_type":"llama","hidden_size":-64,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":8}`, "out of range"},
		{`{"model_type":"gpt2","torch_dtype":"int8"}`, "dtype"},
	} {
		_, err := ParseHFConfig([]byte(bad.json))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want one containing %q", bad.json, err, bad.want)
		}
	}
}

// FuzzParseHFConfig: config.json is external input. No input may panic
// the parser or the tensor builder, and an accepted config must build a
// model whose sizes add up.
func FuzzParseHFConfig(f *testing.F) {
	for _, s := range []string{
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256}`,
		`{"model_type":"qwen2","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256,"tie_word_embeddings":true}`,
		`{"model_type":"gpt2","n_embd":64,"n_layer":2,"n_head":4}`,
		`{"model_type":"bert","hidden_size":64,"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":32}`,
		`{"model_type":"mistral","hidden_size":1e3}`, `[]`, `null`, `{"model_type":7}`,
	} {
		f.Add([]byte(s))
	}
	if files, _ := filepath.Glob(filepath.Join("..", "testdata", "*config*.json")); len(files) > 0 {
		for _, p := range files {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseHFConfig(b)
		if err != nil {
			if !json.Valid(b) || errors.Is(err, ErrArch) || strings.HasPrefix(err.Error(), "ckpt: config.json") {
				return
			}
			t.Fatalf("error without context: %v", err)
		}
		// Keep the fuzzer fast: shrink huge models before building.
		scale := 1.0
		if a.Vocab*a.Hidden > 1<<24 || a.Layers*a.Hidden*a.FFN > 1<<26 {
			scale = 1e-6
		}
		m, err := Build("fuzz", a, "adam", scale)
		if err != nil {
			t.Fatalf("accepted config does not build: %v", err)
		}
		var sum int64
		for _, tn := range m.Tensors {
			if tn.Bytes() <= 0 || tn.Name == "" {
				t.Fatalf("tensor %q has %d bytes", tn.Name, tn.Bytes())
			}
			sum += tn.Bytes()
		}
		if sum != m.TensorBytes() || m.Params <= 0 {
			t.Fatalf("bytes %d vs %d, params %d", sum, m.TensorBytes(), m.Params)
		}
	})
}
