package all

import (
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prism-hpc/prism/examples"
	"github.com/prism-hpc/prism/phases"
)

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
		{"two workdirs", "[plan]\nworkdir = \"/a\"\nnode_local_workdir = \"/b\"\n[[phase]]\nkind = \"create_files\"\n", []string{"bad.toml:3:1", "node_local_workdir", "give one"}},
		{"nodes and ranks", "[[phase]]\nkind = \"create_files\"\nranks = 2\nnodes = 1\n", []string{"bad.toml:4:1", "nodes", "give one"}},
		{"decreasing node sweep", "[[phase]]\nkind = \"create_files\"\nnodes = [2, 1]\n", []string{"bad.toml:3:1", "nodes", "increase"}},
		{"duplicate names", "[[phase]]\nkind = \"create_files\"\nname = \"a\"\n[[phase]]\nkind = \"list_files\"\nname = \"a\"\n", []string{"bad.toml:4", "same name"}},
		{"tree too big", "[[phase]]\nkind = \"folder_bench\"\ndepth = 20\nbreadth = 10\n", []string{"breadth", "directories"}},
		{"phase not array", "phase = 3\n", []string{"phase", "[[phase]]"}},
		{"storage for a posix kind", "[plan]\nstorage = \"s3://bucket/p\"\n[[phase]]\nkind = \"s3_put\"\n[[phase]]\nkind = \"create_files\"\n", []string{"bad.toml:2:1", "plan.storage", "phase 2 (create_files)", "does not run over object storage"}},
		{"bad storage", "[plan]\nstorage = \"s3://B/\"\n[[phase]]\nkind = \"s3_put\"\n", []string{"bad.toml:2:1", "plan.storage", "bucket name"}},
		{"credentials key", "[[phase]]\nkind = \"s3_put\"\ns3_secret_key = \"x\"\n", []string{"bad.toml:3:1", "s3_secret_key", "unknown key"}},
		{"bad kb_base", "[plan]\nname = \"x\"\nkb_base = 1042\n[[phase]]\nkind = \"create_files\"\n", []string{"bad.toml:3:1", "plan.kb_base", "1024", "1000"}},
		{"kb_base not a number", "[plan]\nkb_base = \"1000\"\n[[phase]]\nkind = \"create_files\"\n", []string{"bad.toml:2:1", "plan.kb_base", "integer"}},
		{"bad size in a list", "[[phase]]\nkind = \"create_dataset\"\nsizes = [\"4KiB\", \"4XB\"]\n", []string{"bad.toml:3:1", "sizes", "element 2", "bad size"}},
		{"bad plan name", "[plan]\nname = \"../x\"\n[[phase]]\nkind = \"create_files\"\n", []string{"bad.toml:2:1", "plan.name"}},
		// A huge value is quoted clipped: the start, how much is left out,
		// and the end with what to do (the test below bounds the length).
		{"huge plan name", "[plan]\nname = \"" + strings.Repeat("x/", 1<<19) + "\"\n[[phase]]\nkind = \"create_files\"\n", []string{"bad.toml:2:1", "plan.name", "bytes left out", "use letters, digits"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := phases.DecodePlan(Registry(), "bad.toml", []byte(tc.plan))
			if err == nil {
				t.Fatal("accepted")
			}
			var pe *phases.PlanError
			if !errors.As(err, &pe) {
				t.Fatalf("%T is not a *PlanError: %v", err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %.300q does not mention %q", err, w)
				}
			}
			if n := len(err.Error()); n > 5000 {
				t.Errorf("a %d-byte error: messages quote values clipped", n)
			}
		})
	}
}

// TestKBBase: K and KB are 1024-based as fio reads them unless [plan]
// kb_base = 1000 says otherwise; KiB is 1024-based either way. The base
// reaches every size of the plan: [plan] max_memory, a phase's own sizes,
// lists of sizes and [phase.expect] min_bandwidth.
func TestKBBase(t *testing.T) {
	const body = `
max_memory = "1GB"
[[phase]]
kind = "create_files"
size = "4KB"
[phase.expect]
min_bandwidth = "1MB/s"
[[phase]]
kind = "create_files"
size = "4KiB"
[[phase]]
kind = "create_dataset"
sizes = ["8KB", "1MiB", 512]
`
	for _, tc := range []struct {
		header                  string
		kb, mem, bw, kib, sizes int64
	}{
		{"[plan]\n", 4096, 1 << 30, 1 << 20, 4096, 8192},
		{"[plan]\nkb_base = 1024\n", 4096, 1 << 30, 1 << 20, 4096, 8192},
		{"[plan]\nkb_base = 1000\n", 4000, 1e9, 1e6, 4096, 8000},
	} {
		p, err := phases.DecodePlan(Registry(), "kb.toml", []byte(tc.header+body))
		if err != nil {
			t.Fatalf("%q: %v", tc.header, err)
		}
		size := func(i int) int64 {
			return reflect.ValueOf(p.Phases[i].Phase.Config()).Elem().FieldByName("Size").Int()
		}
		sizes := reflect.ValueOf(p.Phases[2].Phase.Config()).Elem().FieldByName("Sizes").Interface().([]phases.Size)
		got := []int64{size(0), int64(p.Header.MaxMemory), int64(*p.Phases[0].Expect.MinBandwidth), size(1), int64(sizes[0])}
		want := []int64{tc.kb, tc.mem, tc.bw, tc.kib, tc.sizes}
		if !slices.Equal(got, want) {
			t.Errorf("%q: size, max_memory, min_bandwidth, KiB size, sizes[0] = %v, want %v", tc.header, got, want)
		}
		if sizes[1] != 1<<20 || sizes[2] != 512 {
			t.Errorf("%q: sizes = %v", tc.header, sizes)
		}
	}
}

func TestUnnamedPhasesGetUniqueNames(t *testing.T) {
	p, err := phases.DecodePlan(Registry(), "x", []byte("[[phase]]\nkind = \"create_files\"\n[[phase]]\nkind = \"create_files\"\n[[phase]]\nkind = \"list_files\"\n"))
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
		if _, err := phases.DecodePlan(Registry(), n, b); err != nil {
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
		p, err := phases.DecodePlan(Registry(), "fuzz.toml", b)
		if err == nil && (p == nil || len(p.Phases) == 0) {
			t.Fatal("nil error without phases")
		}
		if err != nil {
			var pe *phases.PlanError
			if !errors.As(err, &pe) {
				t.Fatalf("%T: %v", err, err)
			}
		}
	})
}
