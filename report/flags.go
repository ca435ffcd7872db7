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
	FlagImbalance      = "imbalance"
)

// Flag marks an outlier worth a human look: a sweep whose aggregate
// bandwidth or op rate falls as ranks are added (the storage saturated, or
// something contends), a rank (or host) busy much longer than its peers,
// or one that moved far fewer bytes or ops than they did (in a time-based
// phase every rank is busy as long, so only the work shows a slow one).
type Flag struct {
	Kind  string `json:"kind"` // FlagScaleInversion, FlagStraggler or FlagImbalance
	Phase string `json:"phase"`
	Ranks int    `json:"ranks"`          // the phase's rank count
	Rank  *int   `json:"rank,omitempty"` // the rank; nil for a scale inversion or a host
	// Host is the rank's host, or the host flagged as a whole (Rank nil).
	Host string `json:"host,omitempty"`
	// Metric is what was compared: "busy_seconds", "bytes" or "ops" (for
	// a host: its ranks' mean); Value against Median over the phase's
	// ranks (hosts).
	Metric string  `json:"metric,omitempty"`
	Value  float64 `json:"value,omitempty"`
	Median float64 `json:"median,omitempty"`
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
	// BalanceTolerance t: a rank (a host) whose bytes or ops fall below
	// (1 − t) × the median is flagged as imbalance.
	BalanceTolerance float64
	// ScaleTolerance: a sweep step is an inversion when the aggregate rate
	// falls below (1 − tolerance) × the best rate seen at fewer ranks.
	ScaleTolerance float64
}

// DefaultFlagOptions are the rules Flags applies.
// ([plan] straggler_tolerance 0.2: busy 20% above the median, bytes or
// ops 20% below it).
var DefaultFlagOptions = TolerantFlagOptions(DefaultStragglerTolerance)

// DefaultStragglerTolerance is [plan] straggler_tolerance's default.
const DefaultStragglerTolerance = 0.2

// TolerantFlagOptions are the default rules with straggler tolerance t.
func TolerantFlagOptions(t float64) FlagOptions {
	return FlagOptions{StragglerFactor: 1 + t, StragglerMinSeconds: 0.010, BalanceTolerance: t, ScaleTolerance: 0.10}
}

// FlagOptionsOf are the rules m was judged by: its straggler tolerance, or
// the default for a manifest that does not record one.
func FlagOptionsOf(m *Manifest) FlagOptions {
	if m.StragglerTolerance > 0 {
		return TolerantFlagOptions(m.StragglerTolerance)
	}
	return DefaultFlagOptions
}

// Flags finds the outliers of m with FlagOptionsOf(m), stores them in
// m.Flags and returns them.
func Flags(m *Manifest) []Flag {
	m.Flags = FlagsWith(m, FlagOptionsOf(m))
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
//
// Imbalance: a rank whose bytes (or ops) fall below (1 − BalanceTolerance)
// × the median over the phase's ranks.
//
// With ranks on several hosts, the same rules per host, on the mean over
// each host's ranks (so hosts of different rank counts compare).
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

// unit is one rank, or one host's ranks averaged, as the balance rules
// see it.
type unit struct {
	rank             *int
	host             string
	secs, bytes, ops float64
}

func stragglers(p *PhaseResult, o FlagOptions) []Flag {
	if p.PerRank.Len() < 2 {
		return nil
	}
	ranks := make([]unit, p.PerRank.Len())
	var hosts []unit
	at := map[string]int{}
	n := map[string]float64{}
	for i, r := range p.PerRank.All() {
		rank := r.Rank
		ranks[i] = unit{rank: &rank, host: r.Host, secs: r.Seconds, bytes: float64(r.Bytes), ops: float64(r.Ops)}
		j, ok := at[r.Host]
		if !ok {
			j = len(hosts)
			at[r.Host] = j
			hosts = append(hosts, unit{host: r.Host})
		}
		hosts[j].secs += r.Seconds
		hosts[j].bytes += float64(r.Bytes)
		hosts[j].ops += float64(r.Ops)
		n[r.Host]++
	}
	out := balance(p, ranks, o)
	if len(hosts) > 1 {
		for j := range hosts {
			k := n[hosts[j].host]
			hosts[j].secs, hosts[j].bytes, hosts[j].ops = hosts[j].secs/k, hosts[j].bytes/k, hosts[j].ops/k
		}
		out = append(out, balance(p, hosts, o)...)
	}
	return out
}

// balance applies the straggler and imbalance rules to units (the
// phase's ranks, or its hosts).
func balance(p *PhaseResult, units []unit, o FlagOptions) []Flag {
	var out []Flag
	who := func(u unit) string {
		if u.rank != nil {
			return fmt.Sprintf("rank %d on %s", *u.rank, u.host)
		}
		return fmt.Sprintf("host %s (mean of its ranks)", u.host)
	}
	flag := func(kind, metric string, u unit, v, med float64, detail string) {
		out = append(out, Flag{Kind: kind, Phase: p.Name, Ranks: p.Ranks, Rank: u.rank, Host: u.host,
			Metric: metric, Value: v, Median: med, Detail: detail})
	}
	col := func(f func(unit) float64) float64 {
		v := make([]float64, len(units))
		for i, u := range units {
			v[i] = f(u)
		}
		return Median(v)
	}
	if med := col(func(u unit) float64 { return u.secs }); med > 0 {
		limit := StragglerLimit(med, o)
		for _, u := range units {
			if u.secs > limit {
				flag(FlagStraggler, "busy_seconds", u, u.secs, med, fmt.Sprintf("%s busy %s = %.2f× the median %s (limit %.3g×)",
					who(u), FormatSeconds(u.secs), u.secs/med, FormatSeconds(med), o.StragglerFactor))
			}
		}
	}
	if o.BalanceTolerance <= 0 {
		return out
	}
	if med := col(func(u unit) float64 { return u.bytes }); med > 0 {
		for _, u := range units {
			if u.bytes < (1-o.BalanceTolerance)*med {
				flag(FlagImbalance, "bytes", u, u.bytes, med, fmt.Sprintf("%s moved %s = %.0f%% of the median %s (limit -%.0f%%)",
					who(u), FormatBytes(int64(u.bytes)), 100*u.bytes/med, FormatBytes(int64(med)), 100*o.BalanceTolerance))
			}
		}
	}
	if med := col(func(u unit) float64 { return u.ops }); med > 0 {
		for _, u := range units {
			if u.ops < (1-o.BalanceTolerance)*med {
				flag(FlagImbalance, "ops", u, u.ops, med, fmt.Sprintf("%s did %.0f ops = %.0f%% of the median %.0f (limit -%.0f%%)",
					who(u), u.ops, 100*u.ops/med, med, 100*o.BalanceTolerance))
			}
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
