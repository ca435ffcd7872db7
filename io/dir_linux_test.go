package io

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openRoot opens dir as a Dir for the test's lifetime.
func openRoot(t testing.TB, dir string) *Dir {
	t.Helper()
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func makeSub(t testing.TB, d *Dir, name string) *Dir {
	t.Helper()
	s, err := d.MakeSub(name, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func inode(t testing.TB, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// bothResolutions runs f once with openat2 and once with the component
// walk that replaces it on kernels without openat2.
func bothResolutions(t *testing.T, f func(t *testing.T)) {
	saved := openat2State.Load()
	t.Cleanup(func() { openat2State.Store(saved) })
	openat2State.Store(0)
	if useOpenat2() {
		t.Run("openat2", f)
	} else {
		t.Log("this kernel has no openat2: only the walk is tested")
	}
	openat2State.Store(openat2No)
	if useOpenat2() {
		t.Fatal("forcing the walk did not take")
	}
	t.Run("walk", f)
	openat2State.Store(saved)
}

func TestDirOpsRoundTrip(t *testing.T) {
	bothResolutions(t, func(t *testing.T) {
		base := t.TempDir()
		root := openRoot(t, base)
		run := makeSub(t, root, "run")
		other := makeSub(t, run, "other")
		if run.Path() != filepath.Join(base, "run") || other.Path() != filepath.Join(base, "run", "other") {
			t.Fatalf("paths %s %s", run.Path(), other.Path())
		}
		a, b := MustName("a"), MustName("b")
		fd, err := run.Open(a, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Write(fd, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		Close(fd)
		if _, err := run.Open(a, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644); err != unix.EEXIST {
			t.Fatalf("O_EXCL again: %v", err)
		}
		var st unix.Stat_t
		if err := run.Stat(a, &st); err != nil || st.Size != 5 || st.Ino != inode(t, filepath.Join(base, "run", "a")) {
			t.Fatalf("stat: size %d ino %d err %v", st.Size, st.Ino, err)
		}
		if err := run.Rename(a, other, b); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(base, "run", "other", "b")); err != nil || string(got) != "hello" {
			t.Fatalf("after rename: %q %v", got, err)
		}
		// Several components, through the resolution under test.
		ob := MustName("other/b")
		if err := run.Link(ob, run, MustName("hard")); err != nil {
			t.Fatal(err)
		}
		if err := run.Symlink(MustPath("other/b"), MustName("other/link")); err != nil {
			t.Fatal(err)
		}
		if err := run.Stat(MustName("other/link"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
			t.Fatalf("Stat followed the link: mode %#o err %v", st.Mode, err)
		}
		if _, err := run.Open(MustName("other/link"), unix.O_RDONLY, 0); err != unix.ELOOP {
			t.Fatalf("open of a symlink: %v, want ELOOP", err)
		}
		if err := run.Mkdir(MustName("other/sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		fd, err = run.Open(MustName("other/sub/deep"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		Close(fd)
		var names []string
		_, raw, err := other.ReadDir(make([]byte, 64), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := EachName(raw, func(name []byte) error {
			names = append(names, unix.ByteSliceToString(name))
			return other.StatName(name, &st)
		}); err != nil {
			t.Fatal(err)
		}
		sort.Strings(names)
		if strings.Join(names, " ") != "b link sub" {
			t.Fatalf("listing %v", names)
		}
		for _, n := range []string{"other/sub/deep", "other/link", "other/b", "hard"} {
			if err := run.Unlink(MustName(n)); err != nil {
				t.Fatalf("unlink %s: %v", n, err)
			}
		}
		if err := run.Rmdir(MustName("other/sub")); err != nil {
			t.Fatal(err)
		}
		if ents, _ := os.ReadDir(filepath.Join(base, "run", "other")); len(ents) != 0 {
			t.Fatalf("left %v", ents)
		}
		if err := run.Unlink(MustName("other/b")); err != unix.ENOENT {
			t.Fatalf("unlink of a missing name: %v", err)
		}
		if err := run.WriteFile("marker", []byte("id\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := run.WriteFile("marker", []byte("x"), 0o644); !errors.Is(err, unix.EEXIST) {
			t.Fatalf("WriteFile replaced a file: %v", err)
		}
		if got, err := run.ReadFile("marker", 10); err != nil || string(got) != "id\n" {
			t.Fatalf("ReadFile %q %v", got, err)
		}
		if _, err := run.ReadFile("marker", 2); err == nil || !strings.Contains(err.Error(), "more than the 2 expected") {
			t.Fatalf("ReadFile over the limit: %v", err)
		}
		if err := unix.Mkfifo(filepath.Join(base, "run", "fifo"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := run.ReadFile("fifo", 10); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("ReadFile of a FIFO: %v", err)
		}
		if err := run.Sync(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestBeneathRefusesLinks: a name of several components never leaves the
// directory through a symbolic link, whichever resolution the kernel
// allows, and both report the same errno.
func TestBeneathRefusesLinks(t *testing.T) {
	bothResolutions(t, func(t *testing.T) {
		base := t.TempDir()
		outside := t.TempDir()
		secret := filepath.Join(outside, "secret")
		if err := os.WriteFile(secret, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(os.MkdirAll(filepath.Join(base, "a", "b"), 0o755))
		must(os.WriteFile(filepath.Join(base, "a", "b", "c"), []byte("c"), 0o644))
		must(os.WriteFile(filepath.Join(base, "a", "f"), nil, 0o644))
		must(os.Symlink("a", filepath.Join(base, "l")))
		must(os.Symlink("b/c", filepath.Join(base, "a", "lf")))
		must(os.Symlink(outside, filepath.Join(base, "out")))
		must(os.Symlink("/proc/self/root", filepath.Join(base, "proc")))
		d := openRoot(t, base)

		fd, err := d.Open(MustName("a/b/c"), unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		unix.Fstat(fd, &st)
		Close(fd)
		if st.Ino != inode(t, filepath.Join(base, "a", "b", "c")) {
			t.Fatal("a/b/c opened another file")
		}
		for _, c := range []struct {
			name string
			want unix.Errno
		}{
			{"l/b/c", unix.ELOOP},
			{"a/lf", unix.ELOOP},
			{"out/secret", unix.ELOOP},
			{"proc/etc/passwd", unix.ELOOP},
			{"a/f/x", unix.ENOTDIR},
			{"a/missing/x", unix.ENOENT},
		} {
			n := MustName(c.name)
			if fd, err := d.Open(n, unix.O_RDONLY, 0); err != c.want {
				if err == nil {
					Close(fd)
				}
				t.Errorf("Open(%s) = %v, want %v", c.name, err, c.want)
			}
			if err := d.Stat(MustName(c.name+"/x"), &st); err != c.want {
				t.Errorf("Stat(%s/x) = %v, want %v", c.name, err, c.want)
			}
		}
		if err := d.Unlink(MustName("out/secret")); err != unix.ELOOP {
			t.Errorf("Unlink through a link: %v", err)
		}
		if err := d.Mkdir(MustName("out/new"), 0o755); err != unix.ELOOP {
			t.Errorf("Mkdir through a link: %v", err)
		}
		if err := d.Rename(MustName("a/b/c"), d, MustName("out/c")); err != unix.ELOOP {
			t.Errorf("Rename through a link: %v", err)
		}
		if fd, err := d.Open(MustName("out/new"), unix.O_CREAT|unix.O_WRONLY, 0o644); err != unix.ELOOP {
			if err == nil {
				Close(fd)
			}
			t.Errorf("create through a link: %v", err)
		}
		if b, err := os.ReadFile(secret); err != nil || string(b) != "keep" {
			t.Fatalf("the file outside changed: %q %v", b, err)
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 1 {
			t.Fatalf("something was created outside: %v", ents)
		}
		if w := d.Wrap("open", MustName("l/b/c"), unix.ELOOP); !strings.Contains(w.Error(), "prism never follows links") || !errors.Is(w, unix.ELOOP) {
			t.Errorf("Wrap(ELOOP): %v", w)
		}
	})
}

// TestOPathCannotList is why a Dir holds a readable descriptor: the
// kernel refuses getdents64 and fsync on O_PATH ones.
func TestOPathCannotList(t *testing.T) {
	fd, err := unix.Open(t.TempDir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, _, err := ReadDir(fd, make([]byte, 4096), nil); err != unix.EBADF {
		t.Errorf("getdents64 on O_PATH: %v, want EBADF", err)
	}
	if err := Fsync(fd); err != unix.EBADF {
		t.Errorf("fsync on O_PATH: %v, want EBADF", err)
	}
}

func TestSubdirectoryChecks(t *testing.T) {
	base := t.TempDir()
	root := openRoot(t, base)
	run := makeSub(t, root, "run")
	if _, err := root.MakeSub("run", 0o755); !errors.Is(err, unix.EEXIST) {
		t.Fatalf("MakeSub of an existing name: %v", err)
	}
	for _, bad := range []string{"a/b", "..", ""} {
		if _, err := root.MakeSub(bad, 0o755); !errors.Is(err, ErrBadName) {
			t.Errorf("MakeSub(%q): %v", bad, err)
		}
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := root.OpenSub("link"); !errors.Is(err, unix.ELOOP) {
		t.Errorf("OpenSub of a symlink: %v, want ELOOP", err)
	}
	if err := os.WriteFile(filepath.Join(base, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := root.OpenSub("file"); !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("OpenSub of a file: %v, want ENOTDIR", err)
	}
	// A directory that is not empty cannot be the one mkdir just made.
	if err := os.WriteFile(filepath.Join(base, "run", "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := root.adopt(MustName("run"), true)
	var re *ReplacedError
	if !errors.As(err, &re) || re.Path != run.Path() || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("adopting a full directory as fresh: %v", err)
	}
	again, err := root.OpenSub("run")
	if err != nil {
		t.Fatal(err)
	}
	again.Close()
	if os.Geteuid() == 0 {
		if err := os.Chown(filepath.Join(base, "run"), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := root.OpenSub("run"); !errors.As(err, &re) || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("OpenSub of another user's directory: %v", err)
		}
	}
	// EnsureSub creates what is missing and opens what exists.
	deep, err := root.EnsureSub("p/q/r", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if deep.Path() != filepath.Join(base, "p", "q", "r") || inode(t, deep.Path()) != deep.ino {
		t.Fatalf("EnsureSub made %s", deep.Path())
	}
	if len(deep.owned) != 2 || deep.parent.name.String() != "q" {
		t.Fatalf("EnsureSub chain: %d owned", len(deep.owned))
	}
	same, err := root.EnsureSub("p/q/r", 0o755)
	if err != nil || same.ino != deep.ino {
		t.Fatalf("EnsureSub of an existing path: %v", err)
	}
	same.Close()
	owned := deep.owned
	deep.Close()
	for _, o := range owned {
		if o.fd != -1 {
			t.Error("Close left an intermediate directory open")
		}
	}
	if err := deep.Unlink(MustName("x")); err != unix.EBADF {
		t.Errorf("an op on a closed Dir: %v, want EBADF", err)
	}
	if _, err := root.EnsureSub("link/x", 0o755); !errors.Is(err, unix.ELOOP) {
		t.Errorf("EnsureSub through a symlink: %v", err)
	}
}

// TestVerifyDetectsReplacement swaps the run directory for a symlink, for
// another directory and for nothing, from this process, and checks that
// Verify names the replaced directory each time, that Wrap turns the
// errnos a replacement gives into a *ReplacedError, and that ops through
// the Dirs meanwhile stay in prism's own directory.
func TestVerifyDetectsReplacement(t *testing.T) {
	base := t.TempDir()
	victim := filepath.Join(base, "victim")
	if err := os.MkdirAll(filepath.Join(victim, "files"), 0o755); err != nil {
		t.Fatal(err)
	}
	root := openRoot(t, base)
	run := makeSub(t, root, "run")
	files := makeSub(t, run, "files")
	runPath := filepath.Join(base, "run")
	if err := files.Verify(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		swap func() error
		now  string
	}{
		{func() error { return os.Symlink(victim, runPath) }, "a symbolic link"},
		{func() error { return os.Mkdir(runPath, 0o755) }, "another directory"},
		{func() error { return nil }, "nothing has its name"},
	} {
		if err := os.Rename(runPath, runPath+".moved"); err != nil {
			t.Fatal(err)
		}
		if err := c.swap(); err != nil {
			t.Fatal(err)
		}
		err := files.Verify()
		var re *ReplacedError
		if !errors.As(err, &re) || !errors.Is(err, ErrReplaced) || re.Path != runPath || !strings.Contains(re.Now, c.now) {
			t.Fatalf("Verify after the swap (%s): %v", c.now, err)
		}
		if !strings.HasPrefix(err.Error(), "run directory was replaced: "+runPath+" is no longer the directory prism created (") {
			t.Errorf("message %q", err)
		}
		// The ops go on in prism's directory, wherever it is now.
		n := MustName("f0")
		fd, oerr := files.Open(n, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
		if oerr != nil {
			t.Fatal(oerr)
		}
		Close(fd)
		if _, err := os.Lstat(filepath.Join(runPath+".moved", "files", "f0")); err != nil {
			t.Fatalf("the file is not in prism's directory: %v", err)
		}
		if ents, _ := os.ReadDir(filepath.Join(victim, "files")); len(ents) != 0 {
			t.Fatalf("an op reached the victim: %v", ents)
		}
		files.Unlink(n)
		w := files.Wrap("unlink", n, unix.ENOENT)
		if !errors.Is(w, ErrReplaced) || !errors.Is(w, unix.ENOENT) || !errors.As(w, new(*OpError)) {
			t.Errorf("Wrap(ENOENT) during a swap: %v", w)
		}
		if w := files.Wrap("write", n, unix.EIO); errors.Is(w, ErrReplaced) {
			t.Errorf("Wrap(EIO) looked for a replacement: %v", w)
		}
		// Undo: what the swap put there goes, prism's directory comes back.
		os.Remove(runPath)
		if err := os.Rename(runPath+".moved", runPath); err != nil {
			t.Fatal(err)
		}
		if err := files.Verify(); err != nil {
			t.Fatalf("Verify after the undo: %v", err)
		}
	}
	// Remove of a replaced directory empties prism's own directory through
	// its descriptor, and leaves the name, which now leads elsewhere.
	canary := filepath.Join(victim, "files", "f0")
	if err := os.WriteFile(canary, []byte("canary"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(runPath, runPath+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, runPath); err != nil {
		t.Fatal(err)
	}
	if err := run.Remove(); !errors.Is(err, ErrReplaced) {
		t.Errorf("Remove of a replaced directory: %v", err)
	}
	if ents, err := os.ReadDir(runPath + ".moved"); err != nil || len(ents) != 0 {
		t.Errorf("prism's moved directory: %v %v", ents, err)
	}
	if b, err := os.ReadFile(canary); err != nil || string(b) != "canary" {
		t.Fatalf("the victim's file: %q %v", b, err)
	}
	if fi, err := os.Lstat(runPath); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("Remove touched the name that leads elsewhere: %v %v", fi, err)
	}
	os.Remove(runPath)
	if err := os.Rename(runPath+".moved", runPath); err != nil {
		t.Fatal(err)
	}
	if w := run.Wrap("unlink", MustName("f0"), unix.ENOENT); errors.Is(w, ErrReplaced) || w.Error() != "unlink "+filepath.Join(runPath, "f0")+": no such file or directory" {
		t.Errorf("Wrap(ENOENT) without a swap: %v", w)
	}
}

// TestRemoveContents builds a tree with links to a victim outside it (to
// a file, to a directory, a hard link, /), a FIFO and a mount point, and
// checks that removal takes every name in it, none of the victim, and
// does not enter the mounted filesystem.
func TestRemoveContents(t *testing.T) {
	base := t.TempDir()
	victim := t.TempDir()
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(victim, fmt.Sprintf("v%d", i)), []byte("victim"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root := openRoot(t, base)
	run := makeSub(t, root, "run")
	tree := filepath.Join(base, "run")
	dir := tree
	for depth := range 6 {
		dir = filepath.Join(dir, fmt.Sprintf("d%d", depth))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f := range 50 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", f)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, l := range []struct{ to, name string }{{victim, "dirlink"}, {filepath.Join(victim, "v0"), "filelink"}, {"/", "slash"}, {"..", "up"}} {
			if err := os.Symlink(l.to, filepath.Join(dir, l.name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Link(filepath.Join(victim, "v1"), filepath.Join(tree, "hard")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(tree, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run.RemoveContents(); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(tree); err != nil || len(ents) != 0 {
		t.Fatalf("left %v (%v)", ents, err)
	}
	checkVictim := func() {
		t.Helper()
		ents, _ := os.ReadDir(victim)
		if len(ents) != 5 {
			t.Fatalf("victim has %d files, want 5", len(ents))
		}
		for _, e := range ents {
			if b, err := os.ReadFile(filepath.Join(victim, e.Name())); err != nil || string(b) != "victim" {
				t.Fatalf("victim %s: %q %v", e.Name(), b, err)
			}
		}
	}
	checkVictim()

	if os.Geteuid() == 0 {
		mnt := filepath.Join(tree, "mnt")
		os.Mkdir(mnt, 0o755)
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "io-safe-rm", mnt).CombinedOutput(); err != nil {
			t.Fatalf("mount tmpfs: %v %s", err, out)
		}
		defer exec.Command("umount", mnt).Run()
		if err := os.WriteFile(filepath.Join(mnt, "other-fs"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(tree, "beside"), nil, 0o644)
		err := run.RemoveContents()
		if !errors.Is(err, ErrOtherFilesystem) || !strings.Contains(err.Error(), mnt) {
			t.Fatalf("removal across a mount point: %v", err)
		}
		if _, err := os.Stat(filepath.Join(mnt, "other-fs")); err != nil {
			t.Fatalf("removal entered the mounted filesystem: %v", err)
		}
		if _, err := os.Lstat(filepath.Join(tree, "beside")); !os.IsNotExist(err) {
			t.Fatalf("the entry beside the mount point was left: %v", err)
		}
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Fatalf("umount: %v %s", err, out)
		}
	}
	if err := run.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(tree); !os.IsNotExist(err) {
		t.Fatalf("Remove left %s: %v", tree, err)
	}
	if err := root.Remove(); err == nil || !strings.Contains(err.Error(), "prism did not create it") {
		t.Fatalf("Remove of a directory prism did not make: %v", err)
	}
	checkVictim()
}

// TestRemoveSwapBetweenReadAndOpen puts a symbolic link to a victim in
// place of a directory exactly between removal's readdir and its open:
// the open must refuse the link, and the next pass remove the link itself.
func TestRemoveSwapBetweenReadAndOpen(t *testing.T) {
	base := t.TempDir()
	victim := t.TempDir()
	if err := os.WriteFile(filepath.Join(victim, "keep"), []byte("victim"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := openRoot(t, base)
	run := makeSub(t, root, "run")
	sub := filepath.Join(base, "run", "sub")
	if err := os.MkdirAll(filepath.Join(sub, "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	swapped := 0
	beforeEnter = func(path string) {
		if path != sub || swapped > 0 {
			return
		}
		swapped++
		if err := os.Rename(sub, sub+".away"); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(victim, sub); err != nil {
			t.Error(err)
		}
	}
	defer func() { beforeEnter = nil }()
	if err := run.RemoveContents(); err != nil {
		t.Fatal(err)
	}
	if swapped != 1 {
		t.Fatalf("the hook swapped %d times", swapped)
	}
	if b, err := os.ReadFile(filepath.Join(victim, "keep")); err != nil || string(b) != "victim" {
		t.Fatalf("removal followed the link swapped in: %q %v", b, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(base, "run")); len(ents) != 0 {
		t.Fatalf("left %v", ents)
	}
}

func TestRemoveReportsWhatItCannot(t *testing.T) {
	base := t.TempDir()
	root := openRoot(t, base)
	run := makeSub(t, root, "run")
	deep := filepath.Join(base, "run")
	for range MaxRemoveDepth + 3 {
		deep = filepath.Join(deep, "d")
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		os.WriteFile(filepath.Join(base, "run", fmt.Sprintf("f%d", i)), nil, 0o644)
	}
	err := run.RemoveContents()
	if !errors.Is(err, ErrTooDeep) {
		t.Fatalf("a tree deeper than %d: %v", MaxRemoveDepth, err)
	}
	if _, err := os.Lstat(filepath.Join(base, "run", "f0")); !os.IsNotExist(err) {
		t.Fatal("files beside the deep tree were left")
	}
	// Unremovable entries (immutable, as root on ext4/xfs) end the
	// removal with an error counting them, not a loop.
	if os.Geteuid() != 0 {
		return
	}
	os.RemoveAll(filepath.Join(base, "run", "d"))
	for i := range 3 {
		f := filepath.Join(base, "run", "sub", fmt.Sprintf("keep%d", i))
		os.MkdirAll(filepath.Dir(f), 0o755)
		os.WriteFile(f, nil, 0o644)
		if out, err := exec.Command("chattr", "+i", f).CombinedOutput(); err != nil {
			t.Skipf("chattr +i: %v %s", err, out)
		}
		defer exec.Command("chattr", "-i", f).Run()
	}
	err = run.RemoveContents()
	if !errors.Is(err, unix.EPERM) || !strings.Contains(err.Error(), "keep") || !strings.Contains(err.Error(), "and 2 more entries not removed") {
		t.Fatalf("immutable files: %v", err)
	}
}

func TestHotPathAllocatesNothing(t *testing.T) {
	bothResolutions(t, func(t *testing.T) {
		root := openRoot(t, t.TempDir())
		run := makeSub(t, root, "run")
		sub := makeSub(t, run, "sub")
		one, deep, dir := MustName("f"), MustName("sub/g"), MustName("sub/d")
		moved := MustName("sub/moved")
		var st unix.Stat_t
		scratch, raw := make([]byte, 8192), make([]byte, 0, 8192)
		for _, c := range []struct {
			name string
			f    func()
		}{
			{"create+close+stat+unlink", func() {
				fd, _ := run.Open(one, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
				Close(fd)
				_ = run.Stat(one, &st)
				_ = run.Unlink(one)
			}},
			{"several components", func() {
				fd, _ := run.Open(deep, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
				Close(fd)
				_ = run.Stat(deep, &st)
				_ = run.Rename(deep, run, moved)
				_ = run.Unlink(moved)
			}},
			{"mkdir+rmdir", func() {
				_ = run.Mkdir(dir, 0o755)
				_ = run.Rmdir(dir)
			}},
			{"readdir+statname", func() {
				_, raw, _ = sub.ReadDir(scratch, raw[:0])
				_, _ = EachName(raw, func(name []byte) error { return sub.StatName(name, &st) })
			}},
		} {
			if n := testing.AllocsPerRun(200, c.f); n != 0 {
				t.Errorf("%s allocates %.1f times per run", c.name, n)
			}
		}
	})
}

// BenchmarkCreateStatUnlink compares one create (open O_CREAT|O_EXCL and
// close), stat and unlink through a full path from the working directory
// with the same ops on a one-component name through a Dir.
func BenchmarkCreateStatUnlink(b *testing.B) {
	base := b.TempDir()
	root := openRoot(b, base)
	files, err := root.EnsureSub("prism-run/03-create_files/r0/files", 0o755)
	if err != nil {
		b.Fatal(err)
	}
	defer files.Close()
	var st unix.Stat_t
	b.Run("path", func(b *testing.B) {
		p := MustPath(files.Join("f0.17"))
		for b.Loop() {
			fd, err := Open(unix.AT_FDCWD, p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			Close(fd)
			Stat(unix.AT_FDCWD, p, &st)
			Unlink(unix.AT_FDCWD, p)
		}
	})
	b.Run("at", func(b *testing.B) {
		n := MustName("f0.17")
		for b.Loop() {
			fd, err := files.Open(n, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			Close(fd)
			files.Stat(n, &st)
			files.Unlink(n)
		}
	})
}

// OpenPath opens an earlier phase's directory several levels down, and
// refuses a link anywhere on the way.
func TestOpenPath(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "01-create_dataset", "data"), 0o755)
	os.Symlink(filepath.Join(root, "01-create_dataset"), filepath.Join(root, "link"))
	d := openRoot(t, root)
	sub, err := d.OpenPath("01-create_dataset/data")
	if err != nil {
		t.Fatal(err)
	}
	if sub.Path() != filepath.Join(root, "01-create_dataset", "data") || inode(t, sub.Path()) == 0 {
		t.Errorf("opened %s", sub.Path())
	}
	sub.Close()
	if _, err := d.OpenPath("link/data"); err == nil {
		t.Error("OpenPath went through a symbolic link")
	}
	if _, err := d.OpenPath("01-create_dataset/missing"); err == nil {
		t.Error("OpenPath of a missing directory succeeded")
	}
	if _, err := d.OpenPath("../x"); !errors.Is(err, ErrBadName) {
		t.Errorf("OpenPath(../x): %v", err)
	}
}
