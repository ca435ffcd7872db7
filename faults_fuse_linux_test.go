package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// faultFS is a loopback FUSE filesystem that misbehaves on chosen names:
// creating a file whose name is in delay takes that long (the PRISM paper's
// 5-second openat stall); creating one in eio fails with EIO; unlinking
// one in hang never answers (a server that went away), until the kernel
// interrupts the request because its caller died.
type faultFS struct {
	mu    sync.Mutex
	delay map[string]time.Duration
	eio   map[string]bool
	hang  map[string]bool
}

type faultNode struct {
	fs.LoopbackNode
	f *faultFS
}

func (n *faultNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.f.mu.Lock()
	d, eio := n.f.delay[name], n.f.eio[name]
	n.f.mu.Unlock()
	if d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done(): // the kernel interrupted the request
			return nil, nil, 0, syscall.EINTR
		}
	}
	if eio {
		return nil, nil, 0, syscall.EIO
	}
	return n.LoopbackNode.Create(ctx, name, flags, mode, out)
}

func (n *faultNode) Unlink(ctx context.Context, name string) syscall.Errno {
	n.f.mu.Lock()
	hang := n.f.hang[name]
	n.f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return syscall.EINTR
	}
	return n.LoopbackNode.Unlink(ctx, name)
}

// mountFaultFS serves a loopback of a fresh directory at another fresh
// directory from this test process, as root (mount(2) directly).
func mountFaultFS(t *testing.T, f *faultFS) string {
	t.Helper()
	needRoot(t)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse on this machine")
	}
	backing, mnt := filepath.Join(t.TempDir(), "backing"), filepath.Join(t.TempDir(), "mnt")
	os.Mkdir(backing, 0o755)
	os.Mkdir(mnt, 0o755)
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		t.Fatal(err)
	}
	root := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &faultNode{LoopbackNode: fs.LoopbackNode{RootData: r}, f: f}
	}
	root.RootNode = root.NewNode(root, nil, "", &st)
	srv, err := fs.Mount(mnt, root.RootNode, &fs.Options{MountOptions: fuse.MountOptions{DirectMount: true, FsName: "prism-faultfs", Name: "faultfs"}})
	if err != nil {
		t.Skipf("cannot mount FUSE here: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	return mnt
}

const fusePlan = `
[plan]
drop_caches = "none"
%s
[[phase]]
kind = "create_files"
count = 6
size = "1KiB"
[[phase]]
kind = "delete_files"
count = 3
`

// TestStallOnFUSE: one create takes 3 s on a FUSE filesystem; with
// stall_after = 1s prism reports it while it is stuck, names rank, op and
// file, counts it in the manifest, and the run still passes.
func TestStallOnFUSE(t *testing.T) {
	mnt := mountFaultFS(t, &faultFS{delay: map[string]time.Duration{"f0.3": 3 * time.Second}})
	dir := t.TempDir()
	plan := writePlan(t, dir, strings.Replace(fusePlan, "%s", `stall_after = "1s"`, 1))
	r := prism(t, dir, "run", plan, "--workdir", mnt, "--results", filepath.Join(dir, "res"))
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "stall: rank 0: create_files") || !strings.Contains(r.stderr, "op create on "+mnt) || !strings.Contains(r.stderr, "/f0.3 in flight for") {
		t.Fatalf("no stall report naming the file:\n%s", r.stderr)
	}
	m := loadManifest(t, r)
	if m.Phases[0].Metrics["stalls"] != 1 || m.Host.FSType != "fuse.faultfs" && !strings.HasPrefix(m.Host.FSType, "fuse") {
		t.Errorf("stalls %v fs %q", m.Phases[0].Metrics["stalls"], m.Host.FSType)
	}
	if max := m.Phases[0].OpsByType["create"].Latency.Max; max < int64(3*time.Second) {
		t.Errorf("the stalled create's latency %d ns is missing from the histogram", max)
	}
}

// TestOpTimeoutOnFUSE: a create that would take a minute fails the phase at
// op_timeout; prism exits 1 well before the op would have returned.
func TestOpTimeoutOnFUSE(t *testing.T) {
	mnt := mountFaultFS(t, &faultFS{delay: map[string]time.Duration{"f0.2": time.Minute}})
	dir := t.TempDir()
	plan := writePlan(t, dir, strings.Replace(fusePlan, "%s", `op_timeout = "2s"`, 1))
	r := prism(t, dir, "run", plan, "--workdir", mnt, "--results", filepath.Join(dir, "res"))
	if r.code != 1 || r.elapsed > 45*time.Second {
		t.Fatalf("exit %d after %v\n%s", r.code, r.elapsed, r.stderr)
	}
	m := loadManifest(t, r)
	if p := m.Phases[0]; p.Status != "failed" || !strings.Contains(p.Error, "op_timeout = 2s exceeded") || !strings.Contains(p.Error, "f0.2") {
		t.Fatalf("phase %s error %q", p.Status, p.Error)
	}
}

// TestEIOOnFUSE: the storage answers EIO; the phase fails naming rank,
// path, errno and a remedy, earlier results stay, the run's files go, and
// a file placed in the workdir beforehand survives.
func TestEIOOnFUSE(t *testing.T) {
	mnt := mountFaultFS(t, &faultFS{eio: map[string]bool{"f1.4": true}})
	os.WriteFile(filepath.Join(mnt, "precious"), []byte("keep"), 0o644)
	dir := t.TempDir()
	plan := writePlan(t, dir, `
[plan]
drop_caches = "none"
[[phase]]
kind = "list_files"
count = 3
[[phase]]
kind = "create_files"
count = 6
`)
	r := prism(t, dir, "run", "-n", "2", plan, "--workdir", mnt, "--results", filepath.Join(dir, "res"))
	if r.code != 1 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	m := loadManifest(t, r)
	if m.Phases[0].Status != "passed" {
		t.Errorf("earlier phase lost: %s", m.Phases[0].Status)
	}
	p := m.Phases[1]
	if p.FailedRank == nil || *p.FailedRank != 1 || !strings.Contains(p.Error, "input/output error") ||
		!strings.Contains(p.Error, "/f1.4") || !strings.Contains(p.Error, "dmesg") {
		t.Fatalf("failed rank %v error %q", p.FailedRank, p.Error)
	}
	ents, _ := os.ReadDir(mnt)
	if len(ents) != 1 || ents[0].Name() != "precious" {
		t.Errorf("mount after the run holds %v", ents)
	}
}

// TestHungTeardownOnFUSE: the storage stops answering while a phase
// removes its files (an unlink that never returns). prism reports the
// stall while it is stuck; a SIGTERM then ends the run in bounded time
// (exit 143) with the manifest written, the phase marked interrupted, and
// the run directory left and named on stderr rather than waited for.
func TestHungTeardownOnFUSE(t *testing.T) {
	mnt := mountFaultFS(t, &faultFS{hang: map[string]bool{"f0.3": true}})
	dir := t.TempDir()
	plan := writePlan(t, dir, strings.Replace(fusePlan, "%s", `stall_after = "1s"`, 1))
	cmd, out, done := startPrism(t, dir, "run", plan, "--workdir", mnt, "--results", filepath.Join(dir, "res"))
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "stall: rank 0:") {
		if time.Now().After(deadline) {
			t.Fatalf("no stall reported for the hung unlink:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	signalled := time.Now()
	var code int
	select {
	case code = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30 s after SIGTERM with an unlink hung\n%s", out.String())
	}
	// signalGrace (1.5 s) and the manifest; a loaded machine gets slack,
	// but not the unbounded wait this guards against.
	if code != 143 || time.Since(signalled) > 15*time.Second {
		t.Fatalf("exit %d %v after SIGTERM, want 143 within seconds\n%s", code, time.Since(signalled), out.String())
	}
	s := out.String()
	if !strings.Contains(s, "unlink on "+mnt) || !strings.Contains(s, "f0.3 in flight") {
		t.Errorf("the stall does not name the hung unlink:\n%s", s)
	}
	if !strings.Contains(s, "abandoned") {
		t.Errorf("no word that the stuck step was abandoned:\n%s", s)
	}
	m := loadManifest(t, result{stdout: s})
	if m.Status != "interrupted" {
		t.Errorf("manifest status %s", m.Status)
	}
	left, _ := filepath.Glob(filepath.Join(mnt, "prism-*"))
	if len(left) != 1 || !strings.Contains(s, left[0]) {
		t.Errorf("the run directory left behind %v is not named on stderr:\n%s", left, s)
	}
}
