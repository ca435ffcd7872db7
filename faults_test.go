package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount, chattr); CI runs as root")
	}
}

// mountTmpfs mounts a size-limited tmpfs on a fresh directory.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	needRoot(t)
	dir := filepath.Join(t.TempDir(), "tmpfs")
	os.Mkdir(dir, 0o755)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// TestRankFailureFullFilesystem: ranks fill a 4 MiB tmpfs; the rank that
// hits ENOSPC makes every rank leave the phase, the run exits 1 quickly, the
// manifest names the rank and the errno, later phases are skipped, and the
// filesystem holds nothing of prism's afterwards.
func TestRankFailureFullFilesystem(t *testing.T) {
	work := mountTmpfs(t, "4m")
	os.WriteFile(filepath.Join(work, "keep-me"), []byte("x"), 0o644)
	dir := t.TempDir()
	plan := writePlan(t, dir, `
[plan]
drop_caches = "none"
[[phase]]
kind = "create_files"
count = 100
size = "4KiB"
[[phase]]
kind = "create_files"
name = "fills"
count = 400
size = "4KiB"
[[phase]]
kind = "delete_files"
count = 10
`)
	r := prism(t, dir, "run", "-n", "4", plan, "--workdir", work, "--results", filepath.Join(dir, "res"))
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// A hang guard, not a speed test: a stuck rank would take minutes.
	if r.elapsed > 60*time.Second {
		t.Errorf("took %v", r.elapsed)
	}
	m := loadManifest(t, r)
	if m.Status != "failed" || len(m.Phases) != 3 {
		t.Fatalf("status %s, %d phases", m.Status, len(m.Phases))
	}
	if m.Phases[0].Status != "passed" || m.Phases[0].Ops != 400 {
		t.Errorf("first phase kept? %+v", m.Phases[0].Status)
	}
	f := m.Phases[1]
	if f.Status != "failed" || f.FailedRank == nil || !strings.Contains(f.Error, "no space left on device") ||
		!strings.Contains(f.Error, "rank ") || !strings.Contains(f.Error, "filesystem is full") {
		t.Errorf("failed phase: status %s rank %v error %q", f.Status, f.FailedRank, f.Error)
	}
	if f.FailedRank != nil && f.PerRank[*f.FailedRank].Error == "" {
		t.Errorf("per-rank row of rank %d has no error", *f.FailedRank)
	}
	if m.Phases[2].Status != "skipped" {
		t.Errorf("phase after the failure: %s", m.Phases[2].Status)
	}
	ents, _ := os.ReadDir(work)
	if len(ents) != 1 || ents[0].Name() != "keep-me" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("tmpfs after the run: %v", names)
	}
}

// TestRankFailureImmutableDir: one rank's directory is made immutable while
// it creates files; that rank fails with EPERM, the others stop with it.
func TestRankFailureImmutableDir(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("chattr"); err != nil {
		t.Skip("chattr not installed (e2fsprogs)")
	}
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	// Probe that this filesystem supports the immutable attribute.
	if out, err := exec.Command("chattr", "+i", work).CombinedOutput(); err != nil {
		t.Skipf("chattr +i unsupported here: %s", out)
	}
	exec.Command("chattr", "-i", work).Run()
	plan := writePlan(t, dir, "[plan]\ndrop_caches = \"none\"\n[[phase]]\nkind = \"create_files\"\ncount = 200000\nsize = 0\n")

	cmd := exec.Command(prismBin, "run", "-n", "3", plan, "--workdir", work, "--results", filepath.Join(dir, "res"))
	cmd.Env = cleanEnv()
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait for rank 2's file directory, then freeze it.
	var target string
	deadline := time.Now().Add(30 * time.Second)
	for target == "" && time.Now().Before(deadline) {
		m, _ := filepath.Glob(filepath.Join(work, "prism-*", "01-create_files", "r2", "files"))
		if len(m) == 1 {
			target = m[0]
			break
		}
		time.Sleep(time.Millisecond)
	}
	if target == "" {
		cmd.Process.Kill()
		t.Fatal("rank 2's directory never appeared")
	}
	if b, err := exec.Command("chattr", "+i", target).CombinedOutput(); err != nil {
		cmd.Process.Kill()
		t.Fatalf("chattr: %v %s", err, b)
	}
	t.Cleanup(func() {
		exec.Command("chattr", "-i", target).Run()
		os.RemoveAll(work)
	})
	err := cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out.String())
	}
	r := result{stdout: out.String()}
	m := loadManifest(t, r)
	p := m.Phases[0]
	if p.FailedRank == nil || *p.FailedRank != 2 || !strings.Contains(p.Error, "operation not permitted") || !strings.Contains(p.Error, "rank 2") {
		t.Fatalf("failed rank %v error %q", p.FailedRank, p.Error)
	}
	// The other ranks were alerted and stopped early instead of finishing
	// their 200000 creates; they report what they did, without an error
	// of their own.
	for _, pr := range p.PerRank {
		if pr.Rank != 2 && (pr.Error != "" || pr.Ops == 0 || pr.Ops >= 200000) {
			t.Errorf("rank %d: ops %d error %q", pr.Rank, pr.Ops, pr.Error)
		}
	}
}
