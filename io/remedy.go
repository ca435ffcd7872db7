package io

import (
	"errors"

	"golang.org/x/sys/unix"
)

// Remedy returns a short hint (with a leading "; ") for errnos a storage
// engineer can act on, or "" when there is nothing useful to add.
func Remedy(err error) string {
	// A ReplacedError states its own remedy, whatever errno led to it.
	var errno unix.Errno
	if errors.Is(err, ErrReplaced) || !errors.As(err, &errno) {
		return ""
	}
	switch errno {
	case unix.ENOSPC:
		return "; the filesystem is full (or out of inodes): free space, lower count/size, or point workdir elsewhere"
	case unix.EDQUOT:
		return "; quota exceeded for this user on the filesystem"
	case unix.EACCES, unix.EPERM:
		return "; permission denied: check ownership, mode and immutable attributes (lsattr) of the workdir"
	case unix.EROFS:
		return "; the filesystem is mounted read-only"
	case unix.EIO:
		return "; the storage reported an I/O error: check the client's kernel log (dmesg) and the server"
	case unix.EINVAL:
		return "; invalid argument: with direct = true the filesystem may not support O_DIRECT, or bs/offset are not aligned to its block size"
	case unix.EMFILE, unix.ENFILE:
		return "; too many open files: raise ulimit -n"
	case unix.ELOOP:
		return "; a symbolic link on the path was refused: prism never follows links below the directories it opened"
	case unix.ESTALE:
		return "; stale NFS file handle: the file was removed or the export changed under the client"
	}
	return ""
}
