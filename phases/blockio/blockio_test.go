package blockio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/prism-hpc/prism/internal/fstest"
	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/phasestest"
	"github.com/prism-hpc/prism/report"
)

// bioRunPlan runs plan text on one rank with workdir as the workdir, and
// returns its phases.
func bioRunPlan(t *testing.T, workdir, plan string) []report.PhaseResult {
	t.Helper()
	return phasestest.Run(t, registry(), plan, phasestest.Workdir(workdir), phasestest.File("t.toml")).Manifest.Phases
}

// registry is the blockio family alone.
func registry() *phases.Registry {
	r := phases.NewRegistry()
	Register(r)
	return r
}

func bioPassed(t *testing.T, ph report.PhaseResult) {
	t.Helper()
	if ph.Status != report.StatusPassed {
		t.Fatalf("phase %s %s: %s", ph.Name, ph.Status, ph.Error)
	}
}

func TestBlockIOPlanErrors(t *testing.T) {
	cases := []struct{ name, body, key, msg string }{
		{"misaligned bs with direct", "bs = 6000\ndirect = true", "bs", "multiple of 4KiB"},
		{"misaligned 512 bs with direct", "bs = \"512\"\ndirect = true", "bs", "direct = true"},
		{"misaligned offset_align with direct", "rw = \"randread\"\nbs = \"8KiB\"\noffset_align = 512\ndirect = true", "offset_align", "4KiB"},
		{"rwmixread", "rw = \"randrw\"\nrwmixread = 101", "rwmixread", "0 .. 100"},
		{"iodepth 0", "iodepth = 0", "iodepth", "1 .. 1024"},
		{"ioengine", "ioengine = \"libaio\"", "ioengine", "io_uring, psync"},
		{"fixedbufs with psync", "ioengine = \"psync\"\nfixedbufs = true", "fixedbufs", "only for ioengine"},
		{"registerfiles with psync", "ioengine = \"psync\"\nregisterfiles = true", "registerfiles", "only for ioengine"},
		{"iodepth 1025", "iodepth = 1025", "iodepth", "1 .. 1024"},
		{"jobs", "jobs = 0", "jobs", "out of range"},
		{"rw", "rw = \"randomread\"", "rw", "randread"},
		{"profile", "profile = \"seq-read-4m\"", "profile", "seq-read-1m"},
		{"size not multiple", "size = \"10KiB\"\nbs = \"4KiB\"", "size", "multiple of bs"},
		{"size below bs", "size = \"1KiB\"", "size", "less than bs"},
		{"time_based without runtime", "time_based = true", "time_based", "runtime"},
		{"fsync on reads", "rw = \"read\"\nfsync = 4", "fsync", "does not write"},
		{"fsync and fdatasync", "rw = \"write\"\nfsync = 4\nfdatasync = 4", "fdatasync", "not both"},
		{"shared multi-file", "shared_file = true\nnrfiles = 4", "shared_file", "nrfiles"},
		{"files too small", "size = \"64KiB\"\nnrfiles = 32", "nrfiles", "less than bs"},
		{"size beyond files", "nrfiles = 2\nfile_size = \"64KiB\"\nsize = \"1MiB\"", "size", "files"},
		{"data", "data = \"urandom\"", "data", "deterministic"},
		{"compressible", "compressible = 101", "compressible", "0 .. 100"},
		{"dedupe", "dedupe = -2", "dedupe", "0 .. 100"},
		{"compressible zero", "data = \"zero\"\ncompressible = 50", "compressible", "compressible already"},
		{"pattern without data", "pattern = \"0xff\"", "pattern", "data = \\\"pattern\\\""},
		{"bad pattern", "data = \"pattern\"\npattern = \"0xfff\"", "pattern", "hex"},
		{"wrong type", "iodepth = \"deep\"", "iodepth", "want an integer"},
		{"bad size unit", "bs = \"4KB/s\"", "bs", "bad size"},
		{"buffer pool", "buffer_pool = \"1KiB\"", "buffer_pool", "out of range"},
		{"scramble with a pool", "rw = \"write\"\nbuffer_pool = \"1MiB\"\nscramble_buffers = true", "scramble_buffers", "buffer_pool is shared"},
		{"scramble of zeros", "rw = \"write\"\ndata = \"zero\"\nscramble_buffers = true", "scramble_buffers", "exact content"},
		{"scramble of tiny blocks", "rw = \"write\"\nbs = 100\nsize = 1000\nscramble_buffers = true", "scramble_buffers", "512-byte sector"},
		{"scramble of compressible data", "rw = \"write\"\ncompressible = 40\nscramble_buffers = true", "scramble_buffers", "compress"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := "[[phase]]\nkind = \"blockio\"\n" + tc.body + "\n"
			_, err := phases.DecodePlan(registry(), "b.toml", []byte(src))
			var pe *phases.PlanError
			if !errors.As(err, &pe) {
				t.Fatalf("%T %v is not a *PlanError", err, err)
			}
			if pe.Key != tc.key || !strings.Contains(err.Error(), strings.ReplaceAll(tc.msg, `\"`, `"`)) || pe.Line < 3 {
				t.Fatalf("%v (key %q line %d), want key %q and %q", err, pe.Key, pe.Line, tc.key, tc.msg)
			}
		})
	}
}

func decodeBlockIO(t *testing.T, body string) *blockIOConfig {
	t.Helper()
	p, err := phases.DecodePlan(registry(), "b.toml", []byte("[[phase]]\nkind = \"blockio\"\n"+body+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	return p.Phases[0].Phase.Config().(*blockIOConfig)
}

// TestBlockIOProfiles: every preset decodes to the PoC's shape, and a key
// the plan writes wins even when it equals the default.
func TestBlockIOProfiles(t *testing.T) {
	for name, pr := range blockIOProfiles {
		c := decodeBlockIO(t, fmt.Sprintf("profile = %q", name))
		if c.RW != pr.rw || c.BS != pr.bs || c.IODepth != pr.iodepth || c.Jobs != pr.jobs || !c.Direct || !c.TimeBased || c.Runtime != phases.Duration(180*time.Second) || c.NrFiles != pr.n || c.Size < 1<<30 {
			t.Errorf("%s: %+v", name, c)
		}
	}
	c := decodeBlockIO(t, "profile = \"rand-read-4k\"\niodepth = 1\nruntime = \"2s\"\nsize = \"1MiB\"\ndirect = false")
	if c.IODepth != 1 || c.Runtime != phases.Duration(2*time.Second) || c.Size != 1<<20 || c.Direct || c.Jobs != 8 || c.BS != 4096 || c.RW != "randread" {
		t.Errorf("explicit keys did not win: %+v", c)
	}
	m := decodeBlockIO(t, "profile = \"multi-file-rand-read-128k\"\nnrfiles = 4\nfile_size = \"1MiB\"")
	if m.NrFiles != 4 || m.FileSize != 1<<20 || m.Size != 4<<20 || m.OffsetAlign != 128<<10 {
		t.Errorf("multi-file: nrfiles %d file_size %s size %s offset_align %s", m.NrFiles, m.FileSize, m.Size, m.OffsetAlign)
	}
	d := decodeBlockIO(t, "nrfiles = 4\nsize = \"1MiB\"")
	if d.FileSize != 256<<10 {
		t.Errorf("file_size default %s", d.FileSize)
	}
}

// TestBioSegmentOffset: in a shared file every (rank, job) segment is
// disjoint from every other, and together they tile the file.
func TestBioSegmentOffset(t *testing.T) {
	const size = 1 << 20
	for jobs := 1; jobs <= 3; jobs++ {
		type seg struct{ lo, hi int64 }
		var segs []seg
		for rank := 0; rank <= 3; rank++ {
			for j := 0; j < jobs; j++ {
				off := bioSegmentOffset(rank, j, jobs, size)
				segs = append(segs, seg{off, off + size})
			}
		}
		covered := int64(0)
		for i, a := range segs {
			covered += a.hi - a.lo
			for k, b := range segs {
				if i != k && a.lo < b.hi && b.lo < a.hi {
					t.Fatalf("jobs %d: segments %v and %v overlap", jobs, a, b)
				}
			}
			if a.lo%size != 0 || a.hi > int64(4*jobs)*size {
				t.Fatalf("jobs %d: segment %v outside the file", jobs, a)
			}
		}
		if covered != int64(4*jobs)*size {
			t.Fatalf("jobs %d: segments cover %d bytes", jobs, covered)
		}
	}
}

func TestBioPermutation(t *testing.T) {
	for _, n := range []uint64{1, 2, 3, 7, 100, 4096, 10007} {
		pm := newBioPerm(n)
		seen := make([]bool, n)
		inOrder := 0
		for k := uint64(0); k < n; k++ {
			x := pm.at(k, 12345)
			if x >= n || seen[x] {
				t.Fatalf("n=%d: at(%d) = %d repeats or is out of range", n, k, x)
			}
			seen[x] = true
			if x == k {
				inOrder++
			}
		}
		if n >= 100 && inOrder > int(n/10) {
			t.Errorf("n=%d: %d fixed points: hardly random", n, inOrder)
		}
		if n >= 100 && pm.at(5, 1) == pm.at(5, 2) && pm.at(6, 1) == pm.at(6, 2) {
			t.Errorf("n=%d: the key does not change the order", n)
		}
	}
}

// TestBlockIOWriteBytes: a size-bounded write moves exactly size bytes in
// size/bs ops, through O_DIRECT on the disk, and leaves nothing behind.
func TestBlockIOWriteBytes(t *testing.T) {
	ph := bioRunPlan(t, fstest.DiskDir(t), `
[[phase]]
kind = "blockio"
rw = "write"
bs = "64KiB"
size = "4MiB"
iodepth = 4
direct = true
data = "deterministic"
[[phase]]
kind = "blockio"
name = "seq-read"
rw = "read"
bs = "16KiB"
size = "2MiB"
direct = true
data = "seeded_random"
compressible = 50
dedupe = 20
`)
	w := ph[0]
	bioPassed(t, w)
	if w.Bytes != 4<<20 || w.Ops != 64 || w.OpsByType["write"].Ops != 64 || w.Metrics["direct"] != 1 {
		t.Fatalf("bytes %d ops %d by type %+v metrics %v", w.Bytes, w.Ops, w.OpsByType, w.Metrics)
	}
	r := ph[1]
	bioPassed(t, r)
	if r.Bytes != 2<<20 || r.OpsByType["read"].Ops != 128 || r.Params.(map[string]any)["direct"] != true {
		t.Fatalf("read: bytes %d ops %+v", r.Bytes, r.OpsByType)
	}
}

// TestBlockIOConcurrency: with iodepth 4 and 2 jobs, eight ops are in
// flight at once. The hook holds each goroutine's first op until all
// eight have arrived (or a timeout), so the count is deterministic.
func TestBlockIOConcurrency(t *testing.T) {
	var arrived, maxSeen atomic.Int32
	var firsts sync.Map
	blockIOOpHook = func(op bioOp) {
		if _, dup := firsts.LoadOrStore([2]int{op.Job, op.Worker}, true); dup {
			return
		}
		n := arrived.Add(1)
		deadline := time.Now().Add(10 * time.Second)
		for arrived.Load() < 8 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		for {
			m := maxSeen.Load()
			if n <= m || maxSeen.CompareAndSwap(m, n) {
				break
			}
		}
	}
	defer func() { blockIOOpHook = nil }()
	ph := bioRunPlan(t, fstest.DiskDir(t), `
[[phase]]
kind = "blockio"
rw = "randread"
size = "1MiB"
iodepth = 4
jobs = 2
ioengine = "psync"
`)
	bioPassed(t, ph[0])
	if arrived.Load() != 8 || maxSeen.Load() != 8 {
		t.Fatalf("%d goroutines issued ops, at most %d at once; want 8 in flight", arrived.Load(), maxSeen.Load())
	}
}

// TestBlockIOOffsets: random offsets are aligned, inside the file, and a
// size-bounded run touches every aligned position exactly once — also over
// many files; the same seed gives the same sequence.
func TestBlockIOOffsets(t *testing.T) {
	run := func(body string) (map[[2]int64]int, []int64) {
		var mu sync.Mutex
		seen := map[[2]int64]int{}
		var order []int64
		blockIOOpHook = func(op bioOp) {
			mu.Lock()
			seen[[2]int64{op.File, op.Off}]++
			order = append(order, op.File<<32|op.Off)
			mu.Unlock()
		}
		defer func() { blockIOOpHook = nil }()
		bioPassed(t, bioRunPlan(t, fstest.DiskDir(t), "[[phase]]\nkind = \"blockio\"\n"+body)[0])
		return seen, order
	}
	seen, order := run("rw = \"randread\"\nbs = \"4KiB\"\nsize = \"1MiB\"\nrandom_seed = 9\n")
	if len(seen) != 256 || len(order) != 256 {
		t.Fatalf("%d distinct offsets of %d ops, want 256", len(seen), len(order))
	}
	sequential := 0
	for i, v := range order {
		off := v & (1<<32 - 1)
		if off%4096 != 0 || off+4096 > 1<<20 {
			t.Fatalf("offset %d not aligned or outside the file", off)
		}
		if i > 0 && off == order[i-1]&(1<<32-1)+4096 {
			sequential++
		}
	}
	if sequential > 25 {
		t.Errorf("%d of 256 offsets follow their predecessor: not random", sequential)
	}
	_, again := run("rw = \"randread\"\nbs = \"4KiB\"\nsize = \"1MiB\"\nrandom_seed = 9\n")
	if fmt.Sprint(again) != fmt.Sprint(order) {
		t.Error("the same random_seed gave a different sequence")
	}
	// Multi-file (the PoC's 128K profile, scaled down): a random file, then
	// a random aligned offset in it.
	seen, _ = run("profile = \"multi-file-rand-read-128k\"\njobs = 1\niodepth = 2\nnrfiles = 8\nfile_size = \"1MiB\"\ntime_based = false\ndirect = false\n")
	files := map[int64]bool{}
	for k, n := range seen {
		files[k[0]] = true
		if k[1]%(128<<10) != 0 || k[1]+128<<10 > 1<<20 || n != 1 {
			t.Fatalf("multi-file op %v seen %d times", k, n)
		}
	}
	if len(files) != 8 || len(seen) != 64 {
		t.Fatalf("%d files, %d positions; want 8 and 64", len(files), len(seen))
	}
	// offset_align below bs: overlapping positions, still aligned.
	seen, _ = run("rw = \"randread\"\nbs = \"16KiB\"\noffset_align = \"4KiB\"\nsize = \"256KiB\"\n")
	for k := range seen {
		if k[1]%4096 != 0 || k[1]+16<<10 > 256<<10 {
			t.Fatalf("offset %d", k[1])
		}
	}
}

// TestBlockIOMix: the read share of a mixed run is rwmixread within a few
// percent, for a fixed seed, and fsync=N flushes every N writes.
func TestBlockIOMix(t *testing.T) {
	ph := bioRunPlan(t, fstest.DiskDir(t), `
[[phase]]
kind = "blockio"
rw = "randrw"
rwmixread = 70
size = "4MiB"
iodepth = 2
random_seed = 3
fsync = 8
[[phase]]
kind = "blockio"
name = "rw-seq"
rw = "readwrite"
rwmixread = 25
size = "4MiB"
fdatasync = 32
fsync_on_close = true
`)
	for _, tc := range []struct {
		ph      report.PhaseResult
		mix     float64
		syncOp  string
		syncN   int64
		onClose int64
	}{{ph[0], 0.70, "fsync", 8, 0}, {ph[1], 0.25, "fdatasync", 32, 1}} {
		bioPassed(t, tc.ph)
		r, w := tc.ph.OpsByType["read"], tc.ph.OpsByType["write"]
		share := float64(r.Ops) / float64(r.Ops+w.Ops)
		if r.Ops+w.Ops != 1024 || share < tc.mix-0.05 || share > tc.mix+0.05 {
			t.Errorf("%s: %d reads, %d writes: read share %.3f, want %.2f", tc.ph.Name, r.Ops, w.Ops, share, tc.mix)
		}
		if got := tc.ph.OpsByType[tc.syncOp].Ops; got != w.Ops/tc.syncN+map[bool]int64{true: tc.onClose}[tc.syncOp == "fsync"] {
			t.Errorf("%s: %d %s ops for %d writes", tc.ph.Name, got, tc.syncOp, w.Ops)
		}
		if tc.onClose > 0 && tc.ph.OpsByType["fsync"].Ops != tc.onClose {
			t.Errorf("%s: fsync_on_close: %d fsync ops", tc.ph.Name, tc.ph.OpsByType["fsync"].Ops)
		}
	}
}

// TestBlockIOTimeBased: a time-based run lasts at least its runtime, and
// ramp_time ops are issued but not recorded.
func TestBlockIOTimeBased(t *testing.T) {
	ph := bioRunPlan(t, fstest.DiskDir(t), `
[[phase]]
kind = "blockio"
rw = "randread"
size = "1MiB"
time_based = true
runtime = "300ms"
[[phase]]
kind = "blockio"
name = "ramped"
rw = "write"
size = "1MiB"
iodepth = 2
time_based = true
runtime = "200ms"
ramp_time = "200ms"
`)
	tb := ph[0]
	bioPassed(t, tb)
	if tb.Ops == 0 || tb.WallSeconds < 0.3 || tb.Ops <= 256 {
		t.Fatalf("time-based: %d ops in %.3fs (a 1MiB file is 256 ops: it must loop)", tb.Ops, tb.WallSeconds)
	}
	rp := ph[1]
	bioPassed(t, rp)
	issued, ramp := int64(rp.Metrics["ops_issued"]), int64(rp.Metrics["ramp_ops"])
	if ramp == 0 || rp.Ops == 0 || rp.Ops+ramp != issued || rp.WallSeconds < 0.4 {
		t.Fatalf("ramp: %d recorded + %d ramp != %d issued, wall %.3f", rp.Ops, ramp, issued, rp.WallSeconds)
	}
	if rp.Metrics["bytes_per_sec_after_ramp"] <= 0 {
		t.Fatalf("metrics %v", rp.Metrics)
	}
}

// TestBlockIOSharedFile: one rank writing its segment of a shared file.
// (Several ranks are exercised by the launcher tests; the offsets are
// TestBioSegmentOffset's.)
func TestBlockIOSharedFile(t *testing.T) {
	ph := bioRunPlan(t, fstest.DiskDir(t), `
[[phase]]
kind = "blockio"
rw = "write"
bs = "64KiB"
size = "1MiB"
jobs = 3
iodepth = 2
shared_file = true
`)
	bioPassed(t, ph[0])
	if ph[0].Bytes != 3<<20 {
		t.Fatalf("bytes %d", ph[0].Bytes)
	}
}

// TestBlockIODirectOnTmpfs: direct = true on tmpfs fails with a message
// naming the path, the filesystem and the remedy; with direct_fallback it
// passes buffered and records direct = 0.
func TestBlockIODirectOnTmpfs(t *testing.T) {
	dir := fstest.Mount(t, "-t", "tmpfs", "-o", "size=64m", "tmpfs")
	ph := bioRunPlan(t, dir, `
[[phase]]
kind = "blockio"
name = "strict"
size = "1MiB"
direct = true
[[phase]]
kind = "blockio"
name = "fallback"
size = "1MiB"
direct = true
direct_fallback = true
`)
	if ph[0].Status != report.StatusFailed {
		t.Fatalf("direct on tmpfs: %s", ph[0].Status)
	}
	for _, want := range []string{"blockio", "rank 0", dir, "tmpfs does not support O_DIRECT", "set direct = false"} {
		if !strings.Contains(ph[0].Error, want) {
			t.Errorf("error %q does not mention %q", ph[0].Error, want)
		}
	}
	// The plan stops at the first failure; run the fallback on its own.
	ph = bioRunPlan(t, dir, "[[phase]]\nkind = \"blockio\"\nsize = \"1MiB\"\ndirect = true\ndirect_fallback = true\n")
	bioPassed(t, ph[0])
	if d, ok := ph[0].Metrics["direct"]; !ok || d != 0 || ph[0].Bytes != 1<<20 {
		t.Fatalf("fallback: metrics %v bytes %d", ph[0].Metrics, ph[0].Bytes)
	}
}

// TestBlockIODirectOnRamfs: ramfs refuses O_DIRECT at open (EINVAL), the
// other path to the same decision.
func TestBlockIODirectOnRamfs(t *testing.T) {
	dir := fstest.Mount(t, "-t", "ramfs", "ramfs")
	p := &blockIO{cfg: defaultBlockIOConfig()}
	p.cfg.Size, p.cfg.Direct = 64<<10, true
	if err := p.cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	env := phasestest.EnvIn(t, "blockio", dir)
	// CheckDirect already refuses ramfs; go straight to open.
	p.direct = true
	_, err := p.open(env, "f")
	var de *pio.DirectError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "ramfs does not support O_DIRECT") {
		t.Fatalf("%v", err)
	}
	p.cfg.DirectFallback = true
	fd, err := p.open(env, "f")
	if err != nil || p.direct {
		t.Fatalf("fallback open: %v, direct %v", err, p.direct)
	}
	pio.Close(fd)
	if err := p.Teardown(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("teardown left %v", ents)
	}
}

// TestBlockIOOnLoopXFS runs direct reads and writes through the engine on
// a loop-mounted XFS image.
func TestBlockIOOnLoopXFS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a loop device")
	}
	mkfs, err := exec.LookPath("mkfs.xfs")
	if err != nil {
		t.Skip("mkfs.xfs missing: apt-get install xfsprogs")
	}
	img := filepath.Join(t.TempDir(), "xfs.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 320<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.xfs: %v: %s", err, out)
	}
	dir := fstest.Mount(t, "-o", "loop", img)
	ph := bioRunPlan(t, dir, `
[[phase]]
kind = "blockio"
rw = "randwrite"
size = "2MiB"
iodepth = 4
direct = true
[[phase]]
kind = "blockio"
name = "read"
rw = "randread"
size = "2MiB"
iodepth = 4
direct = true
`)
	for _, p := range ph {
		bioPassed(t, p)
		if p.Bytes != 2<<20 || p.Metrics["direct"] != 1 {
			t.Fatalf("%s: bytes %d metrics %v", p.Name, p.Bytes, p.Metrics)
		}
	}
}

// TestBlockIOFadviseEvicts: with the fadvise cache policy, Setup leaves
// the files it filled out of the page cache, so the timed reads are cold.
func TestBlockIOFadviseEvicts(t *testing.T) {
	dir := fstest.DiskDir(t)
	resident := func(p *blockIO) int {
		path := p.jobs[0].paths[0]
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		m, err := unix.Mmap(int(f.Fd()), 0, int(p.cfg.FileSize), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(m)
		vec := make([]byte, (len(m)+4095)/4096)
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			t.Fatal(e)
		}
		n := 0
		for _, v := range vec {
			n += int(v & 1)
		}
		return n
	}
	for _, cache := range []phases.CacheMode{phases.CacheNone, phases.CacheFadvise} {
		p := &blockIO{cfg: defaultBlockIOConfig()}
		p.cfg.Size = 2 << 20
		if err := p.cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		env := phasestest.EnvIn(t, "blockio", dir)
		env.Cache = cache
		if err := p.Setup(context.Background(), env); err != nil {
			t.Fatal(err)
		}
		n := resident(p)
		p.Teardown(context.Background(), env)
		t.Logf("cache %s: %d of 512 pages resident after setup", cache, n)
		if cache == "fadvise" && n != 0 || cache == "none" && n == 0 {
			t.Errorf("cache %s: %d pages resident after setup", cache, n)
		}
	}
	// Through the engine the policy is recorded as applied.
	ph := bioRunPlan(t, dir, "[plan]\nname = \"t\"\ndrop_caches = \"fadvise\"\n[[phase]]\nkind = \"blockio\"\nsize = \"1MiB\"\n")
	bioPassed(t, ph[0])
	if ph[0].Cache.Applied != "fadvise" {
		t.Fatalf("cache %+v", ph[0].Cache)
	}
}

// TestBlockIOVerifyCatchesCorruption: Verify compares read data with the
// generator, so storage returning other bytes fails the phase.
func TestBlockIOVerifyCatchesCorruption(t *testing.T) {
	dir := fstest.DiskDir(t)
	p := &blockIO{cfg: defaultBlockIOConfig()}
	p.cfg.Size, p.cfg.Data = 256<<10, pio.GenDeterministic
	if err := p.cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	env := phasestest.EnvIn(t, "blockio", dir)
	ctx := context.Background()
	defer p.Teardown(ctx, env)
	if err := p.Setup(ctx, env); err != nil {
		t.Fatal(err)
	}
	if err := p.Run(ctx, env); err != nil {
		t.Fatal(err)
	}
	if err := p.Verify(ctx, env); err != nil {
		t.Fatalf("clean data: %v", err)
	}
	path := p.jobs[0].paths[0]
	f, _ := os.OpenFile(path, os.O_WRONLY, 0)
	f.WriteAt([]byte{0xff, 0x00, 0x55}, 0) // the first block is always checked
	f.Close()
	if err := p.Verify(ctx, env); err == nil || !strings.Contains(err.Error(), "different bytes") {
		t.Fatalf("corrupted data: %v", err)
	}
}

// TestBlockIOScrambledWritesAreDistinct: with the default data model a
// file written from one buffer (one job, iodepth 1) holds no two equal
// 512-byte sectors or 4 KiB blocks, on both engines, so a dedupe layer
// finds nothing; and every block is what writtenBlock (Verify's model)
// says. The same plan with a one-block pool and no scramble writes one
// block again and again: the check would see it.
func TestBlockIOScrambledWritesAreDistinct(t *testing.T) {
	for _, tc := range []struct {
		extra    string
		distinct bool
	}{
		{"ioengine = \"psync\"", true}, {"ioengine = \"io_uring\"", true},
		{"ioengine = \"psync\"\nbuffer_pool = \"64KiB\"", false},
	} {
		p := runPhase(t, fstest.DiskDir(t), "rw = \"write\"\nbs = \"64KiB\"\nsize = \"4MiB\"\n"+tc.extra)
		if len(p.pool) != 64<<10 {
			t.Fatalf("%s: a pool of %d bytes, want one 64 KiB buffer", tc.extra, len(p.pool))
		}
		job := p.jobs[0]
		data, err := os.ReadFile(job.paths[0])
		if err != nil || len(data) != 4<<20 {
			t.Fatalf("%s: %d bytes, %v", tc.extra, len(data), err)
		}
		for _, unit := range []int{512, 4096} {
			seen := map[string]int{}
			for off := 0; off < len(data); off += unit {
				if prev, dup := seen[string(data[off:off+unit])]; dup {
					if tc.distinct {
						t.Fatalf("%s: the %d-byte units at %d and %d are equal", tc.extra, unit, prev, off)
					}
					continue
				}
				seen[string(data[off:off+unit])] = off
			}
			if !tc.distinct && len(seen) > 64<<10/unit {
				t.Fatalf("%s: %d distinct %d-byte units from one 64 KiB block", tc.extra, len(seen), unit)
			}
		}
		want := make([]byte, job.bs)
		for q := int64(0); q < job.ppf; q++ {
			p.writtenBlock(want, 0, job, 0, q)
			if !bytes.Equal(data[q*job.bs:(q+1)*job.bs], want) {
				t.Fatalf("%s: block %d is not what was written there", tc.extra, q)
			}
		}
	}
}

// TestBlockIOVerifyCatchesScrambleCorruption: Verify regenerates the
// stamped blocks, so a write phase's file whose stamp alone changed (the
// pass word of the first sector, the rest of the block intact) fails it.
func TestBlockIOVerifyCatchesScrambleCorruption(t *testing.T) {
	dir := fstest.DiskDir(t)
	p := &blockIO{cfg: defaultBlockIOConfig()}
	p.cfg.Size, p.cfg.RW, p.cfg.BS = 1<<20, "write", 64<<10
	if err := p.cfg.Validate(); err != nil || !p.cfg.scramble {
		t.Fatalf("scramble %v, %v", p.cfg.scramble, err)
	}
	env := phasestest.EnvIn(t, "blockio", dir)
	ctx := context.Background()
	defer p.Teardown(ctx, env)
	for _, step := range []func(context.Context, *phases.Env) error{p.Setup, p.Run, p.Verify} {
		if err := step(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(p.jobs[0].paths[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	word := make([]byte, 8)
	f.ReadAt(word, 56)
	word[0] ^= 1
	f.WriteAt(word, 56) // the first block is always checked
	if err := p.Verify(ctx, env); err == nil || !strings.Contains(err.Error(), "different bytes") || !strings.Contains(err.Error(), "byte 56 ") {
		t.Fatalf("corrupted stamp: %v", err)
	}
}

// TestBlockIOWriteDataNote: the manifest says which data model ran.
func TestBlockIOWriteDataNote(t *testing.T) {
	ph := bioRunPlan(t, fstest.DiskDir(t), `
[[phase]]
kind = "blockio"
rw = "write"
size = "1MiB"
iodepth = 2
[[phase]]
kind = "blockio"
rw = "write"
size = "1MiB"
buffer_pool = "256KiB"
[[phase]]
kind = "blockio"
rw = "read"
size = "1MiB"
`)
	for i, want := range []string{"scrambled: 2 buffers of 4KiB", "pool: 256KiB of distinct random blocks", ""} {
		bioPassed(t, ph[i])
		if got := ph[i].Notes["write_data"]; !strings.HasPrefix(got, want) || (want == "") != (got == "") {
			t.Fatalf("phase %d: write_data %q, want %q...", i, got, want)
		}
	}
}

// TestBlockIOHotLoopAllocatesNothing runs a short job and checks that the
// Go heap did not grow per op.
func TestBlockIOHotLoopAllocatesNothing(t *testing.T) {
	dir := fstest.DiskDir(t)
	for _, tc := range []struct {
		rw, engine string
		fixed      bool
		pool       phases.Size // buffer_pool; 0: scrambled, the default
	}{{"randread", enginePsync, false, 0}, {"randwrite", enginePsync, false, 0}, {"randwrite", enginePsync, false, 1 << 20},
		{"randread", engineURing, false, 0}, {"randwrite", engineURing, true, 0}, {"write", engineURing, false, 0},
		{"randwrite", engineURing, false, 1 << 20}, {"randrw", engineURing, true, 0}} {
		rw := fmt.Sprintf("%s %s pool %d", tc.rw, tc.engine, tc.pool)
		p := &blockIO{cfg: defaultBlockIOConfig()}
		p.cfg.Size, p.cfg.RW, p.cfg.Fsync = 4<<20, tc.rw, 0
		if tc.pool > 0 {
			p.cfg.BufferPool, p.cfg.Scramble = tc.pool, false
		}
		p.cfg.IOEngine, p.cfg.FixedBufs, p.cfg.RegisterFiles, p.cfg.IODepth = tc.engine, tc.fixed, tc.fixed, 4
		if err := p.cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		env := phasestest.EnvIn(t, "blockio", dir)
		ctx := context.Background()
		if err := p.Setup(ctx, env); err != nil {
			t.Fatal(err)
		}
		if p.jobs[0].scramble != (tc.pool == 0 && tc.rw != "randread") {
			t.Fatalf("%s: scramble %v", rw, p.jobs[0].scramble)
		}
		w := p.jobs[0].workers[0]
		// Every run on one thread, which a single-issuer ring requires.
		runtime.LockOSThread()
		if (w.ring != nil) != (tc.engine == engineURing) {
			t.Fatalf("%s: the worker has ring %v", rw, w.ring)
		}
		allocs := testing.AllocsPerRun(3, func() {
			p.jobs[0].next.Store(0)
			p.jobs[0].live.Store(1)
			w.loop(p, report.Ticks())
		})
		if w.err != nil || w.byts != 4*1024*4096 {
			t.Fatalf("%s: err %v, %d bytes moved over 4 runs, want %d", rw, w.err, w.byts, 4*1024*4096)
		}
		runtime.UnlockOSThread()
		p.Teardown(ctx, env)
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per run of 1024 ops", rw, allocs)
		}
	}
}

func TestBlockIOFootprint(t *testing.T) {
	c := decodeBlockIO(t, "jobs = 4\nnrfiles = 8\nfile_size = \"1MiB\"")
	if f := c.Footprint(2); f.Files != 32 || f.Bytes != 32<<20 {
		t.Fatalf("%+v", f)
	}
}

// BenchmarkBlockIOLoop measures the per-op cost of the hot loop on a
// page-cached file (tmpfs when /dev/shm is one): the per-op CPU overhead,
// which phases/bench/blockio.sh (disk cells only) cannot separate from the
// disk's spread.
func BenchmarkBlockIOLoop(b *testing.B) {
	dir := b.TempDir()
	if fs, err := pio.StatFS("/dev/shm"); err == nil && fs.Type == "tmpfs" {
		d, err := os.MkdirTemp("/dev/shm", "prism-bench-")
		if err == nil {
			dir = d
			b.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	for _, name := range []string{"psync/randread", "psync/read", "io_uring/randread", "io_uring/read", "psync/write", "io_uring/write"} {
		engine, rw, _ := strings.Cut(name, "/")
		b.Run(name, func(b *testing.B) {
			p := &blockIO{cfg: defaultBlockIOConfig()}
			p.cfg.Size, p.cfg.RW, p.cfg.TimeBased, p.cfg.Runtime = 64<<20, rw, true, phases.Duration(time.Hour)
			p.cfg.IOEngine = engine
			if err := p.cfg.Validate(); err != nil {
				b.Fatal(err)
			}
			env := phasestest.EnvIn(b, "blockio", dir)
			ctx := context.Background()
			if err := p.Setup(ctx, env); err != nil {
				b.Fatal(err)
			}
			defer p.Teardown(ctx, env)
			job := p.jobs[0]
			job.timeBased = false
			job.total = int64(b.N)
			job.live.Store(1)
			b.SetBytes(4096)
			cpu := cpuNs()
			b.ResetTimer()
			job.workers[0].loop(p, report.Ticks())
			b.StopTimer()
			// CPU time per op is what a loaded machine distorts least.
			b.ReportMetric(float64(cpuNs()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
	b.Run("raw-pread", func(b *testing.B) {
		path := filepath.Join(dir, "raw")
		os.WriteFile(path, make([]byte, 64<<20), 0o644)
		fd, _ := unix.Open(path, unix.O_RDONLY, 0)
		defer unix.Close(fd)
		buf := make([]byte, 4096)
		b.SetBytes(4096)
		cpu := cpuNs()
		for i := 0; b.Loop(); i++ {
			pio.PreadFull(fd, buf, int64(i%16384)*4096)
		}
		b.ReportMetric(float64(cpuNs()-cpu)/float64(b.N), "cpu-ns/op")
	})
}

// cpuNs is the process's user + system CPU time.
func cpuNs() int64 {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// TestProcBudget: phases add Ps while they run and the original setting
// returns after the last one, also when two overlap.
func TestProcBudget(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	var b procBudget
	b.acquire(16)
	b.acquire(4)
	if got := runtime.GOMAXPROCS(0); got != base+20 {
		t.Errorf("GOMAXPROCS %d with two phases, want %d", got, base+20)
	}
	b.release(16)
	if got := runtime.GOMAXPROCS(0); got != base+4 {
		t.Errorf("GOMAXPROCS %d after one, want %d", got, base+4)
	}
	b.release(4)
	if got := runtime.GOMAXPROCS(0); got != base {
		t.Errorf("GOMAXPROCS %d after both, want %d", got, base)
	}
}

// BenchmarkBioStamp is the scramble's CPU cost per 1 MiB write, to set
// beside the write itself (tens of µs into the page cache, hundreds to a
// disk).
func BenchmarkBioStamp(b *testing.B) {
	job := &bioJob{seed: 7, stream: 3}
	buf := pio.AlignedBuffer(1<<20, 4096)
	b.SetBytes(int64(len(buf)))
	for i := int64(0); b.Loop(); i++ {
		job.stamp(buf, 0, i<<20, 0)
	}
}

// TestBlockIOTimedSpanHoldsOnlyTheOps: what a Run of blockio used to do
// inside the timed span besides its ops, and must not again
// (docs/PERFORMANCE.md, the IOR read cell). On both engines and for one
// and for several workers: Setup leaves every read buffer's pages mapped
// (else the first timed read faults them in: 256 faults per 1 MiB
// buffer), Run merges no worker set into the rank's (the engine does,
// after the clock: creating the rank's recorder costs ~0.25 ms), and a
// single worker runs on Run's goroutine (no goroutine started and waited
// for).
func TestBlockIOTimedSpanHoldsOnlyTheOps(t *testing.T) {
	dir := fstest.DiskDir(t)
	page := os.Getpagesize()
	for _, tc := range []struct {
		engine        string
		jobs, iodepth int
	}{{enginePsync, 1, 1}, {enginePsync, 2, 2}, {engineURing, 1, 2}, {engineURing, 2, 1}} {
		name := fmt.Sprintf("%s jobs %d iodepth %d", tc.engine, tc.jobs, tc.iodepth)
		p := &blockIO{cfg: defaultBlockIOConfig()}
		p.cfg.RW, p.cfg.BS, p.cfg.Size, p.cfg.IOEngine = "read", 256<<10, 1<<20, tc.engine
		p.cfg.Jobs, p.cfg.IODepth = tc.jobs, tc.iodepth
		if err := p.cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		env := phasestest.EnvIn(t, "blockio", dir)
		ctx := context.Background()
		// Pages the heap had mapped go back to the OS, so that the
		// buffers Setup allocates are fresh, as in the engine's
		// iterations (quiesceHeap).
		debug.FreeOSMemory()
		if err := p.Setup(ctx, env); err != nil {
			t.Fatal(err)
		}
		var bufs [][]byte
		for _, job := range p.jobs {
			for _, w := range job.workers {
				if w.ring == nil {
					bufs = append(bufs, w.buf)
				}
				for _, sl := range w.slots {
					if sl.buf != nil {
						bufs = append(bufs, sl.buf)
					}
				}
			}
		}
		if len(bufs) == 0 {
			t.Fatalf("%s: no read buffers found", name)
		}
		for _, b := range bufs {
			// mincore wants a page-aligned start: from b's first page
			// boundary on (b's start itself when it is page-aligned).
			skip := (page - int(uintptr(unsafe.Pointer(&b[0]))%uintptr(page))) % page
			span := b[skip:]
			vec := make([]byte, (len(span)+page-1)/page)
			if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&span[0])), uintptr(len(span)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
				t.Fatal(e)
			}
			for i, v := range vec {
				if v&1 == 0 {
					t.Fatalf("%s: page %d of %d of a read buffer is not mapped after Setup", name, i, len(vec))
				}
			}
		}
		// Which goroutine issues the first op: Run's own (this one's)
		// or a worker's. Any op, not one worker's: with two workers
		// sharing a job's four blocks one of them may issue none.
		runG := goroutineID()
		var onRun atomic.Int32 // 0 not seen yet, 1 on Run's goroutine, 2 on another
		blockIOOpHook = func(bioOp) {
			v := int32(2)
			if goroutineID() == runG {
				v = 1
			}
			onRun.CompareAndSwap(0, v)
		}
		err := p.Run(ctx, env)
		blockIOOpHook = nil
		if err != nil {
			t.Fatal(err)
		}
		if n := env.Recorder("read").Ops; n != 0 {
			t.Errorf("%s: Run merged %d read ops into the rank's set inside the timed span", name, n)
		}
		single := tc.jobs == 1 && (tc.iodepth == 1 || p.engine == engineURing) // the engine in effect
		if got, want := onRun.Load(), map[bool]int32{true: 1, false: 2}[single]; got != want {
			t.Errorf("%s: the first op ran on %s goroutine, want %s (a single worker runs on Run's own)", name,
				map[int32]string{0: "no", 1: "Run's", 2: "another"}[got], map[int32]string{1: "Run's", 2: "another"}[want])
		}
		if err := p.Verify(ctx, env); err != nil {
			t.Fatal(err)
		}
		p.Teardown(ctx, env)
	}
}

// goroutineID is the calling goroutine's number, from its stack header
// ("goroutine 18 [running]:"); tests only.
func goroutineID() uint64 {
	var b [64]byte
	f := strings.Fields(string(b[:runtime.Stack(b[:], false)]))
	id, _ := strconv.ParseUint(f[1], 10, 64)
	return id
}
