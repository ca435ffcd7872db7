package fstest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// DiskDir returns a directory on a disk filesystem for the test's
// lifetime: t.TempDir() when the temporary directory is on one, else a
// new directory under /var/tmp, which Debian keeps on the root
// filesystem, removed at the end. It skips where there is none.
func DiskDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if !inMemory(dir) {
		return dir
	}
	dir, err := os.MkdirTemp("/var/tmp", "prism-test-")
	if err != nil || inMemory(dir) {
		t.Skipf("no directory on a disk filesystem (/var/tmp: %v)", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Mount runs mount with args on a fresh directory and unmounts it at the
// end of the test; it skips when not root or when the mount fails.
func Mount(t testing.TB, args ...string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a test filesystem")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", append(args, dir)...).CombinedOutput(); err != nil {
		t.Skipf("mount %s: %v: %s", strings.Join(args, " "), err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}
