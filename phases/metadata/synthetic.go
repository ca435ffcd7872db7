package metadata

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
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
	Count            int             `toml:"count" doc:"files per rank"`
	Arrivals         string          `toml:"arrivals" doc:"deterministic (every interval) | poisson (rate per second) | burst (burst_size files, then burst_gap)"`
	Interval         phases.Duration `toml:"interval" doc:"deterministic arrivals: time between files"`
	Rate             float64         `toml:"rate" doc:"poisson arrivals: mean files per second per rank"`
	BurstSize        int             `toml:"burst_size" doc:"burst arrivals: files per burst"`
	BurstGap         phases.Duration `toml:"burst_gap" doc:"burst arrivals: time between bursts"`
	SimulateArrivals bool            `toml:"simulate_arrivals" doc:"sleep until each file's arrival time (untimed); false = create back to back"`
	Size             phases.Size     `toml:"size" doc:"fixed: bytes per file"`
	phases.Sizes
	Data    string `toml:"data" doc:"content: random | deterministic | seeded_random | zero | pattern"`
	Pattern string `toml:"pattern" doc:"pattern data: \"0x...\" hex bytes or literal text"`
	Seed    int64  `toml:"seed" doc:"seed of arrivals, sizes and (deterministic, seeded_random) content"`
}

func defaultSyntheticConfig() syntheticConfig {
	return syntheticConfig{Count: 100, Arrivals: "poisson", Interval: phases.Duration(10 * time.Millisecond), Rate: 100, BurstSize: 10, BurstGap: phases.Duration(100 * time.Millisecond),
		Size: 64 << 10, Sizes: phases.Sizes{Dist: "exponential", Mean: 64 << 10, Min: 4 << 10, Max: 1 << 20, Mu: 11, Sigma: 1, MinSize: 0, MaxSize: 64 << 20},
		Data: pio.GenDeterministic, Seed: 1}
}

var synthArrivals = []string{"deterministic", "poisson", "burst"}

func (c *syntheticConfig) Validate() error {
	switch {
	case c.Count < 1 || c.Count > phases.MaxFilesPerRank:
		return &phases.KeyError{Key: "count", Msg: fmt.Sprintf("%d out of range (1 .. %d)", c.Count, phases.MaxFilesPerRank)}
	case !slices.Contains(synthArrivals, c.Arrivals):
		return &phases.KeyError{Key: "arrivals", Msg: fmt.Sprintf("unknown arrivals %q (allowed: %s)", c.Arrivals, strings.Join(synthArrivals, ", "))}
	case c.Arrivals == "poisson" && !(c.Rate > 0 && c.Rate <= 1e7):
		return &phases.KeyError{Key: "rate", Msg: fmt.Sprintf("%v out of range (0 < rate <= 1e7 per second)", c.Rate)}
	case c.Arrivals == "burst" && (c.BurstSize < 1 || c.BurstSize > phases.MaxFilesPerRank):
		return &phases.KeyError{Key: "burst_size", Msg: fmt.Sprintf("%d out of range (1 .. %d)", c.BurstSize, phases.MaxFilesPerRank)}
	}
	if err := c.Sizes.Validate(c.Size, 1<<30); err != nil {
		return err
	}
	if _, err := c.genConfig(); err != nil {
		return &phases.KeyError{Key: "data", Msg: err.Error()}
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
	rng := pio.PCG{Hi: uint64(c.Seed) ^ 0x73796e7468657469, Lo: stream*0x9e3779b97f4a7c15 + 7}
	at = make([]time.Duration, n)
	sizes = make([]int64, n)
	var t float64 // seconds
	for i := 0; i < n; i++ {
		switch c.Arrivals {
		case "deterministic":
			t = float64(i) * time.Duration(c.Interval).Seconds()
		case "poisson":
			if i > 0 {
				t += -math.Log(1-rng.Float()) / c.Rate
			}
		case "burst":
			t = float64(i/c.BurstSize) * time.Duration(c.BurstGap).Seconds()
		}
		at[i] = time.Duration(t * float64(time.Second))
		sizes[i] = c.Draw(c.Size, &rng)
	}
	return at, sizes
}

type syntheticWorkload struct {
	cfg   syntheticConfig
	at    []time.Duration
	sizes []int64
	dir   *pio.Dir
	names []pio.Name
	gen   *pio.Generator
	buf   []byte
	made  int
	rate  float64
}

func (p *syntheticWorkload) Config() any                               { return &p.cfg }
func (p *syntheticWorkload) ExpectedOps() int64                        { return int64(p.cfg.Count) }
func (p *syntheticWorkload) Verify(context.Context, *phases.Env) error { return nil }

// Resolve: only the chosen arrival process's keys apply (and the size
// distribution's, which ParamValues sees for every kind embedding
// phases.Sizes), pattern only to data = "pattern".
func (p *syntheticWorkload) Resolve([]*phases.Spec) phases.Resolved {
	var unused []string
	arrivals := map[string][]string{"deterministic": {"interval"}, "poisson": {"rate"}, "burst": {"burst_size", "burst_gap"}}
	for _, k := range []string{"interval", "rate", "burst_size", "burst_gap"} {
		if !slices.Contains(arrivals[p.cfg.Arrivals], k) {
			unused = append(unused, k)
		}
	}
	if p.cfg.Data != "pattern" {
		unused = append(unused, "pattern")
	}
	return phases.Resolved{Unused: unused}
}

func (p *syntheticWorkload) Footprint(ranks int) phases.Footprint {
	at, sizes := synthSchedule(&p.cfg, 0, p.cfg.Count)
	_ = at
	var b int64
	for _, s := range sizes {
		b += s
	}
	return phases.Footprint{Files: int64(p.cfg.Count), Bytes: b}
}

// Memory: a prepared name, an arrival time and a size per file, and a
// buffer of the largest size.
func (p *syntheticWorkload) Memory(ranks int) (int64, string) {
	return int64(p.cfg.Count)*(nameBytes+16) + int64(p.cfg.MaxSize), "count or max_size"
}

func (p *syntheticWorkload) Setup(ctx context.Context, env *phases.Env) error {
	c := &p.cfg
	p.at, p.sizes = synthSchedule(c, uint64(env.WorldRank)<<20|uint64(env.Iteration), c.Count)
	if p.dir != nil {
		p.dir.Close()
	}
	d, err := env.Own.EnsureSub("synthetic", 0o755)
	if err != nil {
		return env.Errorf("setup: %w", err)
	}
	p.dir = d
	p.names = make([]pio.Name, c.Count)
	var largest int64
	for i := range p.names {
		p.names[i] = pio.MustName(fmt.Sprintf("s%07d", i))
		largest = max(largest, p.sizes[i])
	}
	g, _ := c.genConfig()
	if p.gen, err = pio.NewGenerator(g); err != nil {
		return env.Errorf("setup: %w", err)
	}
	if int64(len(p.buf)) < largest {
		p.buf = make([]byte, largest)
		pio.Prefault(p.buf) // not by the first file's content, inside the Run
	}
	p.made = 0
	env.Recorder("create") // its histogram is allocated here, not in the timed Run
	return nil
}

// Run creates the files in arrival order. The create op is open
// (O_CREAT|O_EXCL), write, close; the arrival wait and the content
// generation come before it.
func (p *syntheticWorkload) Run(ctx context.Context, env *phases.Env) error {
	rec := env.Recorder("create").Under(p.dir.Path())
	done := ctx.Done()
	t0 := time.Now()
	var first, last time.Time
	for i := range p.names {
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
		name := &p.names[i]
		start := rec.BeginOn(name.Ref())
		n, err := createOne(p.dir, name, b)
		rec.Observe(start, n, err)
		if err != nil {
			return env.Errorf("%w", p.dir.Wrap("create", *name, err))
		}
		p.made++
		if i == 0 {
			first = start
		}
		last = start
	}
	p.rate = 0
	if span := last.Sub(first).Seconds(); span > 0 && len(p.names) > 1 {
		p.rate = float64(len(p.names)-1) / span
	}
	// Per rank; the phase result sums the ranks: the aggregate rates.
	env.SetMetric("arrival_rate_per_sec", p.rate)
	if p.cfg.SimulateArrivals {
		env.SetMetric("arrival_rate_target_per_sec", p.cfg.targetRate())
	}
	return nil
}

func (p *syntheticWorkload) Teardown(ctx context.Context, env *phases.Env) error {
	var first error
	for _, name := range p.names[:p.made] {
		if err := p.dir.Unlink(name); err != nil && err != unix.ENOENT && first == nil {
			first = env.Errorf("teardown: %w", p.dir.Wrap("unlink", name, err))
		}
	}
	p.made = 0
	p.dir.Close()
	p.dir = nil
	return first
}
