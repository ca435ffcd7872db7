package io

// CacheHeld reports whether a filesystem's data lives only in memory, so
// that dropping the page cache neither can nor should make reads cold.
func CacheHeld(fstype string) bool {
	switch fstype {
	case "tmpfs", "ramfs", "devtmpfs":
		return true
	}
	return false
}
