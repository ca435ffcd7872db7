package io

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
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

// AlignmentOf reports the O_DIRECT alignment for path (a file, or a
// directory whose files are meant). In order of trust:
//
//  1. statx(STATX_DIOALIGN) on path: the kernel's own answer for this file
//     (Linux 6.1+, ext4/xfs/btrfs/block devices), which also covers
//     stacked devices and filesystems that are not on one block device;
//  2. the logical block size of the block device holding path, from
//     /sys/dev/block/MAJ:MIN/queue/logical_block_size (or the parent
//     device's queue for a partition);
//  3. the BLKSSZGET ioctl on /dev/block/MAJ:MIN when sysfs has no answer;
//  4. statfs f_bsize, a guess.
func AlignmentOf(path string) (Alignment, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_DIOALIGN|unix.STATX_BASIC_STATS, &stx); err == nil {
		if stx.Mask&unix.STATX_DIOALIGN != 0 && stx.Dio_offset_align > 0 {
			v := int(max(stx.Dio_offset_align, stx.Dio_mem_align))
			return mkAlign(v, "statx", true), nil
		}
	} else if !errors.Is(err, unix.ENOSYS) {
		return Alignment{}, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Alignment{}, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if a, ok := deviceAlignment(st.Dev); ok {
		return a, nil
	}
	var sf unix.Statfs_t
	if err := unix.Statfs(path, &sf); err != nil {
		return Alignment{}, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	return mkAlign(min(int(sf.Bsize), maxGuessAlign), "statfs", false), nil
}

// deviceAlignment reads the logical block size of the block device dev,
// from sysfs or else with BLKSSZGET; ok is false for filesystems not on a
// block device (NFS, Lustre, FUSE, tmpfs have major 0).
func deviceAlignment(dev uint64) (Alignment, bool) {
	maj, mnr := unix.Major(dev), unix.Minor(dev)
	if maj == 0 {
		return Alignment{}, false
	}
	sys := fmt.Sprintf("/sys/dev/block/%d:%d", maj, mnr)
	// A partition's directory has no queue/; its parent disk's has.
	for _, q := range []string{sys + "/queue/logical_block_size", sys + "/../queue/logical_block_size"} {
		if v, ok := readInt(q); ok && v > 0 {
			return mkAlign(v, "sysfs "+q, true), true
		}
	}
	node := fmt.Sprintf("/dev/block/%d:%d", maj, mnr)
	if fd, err := unix.Open(node, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0); err == nil {
		v, err := unix.IoctlGetInt(fd, unix.BLKSSZGET)
		unix.Close(fd)
		if err == nil && v > 0 {
			return mkAlign(v, "BLKSSZGET "+node, true), true
		}
	}
	return Alignment{}, false
}

func mkAlign(v int, source string, exact bool) Alignment {
	b := DirectAlign
	for b < v {
		b <<= 1 // a power of two, as AlignedBuffer needs
	}
	return Alignment{Bytes: b, Reported: v, Source: source, Exact: exact}
}

func readInt(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return v, err == nil
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

// CheckDirect returns the filesystem holding dir and, when O_DIRECT cannot
// take effect there, a *DirectError. tmpfs is refused even on kernels that
// accept the flag: a "direct" read of tmpfs is a memory copy, and letting
// it pass would report memory speed as uncached storage speed, depending
// on the kernel version of the machine.
func CheckDirect(dir string) (FSInfo, error) {
	fs, err := StatFS(dir)
	if err != nil {
		return fs, err
	}
	if CacheHeld(fs.Type) {
		return fs, &DirectError{Path: dir, FSType: fs.Type, Err: ErrDirectNoEffect}
	}
	return fs, nil
}

// OpenDirect opens p like Open with O_DIRECT added. EINVAL, which open
// returns when the filesystem has no direct I/O (ramfs, some FUSE and
// network filesystems), becomes a *DirectError naming the path and the
// filesystem type. With O_CREAT the file may exist even after the refusal
// (the kernel checks O_DIRECT after creating it): callers remove it.
func OpenDirect(p Path, flags int, mode uint32) (int, error) {
	fd, err := Open(unix.AT_FDCWD, p, flags|unix.O_DIRECT, mode)
	if err == unix.EINVAL {
		fstype := "this filesystem"
		if fs, serr := StatFS(filepath.Dir(p.String())); serr == nil {
			fstype = fs.Type
		}
		return -1, &DirectError{Path: p.String(), FSType: fstype, Err: err}
	}
	return fd, err
}
