package spmd

// What rank 0 pays at the end of every phase in a 10,000-rank job, with no
// network: the binomial-tree reduction of every rank's histogram count
// array (what MPI_Reduce does for ReduceInt64), and the gather of every
// rank's JSON summary record, which rank 0 then decodes. The figures are
// compute and memory only; a real job adds ⌈log2 n⌉ transfers of one array
// to the critical path.

import (
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sort"
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

func BenchmarkReduceHistograms10k(b *testing.B) {
	b.Run("tree", benchTreeReduce)
	b.Run("gather", benchGatherRecords)
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

// benchRankRecord has the shape of report.RankRecord, the JSON summary
// every rank sends rank 0 at the end of a phase.
type benchRankRecord struct {
	Rank      int                     `json:"rank"`
	Host      string                  `json:"host"`
	Ops       int64                   `json:"ops"`
	Bytes     int64                   `json:"bytes"`
	Errors    int64                   `json:"errors"`
	MaxNs     int64                   `json:"max_ns"`
	Seconds   float64                 `json:"seconds"`
	Error     string                  `json:"error,omitempty"`
	CPUs      string                  `json:"cpus,omitempty"`
	OpsByType map[string]benchOpCount `json:"ops_by_type,omitempty"`
	Metrics   map[string]float64      `json:"metrics,omitempty"`
}

type benchOpCount struct {
	Ops    int64 `json:"ops"`
	Bytes  int64 `json:"bytes"`
	Errors int64 `json:"errors"`
}

// rankRecords returns every rank's marshalled record, as each rank sends it:
// two op types, like a write phase (open and write).
func rankRecords(n int) [][]byte {
	out := make([][]byte, n)
	for r := range out {
		rec := benchRankRecord{
			Rank: r, Host: fmt.Sprintf("cn%05d.hpc.example.org", r/64),
			Ops: 20000 + int64(r%97), Bytes: 4096 * 10000, MaxNs: 3_000_000 + int64(r)*37,
			Seconds: 0.61234567 + float64(r%1000)/1e4, CPUs: fmt.Sprintf("%d-%d", r%64*2, r%64*2+1),
			OpsByType: map[string]benchOpCount{
				"open":  {Ops: 10000 + int64(r%97)},
				"write": {Ops: 10000, Bytes: 4096 * 10000},
			},
		}
		out[r], _ = json.Marshal(rec)
	}
	return out
}

// gatherAtRank0 is rank 0's side of the engine's Gather of records: the
// pieces land in one buffer (MPI_Gatherv), are sliced per rank, decoded,
// and their op types merged (report.UnionOps).
func gatherAtRank0(pieces [][]byte) ([]benchRankRecord, []string, []byte, error) {
	total := 0
	for _, p := range pieces {
		total += len(p)
	}
	buf := make([]byte, total)
	all := make([][]byte, len(pieces))
	off := 0
	for r, p := range pieces {
		copy(buf[off:], p)
		all[r] = buf[off : off+len(p) : off+len(p)]
		off += len(p)
	}
	recs := make([]benchRankRecord, len(all))
	for i, raw := range all {
		if err := json.Unmarshal(raw, &recs[i]); err != nil {
			return nil, nil, nil, err
		}
	}
	seen := map[string]bool{}
	var ops []string
	for _, r := range recs {
		for op := range r.OpsByType {
			if !seen[op] {
				seen[op] = true
				ops = append(ops, op)
			}
		}
	}
	sort.Strings(ops)
	return recs, ops, buf, nil
}

// benchGatherRecords: ns/op is rank 0's work on 10,000 gathered records
// (copy into the receive buffer, JSON decoding, op union), all of it on the
// critical path; rank0-bytes is what the gathered records hold on rank 0
// afterwards (the receive buffer and the decoded records, measured on the
// heap); record-bytes is the mean record size.
func benchGatherRecords(b *testing.B) {
	pieces := rankRecords(benchRanks)
	size := 0
	for _, p := range pieces {
		size += len(p)
	}
	// Live heap of one gather's results, measured once outside the loop.
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	recs, ops, buf, err := gatherAtRank0(pieces)
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	live := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	runtime.KeepAlive(recs)
	runtime.KeepAlive(buf)
	if len(recs) != benchRanks || len(ops) != 2 || recs[benchRanks-1].Rank != benchRanks-1 {
		b.Fatalf("gathered %d records, ops %v", len(recs), ops)
	}
	recs, buf = nil, nil
	b.SetBytes(int64(size))
	for b.Loop() {
		if _, _, _, err := gatherAtRank0(pieces); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(live), "rank0-bytes")
	b.ReportMetric(float64(size)/benchRanks, "record-bytes")
}
