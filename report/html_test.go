package report

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// htmlOf renders runs and checks what every report must be: one document,
// self-contained (no script, no external reference), with at least
// minPlots inline SVG plots.
func htmlOf(t *testing.T, runs []*Manifest, o HTMLOptions, minPlots int) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteHTMLWith(&b, runs, o); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if n := strings.Count(page, "<svg"); n < minPlots {
		t.Errorf("%d <svg> elements, want at least %d", n, minPlots)
	}
	plotsWithData(t, page)
	if strings.Count(page, "<html") != 1 || !strings.HasSuffix(strings.TrimSpace(page), "</html>") {
		t.Error("not one complete HTML document")
	}
	for _, bad := range []string{"<script", "src=", "@import", "url(", `href="http`, "<?xml"} {
		if strings.Contains(page, bad) {
			t.Errorf("report is not self-contained: contains %q", bad)
		}
	}
	// The only absolute URLs are the SVG namespaces.
	rest := strings.NewReplacer(`"http://www.w3.org/2000/svg"`, "", `"http://www.w3.org/1999/xlink"`, "").Replace(page)
	if strings.Contains(rest, "http://") || strings.Contains(rest, "https://") {
		t.Error("report refers to the network")
	}
	return page
}

func TestHTMLSingleRun(t *testing.T) {
	m := synthManifest(1, 1)
	Flags(m)
	// create_files: 2 sweep plots + 3 rank counts × (percentiles,
	// bandwidth, op rate, busy, bytes); list_files: percentiles, op rate,
	// busy; move_files: percentiles, op rate, busy; delete_files was
	// skipped.
	page := htmlOf(t, []*Manifest{m}, HTMLOptions{}, 2+15+3+3)
	for _, want := range []string{
		"create_files: latency vs ranks", "create_files: aggregate bandwidth vs ranks",
		"create_files, 8 ranks: latency by percentile", "create_files, 8 ranks: busy time per rank", "bytes per rank",
		"create_files, 8 ranks: bandwidth per 1s", "create_files, 8 ranks: op rate per 1s", "busy time (ms)",
		">p99.9<", ">p50<", // the percentile axis
		"list_files, 8 ranks: latency by percentile", "readdir", "stat",
		"<h3>Overview</h3>", "headline rate", `missed: min_iops`,
		"scale_inversion", "straggler", "rank 5 on node002", // flags
		"min_iops", "FAIL", // verdicts
		"drop_caches", "lustre", "10.0.0.1@o2ib:/scratch", "rw,flock,lazystatfs", "Open MPI v4.1.4", "424242", // cache, host
		"rename /lustre/scratch/prism/prism-x/r3/f7", // the failed phase's error
		"sweep over 2, 4, 8 ranks",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func TestHTMLOverlay(t *testing.T) {
	a, b := synthManifest(1, 1), synthManifest(2, 2)
	// create_files: latency-vs-ranks per op (1) + rate + 3 × (percentiles,
	// bandwidth, op rate, busy, bytes); list_files: percentiles per op (2)
	// + op rate + busy; move_files: percentiles, op rate, busy.
	page := htmlOf(t, []*Manifest{a, b}, HTMLOptions{Labels: []string{"before-upgrade", "after-upgrade"}}, 2+15+4+3)
	for _, want := range []string{"before-upgrade vs after-upgrade", ">before-upgrade mean<", ">after-upgrade P99<", "list_files stat, 8 ranks: latency by percentile",
		"create_files, 8 ranks: bandwidth per 1s", ">after-upgrade create<", ">before-upgrade<"} {
		if !strings.Contains(page, want) {
			t.Errorf("overlay lacks %q", want)
		}
	}
	// The same run twice still gets two distinct labels.
	page = htmlOf(t, []*Manifest{a, a}, HTMLOptions{}, 10)
	if !strings.Contains(page, a.RunID+"#2") {
		t.Error("duplicate run not relabelled")
	}
	if err := WriteHTML(&bytes.Buffer{}, nil); err == nil {
		t.Error("no manifest: want an error")
	}
}

// browserManifest is synthManifest with what the page must also get
// right: a phase whose ops nest (save_file holds the writes), with MLPerf
// figures of merit, and a failed phase that recorded no op.
func browserManifest() *Manifest {
	m := synthManifest(1, 1)
	rng := rand.New(rand.NewPCG(9, 9))
	save := synthPhase(rng, phaseSpec{name: "ckpt-save", kind: "fsdp_save", ranks: 8,
		ops:   []opSpec{{name: "save_file", n: 4, medianNs: 12e6, sigma: 0.2}, {name: "write", n: 400, medianNs: 981, sigma: 1.2, bytes: 1 << 20}},
		walls: []float64{0.4}}, 1)
	save.Index = 4
	save.MetricLines = []string{"[METRIC] Checkpoint save duration (seconds): 0.4000 (0.0100)", "[METRIC] Checkpoint save I/O Throughput (GiB/second): 7.8125 (0.1000)"}
	save.Metrics = map[string]float64{"checkpoint_bytes": 3355443200, "save_ckpt_000_seconds": 0.39, "save_ckpt_001_seconds": 0.41}
	save.MetricArrays = map[string][]float64{"load_ckpt_seconds": {0.2, 0.3, 0.4}}
	failed := PhaseResult{Index: 5, Name: "nothing", Kind: "list_files", Status: StatusFailed, Ranks: 8, Error: "setup failed: ENOSPC", Expect: []Verdict{}}
	for r := 0; r < 8; r++ {
		failed.PerRank.Append(RankResult{Rank: r, Host: "node001"})
	}
	m.Phases = append(m.Phases, save, failed)
	return m
}

// plotsWithData checks that every inline SVG of page draws data: a path in
// a palette colour (a series' line, a bar) of more than two points.
// Axes and the grid are black and grey; a plot of no data has neither.
func plotsWithData(t *testing.T, page string) int {
	t.Helper()
	var colours []string
	for _, c := range palette {
		colours = append(colours, fmt.Sprintf("#%02X%02X%02X", c.R, c.G, c.B))
	}
	svgs := regexp.MustCompile(`(?s)<svg.*?</svg>`).FindAllString(page, -1)
	path := regexp.MustCompile(`<path d="([^"]*)" style="([^"]*)"`)
	for i, svg := range svgs {
		ok := false
		for _, m := range path.FindAllStringSubmatch(svg, -1) {
			points := strings.Count(m[1], "M") + strings.Count(m[1], "L")
			for _, c := range colours {
				if points > 2 && strings.Contains(m[2], c) {
					ok = true
				}
			}
		}
		if !ok {
			title := regexp.MustCompile(`<text[^>]*>([^<]*)</text>`).FindStringSubmatch(svg)
			t.Errorf("plot %d (%v) draws no data", i, title)
		}
	}
	return len(svgs)
}

// probeScript is added to the page the browser opens (the report itself
// has no script): once the page has loaded, it writes the document's width
// into the DOM, where --dump-dom shows it.
const probeScript = `<script>window.addEventListener("load", function () {
var d = document.createElement("pre"); d.id = "prism-probe";
d.textContent = "scrollWidth=" + document.documentElement.scrollWidth + ";svgs=" + document.querySelectorAll("svg").length;
document.body.appendChild(d); });</script>`

var probeLine = regexp.MustCompile(`scrollWidth=(\d+);svgs=(\d+)`)

// TestHTMLInBrowser renders a report in headless Chromium at 800 and 1400
// px: every plot draws data (in the HTML) and the screenshots show the
// plots' colours; the page raises no script error or console message and
// is no wider than the window (tables scroll inside their box). The
// screenshots are in the test's artefact directory (go test -artifacts
// keeps them; PRISM_SCREENSHOTS=DIR copies them there).
func TestHTMLInBrowser(t *testing.T) {
	m := browserManifest()
	Flags(m)
	page := htmlOf(t, []*Manifest{m}, HTMLOptions{}, 15)
	n := strings.Count(page, "<svg")
	for _, want := range []string{"No op completed: no latency distribution.", "No rank was busy", "setup failed: ENOSPC",
		"Checkpoint save I/O Throughput (GiB/second): 7.8125", "save_ckpt_*_seconds", "2 values: mean 0.4", "load_ckpt_seconds", "3 values: mean 0.3,",
		"save_file holds the phase&#39;s other ops", `<td class="op">save_file</td>`} {
		if !strings.Contains(page, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, bad := range []string{"seconds (ns)", "seconds (ms)", "latency CDF"} {
		if strings.Contains(page, bad) {
			t.Errorf("report still has %q", bad)
		}
	}
	dir := t.ArtifactDir()
	html := filepath.Join(dir, "report.html")
	if err := os.WriteFile(html, []byte(strings.Replace(page, "</body>", probeScript+"</body>", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, w := range []int{800, 1400} {
		shot := filepath.Join(dir, fmt.Sprintf("report-%d.png", w))
		dom, log := browse(t, html, shot, w, 4000)
		t.Logf("screenshot at %d px: %s", w, shot)
		if keep := os.Getenv("PRISM_SCREENSHOTS"); keep != "" {
			if b, err := os.ReadFile(shot); err == nil {
				os.WriteFile(filepath.Join(keep, filepath.Base(shot)), b, 0o644)
			}
		}
		checkScreenshot(t, shot)
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, "CONSOLE") || strings.Contains(line, "Uncaught") {
				t.Errorf("at %d px the page logged: %s", w, line)
			}
		}
		pm := probeLine.FindStringSubmatch(dom)
		if pm == nil {
			t.Fatalf("at %d px the probe wrote nothing: the page did not load\n%.2000s", w, dom)
		}
		if sw, _ := strconv.Atoi(pm[1]); sw > w {
			t.Errorf("at %d px the document is %d px wide: something overflows the window", w, sw)
		}
		if got, _ := strconv.Atoi(pm[2]); got != n {
			t.Errorf("the browser found %d svg elements, the HTML has %d", got, n)
		}
	}
}

// browse opens a local HTML file in headless Chromium in a window of
// w×h px, takes a screenshot into png and returns the DOM after the load
// and Chromium's log (console messages among it); it skips the test when
// no Chromium is installed.
func browse(t *testing.T, html, png string, w, h int) (dom, log string) {
	t.Helper()
	var bin string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		t.Skip("no Chromium on PATH (apt-get install chromium): the report is not rendered in a browser")
	}
	profile := t.TempDir()
	args := []string{"--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--enable-logging=stderr", "--v=0",
		"--user-data-dir=" + profile, "--screenshot=" + png, "--dump-dom",
		fmt.Sprintf("--window-size=%d,%d", w, h), "file://" + html}
	if os.Geteuid() == 0 {
		args = append([]string{"--no-sandbox"}, args...) // Chromium refuses root with its sandbox
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = profile
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chromium: %v\n%s", err, errb.String())
		}
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("chromium did not finish in 90 s\n%s", errb.String())
	}
	return out.String(), errb.String()
}

func checkScreenshot(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	st := pixelStats(img)
	t.Logf("screenshot %s: %d×%d, %d colours, %.1f%% non-white, %d pixels of the plot blue",
		path, img.Bounds().Dx(), img.Bounds().Dy(), st.colours, 100*st.nonWhite, st.blue)
	if st.colours < 64 || st.nonWhite < 0.03 || st.blue < 2000 {
		t.Errorf("the page looks blank or unplotted: %+v", st)
	}
}

type pixels struct {
	colours  int
	nonWhite float64
	blue     int // pixels close to the first palette colour (bars, lines)
}

func pixelStats(img image.Image) pixels {
	b := img.Bounds()
	seen := map[color.RGBA]bool{}
	var nonWhite, total int
	var st pixels
	want := palette[0]
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			c := color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), 0xff}
			seen[c] = true
			total++
			if c.R < 245 || c.G < 245 || c.B < 245 {
				nonWhite++
			}
			if absDiff(c.R, want.R) < 24 && absDiff(c.G, want.G) < 24 && absDiff(c.B, want.B) < 24 {
				st.blue++
			}
		}
	}
	st.colours = len(seen)
	st.nonWhite = float64(nonWhite) / float64(total)
	return st
}

func absDiff(a, b uint8) int {
	if a > b {
		return int(a - b)
	}
	return int(b - a)
}

// TestHTMLEdgeCases: a run that failed before its first phase, a phase
// without ops, a thousand ranks (bars become a line), a corrupt histogram.
func TestHTMLEdgeCases(t *testing.T) {
	empty := &Manifest{SchemaVersion: SchemaVersion, RunID: "r0", Status: StatusFailed, Error: "rendezvous timed out"}
	page := htmlOf(t, []*Manifest{empty}, HTMLOptions{}, 0)
	if !strings.Contains(page, "rendezvous timed out") {
		t.Error("run error missing")
	}

	m := synthManifest(3, 1)
	m.Phases = append(m.Phases, PhaseResult{Name: "nothing", Kind: "list_files", Status: StatusFailed, Ranks: 8, Error: "setup failed"})
	wide := PhaseResult{Name: "wide", Kind: "create_files", Status: StatusPassed, Ranks: 1000}
	for r := 0; r < 1000; r++ {
		wide.PerRank.Append(RankResult{Rank: r, Seconds: 1 + float64(r%7)/10, Bytes: 4096})
	}
	m.Phases = append(m.Phases, wide)
	page = htmlOf(t, []*Manifest{m}, HTMLOptions{}, 15+2)
	if !strings.Contains(page, "setup failed") || !strings.Contains(page, "wide, 1000 ranks: busy time per rank") {
		t.Error("edge phases missing")
	}

	m.Phases[0].Histograms["create"] = "not base64!"
	if err := WriteHTML(&bytes.Buffer{}, []*Manifest{m}); err == nil || !strings.Contains(err.Error(), "create_files") {
		t.Errorf("corrupt histogram: %v", err)
	}
}

// The headline: a phase's only op, the outer op where ops nest (its ops,
// rate and latency in the phase's row, the phase's bytes), none where
// independent ops or several outer ones share a phase (totals, no pooled
// latency).
func TestHTMLHeadline(t *testing.T) {
	m := browserManifest()
	run := htmlRun{Label: "r"}
	byName := map[string]*PhaseResult{}
	for i := range m.Phases {
		byName[m.Phases[i].Name] = &m.Phases[i]
	}
	save := byName["ckpt-save"]
	r := phaseRow(run, save)
	st := save.OpsByType["save_file"]
	if HeadlineOp(save) != "save_file" || !Nested(save) || r.Op != "save_file" || r.P50 != FormatNs(st.Latency.P50) ||
		r.Ops != fmt.Sprint(st.Ops) || r.Bytes != FormatBytes(save.Bytes) {
		t.Errorf("nested: headline %q, row %+v", HeadlineOp(save), r)
	}
	if save.Latency.P50 >= st.Latency.P50/100 {
		t.Fatalf("test data: the pooled p50 %d should be far below save_file's %d", save.Latency.P50, st.Latency.P50)
	}
	list := byName["list_files"]
	if r := phaseRow(run, list); HeadlineOp(list) != "" || r.Op != "all" || r.P50 != "" || r.Ops != fmt.Sprint(list.Ops) {
		t.Errorf("independent ops: headline %q, row %+v", HeadlineOp(list), r)
	}
	both := &PhaseResult{OpsByType: map[string]OpStats{"save_file": {}, "load_file": {}, "write": {}, "read": {}}}
	if HeadlineOp(both) != "" || len(OuterOps(both)) != 2 {
		t.Errorf("save and load: headline %q, outer %v", HeadlineOp(both), OuterOps(both))
	}
	one := &PhaseResult{OpsByType: map[string]OpStats{"create": {}}}
	if HeadlineOp(one) != "create" || Nested(one) {
		t.Errorf("one op: headline %q", HeadlineOp(one))
	}
	// The overview puts the headline op's p50 and p99 first.
	page := htmlOf(t, []*Manifest{m}, HTMLOptions{}, 10)
	ov := page[strings.Index(page, "<h3>Overview</h3>"):strings.Index(page, `<h2 id="p0"`)]
	if !strings.Contains(ov, ">ckpt-save<") || !strings.Contains(ov, FormatNs(st.Latency.P99)) || !strings.Contains(ov, ">(several)<") ||
		strings.Contains(ov, ">0 ops/s<") { // the phase that timed no op has no rate

		t.Errorf("overview:\n%s", ov)
	}
}
