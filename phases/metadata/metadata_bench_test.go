package metadata

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/phasestest"
	"github.com/prism-hpc/prism/report"
)

// Benchmarks of the metadata phases' timed loops, driven directly on one
// rank without the engine. Each op has two variants on the same prepared
// files: "phase" is the phase's Run (per-op ctx check, clock reads, live
// counters, histogram); "bare" issues the same syscalls through the same
// pio wrappers with nothing around them. phase/bare is the cost of prism's
// instrumentation alone; phases/bench/metadata.sh compares the whole CLI
// against a C loop on the same filesystem.
//
// BenchmarkMetadataPaired alternates the variants within every iteration,
// so that both see the same load on a shared machine, and reports the
// median of the per-pair ratios.
//
// Files go to PRISM_BENCH_DIR if set, else the test's temporary directory
// (which may be tmpfs). Metrics: wall ns per file op of each variant's
// timed loops, and the medians of bare/phase wall and CPU (process user +
// system time, all threads) ratios: the phase's rate as a fraction of the
// bare syscalls' rate.

const benchMetaCount = 2000

type metaCase struct {
	op, kind string
	phase    func() phases.Phase
	// bare returns the run function without instrumentation for p.
	bare func(p phases.Phase) func(context.Context, *phases.Env) error
	// once: set up once and run repeatedly (a listing changes nothing,
	// and populating costs far more than listing).
	once bool
	// reset, if set, undoes a run without a new Setup (renaming the files
	// back is much cheaper than creating them again).
	reset func(p phases.Phase) error
}

// Creates are left to metadata.sh: their cost is the filesystem's (on ext4
// without a journal it grows with every inode freed in the last minutes,
// which would make these benchmarks run for minutes), and their
// bookkeeping is the same as the ops below.
var metaCases = []metaCase{
	{op: "stat", kind: "list_files", once: true,
		phase: func() phases.Phase { return &listFiles{cfg: metaConfig{Count: benchMetaCount}} },
		bare: func(ph phases.Phase) func(context.Context, *phases.Env) error {
			p := ph.(*listFiles)
			return func(context.Context, *phases.Env) error {
				var err error
				if p.scratch, p.raw, err = p.fs.dir.ReadDir(p.scratch, p.raw[:0]); err != nil {
					return err
				}
				var st unix.Stat_t
				p.seen, err = pio.EachName(p.raw, func(name []byte) error { return p.fs.dir.StatName(name, &st) })
				return err
			}
		}},
	{op: "rename", kind: "move_files",
		phase: func() phases.Phase { return &moveFiles{cfg: metaConfig{Count: benchMetaCount}} },
		reset: func(ph phases.Phase) error {
			p := ph.(*moveFiles)
			for i := range p.moved {
				n := p.fs.names.at(i)
				if err := p.dst.Rename(*n, p.fs.dir, *n); err != nil {
					return err
				}
			}
			p.moved = 0
			return nil
		},
		bare: func(ph phases.Phase) func(context.Context, *phases.Env) error {
			p := ph.(*moveFiles)
			return func(context.Context, *phases.Env) error {
				for i := range p.fs.names.count {
					n := p.fs.names.at(i)
					if err := p.fs.dir.Rename(*n, p.dst, *n); err != nil {
						return err
					}
					p.moved++
				}
				return nil
			}
		}},
	{op: "unlink", kind: "delete_files",
		phase: func() phases.Phase { return &deleteFiles{cfg: metaConfig{Count: benchMetaCount}} },
		bare: func(ph phases.Phase) func(context.Context, *phases.Env) error {
			p := ph.(*deleteFiles)
			return func(context.Context, *phases.Env) error {
				for i := range p.fs.names.count {
					if err := p.fs.dir.Unlink(*p.fs.names.at(i)); err != nil {
						return err
					}
					p.deleted++
				}
				return nil
			}
		}},
}

func benchMetaEnv(b *testing.B, kind string) *phases.Env {
	dir := os.Getenv("PRISM_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	} else {
		var err error
		if dir, err = os.MkdirTemp(dir, "prism-bench-"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
	}
	return phasestest.EnvIn(b, kind, dir)
}

// metaRunner drives one phase object through its steps; timed returns the
// wall and CPU time of one run, with Setup before and Verify and Teardown
// after it untimed (once or reset: Setup on first use, Teardown at
// cleanup). The benchmark timer runs only during the run.
type metaRunner struct {
	b     *testing.B
	c     metaCase
	env   *phases.Env
	p     phases.Phase
	ready bool
}

func newMetaRunner(b *testing.B, c metaCase) *metaRunner {
	r := &metaRunner{b: b, c: c, env: benchMetaEnv(b, c.kind), p: c.phase()}
	b.Cleanup(func() {
		if r.ready {
			r.p.Teardown(context.Background(), r.env)
		}
	})
	return r
}

func (r *metaRunner) timed(run func(context.Context, *phases.Env) error) (wall, cpu time.Duration) {
	ctx := context.Background()
	if !r.ready {
		r.env.ResetRecorders()
		if err := r.p.Setup(ctx, r.env); err != nil {
			r.b.Fatal(err)
		}
		r.ready = true
	}
	r.b.StartTimer()
	c0, t0 := cpuNow(), time.Now()
	err := run(ctx, r.env)
	wall, cpu = time.Since(t0), cpuNow()-c0
	r.b.StopTimer()
	if err != nil {
		r.b.Fatal(err)
	}
	if err := r.p.Verify(ctx, r.env); err != nil {
		r.b.Fatal(err)
	}
	switch {
	case r.c.once:
	case r.c.reset != nil:
		if err := r.c.reset(r.p); err != nil {
			r.b.Fatal(err)
		}
	default:
		if err := r.p.Teardown(ctx, r.env); err != nil {
			r.b.Fatal(err)
		}
		r.ready = false
	}
	return wall, cpu
}

func (r *metaRunner) run(bare bool) func(context.Context, *phases.Env) error {
	if bare {
		return r.c.bare(r.p)
	}
	return r.p.Run
}

// BenchmarkMetadataPaired runs phase and bare back to back in every
// iteration (alternating which goes first) on the same files, and reports
// the median over iterations of bare time / phase time: the phase's rate
// as a fraction of the bare syscalls' rate.
func BenchmarkMetadataPaired(b *testing.B) {
	for _, c := range metaCases {
		b.Run(c.op, func(b *testing.B) {
			r := newMetaRunner(b, c)
			phase, bare := r.run(false), r.run(true)
			var ratios, cpuRatios []float64
			var pw, bw time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				var w1, c1, w2, c2 time.Duration
				if i%2 == 0 {
					w1, c1 = r.timed(phase)
					w2, c2 = r.timed(bare)
				} else {
					w2, c2 = r.timed(bare)
					w1, c1 = r.timed(phase)
				}
				pw, bw = pw+w1, bw+w2
				ratios = append(ratios, w2.Seconds()/w1.Seconds())
				if c1 > 0 && c2 > 0 {
					cpuRatios = append(cpuRatios, c2.Seconds()/c1.Seconds())
				}
			}
			ops := float64(b.N) * benchMetaCount
			b.ReportMetric(float64(pw.Nanoseconds())/ops, "phase-ns/file-op")
			b.ReportMetric(float64(bw.Nanoseconds())/ops, "bare-ns/file-op")
			b.ReportMetric(report.Median(slices.Clone(ratios)), "phase/bare")
			if len(cpuRatios) > 0 {
				b.ReportMetric(report.Median(slices.Clone(cpuRatios)), "cpu-phase/bare")
			}
		})
	}
}

// cpuNow is the process's user + system time, all threads (the Go
// runtime's included).
func cpuNow() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMetaOpOverhead is what a metadata phase adds around each
// syscall with no syscall at all: "chained" is the loops' bookkeeping (ctx
// check, BeginAt, one clock read, ObserveNs), "begin-observe" the
// BeginOn + Observe pair (three clock reads) it replaced. Compare with the
// ns/file-op of the benchmarks above.
func BenchmarkMetaOpOverhead(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := ctx.Done()
	target := "x"
	b.Run("chained", func(b *testing.B) {
		rec := benchMetaEnv(b, "overhead").Recorder("stat")
		clk := phases.NewOpClock(context.Background())
		b.ReportAllocs()
		for b.Loop() {
			select {
			case <-done:
				b.Fatal("cancelled")
			default:
			}
			rec.BeginAt(&target, clk.Last())
			rec.ObserveNs(clk.Lap(), 0, nil)
		}
	})
	b.Run("begin-observe", func(b *testing.B) {
		rec := benchMetaEnv(b, "overhead").Recorder("stat")
		b.ReportAllocs()
		for b.Loop() {
			select {
			case <-done:
				b.Fatal("cancelled")
			default:
			}
			start := rec.BeginOn(&target)
			rec.Observe(start, 0, nil)
		}
	})
}
