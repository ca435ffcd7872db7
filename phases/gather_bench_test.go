package phases

// What rank 0 pays at the end of every phase of a 10,000-rank job, with no
// network: GatherPhase itself (the gather of every rank's record, the op
// union and its broadcast, and the reduction of each op's histogram count
// array) on a communicator that plays rank 0 of such a job. Its Gather
// hands over the records every rank marshalled, as MPI_Gatherv does; its
// ReduceInt64 folds, into rank 0's array, the partial sums of rank 0's
// ⌈log2 n⌉ children of a binomial tree — the classic MPI_Reduce for a
// commutative operator, where the subtrees reduce in parallel and rank 0's
// own folds are what lies on the critical path. A real job adds ⌈log2 n⌉
// transfers of one array.

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/prism-hpc/prism/report"
	"github.com/prism-hpc/prism/spmd"
)

// benchRanks is the job size the benchmark simulates.
const benchRanks = 10000

// rank0Comm is rank 0 of a simulated job of len(records) ranks.
type rank0Comm struct {
	spmd.Comm // nil: only the collectives GatherPhase uses are played
	records   [][]byte
	children  [][]int64 // partial sums of rank 0's children, per reduction
	next      int       // the reduction GatherPhase is at
	folds     int
}

func (c *rank0Comm) Rank() int { return 0 }
func (c *rank0Comm) Size() int { return len(c.records) }
func (c *rank0Comm) Gather(_ context.Context, _ int, b []byte) ([][]byte, error) {
	// MPI_Gatherv lands every piece in one receive buffer.
	total := 0
	for _, r := range c.records {
		total += len(r)
	}
	buf := make([]byte, 0, total)
	out := make([][]byte, len(c.records))
	for i, r := range c.records {
		if i == 0 {
			r = b
		}
		buf = append(buf, r...)
		out[i] = buf[len(buf)-len(r):]
	}
	return out, nil
}
func (c *rank0Comm) Bcast(_ context.Context, _ int, b []byte) ([]byte, error) { return b, nil }
func (c *rank0Comm) ReduceInt64(_ context.Context, _ int, _ spmd.Op, v []int64) error {
	// Rank 0 receives from 2^k for every level k: ⌈log2 n⌉ arrays.
	for range bits.Len(uint(len(c.records) - 1)) {
		child := c.children[c.next%len(c.children)]
		for i, x := range child[:min(len(child), len(v))] { // the series' reduction is shorter
			v[i] += x
		}
		c.folds++
	}
	c.next++
	return nil
}

// latencySet is a rank's recorders after a write phase: open and write
// ops with log-normal latencies around 30 µs and 1% stalls 100× slower.
func latencySet(seed uint64) *report.Set {
	s := report.NewSet()
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b9))
	for _, op := range []string{"open", "write"} {
		r := s.Op(op)
		for range 500 {
			v := math.Exp(rng.NormFloat64()*0.5) * 30e3
			if rng.IntN(100) == 0 {
				v *= 100
			}
			r.ObserveNs(int64(v), 4096, nil)
		}
	}
	return s
}

func BenchmarkGatherPhase10k(b *testing.B) {
	c := &rank0Comm{records: make([][]byte, benchRanks)}
	own := latencySet(0)
	for r := range c.records {
		rec := report.NewRankRecord(r, fmt.Sprintf("cn%05d.hpc.example.org", r/64), latencySet(uint64(r%64)), 0.61+float64(r%1000)/1e4)
		rec.CPUs = fmt.Sprintf("%d-%d", r%64*2, r%64*2+1)
		c.records[r] = rec.AppendBinary(nil)
	}
	for k := range 16 {
		c.children = append(c.children, report.Counts(latencySet(uint64(k)).Op("write").Hist()))
	}
	rec := report.NewRankRecord(0, "cn00000.hpc.example.org", own, 0.61)
	g, hists, err := GatherPhase(context.Background(), c, &rec, own)
	if err != nil {
		b.Fatal(err)
	}
	if g.Rows.Len() != benchRanks || len(hists) != 2 || g.Rows.At(benchRanks-1).Rank != benchRanks-1 || g.ByType["write"].Ops != benchRanks*500 {
		b.Fatalf("gathered %d rows, %d histograms, %d writes", g.Rows.Len(), len(hists), g.ByType["write"].Ops)
	}
	// Live heap of one gather's results on rank 0, measured once.
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	g, hists, _ = GatherPhase(context.Background(), c, &rec, own)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	live := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	runtime.KeepAlive(g)
	runtime.KeepAlive(hists)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := GatherPhase(context.Background(), c, &rec, own); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(live), "rank0-live-bytes")
	// Issue 23's bound for rank 0 per phase: the packed rows (~300 KB)
	// and the two merged histograms (~540 KB).
	if live >= 1e6 {
		b.Errorf("rank 0 holds %d bytes after the gather, want < 1 MB", live)
	}
}
