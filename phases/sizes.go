package phases

import (
	"fmt"
	"math"
	"slices"
	"strings"

	pio "github.com/prism-hpc/prism/io"
)

// Sizes is a distribution of sizes, the keys a kind embeds to draw the
// size of each file or object (synthetic_workload, the object family):
// fixed (the kind's own size key), exponential, uniform or lognormal,
// truncated to [min_size, max_size] by redrawing, so the sizes follow the
// truncated distribution rather than piling up at the bounds.
type Sizes struct {
	Dist    string  `toml:"size_dist" doc:"fixed (size) | exponential (mean) | uniform (min, max) | lognormal (mu, sigma of ln bytes)"`
	Mean    Size    `toml:"mean" doc:"exponential: mean bytes"`
	Min     Size    `toml:"min" doc:"uniform: smallest size"`
	Max     Size    `toml:"max" doc:"uniform: largest size"`
	Mu      float64 `toml:"mu" doc:"lognormal: mean of ln(bytes)"`
	Sigma   float64 `toml:"sigma" doc:"lognormal: standard deviation of ln(bytes)"`
	MinSize Size    `toml:"min_size" doc:"lower bound of every size (redrawn below it)"`
	MaxSize Size    `toml:"max_size" doc:"upper bound of every size (redrawn above it)"`
}

// SizeDists are the distributions Sizes knows.
var SizeDists = []string{"fixed", "exponential", "uniform", "lognormal"}

// Validate checks the keys, with size the kind's fixed size and limit the
// largest max_size it accepts.
func (d *Sizes) Validate(size, limit Size) error {
	switch {
	case !slices.Contains(SizeDists, d.Dist):
		return &KeyError{Key: "size_dist", Msg: fmt.Sprintf("unknown distribution %q (allowed: %s)", d.Dist, strings.Join(SizeDists, ", "))}
	case d.MaxSize < 1 || d.MaxSize > limit:
		return &KeyError{Key: "max_size", Msg: fmt.Sprintf("%s out of range (1 .. %s)", d.MaxSize, limit)}
	case d.MinSize > d.MaxSize:
		return &KeyError{Key: "min_size", Msg: fmt.Sprintf("%s is above max_size %s", d.MinSize, d.MaxSize)}
	case d.Dist == "fixed" && (size < d.MinSize || size > d.MaxSize):
		return &KeyError{Key: "size", Msg: fmt.Sprintf("%s outside [min_size, max_size] = [%s, %s]", size, d.MinSize, d.MaxSize)}
	case d.Dist == "exponential" && d.Mean < 1:
		return &KeyError{Key: "mean", Msg: "must be at least 1 byte"}
	case d.Dist == "uniform" && (d.Min > d.Max || d.Max < d.MinSize || d.Min > d.MaxSize):
		return &KeyError{Key: "max", Msg: fmt.Sprintf("uniform [%s, %s] must be ordered and meet [min_size, max_size] = [%s, %s]", d.Min, d.Max, d.MinSize, d.MaxSize)}
	case d.Dist == "lognormal" && !(d.Sigma >= 0 && d.Sigma <= 10 && math.Abs(d.Mu) <= 50):
		return &KeyError{Key: "sigma", Msg: fmt.Sprintf("mu = %v, sigma = %v out of range (|mu| <= 50, 0 <= sigma <= 10)", d.Mu, d.Sigma)}
	}
	return nil
}

// Unused are the keys the distribution does not read (for a Resolver):
// fixed reads only the kind's size; exponential mean; uniform min and
// max; lognormal mu and sigma; all but fixed min_size and max_size.
func (d *Sizes) Unused() []string {
	own := map[string][]string{"fixed": {"size"}, "exponential": {"mean"}, "uniform": {"min", "max"}, "lognormal": {"mu", "sigma"}}
	var out []string
	for _, k := range []string{"size", "mean", "min", "max", "mu", "sigma"} {
		if !slices.Contains(own[d.Dist], k) {
			out = append(out, k)
		}
	}
	if d.Dist == "fixed" {
		out = append(out, "min_size", "max_size")
	}
	return out
}

// Draw returns one size of the distribution (size for fixed), redrawn (up
// to a bound, then clamped) until it lies in [min_size, max_size].
func (d *Sizes) Draw(size Size, rng *pio.PCG) int64 {
	lo, hi := float64(d.MinSize), float64(d.MaxSize)
	var x float64
	for try := 0; try < 1000; try++ {
		switch d.Dist {
		case "fixed":
			return int64(size)
		case "exponential":
			x = -float64(d.Mean) * math.Log(1-rng.Float())
		case "uniform":
			x = float64(d.Min) + rng.Float()*float64(d.Max-d.Min+1)
		case "lognormal":
			u1, u2 := 1-rng.Float(), rng.Float()
			z := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
			x = math.Exp(d.Mu + d.Sigma*z)
		}
		x = math.Floor(x)
		if x >= lo && x <= hi {
			return int64(x)
		}
	}
	return int64(math.Min(math.Max(x, lo), hi))
}
