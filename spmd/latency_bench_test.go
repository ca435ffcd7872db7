package spmd

import (
	"context"
	"flag"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The "wait" case: rank 0 comes lateWait late to each of waitRounds
// Barriers.
const (
	lateWait   = 20 * time.Millisecond
	waitRounds = 50
)

// cpuTime is the CPU time this process has used, every thread's.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCollectiveLatency measures the latency of the two collectives
// the engine runs most, a Barrier and a 4-element AllreduceInt64 (the run
// agreement), and of the two heaviest it runs once per phase (reduce-hist,
// gather250), on the communicator the environment gives (Open): MPI under
// mpirun in a binary built with -tags mpi, else the rendezvous or a single
// rank, as BenchmarkPhaseCoordination does. It is the before/after figure
// of bounding MPI's collectives (polling a non-blocking collective instead
// of blocking in it).
//
// Reported: us/op, the slowest rank's mean. With several ranks run it with
// -test.benchtime=Nx so that every rank runs the same collectives.
//
// "wait" is what a rank pays waiting for a late peer: rank 0 sleeps
// lateWait before each of waitRounds Barriers, and cpu% is the CPU time
// the other ranks used meanwhile (user+system, every thread) over the wall
// time, the most of any of them. Its us/op is lateWait plus how late the
// waiters learned of the release.
func BenchmarkCollectiveLatency(b *testing.B) {
	ctx := context.Background()
	c, _, err := Open(ctx, OpenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if c.Size() > 1 {
		if bt := flag.Lookup("test.benchtime"); bt == nil || !strings.HasSuffix(bt.Value.String(), "x") {
			b.Skip("with several ranks, run with -test.benchtime=Nx so that every rank runs the same collectives")
		}
	}
	v := make([]int64, 4)
	run := func(name string, step func() error) {
		b.Run(name, func(b *testing.B) {
			for range 100 { // warm-up: connections, buffers, the spin
				if err := step(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := step(); err != nil {
					b.Fatal(err)
				}
			}
			el := []int64{int64(b.Elapsed())}
			if err := c.AllreduceInt64(ctx, Max, el); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(el[0])/float64(b.N)/float64(time.Microsecond), "us/op")
		})
	}
	run("barrier", func() error { return c.Barrier(ctx) })
	if c.Size() > 1 {
		b.Run("wait", func(b *testing.B) {
			// A fixed number of rounds, whatever b.N: with the -benchtime
			// the other cases need, b.N late barriers would take hours.
			start, cpu0 := time.Now(), cpuTime()
			for range waitRounds {
				if c.Rank() == 0 {
					time.Sleep(lateWait)
				}
				if err := c.Barrier(ctx); err != nil {
					b.Fatal(err)
				}
			}
			wall := time.Since(start)
			pct := int64(0)
			if c.Rank() != 0 {
				pct = int64(100 * float64(cpuTime()-cpu0) / float64(wall))
			}
			v := []int64{pct, int64(wall)}
			if err := c.AllreduceInt64(ctx, Max, v); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(v[0]), "cpu%")
			b.ReportMetric(float64(v[1])/waitRounds/float64(time.Microsecond), "us/op")
			b.ReportMetric(float64(v[1])/waitRounds, "ns/op")
		})
	}
	run("allreduce4", func() error {
		v[0], v[1], v[2], v[3] = 1, 2, 3, 4
		return c.AllreduceInt64(ctx, Max, v)
	})
	// The heavy ones of a phase's end: a histogram's count array reduced
	// to rank 0, and the per-rank records gathered there.
	counts := make([]int64, histCountsLen)
	run("reduce-hist", func() error { return c.ReduceInt64(ctx, 0, Sum, counts) })
	rec := make([]byte, 250)
	run("gather250", func() error {
		_, err := c.Gather(ctx, 0, rec)
		return err
	})
}
