package phases

import (
	"strings"
	"testing"
	"time"

	"github.com/prism-hpc/prism/spmd"
)

// TestSlowestRank: the slowest rank is the one still running furthest
// behind, named by its rank in the job; finished ranks and ranks not heard
// from yet are never it.
func TestSlowestRank(t *testing.T) {
	rep := func(ops, bytes, el, done, world int64) []int64 { return []int64{ops, bytes, el, done, world, 100} }
	st := &progressState{rate: []float64{10, 1, 5, 0}, brate: []float64{4 << 20, 1 << 20, 2 << 20, 0}}
	latest := [][]int64{
		rep(50, 0, 1e9, 0, 4), // the sub-communicator's rank 0 is rank 4 of the job
		rep(5, 0, 1e9, 1, 5),  // fewest ops, but done
		rep(20, 0, 1e9, 0, 6),
		rep(0, 0, 0, 0, 7), // no report yet
	}
	wants := []int64{100, 100, 100, 100}
	if r, what := slowest(latest, st, wants); r != 6 || what != "20.0%" {
		t.Errorf("count-bounded: rank %d %q, want rank 6 20.0%%", r, what)
	}
	latest[0][repBytes], latest[2][repBytes] = 1, 1
	if r, what := slowest(latest, st, nil); r != 6 || what != "2.0 MiB/s" {
		t.Errorf("bytes: rank %d %q, want rank 6 2.0 MiB/s", r, what)
	}
	latest[0][repDone], latest[2][repDone] = 1, 1
	if r, _ := slowest(latest, st, wants); r != -1 {
		t.Errorf("all done or silent: rank %d, want -1", r)
	}
}

// TestParseProgress: auto follows the terminal; anything else is refused
// naming the flag.
func TestParseProgress(t *testing.T) {
	for _, c := range []struct {
		in   string
		tty  bool
		want Progress
	}{{"auto", true, ProgressTTY}, {"auto", false, ProgressLine}, {"tty", false, ProgressTTY}, {"line", true, ProgressLine}, {"none", true, ProgressNone}} {
		if got, err := ParseProgress(c.in, c.tty); err != nil || got != c.want {
			t.Errorf("%s (tty %v): %q, %v; want %q", c.in, c.tty, got, err, c.want)
		}
	}
	if _, err := ParseProgress("bar", true); err == nil || err.Error() != `--progress "bar": want auto, tty, line or none` {
		t.Errorf("bad value: %v", err)
	}
}

// TestProgressPerRankWants: the percentage, ETA and slowest rank use each
// rank's own expected ops, as it reports them, not rank 0's times the
// ranks: a ddp_save's rank 0 writes everything and the others nothing,
// so rank 0 halfway is 50%, not 17%. A rank not heard from yet counts
// as expecting what rank 0 does.
func TestProgressPerRankWants(t *testing.T) {
	now := time.Now()
	p := &progress{env: &Env{spec: &Spec{Common: Common{Iterations: 1}}}, label: "[1/1] save", started: now.Add(-time.Second)}
	rep := func(ops, el, done, world, want int64) []int64 { return []int64{ops, 0, el, done, world, want} }
	st := &progressState{prev: make([][spmd.ReportWords]int64, 3), rate: make([]float64, 3), brate: make([]float64, 3)}
	latest := [][]int64{rep(50, 1e9, 0, 0, 100), rep(0, 1e9, 0, 1, 0), rep(0, 1e9, 0, 2, 0)}
	line := p.line(st, latest, now)
	for _, want := range []string{" 50.0% 50/100 ops", ", ETA 1s", "; slowest rank 0 50.0%"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q: want %q in it", line, want)
		}
	}
	// Each rank's share is of its own count: rank 1 at 2 of its 10 is
	// furthest behind, and the ETA is its 8 left at its rate.
	latest[1] = rep(2, 1e9, 0, 1, 10)
	line = p.line(st, latest, now)
	for _, want := range []string{" 47.3% 52/110 ops", ", ETA 4s", "; slowest rank 1 20.0%"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q: want %q in it", line, want)
		}
	}
	latest[1] = rep(0, 1e9, 0, 1, 0)
	// Rank 2 has not reported: it is taken to expect rank 0's 100.
	latest[2] = rep(0, 0, 0, 0, 0)
	if line := p.line(st, latest, now); !strings.Contains(line, " 25.0% 50/200 ops") {
		t.Errorf("line %q: want 25.0%% 50/200 ops", line)
	}
	latest[2] = rep(0, 1e9, 1, 2, 0)
	latest[0] = rep(100, 2e9, 1, 0, 100)
	if got := p.final(latest); !strings.Contains(got, "done, 100 ops (100.0% of 100)") {
		t.Errorf("final %q: want 100.0%% of 100", got)
	}
	// No rank expects any: not count-bounded, no percentage.
	for _, v := range latest {
		v[repWant] = 0
	}
	if line := p.line(st, latest, now); strings.Contains(line, "%") || strings.Contains(line, "ETA") {
		t.Errorf("line %q: a percentage or an ETA without expected ops", line)
	}
}
