package uring

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"unsafe"
)

// ErrUnsupported is New's error where the OS has no io_uring.
var ErrUnsupported = errors.New("io_uring: not supported on this OS")

// Opcodes and flags of the io_uring ABI (include/uapi/linux/io_uring.h)
// that prism uses.
const (
	OpNop        = 0
	OpFsync      = 3
	OpReadFixed  = 4
	OpWriteFixed = 5
	OpRead       = 22
	OpWrite      = 23

	SqeFixedFile = 1 << 0 // Fd is an index into the registered files
	SqeIODrain   = 1 << 1 // start only after every earlier SQE completed

	FsyncDatasync = 1 << 0 // OpFsync's OpFlags: fdatasync
)

// Punt is what Punts found about one kind of request on one file.
type Punt struct {
	// Punts: the kernel hands every such request to an io-wq worker
	// thread (a thread wake-up per request) instead of doing it inline.
	Punts bool
	// Errno is the probe's completion error: EOPNOTSUPP (the file lacks
	// FMODE_NOWAIT) or EAGAIN (a buffered write the filesystem cannot do
	// without blocking) when Punts; any other is an answer Punts does not
	// know (an old kernel's EINVAL), reported as not punting. 0 when the
	// probe completed inline.
	Errno syscall.Errno
}

// SQE is one submission queue entry (64 bytes, the kernel's layout).
type SQE struct {
	Opcode      uint8
	Flags       uint8
	Ioprio      uint16
	Fd          int32
	Off         uint64
	Addr        uint64
	Len         uint32
	OpFlags     uint32
	UserData    uint64
	BufIndex    uint16
	Personality uint16
	SpliceFdIn  int32
	Addr3       uint64
	_           uint64
}

// CQE is one completion queue entry (16 bytes): Res is the syscall's
// result, a byte count or a negated errno.
type CQE struct {
	UserData uint64
	Res      int32
	Flags    uint32
}

// Unavailable explains a New error for the manifest: why the kernel
// refused a ring, naming the cause an operator can act on.
func Unavailable(err error) string {
	var se *SetupError
	if !errors.As(err, &se) {
		if errors.Is(err, ErrUnsupported) {
			return "not Linux: no io_uring"
		}
		return err.Error()
	}
	return se.reason()
}

// SetupError is a refused io_uring_setup with its classification.
type SetupError struct {
	Errno error
	// Disabled is the value of /proc/sys/kernel/io_uring_disabled when it
	// could be read ("" otherwise).
	Disabled string
}

func (e *SetupError) Error() string { return "io_uring_setup: " + e.reason() }

func (e *SetupError) reason() string {
	name := fmt.Sprint(e.Errno)
	switch {
	case e.Disabled == "2":
		return fmt.Sprintf("kernel.io_uring_disabled = 2: io_uring is disabled for every process (%s)", name)
	case e.Disabled == "1" && isPerm(e.Errno):
		return fmt.Sprintf("kernel.io_uring_disabled = 1: io_uring is limited to the group in kernel.io_uring_group and CAP_SYS_ADMIN (%s)", name)
	case isPerm(e.Errno):
		return fmt.Sprintf("refused with %s while kernel.io_uring_disabled is %s: a seccomp filter or LSM (container runtime) blocks io_uring_setup", name, orUnknown(e.Disabled))
	case isNoSys(e.Errno):
		return fmt.Sprintf("%s: the kernel has no io_uring (older than 5.1, or built without CONFIG_IO_URING), or a seccomp filter answers ENOSYS", name)
	}
	return name
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// readDisabled reads the sysctl that gates io_uring (Linux 6.6+); "" when
// the file is missing.
func readDisabled() string {
	b, err := os.ReadFile("/proc/sys/kernel/io_uring_disabled")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// PrepRW fills s for a read or write of buf at off of fd (an index with
// SqeFixedFile, a buffer index in BufIndex for the fixed opcodes). buf
// must stay reachable and unmoved until the completion: Go's heap does
// not move objects, and callers keep their buffers in Setup-made slices.
func (s *SQE) PrepRW(op uint8, fd int, buf []byte, off int64) {
	s.Opcode = op
	s.Fd = int32(fd)
	s.Addr = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	s.Len = uint32(len(buf))
	s.Off = uint64(off)
}

// PrepFsync fills s for an fsync (or, with datasync, fdatasync) of fd.
func (s *SQE) PrepFsync(fd int, datasync bool) {
	s.Opcode = OpFsync
	s.Fd = int32(fd)
	if datasync {
		s.OpFlags = FsyncDatasync
	}
}
