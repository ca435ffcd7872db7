package phases

import (
	"strings"
	"testing"
)

// TestPersistDirName: the directory of a persistent output is a pure
// function of kind, name and parameters — the contract that lets a later
// run (another prism version, another host) find what an earlier one kept
// — and other parameters or another kind give another directory.
func TestPersistDirName(t *testing.T) {
	type params struct {
		Sizes []int64 `json:"sizes"`
		Seed  int64   `json:"seed"`
	}
	a, ha, raw := PersistDirName("dataset", "tiny", params{[]int64{8192}, 1})
	if a != "tiny-"+ha || len(ha) != 12 || string(raw) != `{"sizes":[8192],"seed":1}` {
		t.Fatalf("%s %s %s", a, ha, raw)
	}
	// Pinned: a change here orphans every kept dataset.
	if ha != "a32bb34f2c27" {
		t.Errorf("hash of tiny's parameters changed: %s", ha)
	}
	if b, _, _ := PersistDirName("dataset", "tiny", params{[]int64{8192}, 2}); b == a {
		t.Errorf("another seed, the same directory %s", b)
	}
	if c, _, _ := PersistDirName("checkpoint", "tiny", params{[]int64{8192}, 1}); c == a {
		t.Errorf("another kind, the same directory %s", c)
	}
}

func TestCheckPersistName(t *testing.T) {
	for _, ok := range []string{"tiny", "unet3d_h100.v2", "A1"} {
		if err := CheckPersistName("persist", ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a-b", "../x", ".x", "_x", "a/b", strings.Repeat("x", 65)} {
		err := CheckPersistName("persist", bad)
		if err == nil || !strings.HasPrefix(err.Error(), "persist: ") {
			t.Errorf("%q: error %v, want one naming persist", bad, err)
		}
	}
}
