package report

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
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
	Flags   []htmlFlag
	Expect  struct{ Passed, Failed int }
	// StragglerFactor and StragglerMin describe the straggler limit drawn
	// on rank bars.
	StragglerFactor float64
	StragglerMin    string
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
	Note               string
	Rows               []htmlRow
	Verdicts           []htmlVerdict
	Flags              []htmlFlag
	Errors             []string
	SweepPlots         []template.HTML
	Instances          []*htmlInstance
}

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
}

// runPhase is one run's result of one phase at one rank count.
type runPhase struct {
	run int
	p   *PhaseResult
}

func buildPage(runs []*Manifest, o HTMLOptions) (*htmlPage, error) {
	page := &htmlPage{Multi: len(runs) > 1, StragglerFactor: DefaultFlagOptions.StragglerFactor,
		StragglerMin: FormatSeconds(DefaultFlagOptions.StragglerMinSeconds)}
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
		if len(p.OpsByType) > 1 {
			for _, op := range sortedOps(p.OpsByType) {
				hp.Rows = append(hp.Rows, opRow(run, p, op))
			}
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
		plots, err := instancePlots(page, name, k, at)
		if err != nil {
			return nil, err
		}
		inst.Plots = plots
		hp.Instances = append(hp.Instances, inst)
	}
	return hp, nil
}

func phaseRow(run htmlRun, p *PhaseResult) htmlRow {
	r := htmlRow{Run: run.Label, Color: run.Color, Ranks: p.Ranks, Status: p.Status, Cache: p.Cache.Applied,
		Ops: fmt.Sprint(p.Ops), Bytes: FormatBytes(p.Bytes), Wall: FormatSeconds(p.WallSeconds),
		BW: rateOrDash(p.BytesPerSec), OpsPS: formatOps(p.OpsPerSec),
		Mean: FormatNs(int64(p.Latency.Mean)), P50: FormatNs(p.Latency.P50), P90: FormatNs(p.Latency.P90),
		P99: FormatNs(p.Latency.P99), Max: FormatNs(p.Latency.Max), Errors: fmt.Sprint(p.Errors),
		Iter: fmt.Sprint(len(p.Iterations))}
	r.CacheWhy = p.Cache.Reason
	if p.LastDoneSeconds > 0 {
		r.Spread = FormatSeconds(p.FirstDoneSeconds) + " – " + FormatSeconds(p.LastDoneSeconds)
	}
	if len(p.Iterations) > 1 {
		m, s := mean(p.Iterations), math.Sqrt(variance(p.Iterations))
		ci := tQuantile(0.95, float64(len(p.Iterations)-1)) * s / math.Sqrt(float64(len(p.Iterations)))
		r.Iter = fmt.Sprintf("%d: %s ± %s", len(p.Iterations), FormatSeconds(m), FormatSeconds(ci))
	}
	return r
}

func opRow(run htmlRun, p *PhaseResult, op string) htmlRow {
	s := p.OpsByType[op]
	return htmlRow{Run: run.Label, Color: run.Color, Ranks: p.Ranks, Op: op, Sub: true,
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

// instancePlots draws, for one rank count: the latency CDFs (one plot with
// a line per op type for a single run; one plot per op type with a line per
// run for an overlay) and the per-rank bars.
func instancePlots(page *htmlPage, name string, k int, at []runPhase) ([]template.HTML, error) {
	var plots []template.HTML
	ops := opsOf(at)
	hists := map[int]map[string]*hdr.Histogram{}
	for _, rp := range at {
		hists[rp.run] = map[string]*hdr.Histogram{}
		for op, enc := range rp.p.Histograms {
			h, err := DecodeHistogram(enc)
			if err != nil {
				return nil, fmt.Errorf("%s: phase %s: %w", page.Runs[rp.run].Label, name, err)
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
	if !page.Multi {
		var ss []series
		for i, op := range ops {
			if h := hists[at[0].run][op]; h != nil {
				ss = append(ss, series{label: op, color: paletteColor(i), xys: cdfPoints(h)})
			}
		}
		if err := add(cdfPlot(fmt.Sprintf("%s, %d ranks: latency CDF", name, k), ss)); err != nil {
			return nil, err
		}
	} else {
		for _, op := range ops {
			var ss []series
			for _, rp := range at {
				if h := hists[rp.run][op]; h != nil {
					ss = append(ss, series{label: page.Runs[rp.run].Label, color: paletteColor(rp.run), xys: cdfPoints(h)})
				}
			}
			if err := add(cdfPlot(fmt.Sprintf("%s %s, %d ranks: latency CDF", name, op, k), ss)); err != nil {
				return nil, err
			}
		}
	}

	// Per-rank busy seconds, with the straggler limit, and bytes.
	maxSec, maxBytes := 0.0, 0.0
	for _, rp := range at {
		for _, r := range rp.p.PerRank {
			maxSec = math.Max(maxSec, r.Seconds)
			maxBytes = math.Max(maxBytes, float64(r.Bytes))
		}
	}
	unit, div := durationUnit(maxSec * 1e9)
	div /= 1e9
	bunit, bdiv := byteUnit(maxBytes)
	var secs, byts []barGroup
	for _, rp := range at {
		if len(rp.p.PerRank) == 0 {
			continue
		}
		g := barGroup{label: page.Runs[rp.run].Label, color: paletteColor(rp.run)}
		b := g
		all := make([]float64, len(rp.p.PerRank))
		for i, r := range rp.p.PerRank {
			g.values = append(g.values, r.Seconds/div)
			b.values = append(b.values, float64(r.Bytes)/bdiv)
			all[i] = r.Seconds
		}
		if len(all) > 1 {
			g.limit = StragglerLimit(median(all), DefaultFlagOptions) / div
		}
		if !page.Multi {
			g.color, b.color = paletteColor(0), paletteColor(2)
		}
		secs, byts = append(secs, g), append(byts, b)
	}
	if len(secs) > 0 {
		if err := add(rankBars(fmt.Sprintf("%s, %d ranks: busy time per rank", name, k), "seconds ("+unit+")", secs)); err != nil {
			return nil, err
		}
		if maxBytes > 0 {
			if err := add(rankBars(fmt.Sprintf("%s, %d ranks: bytes per rank", name, k), bunit, byts)); err != nil {
				return nil, err
			}
		}
	}
	return plots, nil
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
				xys = append(xys, plotter.XY{X: float64(rp.p.Ranks), Y: pick(s.Latency) / div})
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
		svg, err := sweepPlot(fmt.Sprintf("%s: latency vs ranks", hp.Name), ylabel, hp.Counts, ss, logY)
		if err != nil {
			return nil, err
		}
		plots = append(plots, svg)
	} else {
		for _, op := range ops {
			var ss []series
			for ri, r := range page.Runs {
				ss = append(ss,
					series{label: r.Label + " mean", color: paletteColor(ri), glyph: draw.CircleGlyph{}, xys: curve(ri, op, meanOf)},
					series{label: r.Label + " P99", color: paletteColor(ri), dashed: true, glyph: draw.TriangleGlyph{}, xys: curve(ri, op, p99Of)})
			}
			svg, err := sweepPlot(fmt.Sprintf("%s %s: latency vs ranks", hp.Name, op), ylabel, hp.Counts, ss, logY)
			if err != nil {
				return nil, err
			}
			plots = append(plots, svg)
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
				xys = append(xys, plotter.XY{X: float64(rp.p.Ranks), Y: rate(rp.p) / rdiv})
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
	svg, err := sweepPlot(fmt.Sprintf("%s: aggregate %s vs ranks", hp.Name, what), ylabel, hp.Counts, ss, false)
	if err != nil {
		return nil, err
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
body { font: 14px/1.4 "Liberation Sans", Arial, Helvetica, sans-serif; color: #222; margin: 0 auto; padding: 16px 24px; max-width: 1400px; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 28px 0 6px; padding-top: 8px; border-top: 2px solid #0072b2; }
h2 small, h1 small { font-weight: normal; color: #666; font-size: 13px; }
h3 { font-size: 14px; margin: 14px 0 4px; }
table { border-collapse: collapse; margin: 6px 0 10px; font-size: 12.5px; }
table.nums td, table.nums th { white-space: nowrap; padding: 3px 6px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #e4e4e4; text-align: left; vertical-align: top; }
th { background: #f3f5f8; font-weight: 600; white-space: nowrap; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.sub td { color: #555; background: #fafafa; }
tr.sub td.op { padding-left: 22px; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 5px; vertical-align: baseline; }
.badge { display: inline-block; padding: 0 7px; border-radius: 9px; font-size: 12px; color: #fff; background: #888; }
.passed, .pass { background: #1a7f37; }
.failed, .fail { background: #cf222e; }
.interrupted { background: #bf8700; }
.skipped { background: #888; }
.flag { background: #fff4e5; }
.err { color: #cf222e; white-space: pre-wrap; font-family: "Liberation Mono", monospace; font-size: 12px; }
.note { color: #666; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 10px 18px; }
.plots svg { width: 100%; height: auto; display: block; overflow: visible; }
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
<table class="meta">
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
</table>

<p>Expectations: <span class="badge pass">{{.Expect.Passed}} passed</span> <span class="badge {{if .Expect.Failed}}fail{{end}}">{{.Expect.Failed}} failed</span>
&nbsp; Flags: {{len .Flags}} &nbsp; Phases:
<nav style="display:inline">{{range .Phases}}<a href="#{{.Anchor}}">{{.Name}}</a>{{end}}</nav></p>

{{if .Flags}}
<h3>Outlier flags</h3>
<table>
<tr>{{if .Multi}}<th>run</th>{{end}}<th>kind</th><th>phase</th><th class="n">ranks</th><th>detail</th></tr>
{{range .Flags}}<tr class="flag">{{if $.Multi}}<td>{{.Run}}</td>{{end}}<td>{{.Kind}}</td><td>{{.Phase}}</td><td class="n">{{.Ranks}}</td><td>{{.Detail}}</td></tr>
{{end}}</table>
{{end}}

{{range .Phases}}
<h2 id="{{.Anchor}}">{{.Name}} <small>{{.Kind}}{{if .Sweep}} · sweep over {{range $i, $c := .Counts}}{{if $i}}, {{end}}{{$c}}{{end}} ranks{{end}}</small></h2>
{{with .Note}}<p class="note">{{.}}</p>{{end}}
<table class="nums">
<tr>{{if $.Multi}}<th>run</th>{{end}}<th class="n">ranks</th><th>op</th><th>status</th><th class="n">ops</th><th class="n">bytes</th><th class="n">wall</th><th class="n">bandwidth</th><th class="n">ops/s</th><th class="n">mean</th><th class="n">p50</th><th class="n">p90</th><th class="n">p99</th><th class="n">max</th><th class="n">errors</th><th class="n">rank busy min–max</th><th class="n">iterations: mean ± 95% CI</th><th>cache</th></tr>
{{range .Rows}}<tr{{if .Sub}} class="sub"{{end}}>{{if $.Multi}}<td><span class="swatch" style="background:{{.Color}}"></span>{{.Run}}</td>{{end}}<td class="n">{{.Ranks}}</td><td class="op">{{if .Sub}}{{.Op}}{{else}}all{{end}}</td><td>{{if .Status}}<span class="badge {{.Status}}">{{.Status}}</span>{{end}}</td><td class="n">{{.Ops}}</td><td class="n">{{.Bytes}}</td><td class="n">{{.Wall}}</td><td class="n">{{.BW}}</td><td class="n">{{.OpsPS}}</td><td class="n">{{.Mean}}</td><td class="n">{{.P50}}</td><td class="n">{{.P90}}</td><td class="n">{{.P99}}</td><td class="n">{{.Max}}</td><td class="n">{{.Errors}}</td><td class="n">{{.Spread}}</td><td class="n">{{.Iter}}</td><td{{with .CacheWhy}} title="{{.}}"{{end}}>{{.Cache}}</td></tr>
{{end}}</table>
{{if .Verdicts}}
<table>
<tr>{{if $.Multi}}<th>run</th>{{end}}<th class="n">ranks</th><th>expectation</th><th class="n">value</th><th class="n">limit</th><th>verdict</th></tr>
{{range .Verdicts}}<tr>{{if $.Multi}}<td>{{.Run}}</td>{{end}}<td class="n">{{.Ranks}}</td><td>{{.Metric}}</td><td class="n">{{.Value}}</td><td class="n">{{.Limit}}</td><td>{{if .Passed}}<span class="badge pass">pass</span>{{else}}<span class="badge fail">FAIL</span>{{end}}</td></tr>
{{end}}</table>
{{end}}
{{range .Flags}}<p class="flag">⚑ {{.Kind}}{{if $.Multi}} ({{.Run}}){{end}}, {{.Ranks}} ranks: {{.Detail}}</p>{{end}}
{{range .Errors}}<p class="err">{{.}}</p>{{end}}
{{if .SweepPlots}}<div class="plots">{{range .SweepPlots}}<div>{{.}}</div>{{end}}</div>{{end}}
{{range .Instances}}
<details{{if .Open}} open{{end}}><summary>{{.Ranks}} ranks: latency distribution and per-rank time</summary>
<div class="plots">{{range .Plots}}<div>{{.}}</div>{{end}}</div>
</details>
{{end}}
{{end}}
<p class="note">Latency CDFs come from the merged HdrHistograms (1 ns – 1 h, 3 significant figures). Busy time per rank: a rank above the dashed line — {{printf "%.3g" .StragglerFactor}} × the median, and at least {{.StragglerMin}} above it — is a straggler. Bandwidth and op rates are aggregate: bytes (ops) over the sum of the iterations' walls.</p>
</body>
</html>
`
