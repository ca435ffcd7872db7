package spmd

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"
)

// BenchmarkPhaseCoordination measures what coordination costs the engine
// (phases/engine.go) per phase, on the communicator the environment gives
// (Open): MPI under mpirun in a binary built with -tags mpi, the rendezvous
// under PRISM_RANK/PRISM_SIZE/PRISM_RENDEZVOUS, else a single rank.
// phases/bench/coord.sh runs it all three ways.
//
// "iteration" is the collectives of one iteration of a phase: the
// agreements after setup, run (3 words: failure, start, end), verify and
// teardown, and the barrier before run. "phase" is a whole phase of one
// iteration with one op type: the two directory agreements, one iteration,
// the gather of the per-rank records (about 250 bytes each), the broadcast
// of the op names, the reduction of one histogram count array and the
// world's failure agreement.
//
// Reported: us/iteration or us/phase, the slowest rank's mean, so it is
// the same figure on every rank. With more than one rank every rank must
// run the same number of iterations, so the benchmark needs a fixed count
// (-test.benchtime=Nx) and skips otherwise.
func BenchmarkPhaseCoordination(b *testing.B) {
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
	rec := []byte(`{"rank":1234,"host":"cn00019.hpc.example.org","ops":20000,"bytes":40960000,"errors":0,"max_ns":3045658,` +
		`"seconds":0.6357,"ops_by_type":{"open":{"ops":10000,"bytes":0,"errors":0},"write":{"ops":10000,"bytes":40960000,"errors":0}}}`)
	ops := []byte(`["create"]`)
	counts := make([]int64, histCountsLen)
	for i := 0; i < len(counts); i += 97 {
		counts[i] = int64(i % 13)
	}
	run := func(name, unit string, step func() error) {
		b.Run(name, func(b *testing.B) {
			for range 3 { // warm-up: connections, buffers
				if err := step(); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				if err := step(); err != nil {
					b.Fatal(err)
				}
			}
			// The slowest rank's time is the job's.
			v := []int64{int64(b.Elapsed())}
			if err := c.AllreduceInt64(ctx, Max, v); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(v[0])/float64(b.N)/float64(time.Microsecond), unit)
		})
	}
	run("iteration", "us/iteration", func() error { return coordIteration(ctx, c) })
	run("phase", "us/phase", func() error { return coordPhase(ctx, c, rec, ops, counts) })
}

// coordIteration is the engine's collectives for one iteration of a phase
// that passes (no drop_caches).
func coordIteration(ctx context.Context, c Comm) error {
	agree := func() error { return c.AllreduceInt64(ctx, Max, []int64{0}) }
	if err := agree(); err != nil { // setup
		return err
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	now := time.Now().UnixNano()
	if err := c.AllreduceInt64(ctx, Max, []int64{0, -now, now}); err != nil { // run
		return err
	}
	if err := agree(); err != nil { // verify
		return err
	}
	return agree() // teardown
}

// coordPhase is the engine's collectives for one phase of one iteration.
func coordPhase(ctx context.Context, c Comm, rec, ops []byte, counts []int64) error {
	agree := func() error { return c.AllreduceInt64(ctx, Max, []int64{0}) }
	if err := agree(); err != nil { // shared directory
		return err
	}
	if err := agree(); err != nil { // rank directory
		return err
	}
	if err := coordIteration(ctx, c); err != nil {
		return err
	}
	if _, err := c.Gather(ctx, 0, rec); err != nil {
		return err
	}
	if _, err := c.Bcast(ctx, 0, ops); err != nil {
		return err
	}
	if err := c.ReduceInt64(ctx, 0, Sum, counts); err != nil {
		return err
	}
	return agree() // the world learns whether the phase failed
}
