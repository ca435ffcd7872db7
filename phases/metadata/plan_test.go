package metadata

import (
	"errors"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/phases"
)

const goodPlan = `
[plan]
name = "t"
drop_caches = "none"

[[phase]]
kind = "create_files"
count = 10
size = "4KiB"

[[phase]]
kind = "folder_bench"
name = "tree"
depth = 2
breadth = 3
ranks = [1, 2]
[phase.expect]
p99 = "1s"
min_bandwidth = "1MiB/s"
`

func TestDecodeGoodPlan(t *testing.T) {
	p, err := phases.DecodePlan(registry(), "good.toml", []byte(goodPlan))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Phases) != 2 || p.Header.Name != "t" || p.Header.DropCaches != "none" {
		t.Fatalf("%+v", p.Header)
	}
	c := p.Phases[0].Phase.Config().(*metaConfig)
	if c.Count != 10 || c.Size != 4096 || p.Phases[0].Name != "create_files" || p.Phases[0].Iterations != 1 {
		t.Fatalf("create_files decoded as %+v name %q", c, p.Phases[0].Name)
	}
	f := p.Phases[1]
	if f.Name != "tree" || len(f.Ranks) != 2 || f.Ranks[1] != 2 || f.Expect == nil || f.Expect.P99 == nil || *f.Expect.MinBandwidth != 1<<20 {
		t.Fatalf("folder_bench spec %+v", f)
	}
	if fc := f.Phase.Config().(*folderConfig); fc.Depth != 2 || fc.Breadth != 3 || fc.FilesPerDir != 8 {
		t.Fatalf("defaults not kept: %+v", fc)
	}
}

// A plan of more than phases.MaxPhases phases is refused, naming the line
// of the first phase past the limit, before any phase is decoded; one of
// exactly MaxPhases is a plan like any other.
func TestDecodePlanPhaseLimit(t *testing.T) {
	var b strings.Builder
	b.WriteString("[plan]\nname = \"many\"\n")
	phase := "[[phase]]\nkind = \"create_files\"\ncount = 1\n"
	for range phases.MaxPhases {
		b.WriteString(phase)
	}
	p, err := phases.DecodePlan(registry(), "many.toml", []byte(b.String()))
	if err != nil || len(p.Phases) != phases.MaxPhases {
		t.Fatalf("%d phases: %v", phases.MaxPhases, err)
	}
	b.WriteString(phase)
	_, err = phases.DecodePlan(registry(), "many.toml", []byte(b.String()))
	var pe *phases.PlanError
	if !errors.As(err, &pe) || pe.Line != 3+3*phases.MaxPhases || pe.Phase != phases.MaxPhases+1 ||
		!strings.Contains(err.Error(), "many.toml") || !strings.Contains(err.Error(), "at most 10000") {
		t.Fatalf("%d phases: %#v", phases.MaxPhases+1, err)
	}
}
