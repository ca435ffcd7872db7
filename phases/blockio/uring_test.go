package blockio

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/prism-hpc/prism/internal/fstest"
	"github.com/prism-hpc/prism/io/uring"
	"github.com/prism-hpc/prism/phases/phasestest"
)

// skipWithoutURing skips where this kernel refuses a ring (the fallback
// test covers that path everywhere).
func skipWithoutURing(t *testing.T) {
	t.Helper()
	r, err := uring.New(2)
	if err != nil {
		t.Skipf("io_uring unavailable: %s", uring.Unavailable(err))
	}
	r.Close()
}

// runPhase runs one phase through Setup, Run and Verify in dir, leaving
// Teardown to the test's cleanup, so a test can inspect the files.
func runPhase(t *testing.T, dir, body string) *blockIO {
	t.Helper()
	c := decodeBlockIO(t, body)
	p := &blockIO{cfg: *c}
	env := phasestest.EnvIn(t, "blockio", dir)
	ctx := context.Background()
	t.Cleanup(func() { p.Teardown(ctx, env) })
	if err := p.Setup(ctx, env); err != nil {
		t.Fatal(err)
	}
	if err := p.Run(ctx, env); err != nil {
		t.Fatal(err)
	}
	if err := p.Verify(ctx, env); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestURingWritesEveryBlock: a size-bounded random direct write through
// the ring, with and without registered buffers and files, writes every
// block of every file exactly with the pool block the offset sequence
// names, or with the stamp of its offset (scrambled, the default) (the
// whole file is read back, not the spot check's four blocks),
// and keeps iodepth requests in flight.
func TestURingWritesEveryBlock(t *testing.T) {
	skipWithoutURing(t)
	for _, extra := range []string{"", "fixedbufs = true\nregisterfiles = true", "buffer_pool = \"1MiB\"", "buffer_pool = \"1MiB\"\nfixedbufs = true"} {
		t.Run(strings.ReplaceAll(extra, "\n", ","), func(t *testing.T) {
			p := runPhase(t, fstest.DiskDir(t), "rw = \"randwrite\"\nsize = \"2MiB\"\nnrfiles = 2\njobs = 2\niodepth = 8\ndirect = true\nverify = true\n"+extra)
			if p.cfg.scramble != !strings.Contains(extra, "buffer_pool") {
				t.Fatalf("scramble %v with %q", p.cfg.scramble, extra)
			}
			if p.engine != engineURing {
				t.Fatalf("engine %q (%s)", p.engine, p.fellBack)
			}
			bs := p.jobs[0].bs
			got, want := make([]byte, bs), make([]byte, bs)
			for _, job := range p.jobs {
				w := job.workers[0]
				if len(job.workers) != 1 || w.maxInflight != 8 {
					t.Fatalf("job %d: %d workers, at most %d requests in flight; want 1 worker keeping 8", job.idx, len(job.workers), w.maxInflight)
				}
				for f, path := range job.paths {
					data, err := os.ReadFile(path)
					if err != nil {
						t.Fatal(err)
					}
					if int64(len(data)) != job.ppf*bs {
						t.Fatalf("%s: %d bytes, want %d", path, len(data), job.ppf*bs)
					}
					for q := int64(0); q < job.ppf; q++ {
						p.writtenBlock(want, 0, job, int64(f), q)
						copy(got, data[q*bs:])
						if !bytes.Equal(got, want) {
							t.Fatalf("%s block %d differs from what was written there", path, q)
						}
					}
				}
			}
		})
	}
}

// TestURingReadsContent: reads through the ring (plain and fixed) return
// the file's bytes: at iodepth 1 over a sequential file, the slot's buffer
// ends holding the last block, which the generator predicts.
func TestURingReadsContent(t *testing.T) {
	skipWithoutURing(t)
	for _, extra := range []string{"", "fixedbufs = true\nregisterfiles = true"} {
		p := runPhase(t, fstest.DiskDir(t), "rw = \"read\"\nsize = \"256KiB\"\ndirect = true\ndata = \"deterministic\"\n"+extra)
		job := p.jobs[0]
		want := make([]byte, job.bs)
		p.gen.FillStream(want, job.stream, job.ppf-1)
		if got := job.workers[0].slots[0].buf; !bytes.Equal(got, want) {
			t.Fatalf("%q: the last block read differs from what Setup wrote", extra)
		}
		if job.workers[0].byts != 256<<10 {
			t.Fatalf("%q: %d bytes read", extra, job.workers[0].byts)
		}
	}
}

// TestURingFsyncEveryN: fsync = 4 over 64 writes queues 16 fsyncs (and
// fdatasync likewise), each recorded under its op. io_uring is asked for
// by name: buffered writes on ext4 punt to io-wq, where auto runs psync.
func TestURingFsyncEveryN(t *testing.T) {
	skipWithoutURing(t)
	for _, op := range []string{"fsync", "fdatasync"} {
		ph := bioRunPlan(t, fstest.DiskDir(t), "[[phase]]\nkind = \"blockio\"\nrw = \"write\"\nsize = \"256KiB\"\niodepth = 8\nioengine = \"io_uring\"\n"+op+" = 4\n")
		bioPassed(t, ph[0])
		if ph[0].Notes["ioengine"] != engineURing {
			t.Fatalf("notes %v", ph[0].Notes)
		}
		if n := ph[0].OpsByType[op].Ops; n != 16 || ph[0].OpsByType["write"].Ops != 64 {
			t.Fatalf("%s: %d syncs and %d writes, want 16 and 64", op, n, ph[0].OpsByType["write"].Ops)
		}
	}
}

// TestURingTimeBased: a time-based io_uring run loops over its file for
// its runtime and records the engine.
func TestURingTimeBased(t *testing.T) {
	skipWithoutURing(t)
	ph := bioRunPlan(t, fstest.DiskDir(t), "[[phase]]\nkind = \"blockio\"\nrw = \"randread\"\nsize = \"256KiB\"\niodepth = 4\ntime_based = true\nruntime = \"200ms\"\nramp_time = \"50ms\"\nioengine = \"io_uring\"\n")
	r := ph[0]
	bioPassed(t, r)
	issued, ramp := int64(r.Metrics["ops_issued"]), int64(r.Metrics["ramp_ops"])
	if r.Ops <= 64 || r.WallSeconds < 0.25 || ramp == 0 || r.Ops+ramp != issued || r.Metrics["io_uring"] != 1 {
		t.Fatalf("%d ops + %d ramp (issued %d) in %.3fs, metrics %v: want a loop over the 64-block file", r.Ops, ramp, issued, r.WallSeconds, r.Metrics)
	}
}

// TestURingFallback: when the kernel refuses a ring (simulated: EPERM as
// a seccomp filter answers), the phase runs psync, passes, and the
// manifest records the engine and why.
func TestURingFallback(t *testing.T) {
	uring.SetSetupHookForTest(unix.EPERM)
	defer uring.SetSetupHookForTest(nil)
	ph := bioRunPlan(t, fstest.DiskDir(t), "[[phase]]\nkind = \"blockio\"\nrw = \"randwrite\"\nsize = \"256KiB\"\niodepth = 4\n")
	r := ph[0]
	bioPassed(t, r)
	if r.Notes["ioengine"] != enginePsync || !strings.Contains(r.Notes["ioengine_fallback"], "operation not permitted") || r.Metrics["io_uring"] != 0 {
		t.Fatalf("notes %v, metrics %v", r.Notes, r.Metrics)
	}
	if r.OpsByType["write"].Ops != 64 {
		t.Fatalf("%d writes, want 64", r.OpsByType["write"].Ops)
	}
}

// TestURingOneEnterPerBatch: one io_uring_enter both submits a batch and
// waits for its first completion, where fio 3.33 makes two (submit, then
// wait). Buffered reads of a disk file that Setup just wrote hit the page
// cache and complete inline during the submission, so every pass refills
// all iodepth slots, and 1024 reads at iodepth 16 take 64 enters plus the
// drain (ioengine = "io_uring": auto would run buffered reads on psync).
// A loop that submitted and waited in separate calls, or sent one
// request per call, makes twice as many or more. (tmpfs will not do: its
// reads go to io-wq workers and complete a few at a time.) Another
// process's drop_caches between Setup and Run would send the reads to
// the disk, so a count too high is retried twice; a loop with extra
// enters fails every time.
func TestURingOneEnterPerBatch(t *testing.T) {
	skipWithoutURing(t)
	dir := fstest.DiskDir(t)
	var enters int64
	for try := 0; try < 3; try++ {
		ph := bioRunPlan(t, dir, "[[phase]]\nkind = \"blockio\"\nrw = \"randread\"\nbs = \"4KiB\"\nsize = \"4MiB\"\niodepth = 16\nioengine = \"io_uring\"\n")
		r := ph[0]
		bioPassed(t, r)
		if r.Ops != 1024 {
			t.Fatalf("%d reads, want 1024", r.Ops)
		}
		if enters = int64(r.Metrics["io_uring_enters"]); enters >= 64 && enters <= 64+4 {
			return
		}
	}
	t.Fatalf("1024 reads took %d io_uring_enter calls, want 64 (+ at most 4 for the drain)", enters)
}
