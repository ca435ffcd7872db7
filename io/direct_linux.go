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

// ODirect is the open flag O_DIRECT, for callers that build their own
// flags (0 where the platform has none).
const ODirect = unix.O_DIRECT

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
	return alignmentAt(unix.AT_FDCWD, path, 0, path, func(sf *unix.Statfs_t) error { return unix.Statfs(path, sf) })
}

// AlignmentOf is AlignmentOf for n below d, without following a link.
func (d *Dir) AlignmentOf(n Name) (Alignment, error) {
	fd, _, err := d.parentOf(&n)
	if err != nil {
		return Alignment{}, d.Wrap("statx", n, err)
	}
	defer d.release(fd)
	return alignmentAt(fd, n.s[n.dir+1:], unix.AT_SYMLINK_NOFOLLOW, d.Join(n.s), func(sf *unix.Statfs_t) error { return unix.Fstatfs(d.fd, sf) })
}

// alignmentAt is AlignmentOf for name relative to dirfd, named display in
// errors, with statfs for the guess.
func alignmentAt(dirfd int, name string, flags int, display string, statfs func(*unix.Statfs_t) error) (Alignment, error) {
	var stx unix.Statx_t
	var dev uint64
	switch err := unix.Statx(dirfd, name, flags, unix.STATX_DIOALIGN|unix.STATX_BASIC_STATS, &stx); {
	case err == nil:
		if stx.Mask&unix.STATX_DIOALIGN != 0 && stx.Dio_offset_align > 0 {
			v := int(max(stx.Dio_offset_align, stx.Dio_mem_align))
			return mkAlign(v, "statx", true), nil
		}
		dev = unix.Mkdev(stx.Dev_major, stx.Dev_minor)
	case errors.Is(err, unix.ENOSYS): // before Linux 4.11
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, flags); err != nil {
			return Alignment{}, &os.PathError{Op: "stat", Path: display, Err: err}
		}
		dev = uint64(st.Dev)
	default:
		return Alignment{}, &os.PathError{Op: "statx", Path: display, Err: err}
	}
	if a, ok := deviceAlignment(dev); ok {
		return a, nil
	}
	var sf unix.Statfs_t
	if err := statfs(&sf); err != nil {
		return Alignment{}, &os.PathError{Op: "statfs", Path: display, Err: err}
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

func readInt(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return v, err == nil
}

// CheckDirect returns the filesystem holding dir and, when O_DIRECT cannot
// take effect there, a *DirectError. tmpfs is refused even on kernels that
// accept the flag: a "direct" read of tmpfs is a memory copy, and letting
// it pass would report memory speed as uncached storage speed, depending
// on the kernel version of the machine.
func CheckDirect(dir string) (FSInfo, error) {
	fs, err := StatFS(dir)
	return checkDirect(dir, fs, err)
}

// CheckDirect is CheckDirect for d.
func (d *Dir) CheckDirect() (FSInfo, error) {
	fs, err := d.StatFS()
	return checkDirect(d.path, fs, err)
}

func checkDirect(dir string, fs FSInfo, err error) (FSInfo, error) {
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
	return OpenDirectAt(unix.AT_FDCWD, p, flags, mode)
}

// OpenDirectAt is OpenDirect of p relative to the directory dirfd.
func OpenDirectAt(dirfd int, p Path, flags int, mode uint32) (int, error) {
	fd, err := Open(dirfd, p, flags|unix.O_DIRECT, mode)
	if err == unix.EINVAL {
		fs, serr := StatFS(filepath.Dir(p.String()))
		return -1, directError(p.String(), fs, serr, err)
	}
	return fd, err
}

// OpenDirect is OpenDirect for n below d, opened as Open opens it.
func (d *Dir) OpenDirect(n Name, flags int, mode uint32) (int, error) {
	fd, err := d.Open(n, flags|unix.O_DIRECT, mode)
	if err == unix.EINVAL {
		fs, serr := d.StatFS()
		return -1, directError(d.Join(n.s), fs, serr, err)
	}
	return fd, err
}

func directError(path string, fs FSInfo, serr, err error) error {
	fstype := "this filesystem"
	if serr == nil {
		fstype = fs.Type
	}
	return &DirectError{Path: path, FSType: fstype, Err: err}
}
