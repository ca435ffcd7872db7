package io

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A Name of several components is resolved below its Dir by the kernel in
// one call where it can (openat2, Linux 5.6+), and otherwise one
// component at a time. Both refuse every symbolic link on the way (ELOOP),
// so neither can leave the directory: Names have no ".." and are never
// absolute.

// resolveFlags keep openat2 below the directory and off every link, the
// /proc magic links included.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// walkFlags open each directory of a walk: O_PATH is enough to look names
// up in, and needs no read permission.
const walkFlags = unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// openat2State is 0 before the first probe, openat2Yes or openat2No after
// it. Tests store openat2No to force the walk.
var openat2State atomic.Int32

const (
	openat2Yes = 1
	openat2No  = 2
)

// probeOpenat2 asks the kernel once whether openat2 works, on a name that
// cannot fail for any other reason. Only the probe may conclude that it is
// missing: EPERM from a real call can be the file's own answer (an
// immutable file opened for writing, fanotify), while seccomp filters
// (systemd-nspawn, older Docker) answer EPERM or ENOSYS for the call itself.
func probeOpenat2(dirfd int) {
	if openat2State.Load() != 0 {
		return
	}
	fd, err := openat2Ptr(dirfd, unsafe.Pointer(&dot[0]), walkFlags, 0)
	state := int32(openat2Yes)
	switch err {
	case nil:
		Close(fd)
	case unix.ENOSYS, unix.EPERM, unix.EINVAL, unix.E2BIG:
		state = openat2No
	}
	openat2State.CompareAndSwap(0, state)
}

func useOpenat2() bool {
	if openat2State.Load() == 0 {
		probeOpenat2(unix.AT_FDCWD)
	}
	return openat2State.Load() == openat2Yes
}

// openat2Ptr opens a NUL-terminated relative path below dirfd. EAGAIN,
// which RESOLVE_BENEATH returns when a rename elsewhere on the filesystem
// raced the lookup, is retried a bounded number of times.
func openat2Ptr(dirfd int, pp unsafe.Pointer, flags int, mode uint32) (int, error) {
	// Without O_NOFOLLOW a trailing link is refused by RESOLVE_NO_SYMLINKS
	// with ELOOP; with it, O_DIRECTORY would report ENOTDIR instead and
	// O_PATH would open the link itself.
	how := unix.OpenHow{Flags: uint64((flags | unix.O_CLOEXEC) &^ unix.O_NOFOLLOW), Resolve: resolveFlags}
	if flags&unix.O_CREAT != 0 || flags&unix.O_TMPFILE == unix.O_TMPFILE {
		how.Mode = uint64(mode) // openat2 refuses a mode without them
	}
	for again := 0; ; again++ {
		fd, _, e := unix.Syscall6(unix.SYS_OPENAT2, uintptr(dirfd), uintptr(pp), uintptr(unsafe.Pointer(&how)), unsafe.Sizeof(how), 0, 0)
		if e == unix.EINTR || (e == unix.EAGAIN && again < 64) {
			continue
		}
		if e != 0 {
			return -1, e
		}
		return int(fd), nil
	}
}

// openBeneath opens the multi-component name n below d.
func (d *Dir) openBeneath(n *Name, flags int, mode uint32) (int, error) {
	if useOpenat2() {
		fd, err := openat2Ptr(d.fd, unsafe.Pointer(&n.b[0]), flags, mode)
		if err != unix.ENOSYS && err != unix.EPERM {
			return fd, err
		}
		// A genuine EPERM comes back from the walk as well.
	}
	pfd, err := d.walk(n)
	if err != nil {
		return -1, err
	}
	last := unsafe.Pointer(&n.b[n.dir+1])
	fd, err := openPtr(pfd, last, flags, mode)
	if err != nil {
		err = nofollowErr(pfd, last, err)
	}
	Close(pfd)
	return fd, err
}

// parentOf returns a descriptor of the directory holding n's last
// component, and that component: d's own descriptor for a one-component
// name, else one the caller gives back with release.
func (d *Dir) parentOf(n *Name) (int, unsafe.Pointer, error) {
	if len(n.b) == 0 {
		return -1, nil, ErrEmptyPath
	}
	if n.dir < 0 {
		return d.fd, unsafe.Pointer(&n.b[0]), nil
	}
	last := unsafe.Pointer(&n.b[n.dir+1])
	if useOpenat2() {
		fd, err := openat2Ptr(d.fd, unsafe.Pointer(&n.dirb[0]), walkFlags, 0)
		if err == nil {
			return fd, last, nil
		}
		if err != unix.ENOSYS && err != unix.EPERM {
			return -1, nil, err
		}
	}
	fd, err := d.walk(n)
	return fd, last, err
}

func (d *Dir) release(fd int) {
	if fd != d.fd {
		Close(fd)
	}
}

// walk opens the directory part of n below d one component at a time,
// never through a link, holding at most two descriptors at once.
func (d *Dir) walk(n *Name) (int, error) {
	cur := d.fd
	start := 0
	for i := 0; i <= n.dir; i++ {
		if n.parts[i] != 0 {
			continue
		}
		comp := unsafe.Pointer(&n.parts[start])
		fd, err := openPtr(cur, comp, walkFlags, 0)
		if err != nil {
			err = nofollowErr(cur, comp, err)
		}
		if cur != d.fd {
			Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur, start = fd, i+1
	}
	return cur, nil
}

// nofollowErr turns the ENOTDIR that O_DIRECTORY|O_NOFOLLOW gives for a
// symbolic link into the ELOOP openat2 gives, so both resolutions report
// a link the same way. It costs a stat on the error path only.
func nofollowErr(dirfd int, name unsafe.Pointer, err error) error {
	if err != unix.ENOTDIR {
		return err
	}
	var st unix.Stat_t
	if statPtr(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return unix.ELOOP
	}
	return err
}
