package fstest

import "testing"

// DiskDir never hands out a directory held in memory; a tmpfs is one.
func TestDiskDir(t *testing.T) {
	if d := DiskDir(t); inMemory(d) {
		t.Errorf("DiskDir %s is on a filesystem held in memory", d)
	}
	if !inMemory("/dev/shm") {
		t.Skip("/dev/shm is not tmpfs here")
	}
	m := Mount(t, "-t", "tmpfs", "tmpfs")
	if !inMemory(m) {
		t.Errorf("a tmpfs mounted at %s is not seen as held in memory", m)
	}
}
