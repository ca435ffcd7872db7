package phases

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/prism-hpc/prism/examples"
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
	p, err := DecodePlan(Default(), "good.toml", []byte(goodPlan))
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

// TestPlanErrors: each malformed plan is a *PlanError whose text names the
// offending key or line, so the user can fix it without guessing.
func TestPlanErrors(t *testing.T) {
	cases := []struct {
		name, plan string
		want       []string // substrings of the error
	}{
		{"syntax", "[[phase]\nkind = 1", []string{"bad.toml:2:", "delimiter"}},
		{"empty", "", []string{"no [[phase]]"}},
		{"only header", "[plan]\nname = \"x\"\n", []string{"no [[phase]]"}},
		{"unknown top key", "foo = 1\n[[phase]]\nkind = \"create_files\"\n", []string{"bad.toml:1:1", "foo", "unknown top-level key"}},
		{"unknown plan key", "[plan]\nnmae = \"x\"\n[[phase]]\nkind = \"create_files\"\n", []string{"bad.toml:2:1", "plan.nmae", "allowed:", "name"}},
		{"missing kind", "[[phase]]\ncount = 3\n", []string{"bad.toml:1", "kind: missing", "create_files"}},
		{"unknown kind", "[[phase]]\nkind = \"crate_files\"\n", []string{"bad.toml:2:1", "unknown kind \"crate_files\"", "allowed: ", "create_files", "folder_bench"}},
		{"unknown key", "[[phase]]\nkind = \"create_files\"\n\n[[phase]]\nkind = \"list_files\"\ncoutn = 5\n", []string{"bad.toml:6:1", "coutn", "phase 2", "allowed:", "count"}},
		{"key of another kind", "[[phase]]\nkind = \"create_files\"\ncount = 3\n[[phase]]\nkind = \"folder_bench\"\ncount = 3\n", []string{"bad.toml:6:1", "count", "folder_bench"}},
		{"wrong type", "[[phase]]\nkind = \"create_files\"\ncount = \"many\"\n", []string{"bad.toml:3:1", "count", "want an integer, got a string"}},
		{"bad unit", "[[phase]]\nkind = \"create_files\"\nsize = \"4KB/s\"\n", []string{"bad.toml:3:1", "size", "bad size"}},
		{"negative size", "[[phase]]\nkind = \"create_files\"\nsize = -1\n", []string{"bad.toml:3:1", "size", "negative"}},
		{"out of range", "[[phase]]\nkind = \"create_files\"\ncount = 0\n", []string{"bad.toml:3:1", "count", "out of range"}},
		{"bad duration", "[[phase]]\nkind = \"create_files\"\n[phase.expect]\np99 = \"5\"\n", []string{"bad.toml:4:1", "expect.p99", "needs a unit"}},
		{"unknown expect key", "[[phase]]\nkind = \"create_files\"\n[phase.expect]\np95 = \"5s\"\n", []string{"expect.p95", "allowed:", "p99"}},
		{"bad policy", "[plan]\ndrop_caches = \"always\"\n[[phase]]\nkind = \"create_files\"\n", []string{"bad.toml:2:1", "drop_caches", "auto, root, fadvise, none"}},
		{"bad clock", "[plan]\nname = \"x\"\nclock = \"rdtsc\"\n[[phase]]\nkind = \"create_files\"\n", []string{"bad.toml:3:1", "plan.clock", "auto, tsc, os"}},
		{"bad iterations", "[[phase]]\nkind = \"create_files\"\niterations = 0\n", []string{"bad.toml:3:1", "iterations"}},
		{"decreasing sweep", "[[phase]]\nkind = \"create_files\"\nranks = [4, 2]\n", []string{"bad.toml:3:1", "ranks", "increase"}},
		{"duplicate names", "[[phase]]\nkind = \"create_files\"\nname = \"a\"\n[[phase]]\nkind = \"list_files\"\nname = \"a\"\n", []string{"bad.toml:4", "same name"}},
		{"tree too big", "[[phase]]\nkind = \"folder_bench\"\ndepth = 20\nbreadth = 10\n", []string{"breadth", "directories"}},
		{"phase not array", "phase = 3\n", []string{"phase", "[[phase]]"}},
		{"bad plan name", "[plan]\nname = \"../x\"\n[[phase]]\nkind = \"create_files\"\n", []string{"bad.toml:2:1", "plan.name"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodePlan(Default(), "bad.toml", []byte(tc.plan))
			if err == nil {
				t.Fatal("accepted")
			}
			var pe *PlanError
			if !errors.As(err, &pe) {
				t.Fatalf("%T is not a *PlanError: %v", err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]Size{"4KiB": 4096, "1MiB": 1 << 20, "1.5GB": 1_500_000_000, "64k": 65536, "4096": 4096, "2 GiB": 2 << 30, "0": 0, "1b": 1}
	for in, want := range good {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "KiB", "4XB", "1.5B", "-1KiB", "nan", "1e30PiB", "inf"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
	if Size(4096).String() != "4KiB" || Size(1000).String() != "1000" {
		t.Error("Size.String")
	}
}

func TestUnnamedPhasesGetUniqueNames(t *testing.T) {
	p, err := DecodePlan(Default(), "x", []byte("[[phase]]\nkind = \"create_files\"\n[[phase]]\nkind = \"create_files\"\n[[phase]]\nkind = \"list_files\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Phases[0].Name != "create_files-1" || p.Phases[1].Name != "create_files-2" || p.Phases[2].Name != "list_files" {
		t.Fatalf("names %q %q %q", p.Phases[0].Name, p.Phases[1].Name, p.Phases[2].Name)
	}
}

func TestExamplesDecode(t *testing.T) {
	names, _ := fs.Glob(examples.FS, "*.toml")
	if len(names) < 2 {
		t.Fatalf("examples: %v", names)
	}
	for _, n := range names {
		b, _ := examples.FS.ReadFile(n)
		if _, err := DecodePlan(Default(), n, b); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}

// FuzzDecodePlan: no input may panic the decoder; a nil error means a
// usable plan.
func FuzzDecodePlan(f *testing.F) {
	names, _ := fs.Glob(examples.FS, "*.toml")
	for _, n := range names {
		b, _ := examples.FS.ReadFile(n)
		f.Add(b)
	}
	f.Add([]byte(goodPlan))
	f.Fuzz(func(t *testing.T, b []byte) {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				panic(fmt.Sprintf("DecodePlan still running after 5s on %q", b))
			}
		}()
		p, err := DecodePlan(Default(), "fuzz.toml", b)
		if err == nil && (p == nil || len(p.Phases) == 0) {
			t.Fatal("nil error without phases")
		}
		if err != nil {
			var pe *PlanError
			if !errors.As(err, &pe) {
				t.Fatalf("%T: %v", err, err)
			}
		}
	})
}
