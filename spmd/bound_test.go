package spmd

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestMissingRanks: which probe answers make a rank missing from collective
// #7, and what is said of it.
func TestMissingRanks(t *testing.T) {
	hosts := map[int]string{3: "n3", 4: "n4", 5: "n5", 6: "n6", 7: "n7", 8: "n8"}
	ranks := []int{3, 4, 5, 6, 7, 8}
	answers := []probeAnswer{
		{},               // 3: silent
		{answered: true}, // 4: has no such communicator
		{answered: true, known: true, entered: 7, inside: collBarrier}, // 5: waits in #7 too
		{answered: true, known: true, entered: 9},                      // 6: past it (a non-root)
		{answered: true, known: true, entered: 6, inside: collGather},  // 7: in #6
		{answered: true, known: true, entered: 6},                      // 8: computing after #6
	}
	got := missingRanks(7, ranks, answers, func(w int) string { return hosts[w] }, time.Second)
	want := []struct {
		rank     int
		answered bool
		detail   string
	}{
		{3, false, "did not answer a liveness probe within 1s"},
		{4, true, "does not have this communicator open"},
		{7, true, "waits in collective #6 (Gather) of this communicator, not #7"},
		{8, true, "has not reached collective #7 (it finished #6 and is outside any collective"},
	}
	if len(got) != len(want) {
		t.Fatalf("missing %+v, want ranks 3, 4, 7, 8", got)
	}
	for i, w := range want {
		g := got[i]
		if g.Rank != w.rank || g.Host != hosts[w.rank] || g.Answered != w.answered || !strings.Contains(g.Detail, w.detail) {
			t.Errorf("missing[%d] = %+v, want rank %d on %s, answered %v, detail with %q", i, g, w.rank, hosts[w.rank], w.answered, w.detail)
		}
	}
}

// TestTimeoutError: what callers branch on (errors.Is ErrTimeout, errors.As
// *RankError for the first missing rank, ErrPeerDead for a silent one) and
// what the message says.
func TestTimeoutError(t *testing.T) {
	e := &TimeoutError{Op: "Gather", Seq: 12, Comm: "split 2", Timeout: 3 * time.Minute, Rank: 0, Host: "n0",
		Probe: 3 * time.Second, Missing: []MissingRank{
			{Rank: 5, Host: "n5", Detail: "did not answer"},
			{Rank: 9, Host: "n9", Answered: true, Detail: "is alive but busy"},
		}}
	var err error = e
	if !errors.Is(err, ErrTimeout) {
		t.Error("not errors.Is ErrTimeout")
	}
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 5 || re.Op != "Gather" || !errors.Is(re, ErrPeerDead) {
		t.Errorf("errors.As *RankError = %+v, want rank 5 of Gather, dead", re)
	}
	var all []int
	for _, u := range e.Unwrap()[1:] {
		r := u.(*RankError)
		all = append(all, r.Rank)
		if r.Rank == 9 && errors.Is(r, ErrPeerDead) {
			t.Error("the rank that answered counts as dead")
		}
	}
	if len(all) != 2 || all[0] != 5 || all[1] != 9 {
		t.Errorf("unwrapped ranks %v, want [5 9]", all)
	}
	msg := err.Error()
	for _, s := range []string{"Gather (collective #12 on the split 2 communicator) timed out after 3m0s on rank 0 (host n0)",
		": rank 5 (host n5) did not answer", "; rank 9 (host n9) is alive but busy"} {
		if !strings.Contains(msg, s) {
			t.Errorf("message %q lacks %q", msg, s)
		}
	}

	e.Missing = nil
	if msg := e.Error(); !strings.Contains(msg, "every member answered a probe within 3s and had reached this collective") {
		t.Errorf("message without missing ranks: %q", msg)
	}
	if errors.As(error(e), &re) {
		t.Error("errors.As *RankError holds with no missing rank")
	}
	e.Probe = 0
	if msg := e.Error(); !strings.Contains(msg, "missing ranks are unknown") {
		t.Errorf("message without a probe: %q", msg)
	}
}

func TestProbeWindow(t *testing.T) {
	for _, tc := range []struct{ timeout, want time.Duration }{
		{time.Second, 500 * time.Millisecond},
		{4 * time.Second, 500 * time.Millisecond},
		{20 * time.Second, 2 * time.Second},
		{3 * time.Minute, 3 * time.Second},
	} {
		if got := probeWindow(tc.timeout); got != tc.want {
			t.Errorf("probeWindow(%v) = %v, want %v", tc.timeout, got, tc.want)
		}
	}
}
