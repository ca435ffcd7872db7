package report

import (
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
	// SeriesWidthNs and SeriesExtentNs are the interval of the rank's time
	// series and how far it reaches (Recorder.SeriesShape, the widest over
	// its op types): rank 0 agrees on one interval and length for the sum.
	SeriesWidthNs  int64 `json:"series_width_ns,omitempty"`
	SeriesExtentNs int64 `json:"series_extent_ns,omitempty"`
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
		w, ext := r.SeriesShape()
		rr.SeriesWidthNs, rr.SeriesExtentNs = max(rr.SeriesWidthNs, w), max(rr.SeriesExtentNs, ext)
	}
	return rr
}

// Fill computes a phase's aggregate numbers from the gathered rank records,
// the merged histogram of each op type and the measured iterations' wall
// times: FillGathered of the records.
func Fill(pr *PhaseResult, recs []RankRecord, hists map[string]*hdr.Histogram, walls []float64) error {
	return FillGathered(pr, Gather(recs), hists, walls)
}

// FillGathered computes a phase's aggregate numbers from rank 0's
// Gathered, the merged histogram of each op type and the measured
// iterations' wall times. Bandwidth is aggregate bytes over the sum of
// iteration walls, each wall being max end − min start over ranks, as IOR
// computes it.
func FillGathered(pr *PhaseResult, g *Gathered, hists map[string]*hdr.Histogram, walls []float64) error {
	pr.Iterations = walls
	pr.WallSeconds = 0
	for _, w := range walls {
		pr.WallSeconds += w
	}
	pr.PerRank = g.Rows
	pr.Bytes, pr.Ops, pr.Errors = 0, 0, 0
	for i, r := range g.Rows.All() {
		pr.Bytes += r.Bytes
		pr.Ops += r.Ops
		pr.Errors += r.Errors
		if i == 0 || r.Seconds < pr.FirstDoneSeconds {
			pr.FirstDoneSeconds = r.Seconds
		}
		if r.Seconds > pr.LastDoneSeconds {
			pr.LastDoneSeconds = r.Seconds
		}
	}
	byType := make(map[string]OpStats, len(g.ByType))
	for op, c := range g.ByType {
		byType[op] = OpStats{Ops: c.Ops, Bytes: c.Bytes, Errors: c.Errors}
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
	pr.Timeline = g.Timeline
	pr.Latency = Summarize(all)
	if pr.WallSeconds > 0 {
		pr.BytesPerSec = float64(pr.Bytes) / pr.WallSeconds
		pr.OpsPerSec = float64(pr.Ops) / pr.WallSeconds
	}
	fillHosts(pr)
	return nil
}

// fillHosts sums the per-rank rows of pr by host.
func fillHosts(pr *PhaseResult) {
	pr.PerHost = nil
	at := map[string]int{}
	for _, r := range pr.PerRank.All() {
		i, ok := at[r.Host]
		if !ok {
			i = len(pr.PerHost)
			at[r.Host] = i
			pr.PerHost = append(pr.PerHost, HostResult{Host: r.Host, FirstDoneSeconds: r.Seconds})
		}
		h := &pr.PerHost[i]
		h.Ranks = append(h.Ranks, r.Rank)
		h.Bytes += r.Bytes
		h.Ops += r.Ops
		h.Errors += r.Errors
		h.FirstDoneSeconds = min(h.FirstDoneSeconds, r.Seconds)
		h.LastDoneSeconds = max(h.LastDoneSeconds, r.Seconds)
		h.MaxLatencyNs = max(h.MaxLatencyNs, r.MaxLatencyNs)
	}
	if pr.WallSeconds > 0 {
		for i := range pr.PerHost {
			h := &pr.PerHost[i]
			h.BytesPerSec = float64(h.Bytes) / pr.WallSeconds
			h.OpsPerSec = float64(h.Ops) / pr.WallSeconds
		}
	}
	pr.PerNodeBytesPerSec, pr.PerNodeOpsPerSec = 0, 0
	if n := len(pr.PerHost); n > 0 {
		pr.PerNodeBytesPerSec = pr.BytesPerSec / float64(n)
		pr.PerNodeOpsPerSec = pr.OpsPerSec / float64(n)
	}
}
