package io

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// statfs magic numbers of the filesystems prism users qualify; mountinfo
// normally names the type, these are the fallback.
var fsMagic = map[int64]string{
	0xEF53:     "ext4",
	0x58465342: "xfs",
	0x01021994: "tmpfs",
	0x6969:     "nfs",
	0x0BD00BD0: "lustre",
	0x65735546: "fuse",
	0x9123683E: "btrfs",
	0x2FC12FC1: "zfs",
	0x47504653: "gpfs",
	0x794c7630: "overlay",
	0xFF534D42: "cifs",
	0x73717368: "squashfs",
	0x858458f6: "ramfs",
}

// StatFS describes the filesystem holding path (which must exist).
func StatFS(path string) (FSInfo, error) {
	var sf unix.Statfs_t
	if err := unix.Statfs(path, &sf); err != nil {
		return FSInfo{}, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	abs, err := filepath.Abs(path)
	if err == nil {
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real
		}
	}
	return fsInfo(&sf, abs), nil
}

// StatFS describes the filesystem holding d, found by its descriptor.
func (d *Dir) StatFS() (FSInfo, error) {
	var sf unix.Statfs_t
	if err := unix.Fstatfs(d.fd, &sf); err != nil {
		return FSInfo{}, &os.PathError{Op: "statfs", Path: d.path, Err: err}
	}
	real, err := fdPath(d.fd)
	if err != nil {
		real = d.path
	}
	return fsInfo(&sf, real), nil
}

// fsInfo names the filesystem of sf, with the mount of the absolute path
// abs ("" when unknown) from mountinfo.
func fsInfo(sf *unix.Statfs_t, abs string) FSInfo {
	info := FSInfo{Type: fsMagic[int64(sf.Type)], BlockSize: int64(sf.Bsize)}
	if info.Type == "" {
		info.Type = fmt.Sprintf("0x%x", sf.Type)
	}
	if abs != "" {
		if m, ok := findMount("/proc/self/mountinfo", abs); ok {
			info.Type, info.MountPoint, info.Source, info.MountOptions = m.fstype, m.point, m.source, m.options
		}
	}
	return info
}

type mountEntry struct{ point, fstype, source, options string }

// findMount returns the mountinfo entry with the longest mount point that
// contains path; later entries win ties because they are mounted on top.
func findMount(mountinfo, path string) (mountEntry, bool) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return mountEntry{}, false
	}
	defer f.Close()
	var best mountEntry
	found := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m, ok := parseMountinfoLine(sc.Text())
		if !ok || !within(path, m.point) {
			continue
		}
		if !found || len(m.point) >= len(best.point) {
			best, found = m, true
		}
	}
	return best, found
}

// parseMountinfoLine reads one line of proc(5) mountinfo:
// id parent major:minor root point options [optional...] - fstype source superopts
func parseMountinfoLine(line string) (mountEntry, bool) {
	fields := strings.Fields(line)
	sep := -1
	for i, f := range fields {
		if f == "-" {
			sep = i
			break
		}
	}
	if sep < 6 || len(fields) < sep+3 {
		return mountEntry{}, false
	}
	opts := fields[5]
	if len(fields) > sep+3 {
		opts += "," + fields[sep+3]
	}
	return mountEntry{
		point:   unescapeMount(fields[4]),
		fstype:  fields[sep+1],
		source:  unescapeMount(fields[sep+2]),
		options: opts,
	}, true
}

// unescapeMount undoes the octal escapes (\040 for space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%3o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func within(path, point string) bool {
	if point == "/" {
		return true
	}
	return path == point || strings.HasPrefix(path, point+"/")
}
