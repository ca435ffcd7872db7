package io

import "unsafe"

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
