package report

import (
	"sort"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// RankRecord is what each rank sends to rank 0 at the end of a phase: a
// small, fixed-shape summary (the histograms travel separately, as summed
// count arrays).
type RankRecord struct {
	Rank      int                `json:"rank"`
	Host      string             `json:"host"`
	Ops       int64              `json:"ops"`
	Bytes     int64              `json:"bytes"`
	Errors    int64              `json:"errors"`
	MaxNs     int64              `json:"max_ns"`
	Seconds   float64            `json:"seconds"`
	Error     string             `json:"error,omitempty"`
	CPUs      string             `json:"cpus,omitempty"` // CPU affinity as a cpulist ("0-3"): the launcher's binding
	OpsByType map[string]OpCount `json:"ops_by_type,omitempty"`
	Metrics   map[string]float64 `json:"metrics,omitempty"`
}

// OpCount is one op type's counters on one rank.
type OpCount struct {
	Ops    int64 `json:"ops"`
	Bytes  int64 `json:"bytes"`
	Errors int64 `json:"errors"`
}

// NewRankRecord summarises a rank's recorder set.
func NewRankRecord(rank int, host string, s *Set, seconds float64) RankRecord {
	rr := RankRecord{Rank: rank, Host: host, Seconds: seconds, OpsByType: map[string]OpCount{}}
	rr.Ops, rr.Bytes, rr.Errors, rr.MaxNs = s.Totals()
	for _, op := range s.Ops() {
		r := s.Get(op)
		rr.OpsByType[op] = OpCount{Ops: r.Ops, Bytes: r.Bytes, Errors: r.Errors}
	}
	return rr
}

// UnionOps returns the sorted union of op names over every rank's record:
// the order in which every rank then reduces its count arrays.
func UnionOps(recs []RankRecord) []string {
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
	return ops
}

// Fill computes a phase's aggregate numbers from the gathered rank records,
// the merged histogram of each op type and the measured iterations' wall
// times. Bandwidth is aggregate bytes over the sum of iteration walls, each
// wall being max end − min start over ranks, as IOR computes it.
func Fill(pr *PhaseResult, recs []RankRecord, hists map[string]*hdr.Histogram, walls []float64) error {
	pr.Iterations = walls
	pr.WallSeconds = 0
	for _, w := range walls {
		pr.WallSeconds += w
	}
	pr.PerRank = make([]RankResult, 0, len(recs))
	pr.Bytes, pr.Ops, pr.Errors = 0, 0, 0
	byType := map[string]OpStats{}
	for i, r := range recs {
		pr.PerRank = append(pr.PerRank, RankResult{
			Rank: r.Rank, Host: r.Host, Bytes: r.Bytes, Ops: r.Ops, Seconds: r.Seconds,
			Errors: r.Errors, MaxLatencyNs: r.MaxNs, Error: r.Error, CPUs: r.CPUs,
		})
		pr.Bytes += r.Bytes
		pr.Ops += r.Ops
		pr.Errors += r.Errors
		if i == 0 || r.Seconds < pr.FirstDoneSeconds {
			pr.FirstDoneSeconds = r.Seconds
		}
		if r.Seconds > pr.LastDoneSeconds {
			pr.LastDoneSeconds = r.Seconds
		}
		for op, c := range r.OpsByType {
			st := byType[op]
			st.Ops += c.Ops
			st.Bytes += c.Bytes
			st.Errors += c.Errors
			byType[op] = st
		}
	}
	all := NewHistogram()
	pr.Histograms = map[string]string{}
	for op, h := range hists {
		all.Merge(h)
		st := byType[op]
		st.Latency = Summarize(h)
		if pr.WallSeconds > 0 {
			st.OpsPerSec = float64(st.Ops) / pr.WallSeconds
			st.BytesPerSec = float64(st.Bytes) / pr.WallSeconds
		}
		byType[op] = st
		enc, err := EncodeHistogram(h)
		if err != nil {
			return err
		}
		pr.Histograms[op] = enc
	}
	pr.OpsByType = byType
	pr.Latency = Summarize(all)
	if pr.WallSeconds > 0 {
		pr.BytesPerSec = float64(pr.Bytes) / pr.WallSeconds
		pr.OpsPerSec = float64(pr.Ops) / pr.WallSeconds
	}
	return nil
}
