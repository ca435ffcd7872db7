package io

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestSyscallsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	a := MustPath(filepath.Join(dir, "a"))
	b := MustPath(filepath.Join(dir, "b"))
	sub := MustPath(filepath.Join(dir, "sub"))
	fd, err := Open(unix.AT_FDCWD, a, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := Write(fd, []byte("hello")); err != nil || n != 5 {
		t.Fatalf("write %d %v", n, err)
	}
	if err := Close(fd); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(unix.AT_FDCWD, a, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644); err != unix.EEXIST {
		t.Fatalf("O_EXCL on existing file: %v, want EEXIST", err)
	}
	var st unix.Stat_t
	if err := Stat(unix.AT_FDCWD, a, &st); err != nil || st.Size != 5 {
		t.Fatalf("stat size %d err %v", st.Size, err)
	}
	if err := Rename(a, b); err != nil {
		t.Fatal(err)
	}
	if err := Mkdir(unix.AT_FDCWD, sub, 0o755); err != nil {
		t.Fatal(err)
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	_, raw, err := ReadDir(dfd, make([]byte, 64), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := EachName(raw, func(name []byte) error {
		var st unix.Stat_t
		names = append(names, unix.ByteSliceToString(name))
		return StatName(dfd, name, &st)
	})
	unix.Close(dfd)
	sort.Strings(names)
	if err != nil || n != 2 || len(names) != 2 || names[0] != "b" || names[1] != "sub" {
		t.Fatalf("dirents n=%d names=%v err=%v", n, names, err)
	}
	if err := Unlink(unix.AT_FDCWD, b); err != nil {
		t.Fatal(err)
	}
	if err := Rmdir(unix.AT_FDCWD, sub); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left %v", ents)
	}
	if err := Unlink(unix.AT_FDCWD, b); err != unix.ENOENT {
		t.Fatalf("unlink missing: %v", err)
	}
	if _, err := NewPath("a\x00b"); err == nil {
		t.Fatal("NUL in path accepted")
	}
}

func TestStatAllocatesNothing(t *testing.T) {
	p := MustPath(t.TempDir())
	var st unix.Stat_t
	if n := testing.AllocsPerRun(100, func() { _ = Stat(unix.AT_FDCWD, p, &st) }); n != 0 {
		t.Fatalf("Stat allocates %.1f", n)
	}
}

func TestMountinfo(t *testing.T) {
	line := `36 35 98:0 /mnt1 /mnt/with\040space rw,noatime master:1 - ext3 /dev/root rw,errors=continue`
	m, ok := parseMountinfoLine(line)
	if !ok || m.point != "/mnt/with space" || m.fstype != "ext3" || m.source != "/dev/root" || m.options != "rw,noatime,rw,errors=continue" {
		t.Fatalf("%+v %v", m, ok)
	}
	if _, ok := parseMountinfoLine("garbage"); ok {
		t.Fatal("garbage parsed")
	}
	info, err := StatFS(t.TempDir())
	if err != nil || info.Type == "" || info.MountPoint == "" {
		t.Fatalf("%+v %v", info, err)
	}
	if _, err := StatFS("/nonexistent/x"); err == nil {
		t.Fatal("statfs of a missing path succeeded")
	}
	if within("/datafoo", "/data") || !within("/data/x", "/data") || !within("/x", "/") {
		t.Fatal("within")
	}
}

func TestEachNameRejectsGarbage(t *testing.T) {
	for _, raw := range [][]byte{make([]byte, 10), make([]byte, 40)} {
		if _, err := EachName(raw, nil); err == nil {
			t.Fatalf("garbage of %d bytes accepted", len(raw))
		}
	}
}

func TestTransfersAllocateNothing(t *testing.T) {
	fd, err := unix.Open(filepath.Join(t.TempDir(), "f"), unix.O_CREAT|unix.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	b := make([]byte, 4096)
	if n := testing.AllocsPerRun(100, func() {
		_, _ = PwriteFull(fd, b, 8192)
		_, _ = PreadFull(fd, b, 8192)
	}); n != 0 {
		t.Fatalf("pread/pwrite allocate %.1f times", n)
	}
	if _, err := PreadFull(fd, b, 10000); err != ErrShortIO {
		t.Fatalf("read past the end: %v, want ErrShortIO", err)
	}
}

func TestReadInputRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "plan.toml")
	os.WriteFile(small, []byte("x = 1\n"), 0o644)
	if b, err := ReadInput(small, 100, time.Second); err != nil || string(b) != "x = 1\n" {
		t.Fatalf("a small file: %q, %v", b, err)
	}
	big := filepath.Join(dir, "big")
	os.WriteFile(big, make([]byte, 101), 0o644)
	if _, err := ReadInput(big, 100, time.Second); !errors.Is(err, ErrInputTooLarge) {
		t.Errorf("101 bytes with a limit of 100: %v", err)
	}
	if _, err := ReadInput("/dev/zero", 100, time.Second); err == nil || !strings.Contains(err.Error(), "character device") {
		t.Errorf("/dev/zero: %v", err)
	}
	if _, err := ReadInput(dir, 100, time.Second); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("a directory: %v", err)
	}
	// A FIFO nobody writes: the deadline, not a hang.
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := ReadInput(fifo, 100, 200*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no data after") {
		t.Errorf("a FIFO without a writer: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("ReadInput waited %s past its 200ms deadline", time.Since(start))
	}
	// A FIFO that is written: read whole. Another FIFO: the first call's
	// reader is still blocked in its open and would take the data.
	fifo = filepath.Join(dir, "fifo2")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err == nil {
			f.Write([]byte("[plan]\n"))
			f.Close()
		}
	}()
	if b, err := ReadInput(fifo, 100, 5*time.Second); err != nil || string(b) != "[plan]\n" {
		t.Errorf("a written FIFO: %q, %v", b, err)
	}
}
