package io

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dirFlags opens a directory a Dir holds: never through a symbolic link,
// and readable, because getdents64 and fsync refuse O_PATH descriptors.
const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// dot names a directory relative to its own descriptor: opening it gives a
// second descriptor of the same directory, with its own offset.
var dot = []byte{'.', 0}

// OpenDir opens the existing directory at path, following symbolic links
// in path: it is the user's directory (a workdir, a dataset), and where it
// is is theirs to choose. What prism creates below it is reached only
// through the returned Dir. Verify checks nothing above a Dir from
// OpenDir.
func OpenDir(path string) (*Dir, error) {
	p, err := NewPath(path)
	if err != nil {
		return nil, err
	}
	fd, err := Open(unix.AT_FDCWD, p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, NewOpError("open", path, err)
	}
	return newRoot(fd, path)
}

func newRoot(fd int, path string) (*Dir, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		Close(fd)
		return nil, NewOpError("stat", path, err)
	}
	probeOpenat2(fd)
	return &Dir{fd: fd, path: path, dev: uint64(st.Dev), ino: st.Ino, uid: st.Uid}, nil
}

// MakeSub creates the directory name (one component) in d with mode (less
// the umask) and returns it open; EEXIST when name exists. Before it
// returns, it proves that the directory is the one its mkdir made: opened
// without following a link, the inode its name leads to, owned by this
// process, and empty. A directory someone put in its place between the
// mkdir and the open gives a *ReplacedError and is never adopted.
func (d *Dir) MakeSub(name string, mode uint32) (*Dir, error) {
	n, err := subName(name)
	if err != nil {
		return nil, err
	}
	if err := d.Mkdir(n, mode); err != nil {
		return nil, NewOpError("mkdir", d.Join(name), err)
	}
	return d.adopt(n, true)
}

// OpenSub opens the directory name (one component) in d that prism made
// earlier, on this rank or on another: not through a symbolic link, and
// only if this process's user owns it.
func (d *Dir) OpenSub(name string) (*Dir, error) {
	n, err := subName(name)
	if err != nil {
		return nil, err
	}
	return d.adopt(n, false)
}

// ProcPath is a path that leads to this very directory however the names
// on its path change (/proc/self/fd/N): for code that can only take a path
// — the working directory of a child process (the child changes into it
// before it execs, while it still holds the descriptor), os.OpenRoot, the
// standard library's file functions — so that a directory renamed or
// replaced by a link above d cannot redirect it. It is valid while d is
// open; messages should name Path instead.
func (d *Dir) ProcPath() string { return "/proc/self/fd/" + strconv.Itoa(d.fd) }

// OpenPath opens the existing directory rel (one or several components)
// below d, each component checked as OpenSub checks it: the form for a
// directory an earlier phase made (a dataset, a checkpoint). Closing the
// returned Dir closes the intermediate ones.
func (d *Dir) OpenPath(rel string) (*Dir, error) {
	if _, err := NewName(rel); err != nil {
		return nil, err
	}
	cur := d
	var chain []*Dir
	start := 0
	for i := 0; i <= len(rel); i++ {
		if i < len(rel) && rel[i] != '/' {
			continue
		}
		sub, err := cur.adopt(MustName(rel[start:i]), false)
		if err != nil {
			for j := len(chain) - 1; j >= 0; j-- {
				chain[j].Close()
			}
			return nil, err
		}
		start = i + 1
		chain = append(chain, sub)
		cur = sub
	}
	cur.owned = chain[:len(chain)-1]
	return cur, nil
}

// EnsureSub opens the directory rel below d, creating each missing
// component with mode: the form for a directory several ranks create at
// once (a phase's shared directory). Each component is checked as OpenSub
// checks it, but need not be empty, since another rank may be filling it
// already. Closing the returned Dir closes the intermediate ones.
func (d *Dir) EnsureSub(rel string, mode uint32) (*Dir, error) {
	if _, err := NewName(rel); err != nil {
		return nil, err
	}
	cur := d
	var chain []*Dir
	fail := func(err error) (*Dir, error) {
		for i := len(chain) - 1; i >= 0; i-- {
			chain[i].Close()
		}
		return nil, err
	}
	start := 0
	for i := 0; i <= len(rel); i++ {
		if i < len(rel) && rel[i] != '/' {
			continue
		}
		n := MustName(rel[start:i])
		start = i + 1
		if err := cur.Mkdir(n, mode); err != nil && err != unix.EEXIST {
			return fail(NewOpError("mkdir", cur.Join(n.s), err))
		}
		sub, err := cur.adopt(n, false)
		if err != nil {
			return fail(err)
		}
		chain = append(chain, sub)
		cur = sub
	}
	cur.owned = chain[:len(chain)-1]
	return cur, nil
}

func subName(name string) (Name, error) {
	n, err := NewName(name)
	if err == nil && !n.Single() {
		err = fmt.Errorf("%w: %q has more than one component (EnsureSub takes a path)", ErrBadName, name)
	}
	return n, err
}

// adopt opens the subdirectory n of d and checks that it is the directory
// prism made: fresh when the caller's mkdir just created it.
func (d *Dir) adopt(n Name, fresh bool) (*Dir, error) {
	path := d.Join(n.s)
	name := unsafe.Pointer(&n.b[0])
	fd, err := openPtr(d.fd, name, dirFlags, 0)
	if err != nil {
		err = nofollowErr(d.fd, name, err)
		if fresh && (err == unix.ENOENT || err == unix.ELOOP || err == unix.ENOTDIR) {
			return nil, &ReplacedError{Path: path, Now: "between mkdir and open its name came to lead to " + describeName(d.fd, name), Err: err}
		}
		return nil, NewOpError("open", path, err)
	}
	var st, byName unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		Close(fd)
		return nil, NewOpError("stat", path, err)
	}
	var why string
	switch err := statPtr(d.fd, name, &byName, unix.AT_SYMLINK_NOFOLLOW); {
	case err == unix.ENOENT:
		why = "nothing has its name now"
	case err != nil:
		Close(fd)
		return nil, NewOpError("stat", path, err)
	case st.Dev != byName.Dev || st.Ino != byName.Ino:
		why = "its name now leads to " + describe(&byName)
	case !owns(fd, st.Uid):
		why = fmt.Sprintf("it is owned by uid %d, not by this process's uid %d", st.Uid, os.Geteuid())
	case fresh:
		empty, err := isEmpty(fd)
		if err != nil {
			Close(fd)
			return nil, NewOpError("readdir", path, err)
		}
		if !empty {
			why = "it is not empty, so it is not the directory mkdir just made"
		}
	}
	if why != "" {
		Close(fd)
		return nil, &ReplacedError{Path: path, Now: why}
	}
	return &Dir{fd: fd, parent: d, name: n, path: path, dev: uint64(st.Dev), ino: st.Ino, uid: st.Uid}, nil
}

// owns reports whether a directory owned by uid is this process's. NFS
// with root_squash gives root's creations to the anonymous user (65534
// unless the export says otherwise), so there root's own directories
// belong to nobody.
func owns(fd int, uid uint32) bool {
	euid := uint32(os.Geteuid())
	if uid == euid {
		return true
	}
	var sf unix.Statfs_t
	return euid == 0 && uid == 65534 && unix.Fstatfs(fd, &sf) == nil && sf.Type == unix.NFS_SUPER_MAGIC
}

// isEmpty reads the directory fd from its start, and rewinds it.
func isEmpty(fd int) (bool, error) {
	var buf [4096]byte
	for {
		n, err := unix.Getdents(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, err
		}
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			return false, err
		}
		for off := 0; off < n; {
			next, _, _, name, err := dirent(buf[:n], off)
			if err != nil {
				return false, err
			}
			if !dotOrDotDot(name) {
				return false, nil
			}
			off = next
		}
		return true, nil // . and .. come first, in one small read
	}
}

func describeName(dirfd int, name unsafe.Pointer) string {
	var st unix.Stat_t
	if err := statPtr(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "nothing (" + err.Error() + ")"
	}
	return describe(&st)
}

// Describe says what st is, in the words of a *ReplacedError's Now: for
// callers that judge a path they opened themselves (the rendezvous
// directory).
func Describe(st *unix.Stat_t) string { return describe(st) }

func describe(st *unix.Stat_t) string {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFDIR:
		return fmt.Sprintf("another directory (inode %d, owner uid %d)", st.Ino, st.Uid)
	case unix.S_IFREG:
		return fmt.Sprintf("a regular file (owner uid %d)", st.Uid)
	}
	return fmt.Sprintf("a file of type %#o", st.Mode&unix.S_IFMT)
}

// Verify checks that d's name, and the name of every directory prism made
// above it, still lead to the directories prism opened: a *ReplacedError
// for the topmost one that does not. It stats one name per level, from
// the parent's descriptor, and never follows a link; callers run it after
// each phase and before removing anything.
func (d *Dir) Verify() error {
	if d.parent == nil {
		return nil
	}
	if err := d.parent.Verify(); err != nil {
		return err
	}
	return d.verifyName()
}

func (d *Dir) verifyName() error {
	var st unix.Stat_t
	switch err := d.parent.Stat(d.name, &st); {
	case err == unix.ENOENT:
		return &ReplacedError{Path: d.path, Now: "nothing has its name now"}
	case err != nil:
		return NewOpError("stat", d.path, err)
	case uint64(st.Dev) != d.dev || st.Ino != d.ino:
		return &ReplacedError{Path: d.path, Now: "its name now leads to " + describe(&st)}
	}
	return nil
}

// Close closes d, and the intermediate Dirs EnsureSub opened for it. Any
// later call on d fails with EBADF, never on another descriptor that got
// the same number.
func (d *Dir) Close() error {
	if d.fd < 0 {
		return nil
	}
	err := Close(d.fd)
	d.fd = -1
	for i := len(d.owned) - 1; i >= 0; i-- {
		d.owned[i].Close()
	}
	d.owned = nil
	return err
}

// Wrap turns the bare errno of an op on n below d into an *OpError naming
// the full path, outside the timed region. When the errno is one a
// replaced directory gives (ENOENT, ELOOP, ENOTDIR, ESTALE), it runs
// Verify first, and a replacement becomes the cause: errors.Is then finds
// both ErrReplaced and the errno.
func (d *Dir) Wrap(op string, n Name, err error) error {
	if err == nil {
		return nil
	}
	path := d.Join(n.s)
	switch err {
	case unix.ENOENT, unix.ELOOP, unix.ENOTDIR, unix.ESTALE:
		var re *ReplacedError
		if errors.As(d.Verify(), &re) {
			cp := *re
			cp.Err = err
			return &OpError{Op: op, Path: path, Off: -1, Err: &cp}
		}
	}
	return &OpError{Op: op, Path: path, Off: -1, Err: err}
}

// The methods below are the timed loops' calls: one syscall each for a
// single-component Name (EINTR retried), nothing allocated, errors bare
// errnos for Wrap to dress outside the timed region. A Name of several
// components is first resolved below d without following any symbolic
// link (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or a walk where the
// kernel lacks it); a link on the way gives ELOOP.

// Open opens n with flags (O_NOFOLLOW and O_CLOEXEC added: a symbolic
// link named n is refused with ELOOP, never followed).
func (d *Dir) Open(n Name, flags int, mode uint32) (int, error) {
	if len(n.b) == 0 {
		return -1, ErrEmptyPath
	}
	if n.dir < 0 {
		fd, err := openPtr(d.fd, unsafe.Pointer(&n.b[0]), flags|unix.O_NOFOLLOW, mode)
		if err != nil {
			err = nofollowErr(d.fd, unsafe.Pointer(&n.b[0]), err)
		}
		return fd, err
	}
	return d.openBeneath(&n, flags|unix.O_NOFOLLOW, mode)
}

// Stat fills st for n itself, as lstat(2): a symbolic link is described,
// not followed.
func (d *Dir) Stat(n Name, st *unix.Stat_t) error {
	fd, last, err := d.parentOf(&n)
	if err != nil {
		return err
	}
	err = statPtr(fd, last, st, unix.AT_SYMLINK_NOFOLLOW)
	d.release(fd)
	return err
}

// StatName is Stat for a NUL-terminated name inside a getdents buffer
// (from ReadDir and EachName): one component of d by construction.
func (d *Dir) StatName(name []byte, st *unix.Stat_t) error {
	if len(name) == 0 {
		return ErrEmptyPath
	}
	return statPtr(d.fd, unsafe.Pointer(&name[0]), st, unix.AT_SYMLINK_NOFOLLOW)
}

// Unlink removes the file (or the symbolic link itself) n.
func (d *Dir) Unlink(n Name) error { return d.atName(&n, unix.SYS_UNLINKAT, 0) }

// Rmdir removes the empty directory n.
func (d *Dir) Rmdir(n Name) error { return d.atName(&n, unix.SYS_UNLINKAT, unix.AT_REMOVEDIR) }

// Mkdir creates the directory n with mode (less the umask). MakeSub also
// opens it.
func (d *Dir) Mkdir(n Name, mode uint32) error { return d.atName(&n, unix.SYS_MKDIRAT, uintptr(mode)) }

func (d *Dir) atName(n *Name, trap, arg uintptr) error {
	fd, last, err := d.parentOf(n)
	if err != nil {
		return err
	}
	err = atPtr(trap, fd, last, arg)
	d.release(fd)
	return err
}

// Rename moves n in d to tn in to (replacing tn, as rename(2) does).
func (d *Dir) Rename(n Name, to *Dir, tn Name) error {
	return twoNames(d, &n, to, &tn, renamePtr)
}

// Link makes tn in to a hard link to n in d; a symbolic link n is linked
// itself, never its target.
func (d *Dir) Link(n Name, to *Dir, tn Name) error {
	return twoNames(d, &n, to, &tn, linkPtr)
}

func twoNames(d *Dir, n *Name, to *Dir, tn *Name, call func(int, unsafe.Pointer, int, unsafe.Pointer) error) error {
	fd1, p1, err := d.parentOf(n)
	if err != nil {
		return err
	}
	fd2, p2, err := to.parentOf(tn)
	if err != nil {
		d.release(fd1)
		return err
	}
	err = call(fd1, p1, fd2, p2)
	d.release(fd1)
	to.release(fd2)
	return err
}

// Symlink creates n as a symbolic link to target (any text: prism never
// follows it; a tar entry's link is checked by the extractor).
func (d *Dir) Symlink(target Path, n Name) error {
	tp, err := ptr(target)
	if err != nil {
		return err
	}
	fd, last, err := d.parentOf(&n)
	if err != nil {
		return err
	}
	err = symlinkPtr(tp, fd, last)
	d.release(fd)
	return err
}

// ReadDir lists d as ReadDir(dirfd, …) does, from the start, through a
// descriptor of its own (so concurrent listings do not share an offset):
// open, getdents64 until the end, close.
func (d *Dir) ReadDir(scratch, into []byte) ([]byte, []byte, error) {
	fd, err := openPtr(d.fd, unsafe.Pointer(&dot[0]), dirFlags, 0)
	if err != nil {
		return scratch, into, err
	}
	scratch, into, err = ReadDir(fd, scratch, into)
	Close(fd)
	return scratch, into, err
}

// Sync flushes d's entries (the creates, renames and unlinks in it) to
// stable storage.
func (d *Dir) Sync() error { return Fsync(d.fd) }

// WriteFile creates the regular file name below d with data and perm; it
// never replaces or follows anything already there (EEXIST).
func (d *Dir) WriteFile(name string, data []byte, perm uint32) error {
	n, err := NewName(name)
	if err != nil {
		return err
	}
	fd, err := d.Open(n, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, perm)
	if err != nil {
		return d.Wrap("create", n, err)
	}
	_, err = Write(fd, data)
	if cerr := Close(fd); err == nil {
		err = cerr
	}
	return d.Wrap("write", n, err)
}

// ReadFile returns the content of the regular file name below d, refusing
// a symbolic link, anything but a regular file (a FIFO would block) and a
// file larger than limit bytes.
func (d *Dir) ReadFile(name string, limit int64) ([]byte, error) {
	n, err := NewName(name)
	if err != nil {
		return nil, err
	}
	fd, err := d.Open(n, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, d.Wrap("open", n, err)
	}
	defer Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, d.Wrap("stat", n, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, d.Wrap("read", n, fmt.Errorf("io: not a regular file (%s)", describe(&st)))
	}
	if st.Size > limit {
		return nil, d.Wrap("read", n, fmt.Errorf("io: %d bytes, more than the %d expected", st.Size, limit))
	}
	b := make([]byte, st.Size)
	m, err := PreadFull(fd, b, 0)
	if err == ErrShortIO {
		err = nil // it shrank since fstat
	}
	return b[:m], d.Wrap("read", n, err)
}
