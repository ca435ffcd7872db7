package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
	"gonum.org/v1/gonum/stat/distuv"
)

// Verdicts of one compared metric.
const (
	VerdictRegression  = "regression"  // worse by more than the threshold and the noise
	VerdictImprovement = "improvement" // better by more than the threshold and the noise
	VerdictNoise       = "noise"       // beyond the threshold, but within the noise
	VerdictSame        = "same"        // within the threshold
)

// DefaultThreshold is the relative change prism compare tolerates (10%).
const DefaultThreshold = 0.10

// Noise sources a row's noise estimate came from.
const (
	NoiseIterations = "iterations" // Welch 95% CI over log per-iteration wall times
	NoiseHistogram  = "histogram"  // 95% CI of the statistic from the op histograms
	NoiseNone       = "none"
)

// Comparison is the result of comparing a new run against a base run.
type Comparison struct {
	Base             RunRef       `json:"base"`
	New              RunRef       `json:"new"`
	ThresholdPercent float64      `json:"threshold_percent"`
	Rows             []CompareRow `json:"rows"`
	// OnlyInBase and OnlyInNew list the phases ("name [k ranks]") that have
	// no counterpart in the other run.
	OnlyInBase   []string `json:"only_in_base,omitempty"`
	OnlyInNew    []string `json:"only_in_new,omitempty"`
	Warnings     []string `json:"warnings,omitempty"`
	Regressions  int      `json:"regressions"`
	Improvements int      `json:"improvements"`
	Noise        int      `json:"noise"`
	Same         int      `json:"same"`
}

// RunRef identifies one side of a comparison.
type RunRef struct {
	Label  string `json:"label"`
	RunID  string `json:"run_id"`
	Plan   string `json:"plan"`
	Status string `json:"status"`
	Host   string `json:"host"`
	FSType string `json:"fs_type"`
}

// CompareRow is one metric of one op type of one phase, in both runs.
type CompareRow struct {
	Phase string `json:"phase"`
	Ranks int    `json:"ranks"`
	// Op is the op type, or "all" for the phase as a whole.
	Op string `json:"op"`
	// Metric is mean_ns, p50_ns, p99_ns, bytes_per_sec, ops_per_sec, or
	// status (a phase that passed in one run and not in the other).
	Metric        string  `json:"metric"`
	Base          float64 `json:"base"`
	New           float64 `json:"new"`
	ChangePercent float64 `json:"change_percent"`
	// NoisePercent is the half-width of the 95% confidence interval of
	// ln(new/base), as a percentage (e^noise − 1), from NoiseFrom.
	NoisePercent float64 `json:"noise_percent"`
	NoiseFrom    string  `json:"noise_from"`
	Verdict      string  `json:"verdict"`
	Note         string  `json:"note,omitempty"`
}

// CompareOptions tune Compare.
type CompareOptions struct {
	// Threshold is the relative change below which a metric is "same"
	// (0.10 = 10%). Zero means DefaultThreshold.
	Threshold float64
	// BaseLabel and NewLabel name the runs in the output (default: run id).
	BaseLabel, NewLabel string
}

// Regressed reports whether any metric regressed beyond the threshold and
// the noise.
func (c *Comparison) Regressed() bool { return c.Regressions > 0 }

// Compare matches the phases of base and new by name and rank count and
// compares, for each op type (and the phase as a whole when it has several):
// mean, p50 and p99 latency (lower is better), bytes_per_sec and
// ops_per_sec (higher is better).
//
// The rule. Let change = new/base − 1, and noise the half-width of the 95%
// confidence interval of ln(new/base) — a log ratio, so that a latency and
// the rate it implies are equally significant and the interval is
// symmetric — taken as the larger of
//
//   - iterations: Welch's t interval for the difference of the two runs'
//     mean log per-iteration wall time, with Welch–Satterthwaite degrees of
//     freedom. An iteration repeats the same fixed work, so the spread of
//     its wall is the run-to-run noise of every metric of the phase. With
//     ≥ 2 iterations on one side only, that side's variance stands for both
//     (df = n − 1); with one iteration on each side there is none.
//   - histogram: the sampling error of the statistic itself, from the op
//     histograms, by the delta method: for the mean (and the rates, fixed
//     work over the mean latency) 1.96·√(se²/m² + se'²/m'²), se = sd/√n;
//     for a percentile q the distribution-free order-statistic interval of
//     each run (the values at ranks n·q ± 1.96·√(n·q·(1−q))), half-width h,
//     combined as √((h/v)² + (h'/v')²); unbounded when a rank falls outside
//     the sample (a p99 from fewer than ~400 ops), so that it is never
//     significant.
//
// A metric is "same" when |change| ≤ threshold; "noise" when it exceeds the
// threshold but |ln(new/base)| ≤ noise; otherwise "regression" when it got
// worse (latency up, bandwidth or op rate down) and "improvement" when it
// got better. NoisePercent reports the noise as e^noise − 1. A phase that
// passed in base and failed (or was skipped or interrupted) in new is a
// regression of its status; its partial numbers are not compared.
//
// With a single iteration per run only the histograms' sampling error is
// known, which underestimates run-to-run noise: compare runs with
// iterations ≥ 3 for a verdict that separates storage changes from chance.
func Compare(base, new *Manifest, o CompareOptions) *Comparison {
	if o.Threshold <= 0 {
		o.Threshold = DefaultThreshold
	}
	c := &Comparison{
		Base:             runRef(base, o.BaseLabel),
		New:              runRef(new, o.NewLabel),
		ThresholdPercent: 100 * o.Threshold,
	}
	type key struct {
		name  string
		ranks int
	}
	newIdx := map[key]*PhaseResult{}
	for i := range new.Phases {
		p := &new.Phases[i]
		newIdx[key{p.Name, p.Ranks}] = p
	}
	matched := map[key]bool{}
	for i := range base.Phases {
		b := &base.Phases[i]
		k := key{b.Name, b.Ranks}
		n, ok := newIdx[k]
		if !ok {
			c.OnlyInBase = append(c.OnlyInBase, fmt.Sprintf("%s [%d ranks]", b.Name, b.Ranks))
			continue
		}
		matched[k] = true
		if b.Kind != n.Kind {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s [%d ranks]: kind %s in base, %s in new", b.Name, b.Ranks, b.Kind, n.Kind))
		} else if !sameParams(b.Params, n.Params) {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s [%d ranks]: parameters differ between the runs", b.Name, b.Ranks))
		}
		c.Rows = append(c.Rows, comparePhase(b, n, o.Threshold)...)
	}
	for _, p := range new.Phases {
		if !matched[key{p.Name, p.Ranks}] {
			c.OnlyInNew = append(c.OnlyInNew, fmt.Sprintf("%s [%d ranks]", p.Name, p.Ranks))
		}
	}
	for _, r := range c.Rows {
		switch r.Verdict {
		case VerdictRegression:
			c.Regressions++
		case VerdictImprovement:
			c.Improvements++
		case VerdictNoise:
			c.Noise++
		default:
			c.Same++
		}
	}
	return c
}

func runRef(m *Manifest, label string) RunRef {
	if label == "" {
		label = m.RunID
	}
	return RunRef{Label: label, RunID: m.RunID, Plan: PlanName(m), Status: m.Status, Host: m.Host.Hostname, FSType: m.Host.FSType}
}

func sameParams(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return reflect.DeepEqual(ja, jb)
}

// metric describes one compared quantity.
type metric struct {
	name         string
	higherBetter bool
	quantile     float64 // 0 for the mean and the rates
}

var compareMetrics = []metric{
	{name: "mean_ns"},
	{name: "p50_ns", quantile: 50},
	{name: "p99_ns", quantile: 99},
	{name: "bytes_per_sec", higherBetter: true},
	{name: "ops_per_sec", higherBetter: true},
}

func comparePhase(b, n *PhaseResult, threshold float64) []CompareRow {
	if b.Status != StatusPassed || n.Status != StatusPassed {
		row := CompareRow{Phase: b.Name, Ranks: b.Ranks, Op: "all", Metric: "status", NoiseFrom: NoiseNone, Verdict: VerdictSame,
			Note: fmt.Sprintf("%s in base, %s in new", b.Status, n.Status)}
		switch {
		case b.Status == StatusPassed:
			row.Verdict = VerdictRegression
			if n.Error != "" {
				row.Note += ": " + n.Error
			}
		case n.Status == StatusPassed:
			row.Verdict = VerdictImprovement
		}
		return []CompareRow{row}
	}
	var rows []CompareRow
	ops := sortedOps(b.OpsByType)
	if len(ops) != 1 || len(n.OpsByType) != 1 {
		ops = append([]string{"all"}, ops...)
	}
	for _, op := range ops {
		bs, bh, ok1 := opView(b, op)
		ns, nh, ok2 := opView(n, op)
		if !ok1 || !ok2 {
			continue
		}
		for _, mt := range compareMetrics {
			bv, nv := metricValue(bs, mt), metricValue(ns, mt)
			if bv == 0 && nv == 0 {
				continue // e.g. bandwidth of a phase that moves no bytes
			}
			row := CompareRow{Phase: b.Name, Ranks: b.Ranks, Op: op, Metric: mt.name, Base: bv, New: nv, NoiseFrom: NoiseNone}
			if bv == 0 {
				row.Verdict = VerdictSame
				row.Note = "base is zero: no relative change"
				rows = append(rows, row)
				continue
			}
			change := (nv - bv) / bv
			row.ChangePercent = 100 * change
			noise, from := iterationNoise(b.Iterations, n.Iterations)
			if h, ok := histogramNoise(bh, nh, mt); ok && (h > noise || from == NoiseNone) {
				noise, from = h, NoiseHistogram
			}
			// ln(1e4): a noise beyond ±1,000,000% says nothing more, and
			// must stay finite for JSON.
			row.NoisePercent, row.NoiseFrom = 100*math.Expm1(math.Min(noise, math.Log(1e4))), from
			row.Verdict = verdict(change, nv/bv, noise, threshold, mt.higherBetter)
			rows = append(rows, row)
		}
	}
	return rows
}

// verdict applies the rule documented on Compare: change is the relative
// change, ratio = new/base, noise the half-width of the 95% CI of
// ln(ratio).
func verdict(change, ratio, noise, threshold float64, higherBetter bool) string {
	switch {
	case math.Abs(change) <= threshold:
		return VerdictSame
	case ratio > 0 && math.Abs(math.Log(ratio)) <= noise:
		return VerdictNoise // (a drop to zero is never noise)
	case (change > 0) == higherBetter:
		return VerdictImprovement
	}
	return VerdictRegression
}

// opView returns the stats and the histogram of one op type, or of the
// whole phase for "all" (the histogram being the merge of every op's).
func opView(p *PhaseResult, op string) (OpStats, *hdr.Histogram, bool) {
	if op == "all" {
		st := OpStats{Ops: p.Ops, Errors: p.Errors, Bytes: p.Bytes, OpsPerSec: p.OpsPerSec, BytesPerSec: p.BytesPerSec, Latency: p.Latency}
		var all *hdr.Histogram
		for _, name := range sortedOps(p.Histograms) {
			h, err := DecodeHistogram(p.Histograms[name])
			if err != nil {
				return st, nil, true
			}
			if all == nil {
				all = NewHistogram()
			}
			all.Merge(h)
		}
		return st, all, true
	}
	st, ok := p.OpsByType[op]
	if !ok {
		return st, nil, false
	}
	var h *hdr.Histogram
	if enc, ok := p.Histograms[op]; ok {
		h, _ = DecodeHistogram(enc)
	}
	return st, h, true
}

func metricValue(s OpStats, m metric) float64 {
	switch m.name {
	case "mean_ns":
		return s.Latency.Mean
	case "p50_ns":
		return float64(s.Latency.P50)
	case "p99_ns":
		return float64(s.Latency.P99)
	case "bytes_per_sec":
		return s.BytesPerSec
	case "ops_per_sec":
		return s.OpsPerSec
	}
	return 0
}

// iterationNoise is the half-width of the 95% CI of the difference of the
// two runs' mean log per-iteration wall (Welch's t): the run-to-run noise
// of ln(new/base) for every metric of the phase (a rate is fixed work over
// a wall, so its log differs only in sign).
func iterationNoise(base, new []float64) (float64, string) {
	hw, _, ok := WelchInterval(logs(base), logs(new), 0.95)
	if !ok {
		return 0, NoiseNone
	}
	return hw, NoiseIterations
}

func logs(walls []float64) []float64 {
	out := make([]float64, 0, len(walls))
	for _, w := range walls {
		if w > 0 {
			out = append(out, math.Log(w))
		}
	}
	return out
}

// WelchInterval returns the half-width of the two-sided confidence interval
// (at level, e.g. 0.95) of mean(ys) − mean(xs) by Welch's t procedure with
// Welch–Satterthwaite degrees of freedom. With ≥ 2 samples on one side only,
// that side's variance stands for both. ok is false when neither side has 2
// samples.
func WelchInterval(xs, ys []float64, level float64) (halfWidth, df float64, ok bool) {
	nx, ny := float64(len(xs)), float64(len(ys))
	switch {
	case len(xs) >= 2 && len(ys) >= 2:
		vx, vy := variance(xs)/nx, variance(ys)/ny
		se2 := vx + vy
		if se2 == 0 {
			return 0, nx + ny - 2, true
		}
		df = se2 * se2 / (vx*vx/(nx-1) + vy*vy/(ny-1))
		return tQuantile(level, df) * math.Sqrt(se2), df, true
	case len(xs) >= 2 && len(ys) == 1, len(ys) >= 2 && len(xs) == 1:
		s := xs
		if len(ys) > len(xs) {
			s = ys
		}
		df = float64(len(s) - 1)
		return tQuantile(level, df) * math.Sqrt(variance(s)*(1/nx+1/ny)), df, true
	}
	return 0, 0, false
}

// tQuantile is the two-sided critical value of Student's t at level.
func tQuantile(level, df float64) float64 {
	return distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}.Quantile(1 - (1-level)/2)
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// variance is the unbiased sample variance.
func variance(xs []float64) float64 {
	m := mean(xs)
	var s float64
	for _, x := range xs {
		s += (x - m) * (x - m)
	}
	return s / float64(len(xs)-1)
}

// histogramNoise is the half-width of the 95% CI of ln(new/base) of a
// statistic from the two runs' histograms, by the delta method
// (var ln X ≈ var X / X²): for the mean (and the rates, which are fixed work
// over the mean latency), 1.96·√(se²/m² + se'²/m'²) with se = sd/√n; for a
// percentile, √((h/v)² + (h'/v')²) with h the half-width of its
// order-statistic interval.
func histogramNoise(b, n *hdr.Histogram, m metric) (float64, bool) {
	if b == nil || n == nil || b.TotalCount() == 0 || n.TotalCount() == 0 {
		return 0, false
	}
	if m.quantile == 0 {
		bm, nm := b.Mean(), n.Mean()
		if bm <= 0 || nm <= 0 {
			return 0, false
		}
		rb := b.StdDev() / bm / math.Sqrt(float64(b.TotalCount()))
		rn := n.StdDev() / nm / math.Sqrt(float64(n.TotalCount()))
		return 1.96 * math.Hypot(rb, rn), true
	}
	bv, nv := float64(b.ValueAtQuantile(m.quantile)), float64(n.ValueAtQuantile(m.quantile))
	if bv <= 0 || nv <= 0 {
		return 0, false
	}
	return math.Hypot(QuantileInterval(b, m.quantile)/bv, QuantileInterval(n, m.quantile)/nv), true
}

// QuantileInterval returns the half-width, in the histogram's unit, of the
// distribution-free 95% confidence interval of the q-th percentile (0–100):
// the values at ranks n·q ± 1.96·√(n·q·(1−q)) of the n recorded values. It
// is +Inf when a bound falls outside the sample — too few values to bound
// that percentile (p99 needs about 400) — so a change in it is never called
// significant.
func QuantileInterval(h *hdr.Histogram, q float64) float64 {
	n := float64(h.TotalCount())
	if n == 0 {
		return math.Inf(1)
	}
	p := q / 100
	d := 1.96 * math.Sqrt(p*(1-p)/n)
	if p-d < 0 || p+d > 1 {
		return math.Inf(1)
	}
	return float64(h.ValueAtQuantile(100*(p+d))-h.ValueAtQuantile(100*(p-d))) / 2
}

// WriteText prints the comparison as a table, then the totals.
func (c *Comparison) WriteText(w io.Writer) error {
	for _, r := range []struct {
		side string
		ref  RunRef
	}{{"base", c.Base}, {"new ", c.New}} {
		id := r.ref.RunID
		if r.ref.Label != r.ref.RunID {
			id = r.ref.Label + " (run " + r.ref.RunID + ")"
		}
		fmt.Fprintf(w, "%s %s  plan %s  %s  %s on %s\n", r.side, id, r.ref.Plan, r.ref.Status, r.ref.FSType, r.ref.Host)
	}
	fmt.Fprintf(w, "threshold %g%%; noise = 95%% CI of the change (Welch over iteration walls, or the histograms)\n\n", c.ThresholdPercent)
	t := newTable("lrllrrrrll", "phase", "ranks", "op", "metric", "base", "new", "change", "noise", "verdict", "")
	for _, r := range c.Rows {
		change, noise := fmt.Sprintf("%+.1f%%", r.ChangePercent), fmt.Sprintf("±%.1f%%", r.NoisePercent)
		switch {
		case r.NoiseFrom == NoiseNone:
			noise = "-"
		case r.NoisePercent >= 1e4:
			noise = "±>10000%"
		}
		if r.Metric == "status" || r.Base == 0 {
			change = "-"
		}
		note := r.Note
		if r.Verdict == VerdictRegression {
			note = strings.TrimSpace("<< " + note)
		}
		t.add(r.Phase, fmt.Sprint(r.Ranks), r.Op, r.Metric, formatMetric(r.Metric, r.Base), formatMetric(r.Metric, r.New), change, noise, r.Verdict, note)
	}
	if err := t.write(w); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%d regressions, %d improvements, %d noise, %d same\n", c.Regressions, c.Improvements, c.Noise, c.Same)
	if len(c.OnlyInBase) > 0 {
		fmt.Fprintf(w, "only in base: %s\n", strings.Join(c.OnlyInBase, ", "))
	}
	if len(c.OnlyInNew) > 0 {
		fmt.Fprintf(w, "only in new: %s\n", strings.Join(c.OnlyInNew, ", "))
	}
	for _, warn := range c.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	return nil
}

func formatMetric(name string, v float64) string {
	switch {
	case name == "status":
		return "-"
	case strings.HasSuffix(name, "_ns"):
		return FormatNs(int64(math.Round(v)))
	case name == "bytes_per_sec":
		return formatRate(v)
	}
	return formatOps(v)
}
