package blockio

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/prism-hpc/prism/internal/fstest"
	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases/phasestest"
)

// puntingTmpfs returns a tmpfs directory whose files this kernel cannot
// read without blocking (no FMODE_NOWAIT: preadv2 with RWF_NOWAIT fails
// with EOPNOTSUPP, which is also why io_uring punts their every request):
// a fresh tmpfs mount when root, else one under /dev/shm. It skips where
// there is none, or where tmpfs files take RWF_NOWAIT (a kernel that
// gave tmpfs nowait reads would not punt, so nothing would fall back).
func puntingTmpfs(t *testing.T) string {
	t.Helper()
	skipWithoutURing(t)
	var dir string
	if os.Geteuid() == 0 {
		dir = fstest.Mount(t, "-t", "tmpfs", "-o", "size=16m", "tmpfs")
	} else if fs, err := pio.StatFS("/dev/shm"); err == nil && fs.Type == "tmpfs" {
		d, err := os.MkdirTemp("/dev/shm", "prism-test-")
		if err != nil {
			t.Skipf("no tmpfs: not root, and /dev/shm: %v", err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		dir = d
	} else {
		t.Skip("no tmpfs: not root (to mount one), and /dev/shm is not tmpfs")
	}
	path := filepath.Join(dir, "nowait")
	if err := os.WriteFile(path, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	defer os.Remove(path)
	if _, err := unix.Preadv2(fd, [][]byte{make([]byte, 4096)}, 0, unix.RWF_NOWAIT); err != unix.EOPNOTSUPP {
		t.Skipf("this kernel's tmpfs takes RWF_NOWAIT reads (%v): its io_uring reads do not punt", err)
	}
	return dir
}

// TestURingAutoFallsBackWherePunted: with the default engine (auto), a
// buffered read job and a buffered write job on tmpfs, whose every io_uring
// request the kernel would hand to an io-wq worker thread, run psync, and
// the manifest says which requests punt on which filesystem.
func TestURingAutoFallsBackWherePunted(t *testing.T) {
	dir := puntingTmpfs(t)
	for _, rw := range []string{"randread", "randwrite"} {
		kind := map[string]string{"randread": "reads", "randwrite": "writes"}[rw]
		res := phasestest.Run(t, registry(), "[[phase]]\nkind = \"blockio\"\nrw = \""+rw+"\"\nsize = \"256KiB\"\niodepth = 4\n", phasestest.Workdir(dir), phasestest.File("t.toml"))
		r := res.Manifest.Phases[0]
		bioPassed(t, r)
		if n := strings.Count(res.Stderr, "punt every request to io-wq"); n != 1 {
			t.Fatalf("%s: the punt warned %d times, want once:\n%s", rw, n, res.Stderr)
		}
		why := r.Notes["ioengine_fallback"]
		if r.Notes["ioengine"] != enginePsync || r.Metrics["io_uring"] != 0 || !strings.Contains(why, "buffered "+kind+" of tmpfs files punt every request to io-wq worker threads (zero-length RWF_NOWAIT io_uring probe: EOPNOTSUPP)") {
			t.Fatalf("%s: notes %v, metrics.io_uring %v: want psync with the punt as the fallback's reason", rw, r.Notes, r.Metrics["io_uring"])
		}
		if _, ok := r.Notes["io_uring_punted"]; ok {
			t.Fatalf("%s: io_uring_punted noted although psync ran: %v", rw, r.Notes)
		}
		if r.Ops != 64 {
			t.Fatalf("%s: %d ops, want 64", rw, r.Ops)
		}
	}
}

// TestURingExplicitKeepsRingWherePunted: ioengine = "io_uring" written in
// the plan keeps the ring on tmpfs, and the manifest notes that its
// requests punt, with no fallback.
func TestURingExplicitKeepsRingWherePunted(t *testing.T) {
	dir := puntingTmpfs(t)
	ph := bioRunPlan(t, dir, "[[phase]]\nkind = \"blockio\"\nrw = \"randrw\"\nsize = \"256KiB\"\niodepth = 4\nioengine = \"io_uring\"\n")
	r := ph[0]
	bioPassed(t, r)
	if r.Notes["ioengine"] != engineURing || r.Metrics["io_uring"] != 1 || r.Notes["ioengine_fallback"] != "" ||
		!strings.Contains(r.Notes["io_uring_punted"], "buffered reads and writes of tmpfs files punt every request to io-wq") {
		t.Fatalf("notes %v, metrics.io_uring %v: want io_uring kept, with io_uring_punted", r.Notes, r.Metrics["io_uring"])
	}
}

// TestURingAutoKeepsRingWithoutPunts: O_DIRECT reads and writes on a disk
// filesystem, which the kernel submits inline, keep io_uring under auto
// with no fallback and no punt note; so do buffered reads of a page-cached
// file there.
func TestURingAutoKeepsRingWithoutPunts(t *testing.T) {
	skipWithoutURing(t)
	dir := fstest.DiskDir(t)
	if _, err := pio.CheckDirect(dir); err != nil {
		t.Skipf("no O_DIRECT here: %v", err)
	}
	for _, extra := range []string{"rw = \"randread\"\ndirect = true", "rw = \"randwrite\"\ndirect = true", "rw = \"randread\""} {
		ph := bioRunPlan(t, dir, "[[phase]]\nkind = \"blockio\"\nsize = \"256KiB\"\niodepth = 4\n"+extra+"\n")
		r := ph[0]
		bioPassed(t, r)
		if r.Notes["ioengine"] != engineURing || r.Metrics["io_uring"] != 1 || r.Notes["ioengine_fallback"] != "" || r.Notes["io_uring_punted"] != "" {
			t.Fatalf("%q: notes %v, metrics.io_uring %v: want io_uring without a fallback or punt note", extra, r.Notes, r.Metrics["io_uring"])
		}
	}
}
