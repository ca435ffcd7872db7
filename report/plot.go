package report

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"math"
	"sort"
	"strconv"
	"strings"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The plots of report.html, drawn with gonum/plot and rendered to SVG by
// vgsvg. Fonts are not embedded (that would add ~300 KB per plot): the
// layout is computed with Liberation Sans metrics, and the page's CSS asks
// for Liberation Sans or its metric twins (Arimo, Arial, Helvetica) before
// any sans-serif, and lets labels overflow the SVG box rather than clip.

// Plot size in points; the page scales the SVG to its column.
const (
	plotW = 5.2 * vg.Inch
	plotH = 3.4 * vg.Inch
)

// palette is Okabe & Ito's colour-blind-safe set, in the order series take
// them.
var palette = []color.RGBA{
	{0x00, 0x72, 0xB2, 0xff}, // blue
	{0xD5, 0x5E, 0x00, 0xff}, // vermillion
	{0x00, 0x9E, 0x73, 0xff}, // bluish green
	{0xCC, 0x79, 0xA7, 0xff}, // reddish purple
	{0xE6, 0x9F, 0x00, 0xff}, // orange
	{0x56, 0xB4, 0xE9, 0xff}, // sky blue
	{0x44, 0x44, 0x44, 0xff}, // dark grey
	{0x99, 0x99, 0x44, 0xff}, // olive
}

func paletteColor(i int) color.RGBA { return palette[i%len(palette)] }

// cssColor is the colour as CSS, for the HTML legends next to plots.
func cssColor(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

// series is one line of a line plot.
type series struct {
	label  string
	color  color.RGBA
	dashed bool
	repeat bool             // its colour is another series' too: dashed to tell them apart
	glyph  draw.GlyphDrawer // nil: no point markers
	xys    plotter.XYs
}

// newPlot returns a plot with the house style: light grid, small fonts.
func newPlot(title, xlabel, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = vg.Points(9)
		a.Tick.Label.Font.Size = vg.Points(8)
	}
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Legend.ThumbnailWidth = vg.Points(18)
	g := plotter.NewGrid()
	g.Vertical.Color = color.Gray{0xe4}
	g.Horizontal.Color = color.Gray{0xe4}
	p.Add(g)
	return p
}

// addSeries draws each series as a line (and markers) and lists it in the
// legend.
func addSeries(p *plot.Plot, ss []series) error {
	for _, s := range ss {
		if len(s.xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(s.xys)
		if err != nil {
			return err
		}
		l.Color = s.color
		l.Width = vg.Points(1.6)
		if s.dashed || s.repeat {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l)
		thumbs := []plot.Thumbnailer{l}
		if s.glyph != nil {
			sc, err := plotter.NewScatter(s.xys)
			if err != nil {
				return err
			}
			sc.GlyphStyle = draw.GlyphStyle{Color: s.color, Radius: vg.Points(2.6), Shape: s.glyph}
			p.Add(sc)
			thumbs = append(thumbs, sc)
		}
		if s.label != "" {
			p.Legend.Add(s.label, thumbs...)
		}
	}
	return nil
}

// renderSVG draws p and returns the SVG element, without the XML prolog,
// ready to be inlined in HTML.
func renderSVG(p *plot.Plot, w, h vg.Length) (out template.HTML, err error) {
	// gonum/plot panics on data it cannot draw (a log axis with a value <= 0
	// from a damaged manifest, found by FuzzManifestConsumers); one such
	// plot must not cost the whole report.
	defer func() {
		if r := recover(); r != nil {
			out, err = template.HTML(`<p class="noplot">plot unavailable: `+template.HTMLEscapeString(fmt.Sprint(r))+`</p>`), nil
		}
	}()
	c := vgsvg.New(w, h)
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return "", fmt.Errorf("report: render plot: %w", err)
	}
	s := buf.String()
	if i := strings.Index(s, "<svg"); i > 0 {
		s = s[i:]
	}
	// vgsvg escapes every text it writes (html.EscapeString), so the
	// markup is safe to inline.
	return template.HTML(s), nil // #nosec: generated SVG, text escaped by vgsvg
}

// durationLogTicks labels a log axis of nanoseconds at every decade (and
// at 2× and 5× when the axis spans few decades), with minor ticks between.
type durationLogTicks struct{}

func (durationLogTicks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	decades := math.Log10(max / min)
	for d := math.Pow(10, math.Floor(math.Log10(min))); d <= max*1.0001; d *= 10 {
		for m := 1.0; m < 10; m++ {
			v := d * m
			if v < min*0.9999 || v > max*1.0001 {
				continue
			}
			label := ""
			if m == 1 || (decades < 2.5 && (m == 2 || m == 5)) {
				label = compactDuration(v)
			}
			ticks = append(ticks, plot.Tick{Value: v, Label: label})
		}
	}
	return ticks
}

// compactDuration prints nanoseconds as 1ns, 20µs, 500ms, 10s.
func compactDuration(ns float64) string {
	switch {
	case ns < 1e3:
		return fmt.Sprintf("%gns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%gµs", ns/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%gms", ns/1e6)
	}
	return fmt.Sprintf("%gs", ns/1e9)
}

// durationUnit picks the unit in which the largest of values (ns) reads
// best.
func durationUnit(maxNs float64) (string, float64) {
	switch {
	case maxNs >= 5e9:
		return "s", 1e9
	case maxNs >= 5e6:
		return "ms", 1e6
	case maxNs >= 5e3:
		return "µs", 1e3
	}
	return "ns", 1
}

// byteUnit picks a binary unit for the largest of values (bytes).
func byteUnit(maxB float64) (string, float64) {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	div := 1.0
	for _, u := range units {
		if maxB < 1024*div*2 || u == "PiB" {
			return u, div
		}
		div *= 1024
	}
	return "B", 1
}

// plainTicks are gonum's default ticks with labels in %g form ("2500",
// not "2500.00").
type plainTicks struct{}

func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'g', 4, 64)
		}
	}
	return ticks
}

// rankTicks labels a rank-count axis at the counts that were run.
func rankTicks(counts []int) plot.ConstantTicks {
	var t plot.ConstantTicks
	for _, c := range counts {
		t = append(t, plot.Tick{Value: float64(c), Label: fmt.Sprint(c)})
	}
	return t
}

// sweepPlot draws a metric against the rank count (log scale when the
// counts span a factor of 4 or more); y from zero, or, with logNs, on a
// log scale of nanoseconds labelled as durations (mean and P99 latency
// far apart on one plot).
func sweepPlot(title, xlabel, ylabel string, counts []int, ss []series, logNs bool) (template.HTML, error) {
	p := newPlot(title, xlabel, ylabel)
	sort.Ints(counts)
	lo, hi := float64(counts[0]), float64(counts[len(counts)-1])
	if hi/lo >= 4 {
		p.X.Scale = plot.LogScale{}
		p.X.Min, p.X.Max = lo/1.25, hi*1.25
	} else {
		pad := math.Max(0.5, (hi-lo)*0.08)
		p.X.Min, p.X.Max = lo-pad, hi+pad
	}
	p.X.Tick.Marker = rankTicks(counts)
	ymin, ymax := math.Inf(1), 0.0
	points := 0
	for _, s := range ss {
		points += len(s.xys)
		for _, xy := range s.xys {
			ymax = math.Max(ymax, xy.Y)
			if xy.Y > 0 {
				ymin = math.Min(ymin, xy.Y)
			}
		}
	}
	if points == 0 {
		return "", nil // no instance passed: nothing to draw
	}
	if logNs && ymax > 0 {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = durationLogTicks{}
		p.Y.Min = math.Pow(10, math.Floor(math.Log10(ymin)))
		p.Y.Max = ymax * 4 // room for the legend above the curves
		for i := range ss {
			ss[i].xys = positiveY(ss[i].xys)
		}
	} else {
		p.Y.Min = 0
		p.Y.Max = ymax * 1.3 // room for the legend above the curves
		if p.Y.Max == 0 {
			p.Y.Max = 1
		}
		p.Y.Tick.Marker = plainTicks{}
	}
	if err := addSeries(p, ss); err != nil {
		return "", err
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(6)
	return renderSVG(p, plotW, plotH)
}

// positiveY drops the points a log axis cannot show.
func positiveY(xys plotter.XYs) plotter.XYs {
	out := xys[:0:0]
	for _, xy := range xys {
		if xy.Y > 0 {
			out = append(out, xy)
		}
	}
	return out
}

// barGroup is one run's per-rank values in a rank bar chart.
type barGroup struct {
	label  string
	color  color.RGBA
	values []float64
	// limit, when > 0, is drawn as a dashed line: the busy time above
	// which a rank is a straggler.
	limit float64
}

// rankBars draws one bar per rank (grouped side by side when several runs
// are overlaid), with each group's straggler limit as a dashed line. With
// very many ranks the bars become a line per run.
func rankBars(title, ylabel string, groups []barGroup) (template.HTML, error) {
	return bars(title, "rank", nil, ylabel, groups)
}

// bars is rankBars with other bars than ranks: names, when given, label
// the bars (hosts) on the x axis.
func bars(title, xlabel string, names []string, ylabel string, groups []barGroup) (template.HTML, error) {
	p := newPlot(title, xlabel, ylabel)
	n, ymax := 0, 0.0
	for _, g := range groups {
		n = max(n, len(g.values))
		for _, v := range g.values {
			ymax = math.Max(ymax, v)
		}
		ymax = math.Max(ymax, g.limit)
	}
	if n == 0 {
		return "", nil
	}
	area := plotW - vg.Points(70)
	slot := area / vg.Length(n)
	asBars := n*len(groups) <= 512
	for gi, g := range groups {
		if asBars {
			w := slot * 0.8 / vg.Length(len(groups))
			b, err := plotter.NewBarChart(plotter.Values(g.values), w)
			if err != nil {
				return "", err
			}
			b.Color = g.color
			b.LineStyle.Width = 0
			b.Offset = w * (vg.Length(gi) - vg.Length(len(groups)-1)/2)
			p.Add(b)
			if len(groups) > 1 {
				p.Legend.Add(g.label, b)
			}
		} else {
			xys := make(plotter.XYs, len(g.values))
			for i, v := range g.values {
				xys[i] = plotter.XY{X: float64(i), Y: v}
			}
			label := ""
			if len(groups) > 1 {
				label = g.label
			}
			if err := addSeries(p, []series{{label: label, color: g.color, xys: xys}}); err != nil {
				return "", err
			}
		}
		if g.limit > 0 {
			label := "straggler limit"
			if len(groups) > 1 {
				label = g.label + " limit"
			}
			if err := addSeries(p, []series{{label: label, color: g.color, dashed: true,
				xys: plotter.XYs{{X: -0.5, Y: g.limit}, {X: float64(n) - 0.5, Y: g.limit}}}}); err != nil {
				return "", err
			}
		}
	}
	p.X.Min, p.X.Max = -0.6, float64(n)-0.4
	if n <= 32 {
		var t plot.ConstantTicks
		for i := 0; i < n; i++ {
			label := fmt.Sprint(i)
			if i < len(names) {
				label = names[i]
			}
			t = append(t, plot.Tick{Value: float64(i), Label: label})
		}
		p.X.Tick.Marker = t
	}
	p.Y.Min = 0
	p.Y.Max = ymax * 1.3
	if p.Y.Max == 0 {
		p.Y.Max = 1
	}
	p.Y.Tick.Marker = plainTicks{}
	p.Legend.Top = true // in the headroom above the bars
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(6)
	return renderSVG(p, plotW, plotH)
}

// legendRoom is the fraction of a plot's height that a legend of n
// entries in its top left corner takes: the axis is extended by that
// much above the data, so no entry covers a curve.
func legendRoom(n int) float64 { return 0.06 + 0.055*float64(n) }

// logMaxWithRoom is the top of a log axis from lo to hi with room for a
// legend of n entries above hi.
func logMaxWithRoom(lo, hi float64, n int) float64 {
	f := legendRoom(n)
	return math.Pow(10, math.Log10(hi)+f/(1-f)*math.Log10(hi/lo))
}

// percentileMarks are the percentiles labelled on a percentile plot's
// axis, at x = 1/(1−q).
var percentileMarks = []struct {
	x     float64
	label string
}{{1, "p0"}, {2, "p50"}, {10, "p90"}, {100, "p99"}, {1e3, "p99.9"}, {1e4, "p99.99"}, {1e5, "p99.999"}}

// percentilePoints samples h's latency at quantile q against x = 1/(1−q),
// HdrHistogram's classic percentile distribution: 20 points per decade
// from p0 up to p99.999, or up to where the op count still resolves the
// tail (1/(1−q) ≤ ops), ending at the maximum.
func percentilePoints(h *hdr.Histogram) plotter.XYs {
	total := h.TotalCount()
	if total == 0 {
		return nil
	}
	xEnd := math.Min(1e5, math.Max(float64(total), 2))
	var xys plotter.XYs
	for k := 0; ; k++ {
		x := math.Pow(10, float64(k)/20)
		if x >= xEnd {
			break
		}
		xys = append(xys, plotter.XY{X: x, Y: float64(max(h.ValueAtQuantile(100*(1-1/x)), 1))})
	}
	return append(xys, plotter.XY{X: xEnd, Y: float64(max(h.Max(), 1))})
}

// percentilePlot draws latency against percentile on a logarithmic
// 1/(1−q) axis, where a tail that grew shows as a curve that rose on the
// right. The latency axis is logarithmic when the curves span more than a
// factor of 10, else linear from zero in one unit.
func percentilePlot(title string, ss []series) (template.HTML, error) {
	lo, hi, xmax := math.Inf(1), 0.0, 0.0
	for _, s := range ss {
		for _, xy := range s.xys {
			lo, hi, xmax = math.Min(lo, xy.Y), math.Max(hi, xy.Y), math.Max(xmax, xy.X)
		}
	}
	if hi == 0 {
		return "", nil
	}
	p := newPlot(title, "percentile (log scale of 1/(1−q))", "")
	p.X.Scale = plot.LogScale{}
	p.X.Min, p.X.Max = 1, math.Max(xmax, 10)
	var ticks plot.ConstantTicks
	for _, m := range percentileMarks {
		if m.x <= p.X.Max*1.0001 {
			ticks = append(ticks, plot.Tick{Value: m.x, Label: m.label})
		}
	}
	p.X.Tick.Marker = ticks
	if hi > 10*lo {
		p.Y.Label.Text = "latency (log scale)"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = durationLogTicks{}
		p.Y.Min = math.Pow(10, math.Floor(math.Log10(lo)))
		p.Y.Max = logMaxWithRoom(p.Y.Min, hi, legendEntries(ss))
	} else {
		unit, div := durationUnit(hi)
		p.Y.Label.Text = "latency (" + unit + ")"
		scaled := make([]series, len(ss))
		for i, s := range ss {
			scaled[i] = s
			scaled[i].xys = make(plotter.XYs, len(s.xys))
			for j, xy := range s.xys {
				scaled[i].xys[j] = plotter.XY{X: xy.X, Y: xy.Y / div}
			}
		}
		ss = scaled
		p.Y.Min, p.Y.Max = 0, hi/div/(1-legendRoom(legendEntries(ss)))
		p.Y.Tick.Marker = plainTicks{}
	}
	return drawWithLegend(p, ss)
}

// maxLegend is the most entries a legend inside a plot holds; a plot of
// more series gets its legend below it, in HTML, where it covers nothing.
const maxLegend = 4

// drawWithLegend adds ss to p and renders it, with the legend in the top
// left corner, or below the plot when there are more than maxLegend
// entries.
func drawWithLegend(p *plot.Plot, ss []series) (template.HTML, error) {
	inside := ss
	if len(ss) > maxLegend {
		inside = make([]series, len(ss))
		for i, s := range ss {
			inside[i] = s
			inside[i].label = ""
		}
	}
	if err := addSeries(p, inside); err != nil {
		return "", err
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(6)
	svg, err := renderSVG(p, plotW, plotH)
	if err != nil || len(ss) <= maxLegend {
		return svg, err
	}
	var b strings.Builder
	b.WriteString(`<div class="legend">`)
	for _, s := range ss {
		style := "solid"
		if s.dashed || s.repeat {
			style = "dashed"
		}
		fmt.Fprintf(&b, `<span><i style="border-top:3px %s %s"></i>%s</span>`, style, cssColor(s.color), template.HTMLEscapeString(s.label))
	}
	b.WriteString(`</div>`)
	return svg + template.HTML(b.String()), nil
}

// legendEntries is how many entries a plot's own legend has.
func legendEntries(ss []series) int {
	if len(ss) > maxLegend {
		return 0
	}
	return len(ss)
}

// stairs turns per-interval counts into a rate drawn as steps: each
// interval a flat segment at count/width, the last one as wide as lastW
// (the phase ended inside it) when 0 < lastW < width.
func stairs(counts []int64, width, lastW, div float64) plotter.XYs {
	var xys plotter.XYs
	for i, c := range counts {
		t0, w := float64(i)*width, width
		if i == len(counts)-1 && lastW > 0 && lastW < width {
			w = lastW
		}
		v := float64(c) / w / div
		xys = append(xys, plotter.XY{X: t0, Y: v}, plotter.XY{X: t0 + w, Y: v})
	}
	return xys
}

// timelinePlot draws rates against seconds since the phase's start, from
// zero.
func timelinePlot(title, ylabel string, ss []series) (template.HTML, error) {
	ymax, xmax := 0.0, 0.0
	for _, s := range ss {
		for _, xy := range s.xys {
			ymax, xmax = math.Max(ymax, xy.Y), math.Max(xmax, xy.X)
		}
	}
	if xmax == 0 || math.IsInf(ymax+xmax, 0) || math.IsNaN(ymax+xmax) {
		return "", nil
	}
	p := newPlot(title, "seconds since the phase's start", ylabel)
	p.X.Min, p.X.Max = 0, xmax
	p.X.Tick.Marker = plainTicks{}
	p.Y.Min, p.Y.Max = 0, math.Max(ymax/(1-legendRoom(legendEntries(ss))), 1e-9)
	p.Y.Tick.Marker = plainTicks{}
	return drawWithLegend(p, ss)
}
