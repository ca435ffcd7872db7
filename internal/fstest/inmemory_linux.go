package fstest

import "golang.org/x/sys/unix"

// inMemory tells whether dir is on a filesystem held in memory (tmpfs,
// ramfs), where there is no disk under the page cache.
func inMemory(dir string) bool {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return false
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC
}
