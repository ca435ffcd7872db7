//go:build mips64 || mips64le

package io

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// statPtr is fstatat(2) on a NUL-terminated name. The mips64 kernel's
// struct stat is not unix.Stat_t, so this goes through x/sys, which
// converts it and allocates the name: the one architecture where stat ops
// allocate.
func statPtr(dirfd int, pp unsafe.Pointer, st *unix.Stat_t, flags int) error {
	name := unix.BytePtrToString((*byte)(pp))
	for {
		err := unix.Fstatat(dirfd, name, st, flags)
		if err != unix.EINTR {
			return err
		}
	}
}
