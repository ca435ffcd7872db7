package spmd

import "testing"

// Reports reach rank 0 without any collective: the newest of each rank for
// the tag asked, reports of another tag (an earlier step's) left out, and
// rows of ranks that did not report left as they were.
func TestRendezvousReport(t *testing.T) {
	ranks := startRanks(t, 3, RendezvousConfig{})
	defer closeAll(t, ranks)
	ranks[1].Report("0.3.0.progress", []int64{1, 2, 3, 4, 5, 6})
	ranks[1].Report("0.3.0.progress", []int64{10, 20, 30, 40, 50, 60})
	ranks[2].Report("0.3.1.progress", []int64{7, 7, 7, 7, 7, 7})
	ranks[0].Report("0.3.0.progress", []int64{9, 9, 9, 9, 9, 9}) // rank 0 sends nothing
	latest := [][]int64{{-1, -1, -1, -1, -1, -1}, make([]int64, ReportWords), {8, 8, 8, 8, 8, 8}}
	ranks[0].Collect("0.3.0.progress", latest)
	want := [][]int64{{-1, -1, -1, -1, -1, -1}, {10, 20, 30, 40, 50, 60}, {8, 8, 8, 8, 8, 8}}
	for r := range want {
		if !equal(latest[r], want[r]) {
			t.Errorf("rank %d: %v, want %v", r, latest[r], want[r])
		}
	}
	// Collect elsewhere than rank 0 does nothing.
	other := [][]int64{make([]int64, ReportWords), make([]int64, ReportWords), make([]int64, ReportWords)}
	ranks[1].Collect("0.3.0.progress", other)
	if other[1][0] != 0 {
		t.Errorf("rank 1 collected %v", other)
	}
}
