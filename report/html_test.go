package report

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
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
	// create_files: 2 sweep plots + 3 rank counts × (CDF, busy, bytes);
	// list_files and move_files: CDF + busy; delete_files was skipped.
	page := htmlOf(t, []*Manifest{m}, HTMLOptions{}, 2+9+2+2)
	for _, want := range []string{
		"create_files: latency vs ranks", "create_files: aggregate bandwidth vs ranks",
		"create_files, 8 ranks: latency CDF", "create_files, 8 ranks: busy time per rank", "bytes per rank",
		"list_files, 8 ranks: latency CDF", "readdir", "stat",
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
	// create_files: latency-vs-ranks per op (1) + rate + 3 × (CDF, busy,
	// bytes); list_files: a CDF per op (2) + busy; move_files: CDF + busy.
	page := htmlOf(t, []*Manifest{a, b}, HTMLOptions{Labels: []string{"before-upgrade", "after-upgrade"}}, 2+9+3+2)
	for _, want := range []string{"before-upgrade vs after-upgrade", ">before-upgrade mean<", ">after-upgrade P99<", "list_files stat, 8 ranks: latency CDF"} {
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

// TestHTMLInBrowser renders the report every run writes in headless
// Chromium and checks the screenshot: it decodes, is not blank, and shows
// the plots' colours (the SVG was drawn, not just the text). One page, as a
// browser start costs seconds on a loaded machine; the overlay shares its
// template and plots. PRISM_SCREENSHOTS=DIR keeps the PNG for a human look.
func TestHTMLInBrowser(t *testing.T) {
	m := synthManifest(1, 1)
	Flags(m)
	page := htmlOf(t, []*Manifest{m}, HTMLOptions{}, 15)
	dir := t.TempDir()
	html := filepath.Join(dir, "report.html")
	if err := os.WriteFile(html, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	shot := screenshot(t, html, filepath.Join(dir, "report.png"))
	if keep := os.Getenv("PRISM_SCREENSHOTS"); keep != "" {
		if b, err := os.ReadFile(shot); err == nil {
			os.WriteFile(filepath.Join(keep, "report.png"), b, 0o644)
		}
	}
	checkScreenshot(t, shot)
}

// screenshot takes a 1280×2000 screenshot of a local HTML file with
// headless Chromium, skipping the test when no Chromium is installed.
func screenshot(t *testing.T, html, png string) string {
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
		"--disable-dev-shm-usage", "--hide-scrollbars",
		"--user-data-dir=" + profile, "--screenshot=" + png, "--window-size=1280,2000", "file://" + html}
	if os.Geteuid() == 0 {
		args = append([]string{"--no-sandbox"}, args...) // Chromium refuses root with its sandbox
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = profile
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chromium: %v\n%s", err, out.String())
		}
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("chromium did not finish in 90 s\n%s", out.String())
	}
	return png
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
		wide.PerRank = append(wide.PerRank, RankResult{Rank: r, Seconds: 1 + float64(r%7)/10, Bytes: 4096})
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
