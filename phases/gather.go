package phases

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/prism-hpc/prism/report"
	"github.com/prism-hpc/prism/spmd"
)

// GatherPhase is the cross-rank merge of one phase's results onto rank 0
// of c, and the only place it happens: every rank sends its small
// per-rank record (bytes, ops, seconds, errors, metrics) in a compact
// binary form, which rank 0 folds as it decodes (report.Gathered: one row
// per rank, per-op counters and metrics summed); rank 0 takes the union of
// the op names every rank recorded and tells all ranks, then the
// histogram count arrays of each op are reduced (summed element-wise, a
// tree reduction under MPI) rather than shipped rank by rank, and so are
// the time series (every op's ops and bytes per interval since the phase's
// start, at the widest interval of any rank, in one reduction: each rank's
// series counts from its own start, which the ranks reached together). Rank 0 gets
// the rows in rank order and one merged histogram per op; every other rank
// gets nil, nil. measured holds this rank's recorders of the measured
// (non-warm-up) iterations.
func GatherPhase(ctx context.Context, c spmd.Comm, rec *report.RankRecord, measured *report.Set) (*report.Gathered, map[string]*hdr.Histogram, error) {
	all, err := c.Gather(ctx, 0, rec.AppendBinary(nil))
	if err != nil {
		return nil, nil, err
	}
	var g *report.Gathered
	var ob []byte
	if c.Rank() == 0 {
		g = report.NewGathered(len(all))
		for i, raw := range all {
			if err := g.Add(raw); err != nil {
				return nil, nil, fmt.Errorf("rank %d sent a bad phase record: %w", i, err)
			}
		}
		// The series' interval and length, then the op names, which hold
		// no NUL: they travel as names separated by one.
		ob = binary.AppendVarint(nil, g.SeriesWidthNs)
		ob = binary.AppendVarint(ob, int64(g.SeriesLen()))
		ob = append(ob, bytes.Join(stringsToBytes(g.Ops()), []byte{0})...)
	}
	if ob, err = c.Bcast(ctx, 0, ob); err != nil {
		return nil, nil, err
	}
	width, k := binary.Varint(ob)
	n, l := binary.Varint(ob[max(k, 0):])
	if k <= 0 || l <= 0 || width < 0 || n < 0 || n > report.SeriesCap {
		return nil, nil, fmt.Errorf("rank 0 sent a bad op list")
	}
	ob = ob[k+l:]
	var ops []string
	if len(ob) > 0 {
		for _, op := range bytes.Split(ob, []byte{0}) {
			ops = append(ops, string(op))
		}
	}
	hists := map[string]*hdr.Histogram{}
	var others []int64
	for _, op := range ops {
		own := measured.Op(op).Hist()
		var counts []int64
		if c.Rank() == 0 {
			// Rank 0 adds zeros to the reduction and merges its own
			// histogram into the sum: exporting its counts and importing
			// the sum (hdr.Import copies) held two count arrays per op,
			// ~270 KB each, where this reuses one for every op.
			if others == nil {
				others = make([]int64, report.CountsLen)
			} else {
				clear(others)
			}
			counts = others
		} else {
			counts = report.Counts(own)
		}
		if err := c.ReduceInt64(ctx, 0, spmd.Sum, counts); err != nil {
			return nil, nil, err
		}
		if c.Rank() == 0 {
			h := report.FromCounts(counts)
			h.Merge(own)
			hists[op] = h
		}
	}
	// The time series: every op's ops and bytes per interval, at the
	// interval rank 0 chose, in one reduction.
	var sums []int64
	if n > 0 && len(ops) > 0 {
		for _, op := range ops {
			sums = measured.Op(op).AppendSeries(sums, width, int(n))
		}
		if err := c.ReduceInt64(ctx, 0, spmd.Sum, sums); err != nil {
			return nil, nil, err
		}
	}
	if c.Rank() != 0 {
		return nil, nil, nil
	}
	g.Timeline = report.NewTimeline(ops, width, int(n), sums)
	return g.Done(), hists, nil
}

func stringsToBytes(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}
