package metadata

import (
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/phasestest"
	"github.com/prism-hpc/prism/report"
)

// ksDistance is the Kolmogorov–Smirnov statistic of integer samples
// against the continuous CDF cdf of the (unfloored) variable: floor(X) <= k
// exactly when X < k+1.
func ksDistance(xs []int64, cdf func(float64) float64) float64 {
	s := slices.Clone(xs)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	n := float64(len(s))
	var d float64
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j] == s[i] {
			j++
		}
		below, upTo := cdf(float64(s[i])), cdf(float64(s[i]+1))
		d = max(d, math.Abs(float64(j)/n-upTo), math.Abs(float64(i)/n-below))
		i = j
	}
	return d
}

// truncated is cdf restricted to [lo, hi] (the bounds are integers; the
// sampler keeps floor(X) in [lo, hi], i.e. X in [lo, hi+1)).
func truncated(cdf func(float64) float64, lo, hi float64) func(float64) float64 {
	a, b := cdf(lo), cdf(hi+1)
	return func(x float64) float64 {
		return math.Min(1, math.Max(0, (cdf(x)-a)/(b-a)))
	}
}

// TestSyntheticSizeDistributions: with a fixed seed, 4000 sizes of each
// distribution pass a Kolmogorov–Smirnov test against the (truncated)
// distribution at a generous critical value (2.5/sqrt(n): alpha far below
// 0.001), and respect the bounds.
func TestSyntheticSizeDistributions(t *testing.T) {
	const n = 4000
	crit := 2.5 / math.Sqrt(n)
	for _, tc := range []struct {
		name string
		set  func(c *syntheticConfig)
		cdf  func(float64) float64
	}{
		{"exponential", func(c *syntheticConfig) {
			c.Dist, c.Mean, c.MinSize, c.MaxSize = "exponential", 64<<10, 1<<10, 256<<10
		},
			func(x float64) float64 { return 1 - math.Exp(-x/(64<<10)) }},
		{"uniform", func(c *syntheticConfig) {
			c.Dist, c.Min, c.Max, c.MinSize, c.MaxSize = "uniform", 4<<10, 1<<20, 0, 1<<20
		},
			func(x float64) float64 { return (x - (4 << 10)) / float64((1<<20)-(4<<10)+1) }},
		{"lognormal", func(c *syntheticConfig) {
			c.Dist, c.Mu, c.Sigma, c.MinSize, c.MaxSize = "lognormal", 11, 1, 4<<10, 1<<20
		},
			func(x float64) float64 {
				if x <= 0 {
					return 0
				}
				return 0.5 * (1 + math.Erf((math.Log(x)-11)/math.Sqrt2))
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultSyntheticConfig()
			c.Seed = 12345
			tc.set(&c)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			_, sizes := synthSchedule(&c, 0, n)
			for _, s := range sizes {
				if s < int64(c.MinSize) || s > int64(c.MaxSize) {
					t.Fatalf("size %d outside [%d, %d]", s, c.MinSize, c.MaxSize)
				}
			}
			cdf := truncated(tc.cdf, float64(c.MinSize), float64(c.MaxSize))
			d := ksDistance(sizes, cdf)
			t.Logf("KS distance %.4f (critical %.4f)", d, crit)
			if d > crit {
				t.Errorf("KS distance %.4f above %.4f", d, crit)
			}
			// The same distribution, scaled by 2, must fail: the test has power.
			doubled := make([]int64, n)
			for i, s := range sizes {
				doubled[i] = 2 * s
			}
			if d := ksDistance(doubled, cdf); d <= crit {
				t.Errorf("sizes doubled still pass (KS %.4f): the test cannot tell distributions apart", d)
			}
		})
	}
	c := defaultSyntheticConfig()
	c.Dist, c.Size = "fixed", 777
	if _, sizes := synthSchedule(&c, 3, 10); slices.ContainsFunc(sizes, func(s int64) bool { return s != 777 }) {
		t.Errorf("fixed: %v", sizes)
	}
}

func TestSyntheticSchedule(t *testing.T) {
	c := defaultSyntheticConfig()
	c.Arrivals, c.Rate = "poisson", 200
	a1, s1 := synthSchedule(&c, 1, 2000)
	a2, s2 := synthSchedule(&c, 1, 2000)
	if !slices.Equal(a1, a2) || !slices.Equal(s1, s2) {
		t.Error("same seed and stream, different schedules")
	}
	if a3, _ := synthSchedule(&c, 2, 2000); slices.Equal(a1, a3) {
		t.Error("different streams, same schedule")
	}
	// Poisson: 1999 gaps of mean 5ms; the mean is within 10% (about 4.5
	// standard errors).
	if m := a1[len(a1)-1].Seconds() / 1999; m < 0.0045 || m > 0.0055 {
		t.Errorf("poisson mean gap %.5fs, want about 0.005", m)
	}
	c.Arrivals, c.Interval = "deterministic", phases.Duration(3*time.Millisecond)
	if a, _ := synthSchedule(&c, 0, 4); !slices.Equal(a, []time.Duration{0, 3 * time.Millisecond, 6 * time.Millisecond, 9 * time.Millisecond}) {
		t.Errorf("deterministic: %v", a)
	}
	c.Arrivals, c.BurstSize, c.BurstGap = "burst", 3, phases.Duration(time.Second)
	if a, _ := synthSchedule(&c, 0, 7); !slices.Equal(a, []time.Duration{0, 0, 0, time.Second, time.Second, time.Second, 2 * time.Second}) {
		t.Errorf("burst: %v", a)
	}
}

// TestSyntheticWorkloadEngine: with simulated arrivals every 2ms, the
// achieved rate cannot exceed 500/s (the rank waits for each arrival).
func TestSyntheticWorkloadEngine(t *testing.T) {
	res := phasestest.Run(t, registry(), `[[phase]]
kind = "synthetic_workload"
count = 20
arrivals = "deterministic"
interval = "2ms"
simulate_arrivals = true
size_dist = "uniform"
min = "1KiB"
max = "8KiB"
data = "seeded_random"
`)
	if res.Outcome.Status != report.StatusPassed {
		t.Fatalf("status %s\n%s", res.Outcome.Status, res.Stderr)
	}
	ph := res.Phase(t, "synthetic_workload")
	if ph.OpsByType["create"].Ops != 20 {
		t.Errorf("%d creates, want 20", ph.OpsByType["create"].Ops)
	}
	if r := ph.Metrics["arrival_rate_per_sec"]; r <= 0 || r > 500*1.001 {
		t.Errorf("arrival rate %.1f/s, want in (0, 500]", r)
	}
	if ph.Bytes < 20*1024 || ph.Bytes > 20*8192 {
		t.Errorf("%d bytes outside the size bounds", ph.Bytes)
	}
	_, err := phases.DecodePlan(registry(), "bad.toml", []byte("[[phase]]\nkind = \"synthetic_workload\"\nsize_dist = \"pareto\"\n"))
	if err == nil || !strings.Contains(err.Error(), "size_dist") {
		t.Errorf("bad size_dist: %v", err)
	}
}

// registry is the metadata family alone.
func registry() *phases.Registry {
	r := phases.NewRegistry()
	Register(r)
	return r
}
