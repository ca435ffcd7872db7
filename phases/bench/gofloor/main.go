//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// yieldEvery matches prism's timed loops (phases/yield.go): without it the
// Go runtime's sysmon preempts a syscall loop every 10 ms and polls at
// 20 µs for a while after, which no real Go tool would leave in its loop.
const yieldEvery = int64(5 * time.Millisecond)

// atFDCWD is unix.AT_FDCWD (-100) as a syscall argument.
const atFDCWD = ^uintptr(99)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gofloor:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 4 {
		return fmt.Errorf("usage: gofloor <create|stat|rename|unlink> <dir> <count> <size>")
	}
	op, dir := args[0], args[1]
	count, err := strconv.Atoi(args[2])
	if err != nil || count < 1 {
		return fmt.Errorf("count %q: want an integer >= 1", args[2])
	}
	size, err := strconv.Atoi(args[3])
	if err != nil || size < 0 {
		return fmt.Errorf("size %q: want an integer >= 0", args[3])
	}
	switch op {
	case "create", "stat", "rename", "unlink":
	default:
		return fmt.Errorf("unknown op %q (create, stat, rename, unlink)", op)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}

	// The layout of floor.c's worker 0 and of prism's rank 0.
	src := filepath.Join(dir, "r0", "files")
	dst := filepath.Join(dir, "r0", "dst")
	if op == "rename" {
		src = filepath.Join(dir, "r0", "src")
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	paths := cstrings(src, count)
	var dpaths [][]byte
	if op == "rename" {
		dpaths = cstrings(dst, count)
	}
	buf := make([]byte, max(size, 1))[:size]
	for i := range buf {
		buf[i] = byte(i*131 + 7)
	}
	if op != "create" {
		for _, p := range paths {
			if err := create(p, buf); err != nil {
				return fmt.Errorf("setup: create %s: %w", name(p), err)
			}
		}
	}

	// stat's dirent buffer, mapped in before the clock starts: a page
	// fault costs microseconds on a VM, and a Go slice growing by append
	// faults in every page of every copy, where floor.c's realloc of a
	// large block moves pages with mremap.
	var raw []byte
	if op == "stat" {
		raw = make([]byte, count*64+64<<10)
		for i := 0; i < len(raw); i += 4096 {
			raw[i] = 1
		}
		raw = raw[:0]
	}
	// No garbage collection inside the timed loop: this is the limit of a
	// Go loop, not of Go's collector.
	runtime.GC()
	debug.SetGCPercent(-1)
	l := loop{start: time.Now(), next: yieldEvery}
	ops := 0
	switch op {
	case "create":
		for _, p := range paths {
			if err := create(p, buf); err != nil {
				return fmt.Errorf("create %s: %w", name(p), err)
			}
			l.lap()
		}
		ops = count
	case "stat":
		if ops, err = statAll(src, raw, &l); err != nil {
			return err
		}
	case "rename":
		for i, p := range paths {
			if err := rename(p, dpaths[i]); err != nil {
				return fmt.Errorf("rename %s: %w", name(p), err)
			}
			l.lap()
		}
		ops = count
	case "unlink":
		for _, p := range paths {
			if err := unlink(p); err != nil {
				return fmt.Errorf("unlink %s: %w", name(p), err)
			}
			l.lap()
		}
		ops = count
	}
	secs := time.Duration(l.last).Seconds()

	// Teardown: what is left, so the next run starts from the same layout.
	left := paths
	switch op {
	case "unlink":
		left = nil
	case "rename":
		left = dpaths
	}
	for _, p := range left {
		if err := unlink(p); err != nil && err != unix.ENOENT {
			return fmt.Errorf("teardown: unlink %s: %w", name(p), err)
		}
	}
	fmt.Printf("op=%s nprocs=1 count=%d size=%d ops=%d seconds=%.6f ops_per_sec=%.1f max_op_ns=%d\n",
		op, count, size, ops, secs, float64(ops)/secs, l.maxNs)
	return nil
}

// loop is the timing every Go tool that measures each op needs: one clock
// read per op, an op's end being the next one's start, and a yield every
// yieldEvery. The latency is kept (a maximum, so the compiler cannot drop
// the clock read) but goes into no histogram.
type loop struct {
	start      time.Time
	last, next int64
	maxNs      int64
}

func (l *loop) lap() {
	now := int64(time.Since(l.start))
	if d := now - l.last; d > l.maxNs {
		l.maxNs = d
	}
	l.last = now
	if now >= l.next {
		runtime.Gosched()
		l.next = now + yieldEvery
	}
}

// cstrings returns the NUL-terminated names dir/f0.<i>, built before the
// timed loop as floor.c and prism build theirs (x/sys/unix's string
// wrappers would allocate one per call).
func cstrings(dir string, n int) [][]byte {
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = append([]byte(dir+"/f0."+strconv.Itoa(i)), 0)
	}
	return ps
}

func name(p []byte) string { return string(p[:len(p)-1]) }

// unlink and rename issue the *at syscalls on prepared names with the
// runtime's Syscall (entersyscall/exitsyscall), as prism does.
func unlink(p []byte) error {
	for {
		_, _, e := unix.Syscall(unix.SYS_UNLINKAT, atFDCWD, uintptr(unsafe.Pointer(&p[0])), 0)
		if e != unix.EINTR {
			return errnoErr(e)
		}
	}
}

func rename(from, to []byte) error {
	for {
		_, _, e := unix.Syscall6(unix.SYS_RENAMEAT, atFDCWD, uintptr(unsafe.Pointer(&from[0])),
			atFDCWD, uintptr(unsafe.Pointer(&to[0])), 0, 0)
		if e != unix.EINTR {
			return errnoErr(e)
		}
	}
}

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// create is floor.c's create_one: open O_CREAT|O_EXCL, write, close.
func create(p, buf []byte) error {
	fd, _, e := unix.Syscall6(unix.SYS_OPENAT, atFDCWD, uintptr(unsafe.Pointer(&p[0])),
		uintptr(unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC), 0o644, 0, 0)
	if e != 0 {
		return e
	}
	var err error
	if len(buf) > 0 {
		_, _, e = unix.Syscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
		if e != 0 {
			err = e
		}
	}
	if _, _, e = unix.Syscall(unix.SYS_CLOSE, fd, 0, 0); e != 0 && err == nil {
		err = e
	}
	return err
}

// statAll is floor.c's stat loop: getdents64 the whole directory, then
// fstatat every entry relative to it, naming each by its NUL-terminated
// d_name inside the dirent buffer.
func statAll(dir string, raw []byte, l *loop) (int, error) {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(dfd)
	scratch := make([]byte, 64<<10)
	for {
		n, err := unix.Getdents(dfd, scratch)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("getdents64 %s: %w", dir, err)
		}
		if n == 0 {
			break
		}
		raw = append(raw, scratch[:n]...)
	}
	var st unix.Stat_t
	ops := 0
	const nameOff = 19 // d_ino 8, d_off 8, d_reclen 2, d_type 1
	for off := 0; off < len(raw); {
		reclen := int(*(*uint16)(unsafe.Pointer(&raw[off+16])))
		nm := raw[off+nameOff:]
		off += reclen
		if nm[0] == '.' && (nm[1] == 0 || nm[1] == '.' && nm[2] == 0) {
			continue
		}
		e := unix.EINTR
		for e == unix.EINTR {
			_, _, e = unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(dfd), uintptr(unsafe.Pointer(&nm[0])),
				uintptr(unsafe.Pointer(&st)), 0, 0, 0)
		}
		if e != 0 {
			return ops, fmt.Errorf("fstatat %s: %w", dir, e)
		}
		ops++
		l.lap()
	}
	return ops, nil
}
