package io

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// OpenWorkdir is CheckWorkdir and OpenDir with no gap between the check
// and the open: it opens the resolved path (refusing a link in its last
// component), asks the kernel where the directory it opened really is
// (/proc/self/fd), and judges that path, and the opened directory's mode
// and owner. What was judged is what the run directory is then made in,
// even if someone swaps a directory on the path meanwhile. The Dir is
// named by the path as given, made absolute.
func OpenWorkdir(dir string, allowShared bool) (*Dir, []string, error) {
	resolved, _, err := CheckWorkdir(dir, allowShared)
	if err != nil {
		return nil, nil, err
	}
	refuse := func(fd int, reason, remedy string, err error) (*Dir, []string, error) {
		if fd >= 0 {
			Close(fd)
		}
		return nil, nil, &WorkdirError{Path: dir, Resolved: resolved, Reason: reason, Remedy: remedy, Err: err}
	}
	p, err := NewPath(resolved)
	if err != nil {
		return refuse(-1, "not a usable path", "", err)
	}
	fd, err := Open(unix.AT_FDCWD, p, dirFlags, 0)
	if err != nil {
		return refuse(-1, "cannot open it", "", err)
	}
	real, err := fdPath(fd)
	if err != nil {
		return refuse(fd, "cannot learn where the opened directory is", "mount /proc", err)
	}
	if real != resolved {
		return refuse(fd, "it changed while prism checked it: the directory opened is "+real,
			"run again; if it persists, someone is swapping directories on its path", nil)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return refuse(fd, "cannot stat it", "", err)
	}
	mode := fs.ModeDir | fs.FileMode(st.Mode&0o777)
	if st.Mode&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	warnings, err := judgeWorkdir(dir, real, mode, int(st.Uid), allowShared)
	if err != nil {
		Close(fd)
		return nil, nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	d, err := newRoot(fd, abs)
	return d, warnings, err
}

// fdPath is the kernel's path of the directory fd, as /proc shows it.
func fdPath(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf)
	if err != nil {
		return "", err
	}
	s := string(buf[:n])
	if strings.HasSuffix(s, " (deleted)") || !strings.HasPrefix(s, "/") {
		return "", fmt.Errorf("io: the directory has no path any more (%s)", s)
	}
	return s, nil
}
