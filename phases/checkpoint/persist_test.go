package checkpoint

import (
	"strings"
	"testing"

	"github.com/prism-hpc/prism/phases"
)

// TestPersistKeyErrors: persist and checkpoint are refused where they
// contradict the counts or each other, naming the key.
func TestPersistKeyErrors(t *testing.T) {
	base := "[[phase]]\nkind = \"mlperf_checkpoint\"\nscale = 0.00002\n"
	for _, tc := range []struct{ body, want string }{
		{"num_checkpoints_write = 0\npersist = \"a\"", "persist: a run that writes no checkpoint"},
		{"persist = \"a\"\ncheckpoint = \"b\"", "checkpoint: persist (a write run) and checkpoint"},
		{"persist = \"a\"\nkeep = false", "keep: persist keeps"},
		{"checkpoint = \"b\"", "checkpoint: reads a kept checkpoint in a read-only run"},
		{"num_checkpoints_write = 0\ncheckpoint = \"../b\"", "checkpoint: \"../b\""},
		{"persist = \"a-b\"", "persist: \"a-b\""},
	} {
		_, err := phases.DecodePlan(registry(), "p.toml", []byte(base+tc.body+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.body, err, tc.want)
		}
	}
	if _, err := phases.DecodePlan(registry(), "p.toml", []byte(base+"num_checkpoints_write = 0\ncheckpoint = \"b\"\n")); err != nil {
		t.Errorf("a read-only run of a kept checkpoint: %v", err)
	}
}
