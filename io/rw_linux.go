package io

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The positional transfers below move a whole buffer in one call from the
// caller's point of view: they continue after short transfers and retry
// EINTR, and they allocate nothing, so a timed loop can call them between
// two clock reads. Errors are bare errnos or ErrShortIO; callers wrap them
// with phase, rank, path and offset outside the timed region.

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

// Touch sets fd's access and modification times to now, as futimens(fd,
// NULL) does: one SETATTR on NFS (stamped with the server's clock) or
// Lustre, and nothing written. A persistent directory's claim is renewed
// so (phases/persistclaim.go).
func Touch(fd int) error {
	for {
		_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, 0, 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

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
