package io

import "golang.org/x/sys/unix"

// Advice values for Fadvise (posix_fadvise(2)).
const (
	FadvNormal     = unix.FADV_NORMAL
	FadvSequential = unix.FADV_SEQUENTIAL // larger readahead
	FadvRandom     = unix.FADV_RANDOM     // no readahead
	FadvWillNeed   = unix.FADV_WILLNEED   // start reading into the cache now
	FadvDontNeed   = unix.FADV_DONTNEED   // drop clean cached pages of the range
)

// Fadvise gives the kernel advice about how fd's range [off, off+n) will be
// used; n = 0 means to the end of the file. EINTR is retried.
func Fadvise(fd int, off, n int64, advice int) error {
	for {
		err := unix.Fadvise(fd, off, n, advice)
		if err != unix.EINTR {
			return err
		}
	}
}

// Evict makes the next reads of fd come from storage, without root: it
// writes back dirty pages first (FADV_DONTNEED drops only clean pages, and
// silently keeps the rest) and then drops every cached page of the file.
// It is the per-file form of drop_caches that drop_caches = "fadvise"
// selects. On a filesystem whose data lives in memory (tmpfs) it does
// nothing, by the kernel's design.
func Evict(fd int) error {
	if err := Fdatasync(fd); err != nil && err != unix.EINVAL {
		return err
	}
	return Fadvise(fd, 0, 0, FadvDontNeed)
}
