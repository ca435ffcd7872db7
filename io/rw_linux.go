package io

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The positional transfers below move a whole buffer in one call from the
// caller's point of view: they continue after short transfers and retry
// EINTR, and they allocate nothing, so a timed loop can call them between
// two clock reads. Errors are bare errnos or ErrShortIO; callers wrap them
// with phase, rank, path and offset outside the timed region.

// ErrShortIO is returned when a read reaches end of file, or a write makes
// no progress, before the whole buffer moved.
var ErrShortIO = errors.New("io: short transfer (end of file reached before the whole buffer)")

// PreadFull reads len(b) bytes of fd at off into b.
func PreadFull(fd int, b []byte, off int64) (int, error) {
	done := 0
	for done < len(b) {
		n, _, e := unix.Syscall6(unix.SYS_PREAD64, uintptr(fd), uintptr(unsafe.Pointer(&b[done])), uintptr(len(b)-done), uintptr(off+int64(done)), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return done, e
		}
		if n == 0 {
			return done, ErrShortIO
		}
		done += int(n)
	}
	return done, nil
}

// PwriteFull writes all of b to fd at off.
func PwriteFull(fd int, b []byte, off int64) (int, error) {
	done := 0
	for done < len(b) {
		n, _, e := unix.Syscall6(unix.SYS_PWRITE64, uintptr(fd), uintptr(unsafe.Pointer(&b[done])), uintptr(len(b)-done), uintptr(off+int64(done)), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return done, e
		}
		if n == 0 {
			return done, ErrShortIO
		}
		done += int(n)
	}
	return done, nil
}

// Fsync flushes fd's data and metadata to stable storage.
func Fsync(fd int) error { return retry1(unix.SYS_FSYNC, fd) }

// Fdatasync flushes fd's data, and only the metadata needed to read it back
// (not timestamps): cheaper than Fsync on most filesystems.
func Fdatasync(fd int) error { return retry1(unix.SYS_FDATASYNC, fd) }

func retry1(trap uintptr, fd int) error {
	for {
		_, _, e := unix.Syscall(trap, uintptr(fd), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

// SyncMode is a flush policy: which call makes written data durable.
type SyncMode uint8

// Flush policies.
const (
	SyncNone      SyncMode = iota // leave it to the kernel's writeback
	SyncFsync                     // fsync(2): data and all metadata
	SyncFdatasync                 // fdatasync(2): data and the metadata needed to read it
)

// String names the policy as plans write it.
func (m SyncMode) String() string {
	switch m {
	case SyncFsync:
		return "fsync"
	case SyncFdatasync:
		return "fdatasync"
	}
	return "none"
}

// ParseSyncMode reads "none", "fsync" or "fdatasync".
func ParseSyncMode(s string) (SyncMode, error) {
	switch s {
	case "none", "":
		return SyncNone, nil
	case "fsync":
		return SyncFsync, nil
	case "fdatasync":
		return SyncFdatasync, nil
	}
	return SyncNone, fmt.Errorf("io: unknown sync mode %q (allowed: none, fsync, fdatasync)", s)
}

// Sync applies m to fd.
func Sync(fd int, m SyncMode) error {
	switch m {
	case SyncFsync:
		return Fsync(fd)
	case SyncFdatasync:
		return Fdatasync(fd)
	}
	return nil
}

// Fallocate reserves [off, off+n) of fd, as fio's default fallocate=native
// does before a write job, so that timed writes measure writing rather than
// block allocation. A filesystem without fallocate (some NFS, FUSE) is not
// an error: the file then grows as it is written, which is all it can do.
// It never truncates, so ranks may reserve their segments of one shared
// file concurrently.
func Fallocate(fd int, off, n int64) error {
	if n <= 0 {
		return nil
	}
	for {
		err := unix.Fallocate(fd, 0, off, n)
		switch err {
		case unix.EINTR:
			continue
		case unix.EOPNOTSUPP, unix.ENOSYS:
			return nil
		}
		return err
	}
}
