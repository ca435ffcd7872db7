package all

import (
	"context"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/io/s3/s3test"
	"github.com/prism-hpc/prism/phases/phasestest"
)

// Every kind prism ships keeps the Phase contract; the object family's
// against a real S3 server (VersityGW), whose bucket must hold nothing
// afterwards but what was there before.
func TestConformance(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	c := srv.Client(t, "conformance")
	if err := c.Put(context.Background(), "before/keep-me", []byte("x")); err != nil {
		t.Fatal(err)
	}
	phasestest.ConformanceWith(t, Registry(), srv.PlanLines("conformance", "runs"))
	if keys := s3test.Keys(t, c); !slices.Equal(keys, []string{"before/keep-me"}) {
		t.Errorf("the bucket holds %v after the runs, want only the object placed before", keys)
	}
}

const module = "github.com/prism-hpc/prism/"

// notFamilies are the folders under phases/ that hold no phase family.
var notFamilies = []string{"all", "bench", "ckpt", "phasestest"}

// TestFamiliesImportNoSibling enforces the layout rule phases/doc.go
// states: a family imports the framework (phases), phases/ckpt, io,
// report, spmd and the standard library (its tests also phasestest and
// examples), never another family, so that a family can move, grow or go
// without touching the others.
func TestFamiliesImportNoSibling(t *testing.T) {
	ents, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{"phases", "phases/ckpt", "io", "report", "spmd"}
	families := 0
	for _, e := range ents {
		if !e.IsDir() || slices.Contains(notFamilies, e.Name()) {
			continue
		}
		families++
		files, _ := filepath.Glob(filepath.Join("..", e.Name(), "*.go"))
		for _, f := range files {
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			ok := allowed
			if strings.HasSuffix(f, "_test.go") {
				ok = append(slices.Clone(allowed), "phases/phasestest", "examples")
			}
			for _, imp := range af.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				rel, inModule := strings.CutPrefix(path, module)
				if !inModule {
					continue
				}
				helper := strings.HasSuffix(f, "_test.go") && strings.HasPrefix(rel, "internal/")
				if !slices.Contains(ok, rel) && !strings.HasPrefix(rel, "io/") && !helper {
					t.Errorf("%s imports %s: a family may import only %s, io/… (and its tests internal/…; see phases/doc.go)", f, path, strings.Join(ok, ", "))
				}
			}
		}
	}
	if families < 5 {
		t.Fatalf("found %d family folders under phases/, want at least 5", families)
	}
}
