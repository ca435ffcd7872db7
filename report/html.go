package report

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg/draw"
)

// HTMLOptions tune WriteHTMLWith.
type HTMLOptions struct {
	// Labels name the runs in legends and tables, in the order of the
	// manifests; a missing or empty label falls back to the run id.
	Labels []string
}

// WriteHTML writes report.html for one run, or an overlay of several runs
// (the A-vs-B view: one series per run in every plot). The page is
// self-contained — inline CSS and SVG, no script, no network — so it opens
// from a cluster's shared filesystem.
func WriteHTML(w io.Writer, runs []*Manifest) error {
	return WriteHTMLWith(w, runs, HTMLOptions{})
}

// WriteHTMLWith is WriteHTML with labels for the runs.
//
// Per phase (matched across runs by name): a table of bandwidth, op rates
// and latencies per run and rank count (one row per op type when there are
// several), the expectation verdicts, outlier flags and errors; for a sweep
// (the same phase at several rank counts) mean and P99 latency and the
// aggregate rate against the rank count; and per rank count a latency CDF
// per op type from the decoded histograms and per-rank bars of busy seconds
// (with the straggler limit) and bytes.
func WriteHTMLWith(w io.Writer, runs []*Manifest, o HTMLOptions) error {
	if len(runs) == 0 {
		return fmt.Errorf("report: html: no manifest")
	}
	page, err := buildPage(runs, o)
	if err != nil {
		return err
	}
	if err := pageTemplate().Execute(w, page); err != nil {
		return fmt.Errorf("report: html: %w", err)
	}
	return nil
}

type htmlPage struct {
	Title   string
	Heading string
	Multi   bool
	Runs    []htmlRun
	Phases  []*htmlPhase
	// Overview is one row per phase, rank count and run, before the
	// phases' sections.
	Overview []htmlOverview
	Flags    []htmlFlag
	Expect   struct{ Passed, Failed int }
	// StragglerFactor and StragglerMin describe the straggler limit drawn
	// on rank bars.
	StragglerFactor float64
	flagOpts        FlagOptions
	StragglerMin    string
}

// htmlOverview is one phase instance of one run in the overview table.
type htmlOverview struct {
	Run, Color, Name, Anchor, Kind, Status string
	Ranks                                  int
	Rate, Op, P50, P99                     string
	Verdicts                               string // "2/2 passed", or the missed ones
	Missed                                 bool
}

type htmlRun struct {
	Label, Color string
	M            *Manifest
	Plan         string
	Started      string
	Took         string
	Memory       string
}

type htmlPhase struct {
	Name, Kind, Anchor string
	Sweep              bool
	Counts             []int
	// Axis is what a sweep varies, "ranks" or (every instance selected
	// nodes) "nodes", and AxisCounts its values.
	Axis       string
	AxisCounts []int
	Note       string
	Rows       []htmlRow
	Verdicts   []htmlVerdict
	Flags      []htmlFlag
	Errors     []string
	SweepPlots []template.HTML
	Instances  []*htmlInstance
	// Headline says which op stands for the phase where ops nest.
	Headline string
	Metrics  []htmlMetrics
}

// htmlMetrics are one run's figures of merit of a phase at one rank
// count: another tool's lines ([METRIC] …) and the metrics map.
type htmlMetrics struct {
	Run   string
	Ranks int
	Lines []string
	Rows  []htmlMetric
}

type htmlMetric struct{ Name, Value string }

type htmlRow struct {
	Run, Color, Op, Status, Cache, CacheWhy          string
	Ranks                                            int
	Sub                                              bool
	Ops, Bytes, Wall, BW, OpsPS, Mean, P50, P90, P99 string
	Max, Errors, Spread, Iter                        string
}

type htmlVerdict struct {
	Run, Metric, Value, Limit string
	Ranks                     int
	Passed                    bool
}

type htmlFlag struct {
	Run, Kind, Phase, Detail string
	Ranks                    int
}

type htmlInstance struct {
	Ranks int
	Open  bool
	Plots []template.HTML
	// Notes say, in words, what has no plot (a failed phase's missing
	// latencies, a phase too short for a time series).
	Notes []string
}

// runPhase is one run's result of one phase at one rank count.
type runPhase struct {
	run int
	p   *PhaseResult
}

func buildPage(runs []*Manifest, o HTMLOptions) (*htmlPage, error) {
	fo := DefaultFlagOptions
	if len(runs) > 0 {
		fo = FlagOptionsOf(runs[0])
	}
	page := &htmlPage{Multi: len(runs) > 1, StragglerFactor: fo.StragglerFactor,
		StragglerMin: FormatSeconds(fo.StragglerMinSeconds), flagOpts: fo}
	seen := map[string]int{}
	for i, m := range runs {
		label := m.RunID
		if i < len(o.Labels) && o.Labels[i] != "" {
			label = o.Labels[i]
		}
		if seen[label]++; seen[label] > 1 {
			label = fmt.Sprintf("%s#%d", label, seen[label])
		}
		r := htmlRun{Label: label, Color: cssColor(paletteColor(i)), M: m, Plan: PlanName(m),
			Memory: FormatBytes(m.Host.MemoryBytes)}
		if !m.StartedAt.IsZero() {
			r.Started = m.StartedAt.UTC().Format("2006-01-02 15:04:05 UTC")
			if m.FinishedAt.After(m.StartedAt) {
				r.Took = FormatSeconds(m.FinishedAt.Sub(m.StartedAt).Seconds())
			}
		}
		page.Runs = append(page.Runs, r)
		for _, f := range flagsOf(m) {
			page.Flags = append(page.Flags, htmlFlag{Run: label, Kind: f.Kind, Phase: f.Phase, Ranks: f.Ranks, Detail: f.Detail})
		}
	}
	if page.Multi {
		var ls []string
		for _, r := range page.Runs {
			ls = append(ls, r.Label)
		}
		page.Heading = strings.Join(ls, " vs ")
	} else {
		page.Heading = fmt.Sprintf("plan %s, run %s", page.Runs[0].Plan, runs[0].RunID)
	}
	page.Title = "prism: " + page.Heading

	// Phases in order of first appearance over the runs, matched by name.
	var order []string
	byName := map[string][]runPhase{}
	for ri, m := range runs {
		for i := range m.Phases {
			p := &m.Phases[i]
			if _, ok := byName[p.Name]; !ok {
				order = append(order, p.Name)
			}
			byName[p.Name] = append(byName[p.Name], runPhase{ri, p})
		}
	}
	for i, name := range order {
		hp, err := buildPhase(page, runs, name, byName[name])
		if err != nil {
			return nil, err
		}
		hp.Anchor = fmt.Sprintf("p%d", i)
		page.Overview = append(page.Overview, overviewRows(page, hp, byName[name])...)
		for _, v := range hp.Verdicts {
			if v.Passed {
				page.Expect.Passed++
			} else {
				page.Expect.Failed++
			}
		}
		page.Phases = append(page.Phases, hp)
	}
	return page, nil
}

// x is where a phase instance sits on the sweep axis.
func (hp *htmlPhase) x(p *PhaseResult) float64 {
	if hp.Axis == "nodes" {
		return float64(p.Nodes)
	}
	return float64(p.Ranks)
}

func buildPhase(page *htmlPage, runs []*Manifest, name string, rps []runPhase) (*htmlPhase, error) {
	hp := &htmlPhase{Name: name, Kind: rps[0].p.Kind}
	countSet := map[int]bool{}
	perRun := map[int]int{}
	for _, rp := range rps {
		countSet[rp.p.Ranks] = true
		perRun[rp.run]++
		if rp.p.ConcurrentWith != "" {
			hp.Note = fmt.Sprintf("ran at the same time as %s, on other ranks", rp.p.ConcurrentWith)
		}
	}
	for c := range countSet {
		hp.Counts = append(hp.Counts, c)
	}
	sort.Ints(hp.Counts)
	hp.Axis, hp.AxisCounts = "ranks", hp.Counts
	nodeSet := map[int]bool{}
	for _, rp := range rps {
		nodeSet[rp.p.Nodes] = true
	}
	if !nodeSet[0] {
		hp.Axis, hp.AxisCounts = "nodes", nil
		for n := range nodeSet {
			hp.AxisCounts = append(hp.AxisCounts, n)
		}
		sort.Ints(hp.AxisCounts)
	}
	for _, n := range perRun {
		if n > 1 {
			hp.Sweep = true
		}
	}
	sort.SliceStable(rps, func(i, j int) bool {
		if rps[i].p.Ranks != rps[j].p.Ranks {
			return rps[i].p.Ranks < rps[j].p.Ranks
		}
		return rps[i].run < rps[j].run
	})
	for _, rp := range rps {
		p, run := rp.p, page.Runs[rp.run]
		hp.Rows = append(hp.Rows, phaseRow(run, p))
		head := HeadlineOp(p)
		if outer := OuterOps(p); Nested(p) {
			hp.Headline = fmt.Sprintf("%s holds the phase's other ops (they run inside it): it is the headline, and the rows below it are within it.", head)
		} else if len(outer) > 1 {
			hp.Headline = fmt.Sprintf("%s each hold other ops of the phase: each is a headline of its own, and the first row is the phase's totals.", strings.Join(outer, " and "))
		}
		if len(p.OpsByType) > 1 {
			for _, op := range sortedOps(p.OpsByType) {
				if op != head {
					hp.Rows = append(hp.Rows, opRow(run, p, op))
				}
			}
		}
		if hm := metricsOf(run, p); hm != nil {
			hp.Metrics = append(hp.Metrics, *hm)
		}
		for _, v := range p.Expect {
			hp.Verdicts = append(hp.Verdicts, htmlVerdict{Run: run.Label, Ranks: p.Ranks, Metric: v.Metric, Value: v.Value, Limit: v.Limit, Passed: v.Passed})
		}
		if p.Error != "" {
			where := ""
			if p.FailedRank != nil {
				where = fmt.Sprintf(" on rank %d", *p.FailedRank)
			}
			hp.Errors = append(hp.Errors, fmt.Sprintf("%s, %d ranks: %s%s: %s", run.Label, p.Ranks, p.Status, where, p.Error))
		}
	}
	for _, f := range page.Flags {
		if f.Phase == name {
			hp.Flags = append(hp.Flags, f)
		}
	}
	if hp.Sweep {
		plots, err := sweepPlots(page, hp, rps)
		if err != nil {
			return nil, err
		}
		hp.SweepPlots = plots
	}
	for i, k := range hp.Counts {
		var at []runPhase
		for _, rp := range rps {
			if rp.p.Ranks == k && rp.p.Status != StatusSkipped {
				at = append(at, rp)
			}
		}
		if len(at) == 0 {
			continue
		}
		inst := &htmlInstance{Ranks: k, Open: i == len(hp.Counts)-1}
		plots, notes, err := instancePlots(page, name, k, at)
		if err != nil {
			return nil, err
		}
		inst.Plots, inst.Notes = plots, notes
		hp.Instances = append(hp.Instances, inst)
	}
	return hp, nil
}

// phaseRow is the phase's first row: its headline op's ops, rate and
// latency where there is one (its only op, or the outer op where ops
// nest; the bytes are the phase's, which every op counts once), else its
// totals with no latency (a pool of independent op types' latencies
// stands for none of them).
func phaseRow(run htmlRun, p *PhaseResult) htmlRow {
	r := htmlRow{Run: run.Label, Color: run.Color, Ranks: p.Ranks, Status: p.Status, Cache: p.Cache.Applied, Op: "all",
		Ops: fmt.Sprint(p.Ops), Bytes: FormatBytes(p.Bytes), Wall: FormatSeconds(p.WallSeconds),
		BW: rateOrDash(p.BytesPerSec), OpsPS: formatOps(p.OpsPerSec), Errors: fmt.Sprint(p.Errors),
		Iter: fmt.Sprint(len(p.Iterations))}
	if op := HeadlineOp(p); op != "" {
		s := p.OpsByType[op]
		r.Op, r.Ops, r.OpsPS = op, fmt.Sprint(s.Ops), formatOps(s.OpsPerSec)
		r.Mean, r.P50, r.P90 = FormatNs(int64(s.Latency.Mean)), FormatNs(s.Latency.P50), FormatNs(s.Latency.P90)
		r.P99, r.Max = FormatNs(s.Latency.P99), FormatNs(s.Latency.Max)
	} else if len(p.OpsByType) == 0 {
		r.Op = "-"
	}
	r.CacheWhy = p.Cache.Reason
	if p.LastDoneSeconds > 0 {
		r.Spread = FormatSeconds(p.FirstDoneSeconds) + " – " + FormatSeconds(p.LastDoneSeconds)
	}
	if len(p.Iterations) > 1 {
		m, s := Mean(p.Iterations), math.Sqrt(variance(p.Iterations))
		ci := tQuantile(0.95, float64(len(p.Iterations)-1)) * s / math.Sqrt(float64(len(p.Iterations)))
		r.Iter = fmt.Sprintf("%d: %s ± %s", len(p.Iterations), FormatSeconds(m), FormatSeconds(ci))
	}
	return r
}

func opRow(run htmlRun, p *PhaseResult, op string) htmlRow {
	s := p.OpsByType[op]
	return htmlRow{Run: run.Label, Color: run.Color, Ranks: p.Ranks, Op: op, Sub: true, Status: "",
		Ops: fmt.Sprint(s.Ops), Bytes: FormatBytes(s.Bytes), BW: rateOrDash(s.BytesPerSec), OpsPS: formatOps(s.OpsPerSec),
		Mean: FormatNs(int64(s.Latency.Mean)), P50: FormatNs(s.Latency.P50), P90: FormatNs(s.Latency.P90),
		P99: FormatNs(s.Latency.P99), Max: FormatNs(s.Latency.Max), Errors: fmt.Sprint(s.Errors)}
}

// rateOrDash prints a bandwidth, or "-" for a phase that moves no bytes.
func rateOrDash(v float64) string {
	if v == 0 {
		return "-"
	}
	return formatRate(v)
}

// opsOf is the sorted union of op types over the results.
func opsOf(rps []runPhase) []string {
	set := map[string]bool{}
	for _, rp := range rps {
		for op := range rp.p.OpsByType {
			set[op] = true
		}
	}
	var ops []string
	for op := range set {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	return ops
}

// instancePlots draws, for one rank count: latency by percentile (one plot
// with a line per op type for a single run; one plot per op type with a
// line per run for an overlay), bandwidth and op rate per second since the
// phase's start, and the per-rank (per-host) bars. What has no data gets
// a note instead of an empty plot.
func instancePlots(page *htmlPage, name string, k int, at []runPhase) ([]template.HTML, []string, error) {
	var plots []template.HTML
	var notes []string
	ops := opsOf(at)
	hists := map[int]map[string]*hdr.Histogram{}
	for _, rp := range at {
		hists[rp.run] = map[string]*hdr.Histogram{}
		for op, enc := range rp.p.Histograms {
			h, err := DecodeHistogram(enc)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: phase %s: %w", page.Runs[rp.run].Label, name, err)
			}
			hists[rp.run][op] = h
		}
	}
	add := func(svg template.HTML, err error) error {
		if err == nil && svg != "" {
			plots = append(plots, svg)
		}
		return err
	}
	latencies := 0
	if !page.Multi {
		var ss []series
		for i, op := range ops {
			if h := hists[at[0].run][op]; h != nil && h.TotalCount() > 0 {
				ss = append(ss, series{label: op, color: paletteColor(i), repeat: i >= len(palette), xys: percentilePoints(h)})
			}
		}
		if len(ss) > 0 {
			latencies++
			if err := add(percentilePlot(fmt.Sprintf("%s, %d ranks: latency by percentile", name, k), ss)); err != nil {
				return nil, nil, err
			}
		}
	} else {
		for _, op := range ops {
			var ss []series
			for _, rp := range at {
				if h := hists[rp.run][op]; h != nil && h.TotalCount() > 0 {
					ss = append(ss, series{label: page.Runs[rp.run].Label, color: paletteColor(rp.run), xys: percentilePoints(h)})
				}
			}
			if len(ss) > 0 {
				latencies++
				if err := add(percentilePlot(fmt.Sprintf("%s %s, %d ranks: latency by percentile", name, op, k), ss)); err != nil {
					return nil, nil, err
				}
			}
		}
	}
	if latencies == 0 {
		notes = append(notes, "No op completed: no latency distribution.")
	}
	tplots, tnotes, err := timelinePlots(page, name, k, at)
	if err != nil {
		return nil, nil, err
	}
	plots, notes = append(plots, tplots...), append(notes, tnotes...)

	// Per-rank busy seconds, with the straggler limit, and bytes.
	maxSec, maxBytes := 0.0, 0.0
	for _, rp := range at {
		for _, r := range rp.p.PerRank.All() {
			maxSec = math.Max(maxSec, r.Seconds)
			maxBytes = math.Max(maxBytes, float64(r.Bytes))
		}
	}
	unit, div := durationUnit(maxSec * 1e9)
	div /= 1e9
	bunit, bdiv := byteUnit(maxBytes)
	var secs, byts []barGroup
	for _, rp := range at {
		if rp.p.PerRank.Len() == 0 {
			continue
		}
		g := barGroup{label: page.Runs[rp.run].Label, color: paletteColor(rp.run)}
		b := g
		all := make([]float64, rp.p.PerRank.Len())
		for i, r := range rp.p.PerRank.All() {
			g.values = append(g.values, r.Seconds/div)
			b.values = append(b.values, float64(r.Bytes)/bdiv)
			all[i] = r.Seconds
		}
		if len(all) > 1 {
			g.limit = StragglerLimit(Median(all), page.flagOpts) / div
		}
		if !page.Multi {
			g.color, b.color = paletteColor(0), paletteColor(2)
		}
		secs, byts = append(secs, g), append(byts, b)
	}
	switch {
	case len(secs) == 0:
		notes = append(notes, "No rank reported: no per-rank time.")
	case maxSec == 0:
		notes = append(notes, "No rank was busy (the phase stopped before its timed run): no per-rank time.")
	default:
		if err := add(rankBars(fmt.Sprintf("%s, %d ranks: busy time per rank", name, k), "busy time ("+unit+")", secs)); err != nil {
			return nil, nil, err
		}
		if maxBytes > 0 {
			if err := add(rankBars(fmt.Sprintf("%s, %d ranks: bytes per rank", name, k), bunit, byts)); err != nil {
				return nil, nil, err
			}
		}
	}
	if err := hostPlots(page, name, k, at, add); err != nil {
		return nil, nil, err
	}
	return plots, notes, nil
}

// timelinePlots draws each run's bandwidth and op rate per interval since
// the phase's start (the manifest's timeline): bandwidth over every op
// type (each counts its bytes once), and ops/s of each op type for a
// single run, of the headline op (else every op) per run for an overlay.
func timelinePlots(page *htmlPage, name string, k int, at []runPhase) ([]template.HTML, []string, error) {
	var plots []template.HTML
	var notes []string
	type tl struct {
		rp    runPhase
		t     *Timeline
		lastW float64
	}
	var tls []tl
	maxBW, maxOps := 0.0, 0.0
	for _, rp := range at {
		t := rp.p.Timeline
		who := ""
		if page.Multi {
			who = page.Runs[rp.run].Label + ": "
		}
		if t != nil && !(t.IntervalSeconds >= 1e-3 && t.IntervalSeconds <= 1e7) {
			t = nil // a damaged manifest: no interval this could have been
		}
		if t.Len() < 2 || t.Len() > 100*SeriesCap {
			switch {
			case t.Len() == 1:
				notes = append(notes, fmt.Sprintf("%sthe phase ran within one %gs interval: no time series.", who, t.IntervalSeconds))
			case rp.p.Ops > 0 && rp.p.Kind == "fio":
				notes = append(notes, who+"fio's ops are ingested from its JSON after it ran: no time series (fio's own logs have one).")
			case rp.p.Ops > 0:
				notes = append(notes, who+"no time series recorded (a manifest of an older prism).")
			default:
				notes = append(notes, who+"no op completed: no time series.")
			}
			continue
		}
		x := tl{rp: rp, t: t}
		if n := t.Len(); len(rp.p.Iterations) == 1 {
			// The last interval is cut by the phase's end.
			x.lastW = rp.p.WallSeconds - float64(n-1)*t.IntervalSeconds
		}
		for i := 0; i < t.Len(); i++ {
			var b float64
			for _, v := range t.Bytes {
				if i < len(v) {
					b += float64(v[i])
				}
			}
			maxBW = math.Max(maxBW, b/t.IntervalSeconds)
			for _, v := range t.Ops {
				if i < len(v) {
					maxOps = math.Max(maxOps, float64(v[i])/t.IntervalSeconds)
				}
			}
		}
		tls = append(tls, x)
	}
	if len(tls) == 0 {
		return nil, notes, nil
	}
	if maxBW > 0 {
		unit, div := byteUnit(maxBW)
		var ss []series
		for _, x := range tls {
			sum := make([]int64, x.t.Len())
			for _, v := range x.t.Bytes {
				for i, b := range v {
					sum[i] += b
				}
			}
			label, c := page.Runs[x.rp.run].Label, paletteColor(x.rp.run)
			if !page.Multi {
				label, c = "all ops", paletteColor(0)
			}
			ss = append(ss, series{label: label, color: c, xys: stairs(sum, x.t.IntervalSeconds, x.lastW, div)})
		}
		svg, err := timelinePlot(fmt.Sprintf("%s, %d ranks: bandwidth per %gs", name, k, tls[0].t.IntervalSeconds), unit+"/s", ss)
		if err != nil {
			return nil, nil, err
		}
		if svg != "" {
			plots = append(plots, svg)
		}
	}
	unit, div := "ops/s", 1.0
	if maxOps >= 2e4 {
		unit, div = "kops/s", 1e3
	}
	var ss []series
	for _, x := range tls {
		ops := sortedOps(x.t.Ops)
		if h := HeadlineOp(x.rp.p); page.Multi && h != "" && x.t.Ops[h] != nil {
			ops = []string{h}
		}
		for i, op := range ops {
			label, c := op, paletteColor(i)
			if page.Multi {
				label, c = page.Runs[x.rp.run].Label+" "+op, paletteColor(x.rp.run)
			}
			ss = append(ss, series{label: label, color: c, dashed: page.Multi && i > 0, repeat: !page.Multi && i >= len(palette), xys: stairs(x.t.Ops[op], x.t.IntervalSeconds, x.lastW, div)})
		}
	}
	svg, err := timelinePlot(fmt.Sprintf("%s, %d ranks: op rate per %gs", name, k, tls[0].t.IntervalSeconds), unit, ss)
	if err != nil {
		return nil, nil, err
	}
	if svg != "" {
		plots = append(plots, svg)
	}
	return plots, notes, nil
}

// overviewRows are the overview table's rows of one phase: one per rank
// count and run, with the headline rate (bandwidth when the phase moves
// bytes, else the headline op's rate or the total), the headline op's
// p50 and p99, and the verdicts.
func overviewRows(page *htmlPage, hp *htmlPhase, rps []runPhase) []htmlOverview {
	var out []htmlOverview
	for _, rp := range rps {
		p, run := rp.p, page.Runs[rp.run]
		o := htmlOverview{Run: run.Label, Color: run.Color, Name: p.Name, Anchor: hp.Anchor, Kind: p.Kind, Status: p.Status, Ranks: p.Ranks}
		op := HeadlineOp(p)
		o.Op = op
		if len(p.OpsByType) == 0 {
			o.Op = "-"
		}
		switch {
		case p.Status == StatusSkipped, p.Ops == 0:
		case p.Bytes > 0:
			o.Rate = formatRate(p.BytesPerSec)
		case op != "":
			o.Rate = formatOps(p.OpsByType[op].OpsPerSec) + " ops/s"
		default:
			o.Rate = formatOps(p.OpsPerSec) + " ops/s"
		}
		if s, ok := p.OpsByType[op]; ok && s.Ops > 0 {
			o.P50, o.P99 = FormatNs(s.Latency.P50), FormatNs(s.Latency.P99)
		}
		passed := 0
		var missed []string
		for _, v := range p.Expect {
			if v.Passed {
				passed++
			} else {
				missed = append(missed, v.Reason())
			}
		}
		switch {
		case len(missed) > 0:
			o.Verdicts, o.Missed = "missed: "+strings.Join(missed, "; "), true
		case passed > 0:
			o.Verdicts = fmt.Sprintf("%d/%d passed", passed, len(p.Expect))
		}
		out = append(out, o)
	}
	return out
}

// metricsOf is a phase result's figures of merit: another tool's lines,
// every metric and every metric array, each array (and each numbered
// series of an older manifest, save_ckpt_000_seconds, …) folded into one
// row.
func metricsOf(run htmlRun, p *PhaseResult) *htmlMetrics {
	if len(p.MetricLines) == 0 && len(p.Metrics) == 0 && len(p.MetricArrays) == 0 {
		return nil
	}
	hm := &htmlMetrics{Run: run.Label, Ranks: p.Ranks, Lines: p.MetricLines}
	groups := map[string][]float64{}
	var names []string
	for k := range p.Metrics {
		names = append(names, k)
	}
	sort.Strings(names)
	seen := map[string]bool{}
	for _, k := range names {
		key := numberedKey(k)
		groups[key] = append(groups[key], p.Metrics[k])
		if !seen[key] {
			seen[key] = true
			hm.Rows = append(hm.Rows, htmlMetric{Name: key})
		}
	}
	// The lists (per checkpoint, per process) are folded the same way;
	// a manifest from before metric_arrays has them as numbered keys.
	arrays := make([]string, 0, len(p.MetricArrays))
	for k := range p.MetricArrays {
		arrays = append(arrays, k)
	}
	sort.Strings(arrays)
	for _, k := range arrays {
		if vs := p.MetricArrays[k]; len(vs) > 0 && !seen[k] {
			seen[k] = true
			groups[k] = vs
			hm.Rows = append(hm.Rows, htmlMetric{Name: k})
		}
	}
	for i := range hm.Rows {
		vs := groups[hm.Rows[i].Name]
		if len(vs) == 1 {
			hm.Rows[i].Value = metricString(vs[0])
			continue
		}
		lo, hi := vs[0], vs[0]
		for _, v := range vs {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		hm.Rows[i].Value = fmt.Sprintf("%d values: mean %s, min %s, max %s", len(vs), metricString(Mean(vs)), metricString(lo), metricString(hi))
	}
	return hm
}

// numberedKey replaces a run of three or more digits between
// underscores (a checkpoint's or an epoch's number) with *.
func numberedKey(k string) string {
	parts := strings.Split(k, "_")
	for i, p := range parts {
		if len(p) >= 3 && strings.Trim(p, "0123456789") == "" {
			parts[i] = "*"
		}
	}
	return strings.Join(parts, "_")
}

func metricString(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// hostPlots adds, for a phase that ran on several hosts, the bytes each
// host moved and each host's slowest rank's busy time: a slow node shows
// as one short or tall bar where per-rank bars hide it among many.
func hostPlots(page *htmlPage, name string, k int, at []runPhase, add func(template.HTML, error) error) error {
	var names []string
	maxSec, maxBytes := 0.0, 0.0
	for _, rp := range at {
		if len(rp.p.PerHost) > len(names) {
			names = names[:0]
			for _, h := range rp.p.PerHost {
				names = append(names, h.Host)
			}
		}
		for _, h := range rp.p.PerHost {
			maxSec = math.Max(maxSec, h.LastDoneSeconds)
			maxBytes = math.Max(maxBytes, float64(h.Bytes))
		}
	}
	if len(names) < 2 {
		return nil
	}
	unit, div := durationUnit(maxSec * 1e9)
	div /= 1e9
	bunit, bdiv := byteUnit(maxBytes)
	var secs, byts []barGroup
	for _, rp := range at {
		g := barGroup{label: page.Runs[rp.run].Label, color: paletteColor(rp.run)}
		b := g
		for _, h := range rp.p.PerHost {
			g.values = append(g.values, h.LastDoneSeconds/div)
			b.values = append(b.values, float64(h.Bytes)/bdiv)
		}
		if !page.Multi {
			g.color, b.color = paletteColor(0), paletteColor(2)
		}
		secs, byts = append(secs, g), append(byts, b)
	}
	if maxSec > 0 {
		if err := add(bars(fmt.Sprintf("%s, %d ranks: slowest rank's busy time per host", name, k), "host", names, "busy time ("+unit+")", secs)); err != nil {
			return err
		}
	}
	if maxBytes > 0 {
		return add(bars(fmt.Sprintf("%s, %d ranks: bytes per host", name, k), "host", names, bunit, byts))
	}
	return nil
}

// sweepPlots draws mean and P99 latency against the rank count (per op
// type), and the aggregate bandwidth or op rate against the rank count.
func sweepPlots(page *htmlPage, hp *htmlPhase, rps []runPhase) ([]template.HTML, error) {
	var plots []template.HTML
	ops := opsOf(rps)
	passed := func(rp runPhase) bool { return rp.p.Status == StatusPassed }
	// Mean and P99 on one plot: a log axis when they are more than a factor
	// of 10 apart, else a linear one from zero in a readable unit.
	minNs, maxNs := math.Inf(1), 0.0
	for _, rp := range rps {
		if passed(rp) {
			for _, s := range rp.p.OpsByType {
				maxNs = math.Max(maxNs, float64(s.Latency.P99))
				if s.Latency.Mean > 0 {
					minNs = math.Min(minNs, s.Latency.Mean)
				}
			}
		}
	}
	logY := maxNs > 10*minNs
	ylabel, div := "latency (log scale)", 1.0
	if !logY {
		var unit string
		unit, div = durationUnit(maxNs)
		ylabel = "latency (" + unit + ")"
	}
	curve := func(run int, op string, pick func(Latency) float64) plotter.XYs {
		var xys plotter.XYs
		for _, rp := range rps {
			if rp.run != run || !passed(rp) {
				continue
			}
			if s, ok := rp.p.OpsByType[op]; ok {
				xys = append(xys, plotter.XY{X: hp.x(rp.p), Y: pick(s.Latency) / div})
			}
		}
		return xys
	}
	meanOf := func(l Latency) float64 { return l.Mean }
	p99Of := func(l Latency) float64 { return float64(l.P99) }
	if !page.Multi {
		var ss []series
		for i, op := range ops {
			ss = append(ss,
				series{label: op + " mean", color: paletteColor(i), glyph: draw.CircleGlyph{}, xys: curve(0, op, meanOf)},
				series{label: op + " P99", color: paletteColor(i), dashed: true, glyph: draw.TriangleGlyph{}, xys: curve(0, op, p99Of)})
		}
		svg, err := sweepPlot(fmt.Sprintf("%s: latency vs %s", hp.Name, hp.Axis), hp.Axis, ylabel, hp.AxisCounts, ss, logY)
		if err != nil {
			return nil, err
		}
		if svg != "" {
			plots = append(plots, svg)
		}
	} else {
		for _, op := range ops {
			var ss []series
			for ri, r := range page.Runs {
				ss = append(ss,
					series{label: r.Label + " mean", color: paletteColor(ri), glyph: draw.CircleGlyph{}, xys: curve(ri, op, meanOf)},
					series{label: r.Label + " P99", color: paletteColor(ri), dashed: true, glyph: draw.TriangleGlyph{}, xys: curve(ri, op, p99Of)})
			}
			svg, err := sweepPlot(fmt.Sprintf("%s %s: latency vs %s", hp.Name, op, hp.Axis), hp.Axis, ylabel, hp.AxisCounts, ss, logY)
			if err != nil {
				return nil, err
			}
			if svg != "" {
				plots = append(plots, svg)
			}
		}
	}

	// Aggregate rate: bandwidth when the phase moves bytes, else ops/s.
	moves, maxRate := false, 0.0
	for _, rp := range rps {
		moves = moves || rp.p.Bytes > 0
	}
	rate := func(p *PhaseResult) float64 {
		if moves {
			return p.BytesPerSec
		}
		return p.OpsPerSec
	}
	for _, rp := range rps {
		if passed(rp) {
			maxRate = math.Max(maxRate, rate(rp.p))
		}
	}
	ylabel, rdiv := "ops/s", 1.0
	if moves {
		u, d := byteUnit(maxRate)
		ylabel, rdiv = u+"/s", d
	} else if maxRate >= 2e4 {
		ylabel, rdiv = "kops/s", 1e3
	}
	var ss []series
	for ri, r := range page.Runs {
		var xys plotter.XYs
		for _, rp := range rps {
			if rp.run == ri && passed(rp) {
				xys = append(xys, plotter.XY{X: hp.x(rp.p), Y: rate(rp.p) / rdiv})
			}
		}
		label := r.Label
		if !page.Multi {
			label = "aggregate"
		}
		ss = append(ss, series{label: label, color: paletteColor(ri), glyph: draw.CircleGlyph{}, xys: xys})
	}
	what := "op rate"
	if moves {
		what = "bandwidth"
	}
	svg, err := sweepPlot(fmt.Sprintf("%s: aggregate %s vs %s", hp.Name, what, hp.Axis), hp.Axis, ylabel, hp.AxisCounts, ss, false)
	if err != nil || svg == "" {
		return plots, err
	}
	return append(plots, svg), nil
}

// pageTemplate is parsed on first use, not at start-up: every rank of a
// 10,000-rank job starts this binary, and only rank 0 writes a report.
var pageTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Parse(pageHTML))
})

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font: 14px/1.4 "Liberation Sans", Arial, Helvetica, sans-serif; color: #222; margin: 0 auto; padding: 12px 16px; max-width: 1400px; background: #fff; overflow-wrap: anywhere; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 28px 0 6px; padding-top: 8px; border-top: 2px solid #0072b2; }
h2 small, h1 small { font-weight: normal; color: #666; font-size: 13px; }
h3 { font-size: 14px; margin: 14px 0 4px; }
.tw { max-width: 100%; overflow-x: auto; margin: 6px 0 10px; }
table { border-collapse: collapse; font-size: 12px; }
table.nums td, table.nums th { white-space: nowrap; padding: 2px 5px; }
th, td { padding: 2px 6px; border-bottom: 1px solid #e4e4e4; text-align: left; vertical-align: top; }
th { background: #f3f5f8; font-weight: 600; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.sub td { color: #555; background: #fafafa; }
tr.sub td.op { padding-left: 18px; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 5px; vertical-align: baseline; }
.badge { display: inline-block; padding: 0 7px; border-radius: 9px; font-size: 12px; color: #fff; background: #888; }
.passed, .pass { background: #1a7f37; }
.failed, .fail { background: #cf222e; }
.interrupted { background: #bf8700; }
.skipped { background: #888; }
.flag { background: #fff4e5; }
.err { color: #cf222e; white-space: pre-wrap; font-family: "Liberation Mono", monospace; font-size: 12px; }
.missed { color: #cf222e; }
.note { color: #666; }
pre.metric { font: 12px/1.35 "Liberation Mono", monospace; background: #f6f8fa; padding: 6px 8px; margin: 4px 0; white-space: pre-wrap; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(520px, 100%), 1fr)); gap: 10px 18px; }
.plots > div { min-width: 0; }
.plots svg { width: 100%; height: auto; display: block; overflow: visible; }
.legend { font-size: 12px; margin: 2px 0 0 48px; }
.legend span { display: inline-block; margin-right: 12px; white-space: nowrap; }
.legend i { display: inline-block; width: 18px; margin-right: 4px; vertical-align: middle; }
.plots svg text { font-family: "Liberation Sans", Arimo, Arial, Helvetica, "DejaVu Sans Condensed", sans-serif !important; }
details { margin: 6px 0; }
summary { cursor: pointer; font-weight: 600; }
.meta td:first-child { color: #555; white-space: nowrap; }
nav a { margin-right: 10px; }
</style>
</head>
<body>
<h1>prism report <small>{{.Heading}}</small></h1>

<h3>Runs</h3>
<div class="tw"><table class="meta">
<tr><th></th>{{range .Runs}}<th><span class="swatch" style="background:{{.Color}}"></span>{{.Label}}</th>{{end}}</tr>
<tr><td>run id</td>{{range .Runs}}<td>{{.M.RunID}}</td>{{end}}</tr>
<tr><td>status</td>{{range .Runs}}<td><span class="badge {{.M.Status}}">{{.M.Status}}</span>{{with .M.Error}} <span class="err">{{.}}</span>{{end}}</td>{{end}}</tr>
<tr><td>plan</td>{{range .Runs}}<td>{{.Plan}}</td>{{end}}</tr>
<tr><td>started</td>{{range .Runs}}<td>{{.Started}}{{with .Took}} ({{.}}){{end}}</td>{{end}}</tr>
<tr><td>prism</td>{{range .Runs}}<td>{{.M.Version}} ({{.M.Host.GoVersion}})</td>{{end}}</tr>
<tr><td>ranks</td>{{range .Runs}}<td>{{.M.Comm.Ranks}} on {{.M.Comm.Hosts}} host(s), {{.M.Comm.Kind}} (rank from {{.M.Comm.RankSource}})</td>{{end}}</tr>
<tr><td>storage</td>{{range .Runs}}<td>{{.M.Host.FSType}} {{.M.Host.MountSource}} on {{.M.Host.MountPoint}}<br><span class="note">{{.M.Host.MountOptions}}</span></td>{{end}}</tr>
<tr><td>workdir</td>{{range .Runs}}<td>{{.M.Host.Workdir}}</td>{{end}}</tr>
<tr><td>host</td>{{range .Runs}}<td>{{.M.Host.Hostname}}: {{.M.Host.CPUModel}}, {{.M.Host.LogicalCores}} logical cores, {{.Memory}}</td>{{end}}</tr>
<tr><td>kernel</td>{{range .Runs}}<td>{{.M.Host.Kernel}}</td>{{end}}</tr>
<tr><td>op clock</td>{{range .Runs}}<td>{{or .M.Clock.Source "-"}}{{with .M.Clock.Reason}} <span class="note">{{.}}</span>{{end}}</td>{{end}}</tr>
<tr><td>MPI / Slurm</td>{{range .Runs}}<td>{{or .M.Host.MPILibrary "-"}} / {{or .M.Host.SlurmJobID "-"}}{{with .M.Host.SlurmNodeList}} ({{.}}){{end}}</td>{{end}}</tr>
{{- $warn := false}}{{range .Runs}}{{if .M.Host.Warnings}}{{$warn = true}}{{end}}{{end}}
{{- if $warn}}
<tr><td>warnings</td>{{range .Runs}}<td>{{range .M.Host.Warnings}}{{.}}<br>{{end}}</td>{{end}}</tr>
{{- end}}
</table></div>

<p>Expectations: <span class="badge pass">{{.Expect.Passed}} passed</span> <span class="badge {{if .Expect.Failed}}fail{{end}}">{{.Expect.Failed}} failed</span>
&nbsp; Flags: {{len .Flags}} &nbsp; Phases:
<nav style="display:inline">{{range .Phases}}<a href="#{{.Anchor}}">{{.Name}}</a>{{end}}</nav></p>

{{if .Overview}}
<h3>Overview</h3>
<div class="tw"><table class="nums overview">
<tr><th>phase</th>{{if .Multi}}<th>run</th>{{end}}<th>kind</th><th class="n">ranks</th><th>status</th><th class="n">headline rate</th><th>headline op</th><th class="n">p50</th><th class="n">p99</th><th>expectations</th></tr>
{{range .Overview}}<tr><td><a href="#{{.Anchor}}">{{.Name}}</a></td>{{if $.Multi}}<td><span class="swatch" style="background:{{.Color}}"></span>{{.Run}}</td>{{end}}<td>{{.Kind}}</td><td class="n">{{.Ranks}}</td><td><span class="badge {{.Status}}">{{.Status}}</span></td><td class="n">{{.Rate}}</td><td>{{or .Op "(several)"}}</td><td class="n">{{.P50}}</td><td class="n">{{.P99}}</td><td{{if .Missed}} class="missed"{{end}} style="white-space:normal">{{.Verdicts}}</td></tr>
{{end}}</table></div>
{{end}}

{{if .Flags}}
<h3>Outlier flags</h3>
<div class="tw"><table>
<tr>{{if .Multi}}<th>run</th>{{end}}<th>kind</th><th>phase</th><th class="n">ranks</th><th>detail</th></tr>
{{range .Flags}}<tr class="flag">{{if $.Multi}}<td>{{.Run}}</td>{{end}}<td>{{.Kind}}</td><td>{{.Phase}}</td><td class="n">{{.Ranks}}</td><td>{{.Detail}}</td></tr>
{{end}}</table></div>
{{end}}

{{range .Phases}}
<h2 id="{{.Anchor}}">{{.Name}} <small>{{.Kind}}{{if .Sweep}} · sweep over {{range $i, $c := .AxisCounts}}{{if $i}}, {{end}}{{$c}}{{end}} {{.Axis}}{{end}}</small></h2>
{{with .Note}}<p class="note">{{.}}</p>{{end}}
{{with .Headline}}<p class="note">{{.}}</p>{{end}}
<div class="tw"><table class="nums">
<tr>{{if $.Multi}}<th>run</th>{{end}}<th class="n">ranks</th><th>op</th><th>status</th><th class="n">ops</th><th class="n">bytes</th><th class="n">wall</th><th class="n">bandwidth</th><th class="n">ops/s</th><th class="n">mean</th><th class="n">p50</th><th class="n">p90</th><th class="n">p99</th><th class="n">max</th><th class="n">errors</th></tr>
{{range .Rows}}<tr{{if .Sub}} class="sub"{{end}}>{{if $.Multi}}<td><span class="swatch" style="background:{{.Color}}"></span>{{.Run}}</td>{{end}}<td class="n">{{.Ranks}}</td><td class="op">{{.Op}}</td><td>{{if .Status}}<span class="badge {{.Status}}">{{.Status}}</span>{{end}}</td><td class="n">{{.Ops}}</td><td class="n">{{.Bytes}}</td><td class="n">{{.Wall}}</td><td class="n">{{.BW}}</td><td class="n">{{.OpsPS}}</td><td class="n">{{.Mean}}</td><td class="n">{{.P50}}</td><td class="n">{{.P90}}</td><td class="n">{{.P99}}</td><td class="n">{{.Max}}</td><td class="n">{{.Errors}}</td></tr>
{{end}}</table></div>
<div class="tw"><table class="nums">
<tr>{{if $.Multi}}<th>run</th>{{end}}<th class="n">ranks</th><th class="n">rank busy min–max</th><th class="n">iterations: mean ± 95% CI</th><th>cache</th></tr>
{{range .Rows}}{{if not .Sub}}<tr>{{if $.Multi}}<td><span class="swatch" style="background:{{.Color}}"></span>{{.Run}}</td>{{end}}<td class="n">{{.Ranks}}</td><td class="n">{{.Spread}}</td><td class="n">{{.Iter}}</td><td{{with .CacheWhy}} title="{{.}}"{{end}}>{{.Cache}}{{with .CacheWhy}} <span class="note">({{.}})</span>{{end}}</td></tr>
{{end}}{{end}}</table></div>
{{range .Metrics}}
<h3>Figures of merit{{if $.Multi}}, {{.Run}}{{end}}, {{.Ranks}} ranks</h3>
{{with .Lines}}<pre class="metric">{{range .}}{{.}}
{{end}}</pre>{{end}}
{{if .Rows}}<details{{if not .Lines}} open{{end}}><summary>{{len .Rows}} metrics</summary><div class="tw"><table class="nums"><tr><th>metric</th><th>value</th></tr>
{{range .Rows}}<tr><td>{{.Name}}</td><td class="n">{{.Value}}</td></tr>
{{end}}</table></div></details>{{end}}
{{end}}
{{if .Verdicts}}
<div class="tw"><table>
<tr>{{if $.Multi}}<th>run</th>{{end}}<th class="n">ranks</th><th>expectation</th><th class="n">value</th><th class="n">limit</th><th>verdict</th></tr>
{{range .Verdicts}}<tr>{{if $.Multi}}<td>{{.Run}}</td>{{end}}<td class="n">{{.Ranks}}</td><td>{{.Metric}}</td><td class="n">{{.Value}}</td><td class="n">{{.Limit}}</td><td>{{if .Passed}}<span class="badge pass">pass</span>{{else}}<span class="badge fail">FAIL</span>{{end}}</td></tr>
{{end}}</table></div>
{{end}}
{{range .Flags}}<p class="flag">⚑ {{.Kind}}{{if $.Multi}} ({{.Run}}){{end}}, {{.Ranks}} ranks: {{.Detail}}</p>{{end}}
{{range .Errors}}<p class="err">{{.}}</p>{{end}}
{{if .SweepPlots}}<div class="plots">{{range .SweepPlots}}<div>{{.}}</div>{{end}}</div>{{end}}
{{range .Instances}}
<details{{if .Open}} open{{end}}><summary>{{.Ranks}} ranks: latency by percentile, rates over time, per-rank time</summary>
{{range .Notes}}<p class="note">{{.}}</p>{{end}}
{{if .Plots}}<div class="plots">{{range .Plots}}<div>{{.}}</div>{{end}}</div>{{end}}
</details>
{{end}}
{{end}}
<p class="note">Latency by percentile comes from the merged HdrHistograms (1 ns – 1 h, 3 significant figures), on a logarithmic axis of 1/(1−q): p50, p90, p99, p99.9 … one decade apart, so the tail is as wide as the body; a curve ends where the op count no longer resolves the tail. Rates over time are every rank's ops and bytes per interval since the phase's start (each rank counting from its own start), summed; an interval where nothing ended (between iterations, a pause) is at zero. Where ops nest (save_file holds the writes of a checkpoint file, extract every file of an archive), the outer op is the headline; a phase of several independent op types shows its totals and latency per op type. Busy time per rank: a rank above the dashed line — {{printf "%.3g" .StragglerFactor}} × the median, and at least {{.StragglerMin}} above it — is a straggler. Bandwidth and op rates are aggregate: bytes (ops) over the sum of the iterations' walls.</p>
</body>
</html>
`
