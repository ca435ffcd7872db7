package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// reportPlan has a sweep (create_files at 1 and 2 ranks) and a phase of two
// op types, so the report has every kind of plot.
const reportPlan = `
[plan]
name = "report"
drop_caches = "none"

[[phase]]
kind = "create_files"
count = 30
size = "4KiB"
ranks = [1, 2]
iterations = 2
[phase.expect]
p99 = "10s"

[[phase]]
kind = "list_files"
count = 30
`

var reportLine = regexp.MustCompile(`(?m)^report: (.+)$`)

// TestReportVerb runs a plan twice on 2 local ranks, re-renders one run's
// report next to its manifest and overlays both runs into one page.
func TestReportVerb(t *testing.T) {
	dir := t.TempDir()
	plan := writePlan(t, dir, reportPlan)
	var manifests []string
	for i := 0; i < 2; i++ {
		r := prism(t, dir, "run", "-n", "2", plan, "--workdir", dir, "--results", filepath.Join(dir, "res"))
		if r.code != 0 {
			t.Fatalf("run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		m := manifestLine.FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("no manifest line:\n%s", r.stdout)
		}
		manifests = append(manifests, m[1])
	}

	// One run: report.html next to the manifest. create_files: 2 sweep
	// plots + 2 rank counts × (percentiles, busy, bytes); list_files:
	// percentiles + busy (phases this short have no time series).
	r := prism(t, dir, "report", manifests[0])
	want := filepath.Join(filepath.Dir(manifests[0]), "report.html")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "report: "+want {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	page := readPage(t, want, 10)
	for _, s := range []string{"create_files: latency vs ranks", "create_files, 2 ranks: busy time per rank", "list_files, 2 ranks: latency by percentile", "readdir", "p99", "<h3>Overview</h3>"} {
		if !strings.Contains(page, s) {
			t.Errorf("report lacks %q", s)
		}
	}

	// Two runs overlaid, labelled, written where --out says.
	out := filepath.Join(dir, "ab.html")
	r = prism(t, dir, "report", "--out", out, "--label", "A,B", manifests[0], manifests[1])
	if m := reportLine.FindStringSubmatch(r.stdout); r.code != 0 || m == nil || m[1] != out {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// create_files: latency per op (1) + rate + 2 × 3; list_files: 2
	// percentile plots + busy.
	page = readPage(t, out, 11)
	for _, s := range []string{"A vs B", ">A mean<", ">B P99<", "list_files stat, 2 ranks: latency by percentile"} {
		if !strings.Contains(page, s) {
			t.Errorf("overlay lacks %q", s)
		}
	}

	// Several manifests and no --out: ./report.html.
	if r := prism(t, dir, "report", manifests[0], manifests[1]); r.code != 0 || strings.TrimSpace(r.stdout) != "report: report.html" {
		t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "report.html")); err != nil {
		t.Error(err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"report"}, "usage: prism report"},
		{[]string{"report", "--label", "a", manifests[0], manifests[1]}, "1 labels for 2 manifests"},
		{[]string{"report", filepath.Join(dir, "nope.json")}, "no such file"},
		{[]string{"report", plan}, "not a prism manifest"},
	} {
		if r := prism(t, dir, tc.args...); r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d\n%s%s", tc.args, r.code, r.stdout, r.stderr)
		}
	}
}

func readPage(t *testing.T, path string, minPlots int) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if n := strings.Count(page, "<svg"); n < minPlots {
		t.Errorf("%s: %d <svg> elements, want at least %d", path, n, minPlots)
	}
	if strings.Contains(page, "<script") || strings.Contains(page, "https://") {
		t.Errorf("%s is not self-contained", path)
	}
	return page
}
