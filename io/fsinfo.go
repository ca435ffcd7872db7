package io

// FSInfo names the filesystem under a path, for the manifest and for
// decisions such as "dropping the page cache means nothing on tmpfs".
type FSInfo struct {
	Type         string // from /proc/self/mountinfo, else from the statfs magic
	MountPoint   string
	Source       string
	MountOptions string // per-mount and per-superblock options, comma-joined
	BlockSize    int64  // statfs f_bsize
}
