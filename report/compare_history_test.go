package report

import (
	"fmt"
	"math"
	"testing"
)

// mlperfRun is a manifest of one train and one checkpoint phase whose
// figures are scaled by f (f > 1: better AU and throughput, shorter saves).
func mlperfRun(id string, f float64) *Manifest {
	train := PhaseResult{Name: "train", Kind: "train", Status: StatusPassed, Ranks: 2, Iterations: []float64{1},
		Metrics: map[string]float64{"au_percent": 45 * f, "samples_per_sec": 300 * f, "io_mib_per_sec": 40 * f}}
	ck := PhaseResult{Name: "ckpt", Kind: "mlperf_checkpoint", Status: StatusPassed, Ranks: 2, Iterations: []float64{1},
		Metrics: map[string]float64{"checkpoint_bytes": 4 << 30, "save_checkpoints": 2, "load_checkpoints": 1,
			"save_ckpt_000_seconds": 2 / f, "save_ckpt_001_seconds": 2.2 / f, "load_ckpt_000_seconds": 1 / f}}
	return &Manifest{SchemaVersion: SchemaVersion, RunID: id, Status: StatusPassed, Comm: CommInfo{Ranks: 2},
		Plan: map[string]any{"name": "mlperf"}, Phases: []PhaseResult{train, ck}}
}

// Against a history of five runs, MLPerf's figures are compared with
// their direction: AU and samples/s down, save and load durations up and
// GiB/s down are regressions; the same figures within the history's spread
// are not. The checkpoint figures are derived as MLPerf prints them.
func TestCompareHistoryMLPerf(t *testing.T) {
	var bases []*Manifest
	for i, f := range []float64{1, 1.02, 0.98, 1.01, 0.99} {
		bases = append(bases, mlperfRun(fmt.Sprint("b", i), f))
	}
	verdicts := func(c *Comparison) map[string]CompareRow {
		out := map[string]CompareRow{}
		for _, r := range c.Rows {
			out[r.Phase+" "+r.Metric] = r
		}
		return out
	}
	same := verdicts(CompareHistory(bases, mlperfRun("new", 1.005), CompareOptions{}))
	slow := verdicts(CompareHistory(bases, mlperfRun("new", 0.5), CompareOptions{}))
	for _, k := range []string{"train au_percent", "train samples_per_sec", "train io_mib_per_sec", "ckpt save_seconds", "ckpt save_gib_per_sec", "ckpt load_seconds", "ckpt load_gib_per_sec"} {
		if r, ok := same[k]; !ok || r.Verdict != VerdictSame || r.BaseRuns != 5 || r.Op != "metrics" {
			t.Errorf("%s, same figures: %+v", k, r)
		}
		if r := slow[k]; r.Verdict != VerdictRegression || r.NoiseFrom != NoiseRuns || !(r.IntervalLowPercent < r.ChangePercent && r.ChangePercent < r.IntervalHighPercent) {
			t.Errorf("%s, half as fast: %+v", k, r)
		}
	}
	// save_seconds is the mean duration: (2 + 2.2)/2 at f = 1 → geometric
	// mean over the five bases near 2.1 s; GiB/s the mean of 4/d.
	if r := same["ckpt save_seconds"]; math.Abs(r.Base-2.1) > 0.01 {
		t.Errorf("save_seconds base %.3f, want about 2.1", r.Base)
	}
	if r := same["ckpt save_gib_per_sec"]; math.Abs(r.Base-(4/2.0+4/2.2)/2) > 0.02 {
		t.Errorf("save_gib_per_sec base %.3f", r.Base)
	}
	// Another plan is not comparable.
	other := mlperfRun("x", 1)
	other.Plan = map[string]any{"name": "other"}
	if err := Comparable(other, bases[0]); err == nil {
		t.Error("runs of different plans comparable")
	}
	// One base and one iteration: no noise-based verdict.
	one := CompareHistory(bases[:1], mlperfRun("new", 0.5), CompareOptions{})
	if one.Regressions != 0 || one.Untested == 0 || len(one.Warnings) == 0 {
		t.Errorf("one base, one iteration: %d regressions, %d untested, warnings %v", one.Regressions, one.Untested, one.Warnings)
	}
}
