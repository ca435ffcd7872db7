package report

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func TestTQuantile(t *testing.T) {
	for _, tc := range []struct{ df, want float64 }{
		{1, 12.7062}, {4, 2.7764}, {10, 2.2281}, {30, 2.0423}, {1e6, 1.9600},
	} {
		if got := tQuantile(0.95, tc.df); !near(got, tc.want, 1e-3) {
			t.Errorf("t(0.975, %g) = %.4f, want %.4f", tc.df, got, tc.want)
		}
	}
}

func TestWelchInterval(t *testing.T) {
	// Equal variances (1) and sizes (3): df = 2(n−1) = 4, se = √(2/3).
	hw, df, ok := WelchInterval([]float64{1, 2, 3}, []float64{2, 3, 4}, 0.95)
	if !ok || !near(df, 4, 1e-9) || !near(hw, 2.7764*math.Sqrt(2.0/3), 1e-3) {
		t.Fatalf("hw %g df %g ok %v", hw, df, ok)
	}
	// Unequal variances: Welch–Satterthwaite, checked by hand:
	// vx = 2.5/5 = 0.5, vy = 100/3 = 33.33, df = 33.83² / (0.5²/4 + 33.33²/2) = 2.0602.
	hw, df, ok = WelchInterval([]float64{1, 2, 3, 4, 5}, []float64{0, 10, 20}, 0.95)
	if !ok || !near(df, 2.0602, 1e-3) {
		t.Fatalf("df %g", df)
	}
	if !near(hw, tQuantile(0.95, df)*math.Sqrt(0.5+100.0/3), 1e-9) {
		t.Fatalf("hw %g", hw)
	}
	// One side with one sample borrows the other's variance.
	hw, df, ok = WelchInterval([]float64{1, 2, 3}, []float64{5}, 0.95)
	if !ok || df != 2 || !near(hw, tQuantile(0.95, 2)*math.Sqrt(1+1.0/3), 1e-9) {
		t.Fatalf("one-sided: hw %g df %g ok %v", hw, df, ok)
	}
	if _, _, ok := WelchInterval([]float64{1}, []float64{2}, 0.95); ok {
		t.Fatal("no interval from one sample each")
	}
}

func TestQuantileInterval(t *testing.T) {
	h := NewHistogram()
	for v := int64(1); v <= 10000; v++ {
		h.RecordValue(v)
	}
	// n = 10000, p = 0.5: ranks 5000 ± 1.96·50 = 4902..5098.
	if hw := QuantileInterval(h, 50); !near(hw, 98, 3) {
		t.Fatalf("p50 half-width %g, want ~98", hw)
	}
	// p99: ranks 9900 ± 1.96·9.95 = 9880.5..9919.5.
	if hw := QuantileInterval(h, 99); !near(hw, 19.5, 2) {
		t.Fatalf("p99 half-width %g, want ~19.5", hw)
	}
	// 100 values cannot bound a p99: its upper rank is past the maximum.
	small := NewHistogram()
	for v := int64(1); v <= 100; v++ {
		small.RecordValue(v)
	}
	if hw := QuantileInterval(small, 99); !math.IsInf(hw, 1) {
		t.Fatalf("p99 of 100 values: half-width %g, want +Inf", hw)
	}
	if hw := QuantileInterval(small, 50); !near(hw, 10, 2) {
		t.Fatalf("p50 of 100 values: half-width %g, want ~10", hw)
	}
}

func TestVerdictRule(t *testing.T) {
	for _, tc := range []struct {
		change, noise float64
		higher        bool
		want          string
	}{
		{0.05, 0, false, VerdictSame},
		{-0.09, 0.5, true, VerdictSame},
		{0.30, 0.50, false, VerdictNoise},        // ln 1.3 = 0.26
		{-0.30, 0.50, true, VerdictNoise},        // |ln 0.7| = 0.36
		{0.30, 0.10, false, VerdictRegression},   // latency up
		{-0.30, 0.10, false, VerdictImprovement}, // latency down
		{-0.30, 0.10, true, VerdictRegression},   // bandwidth down
		{0.30, 0.10, true, VerdictImprovement},   // bandwidth up
		{-0.99, 0.5, true, VerdictRegression},    // 100× slower is never noise
		{-1, 50, true, VerdictRegression},        // nor is a rate fallen to zero
	} {
		if got := verdict(tc.change, 1+tc.change, tc.noise, 0.10, tc.higher); got != tc.want {
			t.Errorf("verdict(%+v) = %s, want %s", tc, got, tc.want)
		}
	}
}

func verdicts(c *Comparison) map[string]int {
	out := map[string]int{}
	for _, r := range c.Rows {
		out[r.Verdict]++
	}
	return out
}

func TestCompareSynthetic(t *testing.T) {
	base := synthManifest(1, 1)

	t.Run("a run against itself", func(t *testing.T) {
		c := Compare(base, base, CompareOptions{})
		if c.Regressed() || c.Same != len(c.Rows) || len(c.Rows) == 0 {
			t.Fatalf("%+v", verdicts(c))
		}
	})

	t.Run("same storage, other samples", func(t *testing.T) {
		c := Compare(base, synthManifest(2, 1), CompareOptions{})
		if c.Regressed() {
			var b bytes.Buffer
			c.WriteText(&b)
			t.Fatalf("regression between two samples of the same storage:\n%s", b.String())
		}
	})

	t.Run("three times slower", func(t *testing.T) {
		c := Compare(base, synthManifest(2, 3), CompareOptions{})
		if !c.Regressed() {
			t.Fatalf("no regression: %+v", verdicts(c))
		}
		for _, r := range c.Rows {
			if r.Phase == "create_files" && r.Ranks == 2 && r.Metric == "mean_ns" {
				if r.Verdict != VerdictRegression || !near(r.ChangePercent, 200, 15) || r.NoiseFrom != NoiseIterations {
					t.Errorf("row %+v", r)
				}
			}
			if r.Phase == "create_files" && r.Ranks == 2 && r.Metric == "bytes_per_sec" && (r.Verdict != VerdictRegression || !near(r.ChangePercent, -66.7, 1)) {
				t.Errorf("row %+v", r)
			}
			if r.Phase == "move_files" && (r.Metric != "status" || r.Verdict != VerdictSame) {
				t.Errorf("failed in both runs: %+v", r)
			}
		}
	})

	t.Run("twice as fast", func(t *testing.T) {
		c := Compare(synthManifest(2, 2), base, CompareOptions{})
		if c.Regressed() || c.Improvements == 0 {
			t.Fatalf("%+v", verdicts(c))
		}
	})

	t.Run("a change hidden by noisy iterations", func(t *testing.T) {
		n := synthManifest(2, 1.3)
		for i := range n.Phases {
			p := &n.Phases[i]
			if len(p.Iterations) == 3 {
				p.Iterations[0] *= 0.4
				p.Iterations[2] *= 1.6
			}
		}
		c := Compare(base, n, CompareOptions{})
		for _, r := range c.Rows {
			if r.Phase == "create_files" && r.Metric == "mean_ns" && r.Verdict != VerdictNoise {
				t.Errorf("30%% slower within ±%.0f%% noise: %+v", r.NoisePercent, r)
			}
		}
	})

	t.Run("threshold", func(t *testing.T) {
		c := Compare(base, synthManifest(2, 1.3), CompareOptions{Threshold: 0.5})
		if c.Regressed() || c.Noise != 0 {
			t.Fatalf("a 30%% change under a 50%% threshold: %+v", verdicts(c))
		}
	})

	t.Run("status and unmatched phases", func(t *testing.T) {
		n := synthManifest(1, 1)
		n.Phases[3].Status, n.Phases[3].Error = StatusFailed, "list_files: rank 2: EIO"
		n.Phases = n.Phases[:5]                 // delete_files missing
		n.Phases[0].Ranks = 1                   // create_files at 2 ranks → 1 rank
		c := Compare(base, n, CompareOptions{}) //
		if !c.Regressed() || strings.Join(c.OnlyInBase, ",") != "create_files [2 ranks],delete_files [8 ranks]" ||
			strings.Join(c.OnlyInNew, ",") != "create_files [1 ranks]" {
			t.Fatalf("only in base %v, only in new %v, %+v", c.OnlyInBase, c.OnlyInNew, verdicts(c))
		}
		var status *CompareRow
		for i, r := range c.Rows {
			if r.Phase == "list_files" {
				status = &c.Rows[i]
			}
		}
		if status == nil || status.Metric != "status" || status.Verdict != VerdictRegression || !strings.Contains(status.Note, "EIO") {
			t.Fatalf("status row %+v", status)
		}
	})
}

func TestCompareOutput(t *testing.T) {
	c := Compare(synthManifest(1, 1), synthManifest(2, 3), CompareOptions{BaseLabel: "before", NewLabel: "after"})
	var b bytes.Buffer
	if err := c.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"base before", "new  after", "threshold 10%", "create_files", "mean_ns", "regression", "list_files", "stat", "regressions,"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back Comparison
	if err := json.Unmarshal(js, &back); err != nil || back.Regressions != c.Regressions || len(back.Rows) != len(c.Rows) ||
		!strings.Contains(string(js), `"change_percent"`) || !strings.Contains(string(js), `"noise_from":"iterations"`) {
		t.Fatalf("json round trip: %v\n%s", err, js)
	}
}

// TestPhaseMetricArrays: the checkpoint save/load figures compare read
// metric_arrays, and the <op>_ckpt_NNN_seconds metrics of a manifest
// written before it, to the same values.
func TestPhaseMetricArrays(t *testing.T) {
	arrays := &PhaseResult{Metrics: map[string]float64{"checkpoint_bytes": 4 << 30},
		MetricArrays: map[string][]float64{"save_ckpt_seconds": {1, 4}}}
	flat := &PhaseResult{Metrics: map[string]float64{"checkpoint_bytes": 4 << 30, "save_checkpoints": 2,
		"save_ckpt_000_seconds": 1, "save_ckpt_001_seconds": 4}}
	for _, c := range []struct {
		name string
		want float64
	}{{"save_seconds", 2.5}, {"save_gib_per_sec", (4 + 1) / 2.0}} {
		for _, p := range []*PhaseResult{arrays, flat} {
			if got, ok := phaseMetricValue(p, c.name); !ok || got != c.want {
				t.Errorf("%s = %v, %v; want %v", c.name, got, ok, c.want)
			}
		}
	}
	if _, ok := phaseMetricValue(arrays, "load_seconds"); ok {
		t.Error("load_seconds of a run without loads")
	}
}
