package phasestest

import (
	"maps"
	"slices"
	"testing"

	"github.com/prism-hpc/prism/report"
)

// Want is what a phase should have recorded of one op type: ops and
// bytes summed over its ranks and its measured iterations.
type Want struct{ Ops, Bytes int64 }

// CheckOps fails the test unless ph recorded exactly want of each op type
// named in it, without errors, no op type it never did (a recorder made
// ahead for an op that did not happen lists an empty one), and unless the
// figures derived from the op counts agree with them: the phase's total
// ops and bytes (over every op type), its per-rank rows and its time
// series. A worker set
// (Env.NewSet) merged twice, or not at all, in some iteration moves the
// counts off iterations × ops; a set merged into the wrong iteration's
// recorders (a warmup's) moves them too.
func CheckOps(t testing.TB, ph *report.PhaseResult, want map[string]Want) {
	t.Helper()
	for _, op := range slices.Sorted(maps.Keys(want)) {
		w, st := want[op], ph.OpsByType[op]
		if st.Ops != w.Ops || st.Bytes != w.Bytes || st.Errors != 0 {
			t.Errorf("%s: op %s: %d ops, %d bytes, %d errors; want %d ops, %d bytes, 0 errors", ph.Name, op, st.Ops, st.Bytes, st.Errors, w.Ops, w.Bytes)
		}
	}
	var ops, bytes int64
	for _, op := range slices.Sorted(maps.Keys(ph.OpsByType)) {
		st := ph.OpsByType[op]
		if st.Ops == 0 {
			t.Errorf("%s: op %s listed with no ops", ph.Name, op)
		}
		ops, bytes = ops+st.Ops, bytes+st.Bytes
	}
	if ph.Ops != ops || ph.Bytes != bytes {
		t.Errorf("%s: %d ops and %d bytes, its op types %d and %d", ph.Name, ph.Ops, ph.Bytes, ops, bytes)
	}
	var rops, rbytes int64
	for _, r := range ph.PerRank.All() {
		rops, rbytes = rops+r.Ops, rbytes+r.Bytes
	}
	if rops != ph.Ops || rbytes != ph.Bytes {
		t.Errorf("%s: its ranks' rows hold %d ops and %d bytes, the phase %d and %d", ph.Name, rops, rbytes, ph.Ops, ph.Bytes)
	}
	tl := ph.Timeline
	if tl == nil && ph.Ops > 0 {
		t.Errorf("%s: %d ops and no time series", ph.Name, ph.Ops)
	}
	if tl != nil {
		for op := range want {
			var n int64
			for _, v := range tl.Ops[op] {
				n += v
			}
			if n != ph.OpsByType[op].Ops {
				t.Errorf("%s: the time series holds %d ops %s, the phase %d", ph.Name, n, op, ph.OpsByType[op].Ops)
			}
		}
	}
}
