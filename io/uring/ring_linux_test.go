//go:build linux

package uring

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func newRing(t *testing.T, n uint32) *Ring {
	t.Helper()
	runtime.LockOSThread() // a single-issuer ring is this thread's
	t.Cleanup(runtime.UnlockOSThread)
	r, err := New(n)
	if err != nil {
		t.Skipf("io_uring unavailable here: %v", Unavailable(err))
	}
	if err := r.Enable(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func reap(t *testing.T, r *Ring, want int) map[uint64]int32 {
	t.Helper()
	got := map[uint64]int32{}
	for len(got) < want {
		if _, err := r.Enter(1); err != nil {
			t.Fatal(err)
		}
		for c := r.Peek(); c != nil; c = r.Peek() {
			got[c.UserData] = c.Res
			r.Advance()
		}
	}
	return got
}

// Writes 8 blocks in one batch, fsyncs with a drain, reads them back with
// registered buffers and files, and compares with what the file holds.
func TestRingWriteFsyncReadFixed(t *testing.T) {
	r := newRing(t, 8)
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	const bs = 4096
	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = bytes.Repeat([]byte{byte('a' + i)}, bs)
		s := r.Get()
		s.PrepRW(OpWrite, fd, bufs[i], int64(i)*bs)
		s.UserData = uint64(i)
	}
	if r.Get() != nil {
		t.Fatalf("Get handed out a ninth SQE on an 8-entry ring")
	}
	res := reap(t, r, 8)
	for i := range 8 {
		if res[uint64(i)] != bs {
			t.Fatalf("write %d: res %d, want %d", i, res[uint64(i)], bs)
		}
	}
	s := r.Get()
	s.PrepFsync(fd, true)
	s.Flags |= SqeIODrain
	s.UserData = 99
	if res := reap(t, r, 1); res[99] != 0 {
		t.Fatalf("fdatasync: res %d", res[99])
	}
	disk, _ := os.ReadFile(path)
	if want := bytes.Join(bufs, nil); !bytes.Equal(disk, want) {
		t.Fatalf("file holds %d bytes that differ from the %d written", len(disk), len(want))
	}

	rd := make([][]byte, 8)
	for i := range rd {
		rd[i] = make([]byte, bs)
	}
	if err := r.RegisterBuffers(rd); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterFiles([]int{fd}); err != nil {
		t.Fatal(err)
	}
	for i := 7; i >= 0; i-- {
		s := r.Get()
		s.PrepRW(OpReadFixed, 0, rd[i], int64(i)*bs)
		s.Flags |= SqeFixedFile
		s.BufIndex = uint16(i)
		s.UserData = uint64(i)
	}
	res = reap(t, r, 8)
	for i := range 8 {
		if res[uint64(i)] != bs || !bytes.Equal(rd[i], bufs[i]) {
			t.Fatalf("read fixed %d: res %d, content %q..., want %q...", i, res[uint64(i)], rd[i][:4], bufs[i][:4])
		}
	}
}

// A failed request comes back as a negated errno in Res.
func TestRingErrorInRes(t *testing.T) {
	r := newRing(t, 2)
	s := r.Get()
	s.PrepRW(OpRead, 1<<20, make([]byte, 16), 0)
	s.UserData = 7
	if res := reap(t, r, 1); res[7] != -int32(unix.EBADF) {
		t.Fatalf("read of a bad descriptor: res %d, want -EBADF", res[7])
	}
}

// One submit-and-wait cycle (prepare, enter, reap) allocates nothing.
func TestRingCycleAllocs(t *testing.T) {
	r := newRing(t, 4)
	f, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 512)
	fd := int(f.Fd())
	allocs := testing.AllocsPerRun(200, func() {
		s := r.Get()
		s.PrepRW(OpRead, fd, buf, 0)
		if _, err := r.Enter(1); err != nil {
			t.Fatal(err)
		}
		for c := r.Peek(); c != nil; c = r.Peek() {
			r.Advance()
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per cycle, want 0", allocs)
	}
}

func TestUnavailableReasons(t *testing.T) {
	for _, tc := range []struct {
		err      *SetupError
		contains string
	}{
		{&SetupError{Errno: unix.EPERM, Disabled: "2"}, "kernel.io_uring_disabled = 2"},
		{&SetupError{Errno: unix.EPERM, Disabled: "1"}, "io_uring_group"},
		{&SetupError{Errno: unix.EPERM, Disabled: "0"}, "seccomp"},
		{&SetupError{Errno: unix.ENOSYS}, "older than 5.1"},
	} {
		if got := Unavailable(tc.err); !strings.Contains(got, tc.contains) {
			t.Errorf("%v: %q lacks %q", tc.err.Errno, got, tc.contains)
		}
	}
	SetSetupHookForTest(unix.ENOSYS)
	defer SetSetupHookForTest(nil)
	_, err := New(4)
	var se *SetupError
	if !errors.As(err, &se) || !strings.Contains(Unavailable(err), "ENOSYS") && !strings.Contains(Unavailable(err), "function not implemented") {
		t.Fatalf("New with an injected ENOSYS: %v", err)
	}
}
