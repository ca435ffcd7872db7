//go:build !(386 || arm || mips || mipsle || ppc || sparc64 || mips64 || mips64le)

package io

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// statPtr is fstatat(2) on a NUL-terminated name: newfstatat, whose
// struct stat is unix.Stat_t on these architectures.
func statPtr(dirfd int, pp unsafe.Pointer, st *unix.Stat_t, flags int) error {
	for {
		_, _, e := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(pp), uintptr(unsafe.Pointer(st)), uintptr(flags), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}
