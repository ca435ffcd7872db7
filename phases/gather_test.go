package phases

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"testing"

	"github.com/prism-hpc/prism/report"
)

// Rank 0's merged histogram of each op is exactly the element-wise sum of
// every rank's counts, its own once (it adds zeros to the reduction and
// merges its own histogram), and its rows are the ranks' records.
func TestGatherPhaseSumsEveryRank(t *testing.T) {
	const ranks = 5
	c := &rank0Comm{records: make([][]byte, ranks)}
	for r := range ranks {
		rec := report.NewRankRecord(r, fmt.Sprintf("cn%d", r/2), latencySet(uint64(r)), float64(r))
		c.records[r] = rec.AppendBinary(nil)
	}
	for k := range 2 {
		c.children = append(c.children, report.Counts(latencySet(uint64(10+k)).Op("write").Hist()))
	}
	own := latencySet(0)
	rec := report.NewRankRecord(0, "cn0", own, 0)
	g, hists, err := GatherPhase(context.Background(), c, &rec, own)
	if err != nil {
		t.Fatal(err)
	}
	folds := bits.Len(uint(ranks - 1))
	for j, op := range []string{"open", "write"} { // reduced in this order
		want := report.Counts(own.Op(op).Hist())
		for range folds {
			for i, x := range c.children[j%len(c.children)] {
				want[i] += x
			}
		}
		if got := report.Counts(hists[op]); !slices.Equal(got, want) {
			t.Errorf("%s: %d values merged, want %d", op, hists[op].TotalCount(), sum(want))
		}
	}
	if g.Rows.Len() != ranks || g.Rows.At(3).Host != "cn1" || g.Rows.At(4).Seconds != 4 {
		t.Errorf("rows %d, row 3 %+v, row 4 %+v", g.Rows.Len(), g.Rows.At(3), g.Rows.At(4))
	}
}

func sum(v []int64) (n int64) {
	for _, x := range v {
		n += x
	}
	return n
}
