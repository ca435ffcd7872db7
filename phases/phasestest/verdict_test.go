package phasestest

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/report"
)

// A missed expectation fails its phase (naming metric, value and limit)
// and the run in every artefact: the summary header, manifest.json's run
// and phase status, junit.xml (one failing testcase per missed threshold,
// the status property) and report.html's badge; the phases after it still
// run. Per-op thresholds ([phase.expect.tick]) check that op's figures, and
// one on an op the phase does not issue fails rather than passing on
// nothing.
func TestMissedExpectationFailsEverywhere(t *testing.T) {
	plan := `[[phase]]
name = "first"
kind = "tick"
[phase.expect]
max_errors = 0
min_iops = 1e18
[phase.expect.tick]
max_errors = 0
min_iops = 1e18
[phase.expect.nosuch]
p99 = "1s"
[[phase]]
name = "second"
kind = "tick"
[phase.expect.tick]
max_errors = 0
`
	res := Run(t, tickRegistry(), plan, Ranks(2))
	m := res.Manifest
	if res.Outcome.Status != report.StatusFailed || !res.Outcome.ExpectFailed || m.Status != report.StatusFailed {
		t.Fatalf("outcome %s (expect failed %v), manifest status %s; want failed", res.Outcome.Status, res.Outcome.ExpectFailed, m.Status)
	}
	first, second := res.Phase(t, "first"), res.Phase(t, "second")
	if first.Status != report.StatusFailed {
		t.Errorf("first: status %s, want failed", first.Status)
	}
	for _, want := range []string{"min_iops", "tick.min_iops", "limit 1,000,000,000,000,000,000", "nosuch"} {
		if !strings.Contains(first.Error, want) {
			t.Errorf("first: error %q lacks %q", first.Error, want)
		}
	}
	if strings.Contains(first.Error, "max_errors") {
		t.Errorf("first: error %q names a threshold that passed", first.Error)
	}
	if second.Status != report.StatusPassed || len(second.Expect) != 1 || !second.Expect[0].Passed || second.Expect[0].Metric != "tick.max_errors" || second.Expect[0].Op != "tick" {
		t.Errorf("second: status %s, verdicts %+v; want it run and passed", second.Status, second.Expect)
	}
	missed := 0
	for _, v := range first.Expect {
		if !v.Passed {
			missed++
		}
	}
	if missed != 3 || len(first.Expect) != 5 {
		t.Fatalf("first: %d verdicts, %d missed; want 5 and 3: %+v", len(first.Expect), missed, first.Expect)
	}

	dir := filepath.Dir(res.Outcome.ManifestPath)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if s := read("summary.txt"); !strings.Contains(strings.SplitN(s, "\n", 2)[0], "status failed") {
		t.Errorf("summary header: %q", strings.SplitN(s, "\n", 2)[0])
	}
	var disk report.Manifest
	if err := json.Unmarshal([]byte(read("manifest.json")), &disk); err != nil {
		t.Fatal(err)
	}
	if disk.Status != report.StatusFailed || disk.Phases[0].Status != report.StatusFailed || disk.Phases[1].Status != report.StatusPassed {
		t.Errorf("manifest.json: run %s, phases %s, %s", disk.Status, disk.Phases[0].Status, disk.Phases[1].Status)
	}
	var ju struct {
		Failures int `xml:"failures,attr"`
		Suites   []struct {
			Props []struct {
				Name  string `xml:"name,attr"`
				Value string `xml:"value,attr"`
			} `xml:"properties>property"`
			Cases []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal([]byte(read("junit.xml")), &ju); err != nil {
		t.Fatal(err)
	}
	if ju.Failures != 3 {
		t.Errorf("junit: %d failures, want one per missed threshold (3)", ju.Failures)
	}
	for _, p := range ju.Suites[0].Props {
		if p.Name == "status" && p.Value != report.StatusFailed {
			t.Errorf("junit status property %q", p.Value)
		}
	}
	for _, c := range ju.Suites[0].Cases {
		if c.Name == "first expect tick.min_iops" && (c.Failure == nil || !strings.Contains(c.Failure.Message, "tick.min_iops") || !strings.Contains(c.Failure.Message, "1,000,000,000,000,000,000")) {
			t.Errorf("junit case %s: failure %+v, want metric and limit", c.Name, c.Failure)
		}
	}
	if h := read("report.html"); !strings.Contains(h, `<span class="badge failed">failed</span>`) {
		t.Errorf("report.html has no failed run badge")
	}
}

// A rank that did a third of its peers' work is flagged (bytes and ops,
// with its host, value and median) in the manifest, the summary and the
// report, and its host too when there are several; a plan's
// straggler_tolerance changes the rule.
func TestImbalancedRankFlagged(t *testing.T) {
	plan := "[[phase]]\nkind = \"tick\"\nops = 300\nshort_rank = 2\n"
	res := Run(t, tickRegistry(), plan, Ranks(4), Hosts("a", "b", "c", "c"))
	got := map[string]report.Flag{}
	for _, f := range res.Manifest.Flags {
		key := f.Kind + "/" + f.Metric + "/" + f.Host
		if f.Rank != nil {
			key += fmt.Sprintf("/%d", *f.Rank)
		}
		got[key] = f
	}
	f, ok := got["imbalance/ops/c/2"]
	if !ok || f.Value != 100 || f.Median != 300.5 {
		t.Errorf("rank 2's ops flag %+v (flags %v); want value 100, median 300.5", f, res.Manifest.Flags)
	}
	if _, ok := got["imbalance/bytes/c/2"]; !ok {
		t.Errorf("no bytes flag for rank 2: %v", res.Manifest.Flags)
	}
	if _, ok := got["imbalance/ops/c"]; !ok {
		t.Errorf("no ops flag for host c: %v", res.Manifest.Flags)
	}
	for k := range got {
		if strings.HasPrefix(k, "imbalance/") && !strings.HasSuffix(k, "/2") && k != "imbalance/ops/c" && k != "imbalance/bytes/c" {
			t.Errorf("unexpected flag %s", k)
		}
	}
	if !strings.Contains(res.Stdout, "imbalance") || !strings.Contains(res.Stdout, "rank 2 on c did 100 ops") {
		t.Errorf("summary lacks the flag:\n%s", res.Stdout)
	}
	page, err := os.ReadFile(res.Outcome.ReportPath)
	if err != nil || !strings.Contains(string(page), "rank 2 on c did 100 ops") {
		t.Errorf("report.html lacks the flag (%v)", err)
	}
	res = Run(t, tickRegistry(), "[plan]\ndrop_caches = \"none\"\nstraggler_tolerance = 0.8\n"+plan, Ranks(4), Hosts("a", "b", "c", "c"))
	for _, f := range res.Manifest.Flags {
		if f.Kind == report.FlagImbalance {
			t.Errorf("straggler_tolerance 0.8: %+v", f)
		}
	}
	if res.Manifest.StragglerTolerance != 0.8 {
		t.Errorf("manifest straggler_tolerance %v", res.Manifest.StragglerTolerance)
	}
}
