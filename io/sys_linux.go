package io

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The functions below issue one syscall each (retrying EINTR) on a prepared
// Path, without allocating: they are what phases call between two clock
// reads. Errors are bare errnos; callers wrap them with phase, rank and path
// outside the timed region.
//
// They resolve the whole path, from dirfd or from the working directory,
// on every call, following any symbolic link on the way: safe only where
// nobody else can write a directory of the path. Inside the run directory,
// phases use a Dir and Names instead (dir_linux.go).

func ptr(p Path) (unsafe.Pointer, error) {
	if len(p.b) == 0 {
		return nil, ErrEmptyPath
	}
	return unsafe.Pointer(&p.b[0]), nil
}

// Open opens p relative to dirfd (unix.AT_FDCWD for the working directory).
func Open(dirfd int, p Path, flags int, mode uint32) (int, error) {
	pp, err := ptr(p)
	if err != nil {
		return -1, err
	}
	return openPtr(dirfd, pp, flags, mode)
}

// openPtr is openat(2) on a NUL-terminated name, with O_CLOEXEC: a
// descriptor must never leak into the fio or git children prism starts.
func openPtr(dirfd int, pp unsafe.Pointer, flags int, mode uint32) (int, error) {
	for {
		fd, _, e := unix.Syscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(pp), uintptr(flags|unix.O_CLOEXEC), uintptr(mode), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return -1, e
		}
		return int(fd), nil
	}
}

// Write writes all of b to fd, continuing after short writes.
func Write(fd int, b []byte) (int, error) {
	done := 0
	for done < len(b) {
		n, err := unix.Write(fd, b[done:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			return done, unix.EIO
		}
		done += n
	}
	return done, nil
}

// Close closes fd. EINTR is not retried: on Linux the descriptor is gone
// even when close reports it.
func Close(fd int) error {
	err := unix.Close(fd)
	if err == unix.EINTR {
		return nil
	}
	return err
}

// Unlink removes the file p.
func Unlink(dirfd int, p Path) error { return at(unix.SYS_UNLINKAT, dirfd, p, 0) }

// Rmdir removes the empty directory p.
func Rmdir(dirfd int, p Path) error { return at(unix.SYS_UNLINKAT, dirfd, p, unix.AT_REMOVEDIR) }

// Mkdir creates the directory p.
func Mkdir(dirfd int, p Path, mode uint32) error {
	return at(unix.SYS_MKDIRAT, dirfd, p, uintptr(mode))
}

func at(trap uintptr, dirfd int, p Path, arg uintptr) error {
	pp, err := ptr(p)
	if err != nil {
		return err
	}
	return atPtr(trap, dirfd, pp, arg)
}

// atPtr is a (dirfd, name, integer) call: unlinkat or mkdirat.
func atPtr(trap uintptr, dirfd int, pp unsafe.Pointer, arg uintptr) error {
	for {
		_, _, e := unix.Syscall(trap, uintptr(dirfd), uintptr(pp), arg)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

// Rename moves from to to (both relative to the working directory or
// absolute).
func Rename(from, to Path) error {
	fp, err := ptr(from)
	if err != nil {
		return err
	}
	tp, err := ptr(to)
	if err != nil {
		return err
	}
	return renamePtr(unix.AT_FDCWD, fp, unix.AT_FDCWD, tp)
}

// RenameAt moves from (relative to fromDir) to to (relative to toDir).
func RenameAt(fromDir int, from Path, toDir int, to Path) error {
	fp, err := ptr(from)
	if err != nil {
		return err
	}
	tp, err := ptr(to)
	if err != nil {
		return err
	}
	return renamePtr(fromDir, fp, toDir, tp)
}

// renamePtr is renameat2 with no flags, which is renameat: riscv64 and
// loong64 have only the former.
func renamePtr(fromfd int, fp unsafe.Pointer, tofd int, tp unsafe.Pointer) error {
	for {
		_, _, e := unix.Syscall6(unix.SYS_RENAMEAT2, uintptr(fromfd), uintptr(fp), uintptr(tofd), uintptr(tp), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

// linkPtr is linkat without AT_SYMLINK_FOLLOW: a link to a symlink links
// the symlink itself.
func linkPtr(fromfd int, fp unsafe.Pointer, tofd int, tp unsafe.Pointer) error {
	for {
		_, _, e := unix.Syscall6(unix.SYS_LINKAT, uintptr(fromfd), uintptr(fp), uintptr(tofd), uintptr(tp), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

func symlinkPtr(target unsafe.Pointer, dirfd int, pp unsafe.Pointer) error {
	for {
		_, _, e := unix.Syscall(unix.SYS_SYMLINKAT, uintptr(target), uintptr(dirfd), uintptr(pp))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

// Stat fills st for p (following symlinks, as stat(2)). name may also be a
// NUL-terminated name inside a getdents buffer, with dirfd its directory.
func Stat(dirfd int, p Path, st *unix.Stat_t) error {
	pp, err := ptr(p)
	if err != nil {
		return err
	}
	return statPtr(dirfd, pp, st, 0)
}

// StatName stats the NUL-terminated name starting at name[0] relative to
// dirfd: the form readdir results come in, so listing a directory and
// stat-ing each entry allocates nothing.
func StatName(dirfd int, name []byte, st *unix.Stat_t) error {
	if len(name) == 0 {
		return ErrEmptyPath
	}
	return statPtr(dirfd, unsafe.Pointer(&name[0]), st, 0)
}

// LstatName is StatName without following a symbolic link named name.
func LstatName(dirfd int, name []byte, st *unix.Stat_t) error {
	if len(name) == 0 {
		return ErrEmptyPath
	}
	return statPtr(dirfd, unsafe.Pointer(&name[0]), st, unix.AT_SYMLINK_NOFOLLOW)
}

// OpenName opens a NUL-terminated name from a getdents buffer (ReadDir,
// EachName) relative to dirfd, with O_NOFOLLOW: one component by
// construction, so nothing is resolved beyond dirfd, and no string is
// made.
func OpenName(dirfd int, name []byte, flags int) (int, error) {
	if len(name) == 0 {
		return -1, ErrEmptyPath
	}
	return openPtr(dirfd, unsafe.Pointer(&name[0]), flags|unix.O_NOFOLLOW, 0)
}

// ReadDir appends the raw linux_dirent64 records of every entry of the
// open directory dirfd to into, using scratch for each getdents call (grown
// when one record does not fit). Keeping the listing raw lets a caller time
// the listing alone and then stat each name without a string allocation.
// It reads from dirfd's current offset.
func ReadDir(dirfd int, scratch, into []byte) ([]byte, []byte, error) {
	for {
		n, err := unix.Getdents(dirfd, scratch)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EINVAL {
			scratch = make([]byte, 2*len(scratch)+4096)
			continue
		}
		if err != nil {
			return scratch, into, err
		}
		if n <= 0 {
			return scratch, into, nil
		}
		into = append(into, scratch[:n]...)
	}
}

// EachName calls fn with the NUL-terminated name of every record in raw
// (as ReadDir returns them), skipping "." and "..", and returns how many
// names it saw. A malformed record stops it with EIO.
func EachName(raw []byte, fn func(name []byte) error) (int, error) {
	count := 0
	for off := 0; off < len(raw); {
		next, _, _, name, err := dirent(raw, off)
		if err != nil {
			return count, err
		}
		off = next
		if dotOrDotDot(name) {
			continue
		}
		count++
		if fn != nil {
			if err := fn(name); err != nil {
				return count, err
			}
		}
	}
	return count, nil
}

// dirent decodes the struct linux_dirent64 at raw[off:] (ino u64, off s64,
// reclen u16, type u8, name[]): the offset of the next record, the inode,
// the d_type and the NUL-terminated name with its padding.
func dirent(raw []byte, off int) (next int, ino uint64, typ uint8, name []byte, err error) {
	if off+19 >= len(raw) {
		return 0, 0, 0, nil, unix.EIO
	}
	reclen := int(*(*uint16)(unsafe.Pointer(&raw[off+16])))
	if reclen < 20 || off+reclen > len(raw) {
		return 0, 0, 0, nil, unix.EIO
	}
	ino = *(*uint64)(unsafe.Pointer(&raw[off]))
	return off + reclen, ino, raw[off+18], raw[off+19 : off+reclen], nil
}

func dotOrDotDot(name []byte) bool {
	return name[0] == '.' && (name[1] == 0 || (name[1] == '.' && len(name) > 2 && name[2] == 0))
}
