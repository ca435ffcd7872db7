//go:build unix

package main

import "golang.org/x/sys/unix"

// statfsFree reads free bytes (for unprivileged users) and inodes.
func statfsFree(path string) (fsFree, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return fsFree{}, err
	}
	return fsFree{bytes: uint64(st.Bavail) * uint64(st.Bsize), files: uint64(st.Ffree), totalFiles: uint64(st.Files)}, nil
}
