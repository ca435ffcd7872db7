package io

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/internal/fstest"
	"golang.org/x/sys/unix"
)

func TestAlignedBuffer(t *testing.T) {
	for _, align := range []int{1, 512, 4096, 1 << 20} {
		for _, n := range []int{1, 100, 4096, 1<<20 + 3} {
			b := AlignedBuffer(n, align)
			if len(b) != n || cap(b) != n || !IsAligned(b, align) {
				t.Errorf("AlignedBuffer(%d, %d): len %d cap %d aligned %v", n, align, len(b), cap(b), IsAligned(b, align))
			}
		}
	}
	if len(AlignedBuffer(0, 4096)) != 0 {
		t.Error("empty buffer")
	}
	defer func() {
		if recover() == nil {
			t.Error("alignment 3 accepted")
		}
	}()
	AlignedBuffer(10, 3)
}

// directRoundTrip writes and reads back through O_DIRECT in dir and shows
// that direct I/O really took effect: a misaligned buffer or offset is
// refused with EINVAL, which buffered I/O would accept.
func directRoundTrip(t *testing.T, dir string, wantType string) {
	fs, err := StatFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	if wantType != "" && fs.Type != wantType {
		t.Fatalf("%s is %s, want %s", dir, fs.Type, wantType)
	}
	if _, err := CheckDirect(dir); err != nil {
		t.Fatalf("CheckDirect(%s on %s): %v", dir, fs.Type, err)
	}
	p := MustPath(filepath.Join(dir, "direct"))
	fd, err := OpenDirect(p, unix.O_CREAT|unix.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("O_DIRECT on %s: %v", fs.Type, err)
	}
	defer Close(fd)
	a, err := AlignmentOf(p.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: alignment %d (reported %d by %s, exact %v)", fs.Type, a.Bytes, a.Reported, a.Source, a.Exact)
	if a.Bytes < DirectAlign || a.Bytes&(a.Bytes-1) != 0 || !a.Exact {
		t.Fatalf("alignment %+v", a)
	}
	const n = 256 << 10
	w := AlignedBuffer(n, a.Bytes)
	r := AlignedBuffer(n, a.Bytes)
	if !IsAligned(w, a.Bytes) || !IsAligned(r, a.Bytes) {
		t.Fatal("buffers not aligned")
	}
	g, _ := NewGenerator(GenConfig{Kind: GenSeededRandom, Seed: 5})
	g.Fill(w, 0)
	for _, off := range []int64{0, n, 4 * n} {
		if m, err := PwriteFull(fd, w, off); err != nil || m != n {
			t.Fatalf("direct write @%d: %d %v", off, m, err)
		}
		clear(r)
		if m, err := PreadFull(fd, r, off); err != nil || m != n {
			t.Fatalf("direct read @%d: %d %v", off, m, err)
		}
		if !bytes.Equal(r, w) {
			t.Fatalf("read back different bytes @%d", off)
		}
	}
	if _, err := PreadFull(fd, r[1:4097], 0); err != unix.EINVAL {
		t.Errorf("misaligned buffer: %v, want EINVAL (O_DIRECT not in effect?)", err)
	}
	if _, err := PreadFull(fd, r[:4096], 100); err != unix.EINVAL {
		t.Errorf("misaligned offset: %v, want EINVAL", err)
	}
	if err := Fdatasync(fd); err != nil {
		t.Error(err)
	}
	if err := Evict(fd); err != nil {
		t.Error(err)
	}
	if err := Fadvise(fd, 0, 0, FadvRandom); err != nil {
		t.Error(err)
	}
}

func TestDirectOnDisk(t *testing.T) {
	directRoundTrip(t, fstest.DiskDir(t), "")
}

func TestDirectOnLoopXFS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a loop device")
	}
	mkfs, err := exec.LookPath("mkfs.xfs")
	if err != nil {
		t.Skip("mkfs.xfs missing: apt-get install xfsprogs")
	}
	img := filepath.Join(t.TempDir(), "xfs.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: XFS wants 300 MB at least, the disk gives only what is written.
	if err := f.Truncate(320 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if out, err := exec.Command(mkfs, "-q", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.xfs: %v: %s", err, out)
	}
	directRoundTrip(t, fstest.Mount(t, "-o", "loop", img), "xfs")
}

func TestDirectRefusedOnTmpfs(t *testing.T) {
	dir := fstest.Mount(t, "-t", "tmpfs", "-o", "size=8m", "tmpfs")
	_, err := CheckDirect(dir)
	var de *DirectError
	if !errors.As(err, &de) || de.FSType != "tmpfs" || !errors.Is(err, ErrDirectNoEffect) {
		t.Fatalf("CheckDirect on tmpfs: %v", err)
	}
	for _, want := range []string{dir, "tmpfs does not support O_DIRECT", "direct = false", "direct_fallback"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not mention %q", err, want)
		}
	}
}

// ramfs has no direct I/O at all: open itself fails with EINVAL on every
// kernel, the path tmpfs took before Linux 6.6.
func TestDirectRefusedOnRamfs(t *testing.T) {
	dir := fstest.Mount(t, "-t", "ramfs", "ramfs")
	p := MustPath(filepath.Join(dir, "f"))
	fd, err := OpenDirect(p, unix.O_CREAT|unix.O_RDWR, 0o644)
	if err == nil {
		Close(fd)
		t.Fatal("O_DIRECT accepted on ramfs")
	}
	var de *DirectError
	if !errors.As(err, &de) || de.FSType != "ramfs" || !errors.Is(err, unix.EINVAL) {
		t.Fatalf("%T %v", err, err)
	}
	for _, want := range []string{p.String(), "ramfs does not support O_DIRECT", "direct = false"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not mention %q", err, want)
		}
	}
	if _, err := CheckDirect(dir); err == nil {
		t.Error("CheckDirect accepts ramfs")
	}
}

func TestSyncMode(t *testing.T) {
	for _, s := range []string{"none", "fsync", "fdatasync"} {
		m, err := ParseSyncMode(s)
		if err != nil || m.String() != s {
			t.Errorf("%s: %v %v", s, m, err)
		}
	}
	if _, err := ParseSyncMode("always"); err == nil {
		t.Error("bad mode accepted")
	}
	fd, err := unix.Open(filepath.Join(t.TempDir(), "f"), unix.O_CREAT|unix.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for _, m := range []SyncMode{SyncNone, SyncFsync, SyncFdatasync} {
		if err := Sync(fd, m); err != nil {
			t.Errorf("%v: %v", m, err)
		}
	}
	if err := Fallocate(fd, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st); st.Size != 1<<20 {
		t.Errorf("fallocate: size %d", st.Size)
	}
}

// TestDeviceAlignment checks the sysfs/BLKSSZGET path against statx, the
// kernel's own answer, on the disk under the test directory.
func TestDeviceAlignment(t *testing.T) {
	dir := fstest.DiskDir(t)
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	a, ok := deviceAlignment(uint64(st.Dev))
	if !ok {
		t.Skipf("%s is not on a block device", dir)
	}
	t.Logf("device %d:%d: %+v", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), a)
	if a.Reported < 512 || a.Bytes < DirectAlign || !a.Exact {
		t.Fatalf("%+v", a)
	}
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if sx, err := AlignmentOf(f); err == nil && sx.Source == "statx" && sx.Reported > a.Reported {
		t.Errorf("statx says %d, the device %d", sx.Reported, a.Reported)
	}
	if _, ok := deviceAlignment(0); ok {
		t.Error("device 0:0 has an alignment")
	}
}
