package phases

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

type paramValuerString string

func (p paramValuerString) ParamValue() any { return p == "yes" }

// TestParamValues: each TOML type keeps its JSON type; a size or duration
// keeps the form written when it still says the value, and prism's form
// when the phase resolved it to something else or the plan did not set it;
// unset pointers and empty arrays are left out.
func TestParamValues(t *testing.T) {
	cfg := struct {
		Count   int               `toml:"count"`
		Ratio   float64           `toml:"ratio"`
		On      bool              `toml:"on"`
		Name    string            `toml:"name"`
		BS      Size              `toml:"bs"`
		Rounded Size              `toml:"rounded"`
		Default Size              `toml:"default"`
		Wait    Duration          `toml:"wait"`
		Limit   *Rate             `toml:"limit"`
		Unset   *Duration         `toml:"unset"`
		List    []Size            `toml:"list"`
		Empty   []string          `toml:"empty"`
		Auto    paramValuerString `toml:"auto"`
		Sub     struct {
			Depth int `toml:"depth"`
		} `toml:"sub"`
		hidden int
	}{Count: 3, Ratio: 0.5, On: true, Name: "random", BS: 4000, Rounded: 8192, Default: 1 << 20, Wait: Duration(5 * time.Second),
		Limit: func() *Rate { r := Rate(1e6); return &r }(), List: []Size{4000, 512}, Auto: "yes"}
	cfg.Sub.Depth = 2
	raw := map[string]any{"count": int64(3), "bs": "4KB", "rounded": "5000", "wait": "5s", "limit": "1MB/s",
		"list": []any{"4KB", int64(512)}, "sub": map[string]any{"depth": int64(2)}}
	out := map[string]any{}
	paramWriter{1000}.params(reflect.ValueOf(cfg), raw, out)
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"auto":true,"bs":{"bytes":4000,"text":"4KB"},"count":3,"default":{"bytes":1048576,"text":"1MiB"},` +
		`"limit":{"bytes_per_sec":1000000,"text":"1MB/s"},"list":[{"bytes":4000,"text":"4KB"},{"bytes":512,"text":"512"}],` +
		`"name":"random","on":true,"ratio":0.5,"rounded":{"bytes":8192,"text":"8KiB"},"sub":{"depth":2},"wait":{"ns":5000000000,"text":"5s"}}`
	if string(b) != want {
		t.Errorf("params\n got %s\nwant %s", b, want)
	}
	// With kb_base 1024, "4KB" is 4096 bytes, so it no longer says 4000.
	out = map[string]any{}
	paramWriter{1024}.params(reflect.ValueOf(cfg), raw, out)
	if bs := out["bs"].(map[string]any); bs["text"] != "4000" {
		t.Errorf("bs at kb_base 1024 = %v, want prism's form of 4000 bytes", bs)
	}
}
