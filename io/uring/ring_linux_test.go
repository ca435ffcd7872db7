//go:build linux

package uring

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
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

// ioWorker reports whether this process has an io-wq worker thread of
// the thread tid: the kernel names them iou-wrk-<tid of the submitter>.
func ioWorker(tid int) (bool, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return false, err
	}
	want := "iou-wrk-" + strconv.Itoa(tid)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join("/proc/self/task", e.Name(), "comm"))
		if strings.TrimSpace(string(b)) == want {
			return true, nil
		}
	}
	return false, nil
}

// probeAndSubmit runs Punts on fd, then submits one 4 KiB request of the
// kind through a ring, both from a new OS thread that exits afterwards
// (the goroutine ends locked to it), so no io-wq worker of an earlier
// test's ring is around; and reports whether the kernel gave the request
// to an io-wq worker of that thread. Workers outlive their request, so
// the check after the completion sees one.
func probeAndSubmit(fd int, write bool) (p Punt, punted, stale bool, res int32, err error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		tid := unix.Gettid()
		if stale, err = ioWorker(tid); stale || err != nil {
			return
		}
		if p, err = Punts(fd, write); err != nil {
			return
		}
		r, e := New(2)
		if err = e; err != nil {
			return
		}
		defer r.Close()
		if err = r.Enable(); err != nil {
			return
		}
		buf := make([]byte, 4096)
		if write {
			unix.Pread(fd, buf, 0) // write back what is there
		}
		op := uint8(OpRead)
		if write {
			op = OpWrite
		}
		r.Get().PrepRW(op, fd, buf, 0)
		if _, err = r.Enter(1); err != nil {
			return
		}
		res = r.Peek().Res
		r.Advance()
		punted, err = ioWorker(tid)
	}()
	<-done
	return
}

// TestPuntsMatchesTheKernel: Punts says a kind of request punts exactly
// where the kernel hands a real one to an io-wq worker thread. A buffered
// read of a tmpfs file (no FMODE_NOWAIT) makes an iou-wrk-<tid> thread
// and Punts says it punts (EOPNOTSUPP); a read of a page-cached file on a
// disk filesystem completes inline, with no worker, and Punts says no; on
// ext4 a buffered write punts (no FOP_BUFFER_WASYNC: EAGAIN), and Punts
// says so. The probe moves no byte: the file's content is unchanged.
func TestPuntsMatchesTheKernel(t *testing.T) {
	type tc struct {
		name, dir string
		write     bool
		errno     unix.Errno // the probe's answer where it punts
	}
	var cases []tc
	var sf unix.Statfs_t
	if unix.Statfs("/dev/shm", &sf) == nil && sf.Type == unix.TMPFS_MAGIC {
		cases = append(cases, tc{"tmpfs read", "/dev/shm", false, unix.EOPNOTSUPP})
	}
	disk := t.TempDir()
	if unix.Statfs(disk, &sf) == nil && sf.Type == unix.TMPFS_MAGIC {
		disk = "/var/tmp"
	}
	if unix.Statfs(disk, &sf) == nil && sf.Type != unix.TMPFS_MAGIC {
		cases = append(cases, tc{"disk read", disk, false, 0})
		if sf.Type == unix.EXT4_SUPER_MAGIC {
			cases = append(cases, tc{"ext4 write", disk, true, unix.EAGAIN})
		}
	}
	if len(cases) == 0 {
		t.Skip("neither /dev/shm on tmpfs nor a disk filesystem here")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := os.MkdirTemp(c.dir, "prism-uring-")
			if err != nil {
				t.Skip(err)
			}
			defer os.RemoveAll(d)
			path := filepath.Join(d, "f")
			data := bytes.Repeat([]byte("prism"), 1000)[:4096]
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			fd, err := unix.Open(path, unix.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			unix.Fdatasync(fd)
			p, punted, stale, res, err := probeAndSubmit(fd, c.write)
			switch {
			case stale:
				t.Skip("the new thread already has an io-wq worker")
			case err != nil:
				t.Skipf("io_uring or /proc unavailable here: %v", Unavailable(err))
			case res != 4096:
				t.Fatalf("the request returned %d", res)
			}
			if p.Punts != punted || p.Errno != c.errno {
				t.Fatalf("Punts = %+v, a real request went to io-wq: %v; want Punts %v with %v", p, punted, c.errno != 0, c.errno)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, data) {
				t.Fatal("the probe changed the file")
			}
		})
	}
}
