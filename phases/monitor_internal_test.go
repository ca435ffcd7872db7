package phases

import "testing"

// TestSlowestRank: the slowest rank is the one still running furthest
// behind, named by its rank in the job; finished ranks and ranks not heard
// from yet are never it.
func TestSlowestRank(t *testing.T) {
	rep := func(ops, bytes, el, done, world int64) []int64 { return []int64{ops, bytes, el, done, world} }
	st := &progressState{rate: []float64{10, 1, 5, 0}, brate: []float64{4 << 20, 1 << 20, 2 << 20, 0}}
	latest := [][]int64{
		rep(50, 0, 1e9, 0, 4), // the sub-communicator's rank 0 is rank 4 of the job
		rep(5, 0, 1e9, 1, 5),  // fewest ops, but done
		rep(20, 0, 1e9, 0, 6),
		rep(0, 0, 0, 0, 7), // no report yet
	}
	if r, what := slowest(latest, st, 100); r != 6 || what != "20.0%" {
		t.Errorf("count-bounded: rank %d %q, want rank 6 20.0%%", r, what)
	}
	latest[0][repBytes], latest[2][repBytes] = 1, 1
	if r, what := slowest(latest, st, 0); r != 6 || what != "2.0 MiB/s" {
		t.Errorf("bytes: rank %d %q, want rank 6 2.0 MiB/s", r, what)
	}
	latest[0][repDone], latest[2][repDone] = 1, 1
	if r, _ := slowest(latest, st, 100); r != -1 {
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
