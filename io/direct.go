package io

import (
	"errors"
	"fmt"
)

// Alignment is what O_DIRECT asks of buffers, sizes and offsets for one
// file, and where prism learned it.
type Alignment struct {
	// Bytes is the alignment to use: the reported value, at least
	// DirectAlign.
	Bytes int
	// Reported is what the source said (0 when nothing answered).
	Reported int
	// Source names where Reported came from, for error messages and the
	// manifest: "statx", "sysfs <path>", "BLKSSZGET <dev>" or "statfs".
	Source string
	// Exact is set when the source states an O_DIRECT requirement (statx,
	// the device's logical block size). statfs only gives a preferred I/O
	// size (NFS reports its rsize there), so it may size buffers but must
	// not reject a transfer size.
	Exact bool
}

// maxGuessAlign caps an alignment guessed from statfs: f_bsize can be the
// 1-4 MiB transfer size of a network filesystem, which would waste that
// much memory per buffer for nothing.
const maxGuessAlign = 1 << 20

func mkAlign(v int, source string, exact bool) Alignment {
	b := DirectAlign
	for b < v {
		b <<= 1 // a power of two, as AlignedBuffer needs
	}
	return Alignment{Bytes: b, Reported: v, Source: source, Exact: exact}
}

// ErrDirectNoEffect says that O_DIRECT cannot bypass a cache on a
// filesystem whose file data lives only in memory.
var ErrDirectNoEffect = errors.New("io: O_DIRECT has no effect on a memory filesystem")

// DirectError is a refusal of O_DIRECT, naming the file and the
// filesystem type so the message says what to change.
type DirectError struct {
	Path   string
	FSType string
	Err    error // unix.EINVAL from open, or ErrDirectNoEffect
}

func (e *DirectError) Error() string {
	fix := "set direct = false, or direct_fallback = true to run buffered and record direct = 0"
	if errors.Is(e.Err, ErrDirectNoEffect) {
		return fmt.Sprintf("io: O_DIRECT on %s: %s does not support O_DIRECT: it keeps file data in memory, so direct I/O cannot bypass a cache there (Linux 6.6+ accepts the flag as a no-op, older kernels refuse it with EINVAL); %s", e.Path, e.FSType, fix)
	}
	return fmt.Sprintf("io: open %s with O_DIRECT: %v: %s does not support O_DIRECT; %s", e.Path, e.Err, e.FSType, fix)
}

func (e *DirectError) Unwrap() error { return e.Err }
