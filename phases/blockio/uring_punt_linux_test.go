package blockio

import (
	"fmt"
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
// buffered write job at iodepth 4 on tmpfs, whose every io_uring request
// the kernel would hand to an io-wq worker thread, runs psync, and the
// manifest says which requests punt on which filesystem. (Buffered reads,
// and any buffered job at iodepth 1, run psync under auto before a probe:
// TestURingAutoPageCachePsync; prism refuses O_DIRECT on tmpfs, so the
// probe's reads are TestURingExplicitKeepsRingWherePunted's.)
func TestURingAutoFallsBackWherePunted(t *testing.T) {
	dir := puntingTmpfs(t)
	for _, tc := range []struct{ rw, what string }{
		{"randwrite", "buffered writes"},
		{"write", "buffered writes"},
	} {
		rw := tc.rw
		res := phasestest.Run(t, registry(), "[[phase]]\nkind = \"blockio\"\nrw = \""+rw+"\"\nsize = \"256KiB\"\niodepth = 4\n", phasestest.Workdir(dir), phasestest.File("t.toml"))
		r := res.Manifest.Phases[0]
		bioPassed(t, r)
		if n := strings.Count(res.Stderr, "punt every request to io-wq"); n != 1 {
			t.Fatalf("%s: the punt warned %d times, want once:\n%s", rw, n, res.Stderr)
		}
		why := r.Notes["ioengine_fallback"]
		if r.Notes["ioengine"] != enginePsync || r.Metrics["io_uring"] != 0 || !strings.Contains(why, tc.what+" of tmpfs files punt every request to io-wq worker threads (zero-length RWF_NOWAIT io_uring probe: EOPNOTSUPP)") {
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
// with no fallback and no punt note, at iodepth 1 as at 4.
func TestURingAutoKeepsRingWithoutPunts(t *testing.T) {
	skipWithoutURing(t)
	dir := fstest.DiskDir(t)
	if _, err := pio.CheckDirect(dir); err != nil {
		t.Skipf("no O_DIRECT here: %v", err)
	}
	for _, extra := range []string{"rw = \"randread\"\niodepth = 4", "rw = \"randwrite\"\niodepth = 4", "rw = \"randrw\"\niodepth = 1"} {
		ph := bioRunPlan(t, dir, "[[phase]]\nkind = \"blockio\"\nsize = \"256KiB\"\ndirect = true\n"+extra+"\n")
		r := ph[0]
		bioPassed(t, r)
		if r.Notes["ioengine"] != engineURing || r.Metrics["io_uring"] != 1 || r.Notes["ioengine_fallback"] != "" || r.Notes["io_uring_punted"] != "" {
			t.Fatalf("%q: notes %v, metrics.io_uring %v: want io_uring without a fallback or punt note", extra, r.Notes, r.Metrics["io_uring"])
		}
	}
}

// TestURingAutoPageCachePsync: under auto, buffered reads at any iodepth
// and buffered writes at iodepth 1 run psync without asking for a ring,
// on a disk filesystem as on tmpfs, and notes.ioengine_fallback says they
// are page-cache copies; buffered writes at iodepth 4 are left to the
// probe (io_uring on XFS, psync by the punt on ext4 and tmpfs, never by
// this rule), and ioengine = "io_uring" keeps the ring for buffered reads.
func TestURingAutoPageCachePsync(t *testing.T) {
	skipWithoutURing(t)
	dirs := map[string]string{"disk": fstest.DiskDir(t), "tmpfs": puntingTmpfs(t)}
	for _, name := range []string{"disk", "tmpfs"} {
		for _, tc := range []struct {
			rw       string
			depth    int
			want     string // the reason's start, "" = not this rule
			explicit bool
		}{
			{"randread", 4, "buffered reads at iodepth 4 are page-cache copies", false},
			{"read", 1, "buffered reads at iodepth 1 are page-cache copies", false},
			{"randwrite", 1, "buffered writes at iodepth 1 are page-cache copies", false},
			{"randrw", 16, "buffered reads and writes at iodepth 16 are page-cache copies", false},
			{"randwrite", 4, "", false},
			{"randread", 4, "", true},
		} {
			plan := fmt.Sprintf("[[phase]]\nkind = \"blockio\"\nrw = %q\nsize = \"256KiB\"\niodepth = %d\n", tc.rw, tc.depth)
			if tc.explicit {
				plan += "ioengine = \"io_uring\"\n"
			}
			res := phasestest.Run(t, registry(), plan, phasestest.Workdir(dirs[name]), phasestest.File("t.toml"))
			r := res.Manifest.Phases[0]
			bioPassed(t, r)
			why := r.Notes["ioengine_fallback"]
			if tc.want == "" {
				if strings.Contains(why, "page-cache") || strings.Contains(res.Stderr, "page-cache") {
					t.Fatalf("%s: %s at iodepth %d (explicit %v): the page-cache rule chose psync: %v", name, tc.rw, tc.depth, tc.explicit, r.Notes)
				}
				if tc.explicit && (r.Notes["ioengine"] != engineURing || r.Metrics["io_uring"] != 1) {
					t.Fatalf("%s: ioengine = \"io_uring\" for buffered reads: notes %v, metrics.io_uring %v: want the ring", name, r.Notes, r.Metrics["io_uring"])
				}
				continue
			}
			if r.Notes["ioengine"] != enginePsync || r.Metrics["io_uring"] != 0 || !strings.HasPrefix(why, tc.want) || r.Metrics["io_uring_enters"] != 0 {
				t.Fatalf("%s: %s at iodepth %d: notes %v, metrics %v: want psync, no ring, and the fallback %q...", name, tc.rw, tc.depth, r.Notes, r.Metrics, tc.want)
			}
			if strings.Contains(res.Stderr, "punt") || strings.Count(res.Stderr, tc.want) != 1 {
				t.Fatalf("%s: %s at iodepth %d: want one log line of the page-cache choice and no probe:\n%s", name, tc.rw, tc.depth, res.Stderr)
			}
		}
	}
}
