package io

import (
	"os"
	"unsafe"
)

// DirectAlign is the smallest alignment prism uses for O_DIRECT buffers,
// transfer sizes and offsets. Linux accepts 512 on most block devices, but
// 4 KiB is what 4Kn disks, most parallel filesystems and NVMe namespaces
// formatted for performance require, and a plan that passes `prism check`
// on a laptop must not fail with EINVAL on the cluster.
const DirectAlign = 4096

// AlignedBuffer returns a zeroed slice of n bytes whose first byte lies at a
// multiple of align (a power of two, at least 1), as O_DIRECT requires of
// user buffers. It over-allocates by align and slices: the Go heap never
// moves an object, so the alignment holds for the slice's lifetime, and
// the slice keeps the whole allocation alive. Its capacity is n, so an
// append can never silently move the data to an unaligned array.
func AlignedBuffer(n, align int) []byte {
	if align < 1 || align&(align-1) != 0 {
		panic("io: AlignedBuffer: alignment must be a power of two")
	}
	if n <= 0 {
		return []byte{}
	}
	raw := make([]byte, n+align)
	off := 0
	if rem := int(uintptr(unsafe.Pointer(&raw[0])) & uintptr(align-1)); rem != 0 {
		off = align - rem
	}
	return raw[off : off+n : off+n]
}

// IsAligned reports whether b's first byte lies at a multiple of align. An
// empty slice is aligned.
func IsAligned(b []byte, align int) bool {
	if len(b) == 0 {
		return true
	}
	return uintptr(unsafe.Pointer(&b[0]))%uintptr(align) == 0
}

// Prefault writes a zero into every page of b, so that the kernel maps
// them now: an untouched buffer (fresh from the OS, as the Go heap's
// large allocations are after a collection returned their pages) is
// otherwise faulted in page by page by the first read into it, inside
// whatever is being timed — 256 faults for a 1 MiB buffer, measured as
// part of the first timed run of a blockio read (docs/PERFORMANCE.md).
// It zeroes one byte in each page (the last of b included): call it on a
// buffer whose content does not matter yet, such as a fresh one.
func Prefault(b []byte) {
	for i := 0; i < len(b); i += pageSize {
		b[i] = 0
	}
	if len(b) > 0 {
		b[len(b)-1] = 0
	}
}

var pageSize = os.Getpagesize()
