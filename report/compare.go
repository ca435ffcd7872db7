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
	// VerdictUntested: beyond the threshold, but with one base run and one
	// iteration each there is no estimate of run-to-run noise to judge by.
	VerdictUntested = "untested"
	// VerdictNotComparable: the phase's kind or parameters differ.
	VerdictNotComparable = "not_comparable"
)

// DefaultThreshold is the relative change prism compare tolerates (10%).
const DefaultThreshold = 0.10

// HistoryFalseAlarm is the chance, over all the rows of one comparison
// against run history, of calling a regression (or an improvement) between
// runs of the same storage when the runs' spread is what the history
// shows: each of the k rows judged by run history gets the prediction
// interval at level 1 − HistoryFalseAlarm/k (Bonferroni), because a
// comparison tests many rows at once and a shared machine's run-to-run
// spread is heavy-tailed (with 95% per row, a 5-run history of identical
// runs on a loaded 2-core machine flagged one comparison in six).
const HistoryFalseAlarm = 0.01

// Noise sources a row's noise estimate came from.
const (
	NoiseIterations = "iterations" // Welch 95% CI over log per-iteration wall times
	NoiseHistogram  = "histogram"  // 95% CI of the statistic from the op histograms
	// NoiseRuns: the t prediction interval (at 1 − HistoryFalseAlarm/k
	// for k such rows) of a new run's log value from the spread of the
	// base runs' (two or more).
	NoiseRuns = "runs"
	NoiseNone = "none"
)

// Comparison is the result of comparing a new run against a base run.
type Comparison struct {
	Base RunRef `json:"base"`
	// Bases are every base run, oldest first as given (Base is the first).
	Bases            []RunRef     `json:"bases"`
	New              RunRef       `json:"new"`
	ThresholdPercent float64      `json:"threshold_percent"`
	Rows             []CompareRow `json:"rows"`
	// OnlyInBase and OnlyInNew list the phases ("name [k ranks]") that have
	// no counterpart in the other run.
	OnlyInBase    []string `json:"only_in_base,omitempty"`
	OnlyInNew     []string `json:"only_in_new,omitempty"`
	Warnings      []string `json:"warnings,omitempty"`
	Regressions   int      `json:"regressions"`
	Improvements  int      `json:"improvements"`
	Noise         int      `json:"noise"`
	Same          int      `json:"same"`
	Untested      int      `json:"untested"`
	NotComparable int      `json:"not_comparable"`
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
	Metric string `json:"metric"`
	// Base is the base value: with several base runs, their geometric
	// mean (BaseValues holds each run's, BaseRuns how many).
	Base          float64   `json:"base"`
	BaseValues    []float64 `json:"base_values,omitempty"`
	BaseRuns      int       `json:"base_runs"`
	New           float64   `json:"new"`
	ChangePercent float64   `json:"change_percent"`
	// NoisePercent is the half-width of the 95% confidence interval of
	// ln(new/base), as a percentage (e^noise − 1), from NoiseFrom.
	NoisePercent float64 `json:"noise_percent"`
	NoiseFrom    string  `json:"noise_from"`
	// IntervalLowPercent and IntervalHighPercent bound the change by the
	// noise, on the log scale and so asymmetric: e^(ln(new/base) ∓ noise) − 1.
	// The change is noise when the interval holds 0.
	IntervalLowPercent  float64 `json:"interval_low_percent"`
	IntervalHighPercent float64 `json:"interval_high_percent"`
	Verdict             string  `json:"verdict"`
	Note                string  `json:"note,omitempty"`
	// LevelPercent is the coverage of the row's interval when it is a
	// prediction interval over run history (1 − HistoryFalseAlarm/k).
	LevelPercent float64 `json:"level_percent,omitempty"`

	// Set by historyRow for CompareHistory to finish once it knows how
	// many rows it judges: s·√(1 + 1/m), m, the direction.
	spread       float64
	runs         int
	higherBetter bool
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
	return CompareHistory([]*Manifest{base}, new, o)
}

// Comparable says why base and new cannot be compared (different plans,
// schema versions or rank counts), or nil.
func Comparable(base, new *Manifest) error {
	switch {
	case PlanName(base) != PlanName(new):
		return fmt.Errorf("plan %q, the new run's is %q: not comparable", PlanName(base), PlanName(new))
	case base.SchemaVersion != new.SchemaVersion:
		return fmt.Errorf("schema_version %d, the new run's is %d: not comparable", base.SchemaVersion, new.SchemaVersion)
	case base.Comm.Ranks != new.Comm.Ranks:
		return fmt.Errorf("%d ranks, the new run has %d: not comparable", base.Comm.Ranks, new.Comm.Ranks)
	}
	return nil
}

// CompareHistory compares new against a history of base runs of the same
// plan (Comparable). With two or more bases, a metric's noise is the
// spread between runs: the base runs' log values give a mean μ and a
// standard deviation s, and the new run's log value is noise when it lies
// in the t prediction interval μ ± t(1 − α/2, m−1)·s·√(1 + 1/m), with
// α = HistoryFalseAlarm/k for the k rows so judged (the change is against
// the geometric mean e^μ). With one base, the noise is
// that of Compare's rule (iterations, histograms), with a warning that it
// misses run-to-run variance; with one base and one iteration on each side
// there is no noise estimate, and a change beyond the threshold is
// "untested", never a regression.
func CompareHistory(bases []*Manifest, new *Manifest, o CompareOptions) *Comparison {
	if o.Threshold <= 0 {
		o.Threshold = DefaultThreshold
	}
	c := &Comparison{
		Base:             runRef(bases[0], o.BaseLabel),
		New:              runRef(new, o.NewLabel),
		ThresholdPercent: 100 * o.Threshold,
	}
	for i, b := range bases {
		label := ""
		if i == 0 {
			label = o.BaseLabel
		}
		c.Bases = append(c.Bases, runRef(b, label))
	}
	type key struct {
		name  string
		ranks int
	}
	inNew := map[key]bool{}
	for i := range new.Phases {
		n := &new.Phases[i]
		k := key{n.Name, n.Ranks}
		inNew[k] = true
		var matched []*PhaseResult
		for _, b := range bases {
			for j := range b.Phases {
				if bp := &b.Phases[j]; bp.Name == n.Name && bp.Ranks == n.Ranks {
					matched = append(matched, bp)
					break
				}
			}
		}
		if len(matched) == 0 {
			c.OnlyInNew = append(c.OnlyInNew, fmt.Sprintf("%s [%d ranks]", n.Name, n.Ranks))
			continue
		}
		c.Rows = append(c.Rows, compareHistoryPhase(matched, n, o.Threshold)...)
	}
	seen := map[key]bool{}
	for _, b := range bases {
		for _, p := range b.Phases {
			if k := (key{p.Name, p.Ranks}); !inNew[k] && !seen[k] {
				seen[k] = true
				c.OnlyInBase = append(c.OnlyInBase, fmt.Sprintf("%s [%d ranks]", p.Name, p.Ranks))
			}
		}
	}
	finishHistory(c.Rows, o.Threshold)
	var fromIters, untested bool
	for _, r := range c.Rows {
		fromIters = fromIters || (r.BaseRuns == 1 && r.NoiseFrom == NoiseIterations)
		untested = untested || (r.BaseRuns == 1 && r.Verdict == VerdictUntested)
		switch r.Verdict {
		case VerdictRegression:
			c.Regressions++
		case VerdictImprovement:
			c.Improvements++
		case VerdictNoise:
			c.Noise++
		case VerdictUntested:
			c.Untested++
		case VerdictNotComparable:
			c.NotComparable++
		default:
			c.Same++
		}
	}
	if len(bases) == 1 && fromIters {
		c.Warnings = append(c.Warnings, "one base run: the noise comes from the iterations inside each run, which misses run-to-run variance (filesystem state, caches, other tenants); give several base runs (prism compare b1.json b2.json ... new.json, or --base-dir) for a verdict over run history")
	}
	if untested {
		c.Warnings = append(c.Warnings, "one base run and one iteration: no estimate of run-to-run noise, so no noise-based verdict — a change beyond the threshold is \"untested\"; give several base runs or iterations >= 3")
	}
	return c
}

// compareHistoryPhase compares one phase of new with the same phase of
// every base run that has it.
func compareHistoryPhase(bases []*PhaseResult, n *PhaseResult, threshold float64) []CompareRow {
	var passed []*PhaseResult
	for _, b := range bases {
		if b.Status == StatusPassed {
			passed = append(passed, b)
		}
	}
	if len(passed) == 0 || n.Status != StatusPassed {
		b := bases[len(bases)-1]
		if len(passed) > 0 {
			b = passed[len(passed)-1]
		}
		return comparePhase(b, n, threshold)
	}
	for _, b := range passed {
		if b.Kind != n.Kind || !sameParams(b.Params, n.Params) {
			what := "parameters differ"
			if b.Kind != n.Kind {
				what = fmt.Sprintf("kind %s in a base run, %s in new", b.Kind, n.Kind)
			}
			return []CompareRow{{Phase: n.Name, Ranks: n.Ranks, Op: "all", Metric: "params", BaseRuns: len(passed), NoiseFrom: NoiseNone,
				Verdict: VerdictNotComparable, Note: what + ": not comparable"}}
		}
	}
	if len(passed) == 1 {
		return comparePhase(passed[0], n, threshold)
	}
	var rows []CompareRow
	ops := sortedOps(passed[0].OpsByType)
	if len(ops) != 1 || len(n.OpsByType) != 1 {
		ops = append([]string{"all"}, ops...)
	}
	for _, op := range ops {
		ns, _, ok := opView(n, op)
		if !ok {
			continue
		}
		var views []OpStats
		for _, b := range passed {
			if bs, _, ok := opView(b, op); ok {
				views = append(views, bs)
			}
		}
		for _, mt := range compareMetrics {
			bv := make([]float64, len(views))
			for i, v := range views {
				bv[i] = metricValue(v, mt)
			}
			if row, ok := historyRow(n, op, mt.name, bv, metricValue(ns, mt), mt.higherBetter, threshold); ok {
				rows = append(rows, row)
			}
		}
	}
	for _, pm := range phaseMetricsOf(n) {
		var bv []float64
		for _, b := range passed {
			if v, ok := phaseMetricValue(b, pm.name); ok {
				bv = append(bv, v)
			}
		}
		nv, _ := phaseMetricValue(n, pm.name)
		if row, ok := historyRow(n, "metrics", pm.name, bv, nv, pm.higherBetter, threshold); ok {
			rows = append(rows, row)
		}
	}
	return rows
}

// historyRow is one metric against two or more base runs' values (the t
// prediction interval of CompareHistory).
func historyRow(n *PhaseResult, op, name string, bv []float64, nv float64, higherBetter bool, threshold float64) (CompareRow, bool) {
	var ls []float64
	for _, v := range bv {
		if v > 0 {
			ls = append(ls, math.Log(v))
		}
	}
	if len(ls) == 0 && nv == 0 {
		return CompareRow{}, false
	}
	row := CompareRow{Phase: n.Name, Ranks: n.Ranks, Op: op, Metric: name, New: nv, BaseValues: bv, BaseRuns: len(bv), NoiseFrom: NoiseNone}
	if len(ls) < len(bv) || len(ls) == 0 {
		row.Verdict, row.Note = VerdictSame, "a base run's value is zero: no relative change"
		return row, true
	}
	mu := Mean(ls)
	row.Base = math.Exp(mu)
	change := nv/row.Base - 1
	row.ChangePercent = 100 * change
	m := float64(len(ls))
	row.runs, row.higherBetter = len(ls), higherBetter
	if len(ls) >= 2 {
		row.spread = math.Sqrt(variance(ls)) * math.Sqrt(1+1/m)
	}
	// The interval and the verdict wait for the row count (finishHistory).
	return row, true
}

// finishHistory gives every row judged by run history its prediction
// interval at level 1 − HistoryFalseAlarm/k, k being how many there are,
// and its verdict.
func finishHistory(rows []CompareRow, threshold float64) {
	k := 0
	for _, r := range rows {
		if r.runs >= 2 && r.Verdict == "" {
			k++
		}
	}
	level := 1 - HistoryFalseAlarm/math.Max(1, float64(k))
	for i := range rows {
		r := &rows[i]
		if r.Verdict != "" {
			continue
		}
		if r.runs < 2 {
			// One base run had the op: no spread to judge by.
			r.Verdict = untestedVerdict(r.New/r.Base-1, threshold)
			continue
		}
		noise := tQuantile(level, float64(r.runs-1)) * r.spread
		ratio := r.New / r.Base
		setNoise(r, noise, NoiseRuns, ratio)
		r.LevelPercent = 100 * level
		r.Verdict = verdict(ratio-1, ratio, noise, threshold, r.higherBetter)
	}
}

// setNoise records a noise (half-width on the log scale) and the interval
// of the change it gives.
func setNoise(row *CompareRow, noise float64, from string, ratio float64) {
	// ln(1e4): a noise beyond ±1,000,000% says nothing more, and must stay
	// finite for JSON.
	noise = math.Min(noise, math.Log(1e4))
	row.NoisePercent, row.NoiseFrom = 100*math.Expm1(noise), from
	if ratio > 0 {
		l := math.Log(ratio)
		row.IntervalLowPercent, row.IntervalHighPercent = 100*math.Expm1(l-noise), 100*math.Expm1(l+noise)
	}
}

// phaseMetric is one of a phase's own figures that compare knows the
// direction of: MLPerf's (AU, samples/s, checkpoint save and load duration
// and GiB/s) and fio's own rates.
type phaseMetric struct {
	name         string
	higherBetter bool
}

var phaseMetrics = []phaseMetric{
	{"au_percent", true}, {"samples_per_sec", true}, {"io_mib_per_sec", true},
	{"save_seconds", false}, {"save_gib_per_sec", true}, {"load_seconds", false}, {"load_gib_per_sec", true},
	{"fio_bytes_per_sec", true}, {"fio_iops", true},
}

// phaseMetricsOf are the phase metrics p has.
func phaseMetricsOf(p *PhaseResult) []phaseMetric {
	var out []phaseMetric
	for _, pm := range phaseMetrics {
		if _, ok := phaseMetricValue(p, pm.name); ok {
			out = append(out, pm)
		}
	}
	return out
}

// phaseMetricValue reads a phase metric; the checkpoint figures are
// derived as MLPerf Storage prints them: the mean duration of the saves
// (loads) and the mean of checkpoint_bytes / duration in GiB/s.
func phaseMetricValue(p *PhaseResult, name string) (float64, bool) {
	m := p.Metrics
	if m == nil {
		return 0, false
	}
	for _, op := range []string{"save", "load"} {
		if name != op+"_seconds" && name != op+"_gib_per_sec" {
			continue
		}
		// metric_arrays holds the durations; a manifest written before it
		// has them as <op>_ckpt_NNN_seconds metrics.
		durs := p.MetricArrays[op+"_ckpt_seconds"]
		if durs == nil {
			for i := 0; i < int(m[op+"_checkpoints"]); i++ {
				durs = append(durs, m[fmt.Sprintf("%s_ckpt_%03d_seconds", op, i)])
			}
		}
		k := len(durs)
		if k == 0 || m["checkpoint_bytes"] == 0 {
			return 0, false
		}
		var d, g float64
		for _, s := range durs {
			d += s
			if s > 0 {
				g += m["checkpoint_bytes"] / (1 << 30) / s
			}
		}
		if name == op+"_seconds" {
			return d / float64(k), true
		}
		return g / float64(k), true
	}
	v, ok := m[name]
	return v, ok
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
	if b.Kind != n.Kind || !sameParams(b.Params, n.Params) {
		what := "parameters differ"
		if b.Kind != n.Kind {
			what = fmt.Sprintf("kind %s in base, %s in new", b.Kind, n.Kind)
		}
		return []CompareRow{{Phase: n.Name, Ranks: n.Ranks, Op: "all", Metric: "params", BaseRuns: 1, NoiseFrom: NoiseNone,
			Verdict: VerdictNotComparable, Note: what + ": not comparable"}}
	}
	var rows []CompareRow
	ops := sortedOps(b.OpsByType)
	if len(ops) != 1 || len(n.OpsByType) != 1 {
		ops = append([]string{"all"}, ops...)
	}
	iterNoise, iterFrom := iterationNoise(b.Iterations, n.Iterations)
	var metricRows []CompareRow
	for _, pm := range phaseMetricsOf(n) {
		bv, ok := phaseMetricValue(b, pm.name)
		nv, _ := phaseMetricValue(n, pm.name)
		if !ok || (bv == 0 && nv == 0) {
			continue
		}
		row := CompareRow{Phase: b.Name, Ranks: b.Ranks, Op: "metrics", Metric: pm.name, Base: bv, New: nv, BaseRuns: 1, NoiseFrom: NoiseNone}
		if bv == 0 {
			row.Verdict, row.Note = VerdictSame, "base is zero: no relative change"
		} else {
			change := (nv - bv) / bv
			row.ChangePercent = 100 * change
			if iterFrom == NoiseNone {
				row.Verdict = untestedVerdict(change, threshold)
			} else {
				setNoise(&row, iterNoise, iterFrom, nv/bv)
				row.Verdict = verdict(change, nv/bv, iterNoise, threshold, pm.higherBetter)
			}
		}
		metricRows = append(metricRows, row)
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
			row := CompareRow{Phase: b.Name, Ranks: b.Ranks, Op: op, Metric: mt.name, Base: bv, New: nv, BaseRuns: 1, NoiseFrom: NoiseNone}
			if bv == 0 {
				row.Verdict = VerdictSame
				row.Note = "base is zero: no relative change"
				rows = append(rows, row)
				continue
			}
			change := (nv - bv) / bv
			row.ChangePercent = 100 * change
			if iterFrom == NoiseNone {
				// One iteration on each side of one base run: the
				// histograms' sampling error alone is no estimate of
				// run-to-run noise (identical runs were seen 13% apart),
				// so there is no noise-based verdict.
				row.Verdict = untestedVerdict(change, threshold)
				rows = append(rows, row)
				continue
			}
			noise, from := iterNoise, iterFrom
			if h, ok := histogramNoise(bh, nh, mt); ok && h > noise {
				noise, from = h, NoiseHistogram
			}
			setNoise(&row, noise, from, nv/bv)
			row.Verdict = verdict(change, nv/bv, noise, threshold, mt.higherBetter)
			rows = append(rows, row)
		}
	}
	return append(rows, metricRows...)
}

// untestedVerdict is the verdict without a noise estimate: same within the
// threshold, else untested.
func untestedVerdict(change, threshold float64) string {
	if math.Abs(change) <= threshold {
		return VerdictSame
	}
	return VerdictUntested
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
// (at level, e.g. 0.95) of Mean(ys) − Mean(xs) by Welch's t procedure with
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

// variance is the unbiased sample variance.
func variance(xs []float64) float64 {
	m := Mean(xs)
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
	refs := []struct {
		side string
		ref  RunRef
	}{{"base", c.Base}}
	for i, b := range c.Bases {
		if i > 0 {
			refs = append(refs, struct {
				side string
				ref  RunRef
			}{"base", b})
		}
	}
	refs = append(refs, struct {
		side string
		ref  RunRef
	}{"new ", c.New})
	for _, r := range refs {
		id := r.ref.RunID
		if r.ref.Label != r.ref.RunID {
			id = r.ref.Label + " (run " + r.ref.RunID + ")"
		}
		fmt.Fprintf(w, "%s %s  plan %s  %s  %s on %s\n", r.side, id, r.ref.Plan, r.ref.Status, r.ref.FSType, r.ref.Host)
	}
	if len(c.Bases) > 1 {
		level := 0.0
		for _, r := range c.Rows {
			level = math.Max(level, r.LevelPercent)
		}
		fmt.Fprintf(w, "threshold %g%%; %d base runs: base = their geometric mean, interval = the change's %.4g%% t prediction interval from the spread between them (log scale; %g%% false alarms over the comparison)\n\n", c.ThresholdPercent, len(c.Bases), level, 100*HistoryFalseAlarm)
	} else {
		fmt.Fprintf(w, "threshold %g%%; interval = the change's 95%% CI (log scale: Welch over iteration walls, or the histograms)\n\n", c.ThresholdPercent)
	}
	t := newTable("lrllrrrlll", "phase", "ranks", "op", "metric", "base", "new", "change", "interval", "verdict", "")
	for _, r := range c.Rows {
		change, noise := fmt.Sprintf("%+.1f%%", r.ChangePercent), fmt.Sprintf("[%+.1f%%, %+.1f%%]", r.IntervalLowPercent, r.IntervalHighPercent)
		switch {
		case r.NoiseFrom == NoiseNone:
			noise = "-"
		case r.NoisePercent >= 1e4:
			noise = "[unbounded]"
		}
		if r.Metric == "status" || r.Metric == "params" || r.Base == 0 {
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
	fmt.Fprintf(w, "\n%d regressions, %d improvements, %d noise, %d same", c.Regressions, c.Improvements, c.Noise, c.Same)
	if c.Untested > 0 {
		fmt.Fprintf(w, ", %d untested", c.Untested)
	}
	if c.NotComparable > 0 {
		fmt.Fprintf(w, ", %d not comparable", c.NotComparable)
	}
	fmt.Fprintln(w)
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
	case name == "status", name == "params":
		return "-"
	case strings.HasSuffix(name, "_seconds"):
		return FormatSeconds(v)
	case name == "au_percent":
		return fmt.Sprintf("%.2f%%", v)
	case strings.HasSuffix(name, "_bytes_per_sec"):
		return formatRate(v)
	case strings.HasSuffix(name, "_ns"):
		return FormatNs(int64(math.Round(v)))
	case name == "bytes_per_sec":
		return formatRate(v)
	}
	return formatOps(v)
}
