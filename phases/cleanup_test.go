package phases

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/spmd"
)

// TestCleanupNeverLeavesTheRunDir: a symlink inside the run directory that
// points outside is removed as a link; its target and the target's files
// survive. A run directory whose marker names another run is not removed.
func TestCleanupNeverLeavesTheRunDir(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(root, "outside")
	os.Mkdir(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "precious"), []byte("x"), 0o644)

	run := filepath.Join(root, "prism-r1")
	os.MkdirAll(filepath.Join(run, "01-x", "r0"), 0o755)
	os.WriteFile(filepath.Join(run, RunMarker), []byte("r1\n"), 0o644)
	os.Symlink(outside, filepath.Join(run, "01-x", "r0", "link"))
	os.Symlink(filepath.Join(outside, "precious"), filepath.Join(run, "filelink"))

	open := func(id, dir string, h Header) *engine {
		wd, err := pio.OpenDir(root)
		if err != nil {
			t.Fatal(err)
		}
		rd, err := wd.OpenSub(filepath.Base(dir))
		if err != nil {
			t.Fatal(err)
		}
		return &engine{o: Options{Plan: &Plan{Header: h}, Stderr: io.Discard}, comm: spmd.NewSingle(), runID: id, runDir: dir, ownDir: true, wd: wd, run: rd}
	}
	e := open("r1", run, Header{})
	e.cleanup(context.Background())
	if _, err := os.Lstat(run); !os.IsNotExist(err) {
		t.Fatalf("run directory still there: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "precious")); err != nil || string(b) != "x" {
		t.Fatalf("cleanup followed a symlink out of the run directory: %v", err)
	}

	other := filepath.Join(root, "prism-r2")
	os.Mkdir(other, 0o755)
	os.WriteFile(filepath.Join(other, RunMarker), []byte("somebody-else\n"), 0o644)
	e = open("r2", other, Header{})
	e.cleanup(context.Background())
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("a directory marked for another run was removed: %v", err)
	}
	// keep = true leaves everything.
	e = open("somebody-else", other, Header{Keep: true})
	e.cleanup(context.Background())
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("keep = true removed the run directory: %v", err)
	}
}

func TestCheckWorkdirRefusals(t *testing.T) {
	home, _ := os.UserHomeDir()
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	for _, dir := range []string{"/", "/home", home, file, "/nonexistent-prism"} {
		if dir == "" {
			continue
		}
		if _, err := CheckWorkdir(dir, false); err == nil {
			t.Errorf("CheckWorkdir(%q) accepted", dir)
		}
	}
	if _, err := CheckWorkdir(t.TempDir(), false); err != nil {
		t.Errorf("a scratch directory refused: %v", err)
	}
}
