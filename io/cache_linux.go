package io

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// DropCaches flushes dirty data and asks the kernel to drop the page cache,
// dentries and inodes (echo 3 > /proc/sys/vm/drop_caches). It needs root;
// the error says so when it is refused.
func DropCaches() error {
	unix.Sync()
	f, err := os.OpenFile("/proc/sys/vm/drop_caches", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("io: drop caches: %w (needs root; use drop_caches = \"fadvise\" or \"none\")", err)
	}
	defer f.Close()
	if _, err := f.WriteString("3\n"); err != nil {
		return fmt.Errorf("io: drop caches: %w", err)
	}
	return nil
}

// CanDropCaches reports whether DropCaches can work for this process.
func CanDropCaches() bool {
	return unix.Access("/proc/sys/vm/drop_caches", unix.W_OK) == nil && os.Geteuid() == 0
}
