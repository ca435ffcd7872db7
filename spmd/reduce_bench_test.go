package spmd

// What the binomial-tree reduction of every rank's histogram count array
// (what MPI_Reduce does for ReduceInt64) costs in a 10,000-rank job, with
// no network. The figures are compute and memory only; a real job adds
// ⌈log2 n⌉ transfers of one array to the critical path.

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// benchRanks is the job size these benchmarks simulate.
const benchRanks = 10000

// histCountsLen is the length of a count array of prism's histogram
// geometry (report.CountsLen: 1 ns .. 1 h at 3 significant figures),
// computed the same way, since spmd must not import report.
var histCountsLen = len(hdr.New(1, int64(time.Hour), 3).Export().Counts)

// benchTemplates is how many distinct histograms the simulated ranks hold:
// rank r holds template r % benchTemplates, since 10,000 distinct arrays
// would take 2.7 GB. Reading them costs the same as distinct arrays (64
// arrays of 270 KB do not fit a CPU cache either).
const benchTemplates = 64

// latencyCounts returns count arrays of realistic metadata-op latencies:
// 500 ops per rank, log-normal around 30 µs, with 1% stalls a hundred
// times slower: a few hundred non-zero buckets each. (Sparsity changes
// nothing for the reduction, which folds whole arrays.)
func latencyCounts(n int) [][]int64 {
	out := make([][]int64, n)
	for i := range out {
		h := hdr.New(1, int64(time.Hour), 3)
		rng := rand.New(rand.NewPCG(uint64(i), 0x9e3779b9))
		for range 500 {
			v := math.Exp(rng.NormFloat64()*0.5) * 30e3
			if rng.IntN(100) == 0 {
				v *= 100
			}
			_ = h.RecordValue(int64(v))
		}
		out[i] = h.Export().Counts
	}
	return out
}

// binomialReduce simulates MPI_Reduce onto rank 0 over a binomial tree, the
// classic algorithm of MPI libraries for a commutative operator: rank r
// receives, for each level k below the lowest set bit of r, the partial
// result of the subtree rooted at r + 2^k, folds it into its own array, and
// sends the total to its parent. The simulation walks the tree depth first,
// the order in which data becomes ready, holding what a real tree holds in
// flight along one path: one array per open level, at most ⌈log2 n⌉+1.
type binomialReduce struct {
	n    int
	own  func(rank int) []int64 // a rank's array, read only
	bufs [][]int64              // the partial result of the open subtree at each level
	// rank0Ns is the time rank 0 spends folding its ⌈log2 n⌉ children:
	// the compute on the critical path of a parallel run, where each
	// child's subtree is reduced concurrently with the others.
	rank0Ns int64
	folds   int
}

func newBinomialReduce(n, length int, own func(int) []int64) *binomialReduce {
	levels := bits.Len(uint(n - 1)) // ⌈log2 n⌉
	t := &binomialReduce{n: n, own: own, bufs: make([][]int64, levels+1)}
	for i := range t.bufs {
		t.bufs[i] = make([]int64, length)
	}
	return t
}

// liveArrays is how many arrays the simulation holds: one per level.
func (t *binomialReduce) liveArrays() int { return len(t.bufs) }

// run reduces every rank's array and returns the result (rank 0's buffer).
func (t *binomialReduce) run() []int64 {
	t.rank0Ns, t.folds = 0, 0
	return t.subtree(0, len(t.bufs)-1)
}

// subtree returns the reduction of ranks r .. r+2^level-1 (those below n).
// A leaf sends its own array as it is, without a copy.
func (t *binomialReduce) subtree(r, level int) []int64 {
	if level == 0 || r+1 >= t.n {
		return t.own(r)
	}
	buf := t.bufs[level]
	copy(buf, t.own(r))
	for k := 0; k < level && r+1<<k < t.n; k++ {
		child := t.subtree(r+1<<k, k)
		var t0 time.Time
		if r == 0 {
			t0 = time.Now()
		}
		fold(Sum, buf, child)
		if r == 0 {
			t.rank0Ns += int64(time.Since(t0))
		}
		t.folds++
	}
	return buf
}

// BenchmarkReduceHistograms10k is the whole tree reduction of a
// 10,000-rank job simulated serially; what rank 0 pays of it, with the
// gather of every rank's record, is phases' BenchmarkGatherPhase10k, which
// runs the engine's own GatherPhase.
func BenchmarkReduceHistograms10k(b *testing.B) {
	b.Run("tree", benchTreeReduce)
}

// benchTreeReduce: ns/op is the whole reduction done serially (n-1 folds),
// an upper bound of its critical path; rank0-ns is rank 0's own ⌈log2 n⌉
// folds, the compute on the critical path when the subtrees run in
// parallel; rank0-bytes is what rank 0 holds at peak: its array, reduced in
// place (MPI_IN_PLACE), and one received array.
func benchTreeReduce(b *testing.B) {
	tpl := latencyCounts(benchTemplates)
	length := histCountsLen
	nonzero, total := 0, int64(0)
	for r := range benchRanks {
		c := tpl[r%benchTemplates]
		if len(c) != length {
			b.Fatalf("count array of %d, want %d", len(c), length)
		}
		for _, x := range c {
			total += x
		}
	}
	for _, x := range tpl[0] {
		if x != 0 {
			nonzero++
		}
	}
	t := newBinomialReduce(benchRanks, length, func(r int) []int64 { return tpl[r%benchTemplates] })
	if got := sum(t.run()); got != total {
		b.Fatalf("reduced total count %d, want %d", got, total)
	}
	if t.folds != benchRanks-1 {
		b.Fatalf("%d folds, want %d", t.folds, benchRanks-1)
	}
	b.Logf("%d ranks, %d buckets (%d non-zero in a rank's array), %d levels, simulation holds %d arrays",
		benchRanks, length, nonzero, t.liveArrays()-1, t.liveArrays())
	var rank0 int64
	b.SetBytes(int64(benchRanks-1) * int64(length) * 8) // bytes folded
	for b.Loop() {
		t.run()
		rank0 += t.rank0Ns
	}
	b.ReportMetric(float64(rank0)/float64(b.N), "rank0-ns")
	b.ReportMetric(float64(2*length*8), "rank0-bytes")
}

func sum(v []int64) (s int64) {
	for _, x := range v {
		s += x
	}
	return s
}
