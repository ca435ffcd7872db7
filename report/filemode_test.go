package report

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Result files are 0666 masked by the umask (0644 under 022, 0600 under
// 077), still written through a rename: no temporary file is left.
func TestResultFileModeFollowsUmask(t *testing.T) {
	for _, tc := range []struct {
		mask int
		want os.FileMode
	}{{0o022, 0o644}, {0o077, 0o600}, {0o002, 0o664}} {
		old := syscall.Umask(tc.mask)
		umask.Store(uint32(readUmask()))
		dir := t.TempDir()
		path := filepath.Join(dir, "manifest.json")
		err := WriteManifest(path, &Manifest{SchemaVersion: SchemaVersion, Tool: "prism"})
		if err == nil {
			err = WriteFileAtomic(filepath.Join(dir, "summary.txt"), []byte("x\n"))
		}
		syscall.Umask(old)
		umask.Store(uint32(readUmask()))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"manifest.json", "summary.txt"} {
			st, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Mode().Perm(); got != tc.want {
				t.Errorf("umask %03o: %s has mode %03o, want %03o", tc.mask, name, got, tc.want)
			}
		}
		if left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(left) != 0 {
			t.Errorf("umask %03o: temporary files left: %v", tc.mask, left)
		}
	}
}
