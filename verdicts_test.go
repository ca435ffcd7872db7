package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestResultFilesReadable: every result file of a run through the binary
// is 0666 masked by the umask the binary was started with (0644 under
// 022, 0600 under 077), as fio, IOR and mdtest leave theirs.
func TestResultFilesReadable(t *testing.T) {
	for _, tc := range []struct {
		mask string
		want os.FileMode
	}{{"022", 0o644}, {"077", 0o600}} {
		dir := t.TempDir()
		plan := writePlan(t, dir, "[plan]\nname = \"modes\"\ndrop_caches = \"none\"\n[[phase]]\nkind = \"create_files\"\ncount = 5\n")
		cmd := exec.Command("sh", "-c", fmt.Sprintf(`umask %s && exec "$0" "$@"`, tc.mask), prismBin, "run", plan, "--workdir", dir, "--results", filepath.Join(dir, "res"))
		cmd.Dir, cmd.Env = dir, cleanEnv()
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("umask %s: %v\n%s", tc.mask, err, out.String())
		}
		m := manifestLine.FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("no manifest line:\n%s", out.String())
		}
		for _, name := range []string{"manifest.json", "summary.txt", "junit.xml", "report.html"} {
			st, err := os.Stat(filepath.Join(filepath.Dir(m[1]), name))
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Mode().Perm(); got != tc.want {
				t.Errorf("umask %s: %s has mode %03o, want %03o", tc.mask, name, got, tc.want)
			}
		}
	}
}
