package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	if f.FailedRank != nil && f.PerRank.At(*f.FailedRank).Error == "" {
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
	// Wait until every rank has created a file, then freeze rank 2's
	// directory. Its directory alone appears in Setup, before the Run: frozen
	// then, rank 2 fails at its first create, and a rank the loaded machine
	// wakes late for the Run is stopped before its first op and rightly
	// reports none.
	var target string
	deadline := time.Now().Add(30 * time.Second)
	for target == "" && time.Now().Before(deadline) {
		m, _ := filepath.Glob(filepath.Join(work, "prism-*", "01-create_files", "r[0-2]", "files"))
		if len(m) == 3 && hasEntry(m[0]) && hasEntry(m[1]) && hasEntry(m[2]) {
			target = m[2]
			break
		}
		time.Sleep(time.Millisecond)
	}
	if target == "" {
		cmd.Process.Kill()
		t.Fatal("the ranks' files never appeared")
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
	for _, pr := range p.PerRank.All() {
		if pr.Rank != 2 && (pr.Error != "" || pr.Ops == 0 || pr.Ops >= 200000) {
			t.Errorf("rank %d: ops %d error %q", pr.Rank, pr.Ops, pr.Error)
		}
	}
}

// hasEntry reports whether directory dir has an entry.
func hasEntry(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	return len(names) > 0
}

// startPrism runs prism in the background; the caller waits on the
// returned channel for its exit code.
func startPrism(t *testing.T, dir string, args ...string) (*exec.Cmd, *strings.Builder, <-chan int) {
	t.Helper()
	cmd := exec.Command(prismBin, args...)
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	var out strings.Builder
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		err := cmd.Wait()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		}
		done <- code
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, &out, done
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// waitGlob polls until pattern matches, or fails the test.
func waitGlob(t *testing.T, pattern string, bound time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", pattern)
	return ""
}

// launcherChildren returns the pids of the local launcher's rank
// processes, keyed by PRISM_RANK.
func launcherChildren(parent int) map[int]int {
	out := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		for _, kv := range strings.Split(string(env), "\x00") {
			if v, ok := strings.CutPrefix(kv, "PRISM_RANK="); ok {
				if r, err := strconv.Atoi(v); err == nil {
					out[r] = pid
				}
			}
		}
	}
	return out
}

const longPlan = "[plan]\ndrop_caches = \"none\"\n[[phase]]\nkind = \"create_files\"\ncount = 400000\nsize = 0\n[[phase]]\nkind = \"delete_files\"\ncount = 5\n"

// TestSigtermWritesPartialResults: Slurm's time limit sends SIGTERM. prism
// stops issuing ops, writes the manifest with what completed, marks it
// interrupted, removes its run directory and exits 143 within seconds.
func TestSigtermWritesPartialResults(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	plan := writePlan(t, dir, longPlan)
	cmd, out, done := startPrism(t, dir, "run", "-n", "3", plan, "--workdir", work, "--results", filepath.Join(dir, "res"))
	waitGlob(t, filepath.Join(work, "prism-*", "01-create_files", "r2", "files", "f2.100"), 60*time.Second)
	cmd.Process.Signal(syscall.SIGTERM)
	var code int
	select {
	case code = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("still running a minute after SIGTERM\n%s", out.String())
	}
	if code != 143 {
		t.Fatalf("exit %d, want 143\n%s", code, out.String())
	}
	m := loadManifest(t, result{stdout: out.String()})
	p := m.Phases[0]
	if m.Status != "interrupted" || p.Status != "interrupted" || p.Ops == 0 || p.Ops >= 3*400000 || m.Phases[1].Status != "skipped" {
		t.Fatalf("manifest status %s, phase %s with %d ops, next %s", m.Status, p.Status, p.Ops, m.Phases[1].Status)
	}
	if left, _ := filepath.Glob(filepath.Join(work, "prism-*")); len(left) != 0 {
		t.Errorf("run directory left behind: %v", left)
	}
}

// TestRankKilledRendezvous: a rank SIGKILLed mid-phase under the local
// launcher brings the others down within a bounded time; rank 0 still
// writes the manifest naming the dead rank.
func TestRankKilledRendezvous(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	plan := writePlan(t, dir, longPlan)
	cmd, out, done := startPrism(t, dir, "run", "-n", "3", plan, "--workdir", work, "--results", filepath.Join(dir, "res"))
	waitGlob(t, filepath.Join(work, "prism-*", "01-create_files", "r1", "files", "f1.100"), 60*time.Second)
	kids := launcherChildren(cmd.Process.Pid)
	if len(kids) != 3 {
		t.Fatalf("found rank processes %v", kids)
	}
	syscall.Kill(kids[1], syscall.SIGKILL)
	var code int
	select {
	case code = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("still running a minute after rank 1 died\n%s", out.String())
	}
	if code != 1 {
		t.Errorf("exit %d, want 1 (a rank died)\n%s", code, out.String())
	}
	for r, pid := range kids {
		if syscall.Kill(pid, 0) == nil {
			if stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(stat), ") Z") {
				t.Errorf("rank %d (pid %d) still alive", r, pid)
			}
		}
	}
	m := loadManifest(t, result{stdout: out.String()})
	if m.Status != "failed" || !strings.Contains(m.Error+m.Phases[0].Error, "rank 1") {
		t.Errorf("manifest status %s error %q / %q", m.Status, m.Error, m.Phases[0].Error)
	}
}

// TestReadOnlyWorkdir: a read-only bind mount fails with the errno and a
// remedy, and nothing is written there.
func TestReadOnlyWorkdir(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	src, ro := filepath.Join(dir, "src"), filepath.Join(dir, "ro")
	os.Mkdir(src, 0o755)
	os.Mkdir(ro, 0o755)
	if out, err := exec.Command("mount", "--bind", src, ro).CombinedOutput(); err != nil {
		t.Skipf("bind mount: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", ro).Run() })
	if out, err := exec.Command("mount", "-o", "remount,bind,ro", ro).CombinedOutput(); err != nil {
		t.Skipf("remount ro: %v %s", err, out)
	}
	plan := writePlan(t, dir, "[[phase]]\nkind = \"create_files\"\ncount = 3\n")
	r := prism(t, dir, "run", "-n", "2", plan, "--workdir", ro, "--results", filepath.Join(dir, "res"))
	if r.code != 1 || !strings.Contains(r.stderr, "read-only file system") || !strings.Contains(r.stderr, "mounted read-only") {
		t.Fatalf("exit %d stderr %q", r.code, r.stderr)
	}
	if ents, _ := os.ReadDir(src); len(ents) != 0 {
		t.Errorf("wrote %v", ents)
	}
}

// TestRankKilledWithoutLauncher: ranks started by something other than
// prism's launcher (srun without MPI, with a shared rendezvous directory)
// have no parent to notice a death; the heartbeats do. A SIGKILLed rank
// makes the others fail within a bounded time instead of waiting out the
// coordination timeout, and rank 0 writes the manifest.
func TestRankKilledWithoutLauncher(t *testing.T) {
	dir := t.TempDir()
	work, rdv := filepath.Join(dir, "work"), filepath.Join(dir, "rdv")
	os.Mkdir(work, 0o755)
	os.Mkdir(rdv, 0o755)
	plan := writePlan(t, dir, strings.Replace(longPlan, "count = 400000", "count = 60000", 1))
	type rank struct {
		cmd  *exec.Cmd
		out  *strings.Builder
		done chan int
	}
	ranks := make([]rank, 3)
	for i := range ranks {
		cmd := exec.Command(prismBin, "run", plan, "--workdir", work, "--results", filepath.Join(dir, "res"))
		cmd.Dir = dir
		cmd.Env = append(cleanEnv(), fmt.Sprintf("PRISM_RANK=%d", i), "PRISM_SIZE=3", "PRISM_RENDEZVOUS="+rdv)
		out := &strings.Builder{}
		var mu sync.Mutex
		w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan int, 1)
		go func() {
			err := cmd.Wait()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			done <- code
		}()
		t.Cleanup(func() { cmd.Process.Kill() })
		ranks[i] = rank{cmd, out, done}
	}
	waitGlob(t, filepath.Join(work, "prism-*", "01-create_files", "r1", "files", "f1.100"), 60*time.Second)
	ranks[1].cmd.Process.Kill()
	start := time.Now()
	for _, i := range []int{0, 2} {
		select {
		case code := <-ranks[i].done:
			if code == 0 {
				t.Errorf("rank %d exited 0 after rank 1 died", i)
			}
		case <-time.After(90 * time.Second):
			t.Fatalf("rank %d still running 90 s after rank 1 died (coordination timeout is 3 min):\n%s", i, ranks[i].out.String())
		}
	}
	t.Logf("peers gone %v after the kill", time.Since(start).Round(time.Millisecond))
	m := loadManifest(t, result{stdout: ranks[0].out.String()})
	if m.Status != "failed" || !strings.Contains(m.Error, "rank 1") {
		t.Errorf("manifest status %s error %q", m.Status, m.Error)
	}
}
