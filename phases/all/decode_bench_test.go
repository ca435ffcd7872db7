package all

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/phases"
)

// BenchmarkDecodePlan10k decodes a plan of 10,000 phases, the size a
// generated parameter sweep reaches: `prism check` of it must take well
// under a second.
func BenchmarkDecodePlan10k(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("[plan]\nname = \"big\"\n")
	for i := range 10000 {
		fmt.Fprintf(&sb, "[[phase]]\nkind = \"create_files\"\nname = \"p%d\"\ncount = 10\nsize = \"4KiB\"\n[phase.expect]\np99 = \"10ms\"\n", i)
	}
	src := []byte(sb.String())
	reg := Registry()
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := phases.DecodePlan(reg, "big.toml", src); err != nil {
			b.Fatal(err)
		}
	}
}
