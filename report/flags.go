package report

import (
	"fmt"
	"math"
	"sort"
)

// Flag kinds.
const (
	FlagScaleInversion = "scale_inversion"
	FlagStraggler      = "straggler"
)

// Flag marks an outlier worth a human look: a sweep whose aggregate
// bandwidth or op rate falls as ranks are added (the storage saturated, or
// something contends), or a rank much slower than its peers.
type Flag struct {
	Kind  string `json:"kind"` // FlagScaleInversion or FlagStraggler
	Phase string `json:"phase"`
	Ranks int    `json:"ranks"`          // the phase's rank count
	Rank  *int   `json:"rank,omitempty"` // the straggler; nil for a scale inversion
	// Detail says what was measured, in words a summary can print.
	Detail string `json:"detail"`
}

// FlagOptions tune the outlier rules.
type FlagOptions struct {
	// StragglerFactor k: a rank is a straggler when its busy seconds exceed
	// k × the median of the phase's ranks.
	StragglerFactor float64
	// StragglerMinSeconds: and when it is at least this much slower than
	// the median, so that scheduler jitter on sub-millisecond phases is not
	// reported as a slow node.
	StragglerMinSeconds float64
	// ScaleTolerance: a sweep step is an inversion when the aggregate rate
	// falls below (1 − tolerance) × the best rate seen at fewer ranks.
	ScaleTolerance float64
}

// DefaultFlagOptions are the rules Flags applies.
var DefaultFlagOptions = FlagOptions{StragglerFactor: 1.5, StragglerMinSeconds: 0.010, ScaleTolerance: 0.10}

// Flags finds the outliers of m with DefaultFlagOptions, stores them in
// m.Flags and returns them.
func Flags(m *Manifest) []Flag {
	m.Flags = FlagsWith(m, DefaultFlagOptions)
	return m.Flags
}

// FlagsWith returns the outliers of m under o without modifying m. Only
// phases that passed are judged: a failed phase's numbers are partial.
//
// Scale inversion: within a sweep (several results with the same phase name
// and different rank counts), a rank count whose aggregate rate —
// bytes_per_sec when the phase moves bytes, else ops_per_sec — is below
// (1 − ScaleTolerance) × the best rate at any smaller rank count.
//
// Straggler: a rank whose busy seconds exceed StragglerLimit: both
// StragglerFactor × the median over the phase's ranks and the median plus
// StragglerMinSeconds.
func FlagsWith(m *Manifest, o FlagOptions) []Flag {
	var out []Flag
	sweeps := map[string][]*PhaseResult{}
	var names []string
	for i := range m.Phases {
		p := &m.Phases[i]
		if p.Status != StatusPassed {
			continue
		}
		if _, ok := sweeps[p.Name]; !ok {
			names = append(names, p.Name)
		}
		sweeps[p.Name] = append(sweeps[p.Name], p)
		out = append(out, stragglers(p, o)...)
	}
	for _, name := range names {
		out = append(out, inversions(sweeps[name], o)...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Phase != b.Phase {
			return phaseOrder(m, a.Phase) < phaseOrder(m, b.Phase)
		}
		if a.Ranks != b.Ranks {
			return a.Ranks < b.Ranks
		}
		return a.Kind < b.Kind
	})
	return out
}

func phaseOrder(m *Manifest, name string) int {
	for i, p := range m.Phases {
		if p.Name == name {
			return i
		}
	}
	return len(m.Phases)
}

func stragglers(p *PhaseResult, o FlagOptions) []Flag {
	if len(p.PerRank) < 2 {
		return nil
	}
	secs := make([]float64, len(p.PerRank))
	for i, r := range p.PerRank {
		secs[i] = r.Seconds
	}
	med := median(secs)
	if med <= 0 {
		return nil
	}
	limit := StragglerLimit(med, o)
	var out []Flag
	for _, r := range p.PerRank {
		if r.Seconds > limit {
			rank := r.Rank
			out = append(out, Flag{
				Kind: FlagStraggler, Phase: p.Name, Ranks: p.Ranks, Rank: &rank,
				Detail: fmt.Sprintf("rank %d on %s busy %s = %.1f× the median %s (limit %.3g×)",
					r.Rank, r.Host, FormatSeconds(r.Seconds), r.Seconds/med, FormatSeconds(med), o.StragglerFactor),
			})
		}
	}
	return out
}

// StragglerLimit is the busy time above which a rank is a straggler, given
// the median over the phase's ranks: max(k × median, median + min seconds).
func StragglerLimit(median float64, o FlagOptions) float64 {
	return math.Max(o.StragglerFactor*median, median+o.StragglerMinSeconds)
}

func inversions(results []*PhaseResult, o FlagOptions) []Flag {
	if len(results) < 2 {
		return nil
	}
	rs := append([]*PhaseResult(nil), results...)
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].Ranks < rs[j].Ranks })
	var out []Flag
	check := func(metric string, rate func(*PhaseResult) float64, format func(float64) string) {
		best, bestRanks := 0.0, 0
		for _, p := range rs {
			v := rate(p)
			if bestRanks > 0 && p.Ranks > bestRanks && v < (1-o.ScaleTolerance)*best {
				out = append(out, Flag{
					Kind: FlagScaleInversion, Phase: p.Name, Ranks: p.Ranks,
					Detail: fmt.Sprintf("aggregate %s fell to %s at %d ranks from %s at %d ranks (%+.0f%%)",
						metric, format(v), p.Ranks, format(best), bestRanks, 100*(v/best-1)),
				})
			}
			if v > best {
				best, bestRanks = v, p.Ranks
			}
		}
	}
	// Bandwidth when the phase moves bytes, else the op rate: with a fixed
	// op mix per rank the two move together, so one flag says it.
	moves := false
	for _, p := range rs {
		moves = moves || p.Bytes > 0
	}
	if moves {
		check("bandwidth", func(p *PhaseResult) float64 { return p.BytesPerSec }, formatRate)
	} else {
		check("op rate", func(p *PhaseResult) float64 { return p.OpsPerSec }, func(v float64) string { return formatOps(v) + " ops/s" })
	}
	return out
}

// median of xs (xs is reordered).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// formatRate prints a bandwidth in bytes per second.
func formatRate(v float64) string { return FormatBytes(int64(v)) + "/s" }

// formatOps prints an op rate with three significant figures.
func formatOps(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.3gG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.3gk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
