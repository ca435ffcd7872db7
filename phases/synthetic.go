package phases

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
)

// synthetic_workload (PRISM's generate family) creates files whose
// arrival times and sizes follow seeded distributions: arrivals
// deterministic (every interval), poisson (exponential gaps of mean
// 1/rate) or burst (burst_size files, then burst_gap); sizes fixed,
// exponential, uniform or lognormal, truncated to [min_size, max_size] by
// redrawing (so the sizes follow the truncated distribution, not a pile-up
// at the bounds). The schedule is drawn in setup from (seed, rank), so it
// is the same on every run. With simulate_arrivals the rank sleeps until
// each file's arrival time (untimed); without, files are created back to
// back. Content comes from the io generators (data key) and is generated
// between the timed creates.

type syntheticConfig struct {
	Count            int      `toml:"count" doc:"files per rank"`
	Arrivals         string   `toml:"arrivals" doc:"deterministic (every interval) | poisson (rate per second) | burst (burst_size files, then burst_gap)"`
	Interval         Duration `toml:"interval" doc:"deterministic arrivals: time between files"`
	Rate             float64  `toml:"rate" doc:"poisson arrivals: mean files per second per rank"`
	BurstSize        int      `toml:"burst_size" doc:"burst arrivals: files per burst"`
	BurstGap         Duration `toml:"burst_gap" doc:"burst arrivals: time between bursts"`
	SimulateArrivals bool     `toml:"simulate_arrivals" doc:"sleep until each file's arrival time (untimed); false = create back to back"`
	SizeDist         string   `toml:"size_dist" doc:"fixed (size) | exponential (mean) | uniform (min, max) | lognormal (mu, sigma of ln bytes)"`
	Size             Size     `toml:"size" doc:"fixed: bytes per file"`
	Mean             Size     `toml:"mean" doc:"exponential: mean bytes"`
	Min              Size     `toml:"min" doc:"uniform: smallest size"`
	Max              Size     `toml:"max" doc:"uniform: largest size"`
	Mu               float64  `toml:"mu" doc:"lognormal: mean of ln(bytes)"`
	Sigma            float64  `toml:"sigma" doc:"lognormal: standard deviation of ln(bytes)"`
	MinSize          Size     `toml:"min_size" doc:"lower bound of every size (redrawn below it)"`
	MaxSize          Size     `toml:"max_size" doc:"upper bound of every size (redrawn above it)"`
	Data             string   `toml:"data" doc:"content: random | deterministic | seeded_random | zero | pattern"`
	Pattern          string   `toml:"pattern" doc:"pattern data: \"0x...\" hex bytes or literal text"`
	Seed             int64    `toml:"seed" doc:"seed of arrivals, sizes and (deterministic, seeded_random) content"`
}

func defaultSyntheticConfig() syntheticConfig {
	return syntheticConfig{Count: 100, Arrivals: "poisson", Interval: Duration(10 * time.Millisecond), Rate: 100, BurstSize: 10, BurstGap: Duration(100 * time.Millisecond),
		SizeDist: "exponential", Size: 64 << 10, Mean: 64 << 10, Min: 4 << 10, Max: 1 << 20, Mu: 11, Sigma: 1,
		MinSize: 0, MaxSize: 64 << 20, Data: pio.GenDeterministic, Seed: 1}
}

var (
	synthArrivals = []string{"deterministic", "poisson", "burst"}
	synthSizes    = []string{"fixed", "exponential", "uniform", "lognormal"}
)

func (c *syntheticConfig) Validate() error {
	switch {
	case c.Count < 1 || c.Count > maxMetaCount:
		return &KeyError{Key: "count", Msg: fmt.Sprintf("%d out of range (1 .. %d)", c.Count, maxMetaCount)}
	case !contains(synthArrivals, c.Arrivals):
		return &KeyError{Key: "arrivals", Msg: fmt.Sprintf("unknown arrivals %q (allowed: %s)", c.Arrivals, strings.Join(synthArrivals, ", "))}
	case c.Arrivals == "poisson" && !(c.Rate > 0 && c.Rate <= 1e7):
		return &KeyError{Key: "rate", Msg: fmt.Sprintf("%v out of range (0 < rate <= 1e7 per second)", c.Rate)}
	case c.Arrivals == "burst" && (c.BurstSize < 1 || c.BurstSize > maxMetaCount):
		return &KeyError{Key: "burst_size", Msg: fmt.Sprintf("%d out of range (1 .. %d)", c.BurstSize, maxMetaCount)}
	case !contains(synthSizes, c.SizeDist):
		return &KeyError{Key: "size_dist", Msg: fmt.Sprintf("unknown distribution %q (allowed: %s)", c.SizeDist, strings.Join(synthSizes, ", "))}
	case c.MaxSize < 1 || c.MaxSize > 1<<30:
		return &KeyError{Key: "max_size", Msg: fmt.Sprintf("%s out of range (1 .. 1GiB)", c.MaxSize)}
	case c.MinSize > c.MaxSize:
		return &KeyError{Key: "min_size", Msg: fmt.Sprintf("%s is above max_size %s", c.MinSize, c.MaxSize)}
	case c.SizeDist == "fixed" && (c.Size < c.MinSize || c.Size > c.MaxSize):
		return &KeyError{Key: "size", Msg: fmt.Sprintf("%s outside [min_size, max_size] = [%s, %s]", c.Size, c.MinSize, c.MaxSize)}
	case c.SizeDist == "exponential" && c.Mean < 1:
		return &KeyError{Key: "mean", Msg: "must be at least 1 byte"}
	case c.SizeDist == "uniform" && (c.Min > c.Max || c.Max < c.MinSize || c.Min > c.MaxSize):
		return &KeyError{Key: "max", Msg: fmt.Sprintf("uniform [%s, %s] must be ordered and meet [min_size, max_size] = [%s, %s]", c.Min, c.Max, c.MinSize, c.MaxSize)}
	case c.SizeDist == "lognormal" && !(c.Sigma >= 0 && c.Sigma <= 10 && math.Abs(c.Mu) <= 50):
		return &KeyError{Key: "sigma", Msg: fmt.Sprintf("mu = %v, sigma = %v out of range (|mu| <= 50, 0 <= sigma <= 10)", c.Mu, c.Sigma)}
	}
	if _, err := c.genConfig(); err != nil {
		return &KeyError{Key: "data", Msg: err.Error()}
	}
	return nil
}

func (c *syntheticConfig) genConfig() (pio.GenConfig, error) {
	g := pio.GenConfig{Kind: c.Data, Seed: uint64(c.Seed)}
	if c.Data == pio.GenPattern {
		b, err := pio.ParsePattern(c.Pattern)
		if err != nil {
			return g, err
		}
		g.Pattern = b
	}
	return g, g.Validate()
}

// targetRate is the mean arrival rate per rank the keys ask for.
func (c *syntheticConfig) targetRate() float64 {
	switch c.Arrivals {
	case "deterministic":
		if c.Interval > 0 {
			return 1 / time.Duration(c.Interval).Seconds()
		}
	case "poisson":
		return c.Rate
	case "burst":
		if c.BurstGap > 0 {
			return float64(c.BurstSize) / time.Duration(c.BurstGap).Seconds()
		}
	}
	return 0
}

// synthSchedule draws n arrival offsets and sizes from (c, stream): the
// same every run.
func synthSchedule(c *syntheticConfig, stream uint64, n int) (at []time.Duration, sizes []int64) {
	rng := pcg{hi: uint64(c.Seed) ^ 0x73796e7468657469, lo: stream*0x9e3779b97f4a7c15 + 7}
	at = make([]time.Duration, n)
	sizes = make([]int64, n)
	var t float64 // seconds
	for i := 0; i < n; i++ {
		switch c.Arrivals {
		case "deterministic":
			t = float64(i) * time.Duration(c.Interval).Seconds()
		case "poisson":
			if i > 0 {
				t += -math.Log(1-rng.float()) / c.Rate
			}
		case "burst":
			t = float64(i/c.BurstSize) * time.Duration(c.BurstGap).Seconds()
		}
		at[i] = time.Duration(t * float64(time.Second))
		sizes[i] = synthSize(c, &rng)
	}
	return at, sizes
}

// synthSize draws one size of the configured distribution, redrawn (up to
// a bound, then clamped) until it lies in [min_size, max_size].
func synthSize(c *syntheticConfig, rng *pcg) int64 {
	lo, hi := float64(c.MinSize), float64(c.MaxSize)
	var x float64
	for try := 0; try < 1000; try++ {
		switch c.SizeDist {
		case "fixed":
			return int64(c.Size)
		case "exponential":
			x = -float64(c.Mean) * math.Log(1-rng.float())
		case "uniform":
			x = float64(c.Min) + rng.float()*float64(c.Max-c.Min+1)
		case "lognormal":
			u1, u2 := 1-rng.float(), rng.float()
			z := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
			x = math.Exp(c.Mu + c.Sigma*z)
		}
		x = math.Floor(x)
		if x >= lo && x <= hi {
			return int64(x)
		}
	}
	return int64(math.Min(math.Max(x, lo), hi))
}

type syntheticWorkload struct {
	cfg   syntheticConfig
	at    []time.Duration
	sizes []int64
	paths []pio.Path
	gen   *pio.Generator
	buf   []byte
	made  int
	rate  float64
}

func (p *syntheticWorkload) Config() any                        { return &p.cfg }
func (p *syntheticWorkload) ExpectedOps() int64                 { return int64(p.cfg.Count) }
func (p *syntheticWorkload) Verify(context.Context, *Env) error { return nil }

func (p *syntheticWorkload) Footprint(ranks int) Footprint {
	at, sizes := synthSchedule(&p.cfg, 0, p.cfg.Count)
	_ = at
	var b int64
	for _, s := range sizes {
		b += s
	}
	return Footprint{Files: int64(p.cfg.Count), Bytes: b}
}

func (p *syntheticWorkload) Setup(ctx context.Context, env *Env) error {
	c := &p.cfg
	p.at, p.sizes = synthSchedule(c, uint64(env.WorldRank)<<20|uint64(env.Iteration), c.Count)
	dir := filepath.Join(env.RankDir, "synthetic")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return env.Errorf("setup: mkdir %s: %w%s", dir, err, pio.Remedy(err))
	}
	p.paths = make([]pio.Path, c.Count)
	var largest int64
	for i := range p.paths {
		p.paths[i] = pio.MustPath(filepath.Join(dir, fmt.Sprintf("s%07d", i)))
		largest = max(largest, p.sizes[i])
	}
	g, _ := c.genConfig()
	var err error
	if p.gen, err = pio.NewGenerator(g); err != nil {
		return env.Errorf("setup: %w", err)
	}
	if int64(len(p.buf)) < largest {
		p.buf = make([]byte, largest)
	}
	p.made = 0
	return nil
}

// Run creates the files in arrival order. The create op is open
// (O_CREAT|O_EXCL), write, close; the arrival wait and the content
// generation come before it.
func (p *syntheticWorkload) Run(ctx context.Context, env *Env) error {
	rec := env.Recorder("create")
	done := ctx.Done()
	t0 := time.Now()
	var first, last time.Time
	for i := range p.paths {
		if p.cfg.SimulateArrivals {
			if d := time.Until(t0.Add(p.at[i])); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-done:
					t.Stop()
					return ctx.Err()
				}
			}
		} else {
			select {
			case <-done:
				return ctx.Err()
			default:
			}
		}
		b := p.buf[:p.sizes[i]]
		p.gen.FillStream(b, uint64(env.WorldRank)<<32|uint64(i), 0)
		path := &p.paths[i]
		start := rec.BeginOn(path.Name())
		n, err := createOne(*path, b)
		rec.Observe(start, n, err)
		if err != nil {
			return env.Errorf("create %s: %w%s", path, err, pio.Remedy(err))
		}
		p.made++
		if i == 0 {
			first = start
		}
		last = start
	}
	p.rate = 0
	if span := last.Sub(first).Seconds(); span > 0 && len(p.paths) > 1 {
		p.rate = float64(len(p.paths)-1) / span
	}
	// Per rank; the phase result sums the ranks: the aggregate rates.
	env.SetMetric("arrival_rate_per_sec", p.rate)
	if p.cfg.SimulateArrivals {
		env.SetMetric("arrival_rate_target_per_sec", p.cfg.targetRate())
	}
	return nil
}

func (p *syntheticWorkload) Teardown(ctx context.Context, env *Env) error {
	var first error
	for _, path := range p.paths[:p.made] {
		if err := pio.Unlink(unix.AT_FDCWD, path); err != nil && err != unix.ENOENT && first == nil {
			first = env.Errorf("teardown: unlink %s: %w", path, err)
		}
	}
	p.made = 0
	return first
}
