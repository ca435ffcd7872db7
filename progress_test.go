package main

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// progressPlan sweeps create_files over 1 and 2 ranks, then removes on 2,
// then sweeps create_dataset, whose count Setup works out (each rank's
// share of the files): five phase instances.
const progressPlan = `[plan]
drop_caches = "none"
[[phase]]
kind = "create_files"
count = 3000
ranks = [1, 2]
[[phase]]
kind = "delete_files"
count = 3000
[[phase]]
kind = "create_dataset"
sizes = ["4KiB"]
copies = 6
ranks = [1, 2]
`

// checkProgress asserts what rank 0 prints on stderr for progressPlan on
// two ranks, whichever communicator carried the ranks' reports: a start
// line per instance numbered over the sweep, percentages that never fall
// nor pass 100, and a last line per instance counting every rank's ops
// (6000 at two ranks: rank 0's 3000 alone would be 50%); stdout keeps only
// the summary and its manifest line.
func checkProgress(t *testing.T, r result) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{
		"[1/5] create_files on 1 rank: 3000 ops per rank (3000 in all), 1 iteration\n",
		"[2/5] create_files on 2 ranks: 3000 ops per rank (6000 in all), 1 iteration\n",
		"[3/5] delete_files on 2 ranks: 3000 ops per rank (6000 in all), 1 iteration\n",
		"[1/5] create_files: done, 3000 ops (100.0% of 3000)",
		"[2/5] create_files: done, 6000 ops (100.0% of 6000)",
		"[3/5] delete_files: done, 6000 ops (100.0% of 6000)",
		// No count before Setup has shared out the files: not even the
		// 6 of rank 0 at one rank, which it holds at the second size's start.
		"[4/5] create_dataset on 1 rank: 1 iteration\n",
		"[5/5] create_dataset on 2 ranks: 1 iteration\n",
		"[4/5] create_dataset: done, 6 ops (100.0% of 6)",
		"[5/5] create_dataset: done, 6 ops (100.0% of 6)",
	} {
		if strings.Count(r.stderr, want) != 1 {
			t.Errorf("stderr has not once %q:\n%s", want, r.stderr)
		}
	}
	pct := regexp.MustCompile(`^(\[\d/5\]) \w+: +([0-9.]+)% (\d+)/(\d+) ops`)
	last := map[string]float64{}
	for _, l := range strings.Split(r.stderr, "\n") {
		m := pct.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		p, _ := strconv.ParseFloat(m[2], 64)
		done, _ := strconv.Atoi(m[3])
		want, _ := strconv.Atoi(m[4])
		if p < last[m[1]] || p > 100 || done > want {
			t.Errorf("%s: %.1f%% after %.1f%%: %q", m[1], p, last[m[1]], l)
		}
		last[m[1]] = p
	}
	if strings.Contains(r.stdout, "[1/5]") || strings.Count(r.stdout, "manifest: ") != 1 {
		t.Errorf("stdout is not the summary alone:\n%s", r.stdout)
	}
}

func TestProgressRendezvous(t *testing.T) {
	dir := t.TempDir()
	plan := writePlan(t, dir, progressPlan)
	checkProgress(t, prism(t, dir, "run", "-n", "2", "--progress", "line", "--progress-interval", "20ms",
		"--results", filepath.Join(dir, "res"), plan))
}

func TestProgressMPI(t *testing.T) {
	mpirun := needMPI(t)
	dir := t.TempDir()
	plan := writePlan(t, dir, progressPlan)
	checkProgress(t, runMPI(t, mpirun, dir, mpirunArgs("2", prismBin, "run", "--progress", "line", "--progress-interval", "20ms",
		"--results", filepath.Join(dir, "res"), plan)...))
}

// TestProgressFlag: none prints no progress at all; a bad value or
// interval is bad usage naming the flag.
func TestProgressFlag(t *testing.T) {
	dir := t.TempDir()
	plan := writePlan(t, dir, progressPlan)
	r := prism(t, dir, "run", "-n", "2", "--progress", "none", "--results", filepath.Join(dir, "res"), plan)
	if r.code != 0 || strings.Contains(r.stderr, "/5]") {
		t.Errorf("--progress none: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	for _, args := range [][]string{{"--progress", "bar"}, {"--progress-interval", "-1s"}, {"--progress-interval", "1ns"}} {
		r := prism(t, dir, append(append([]string{"run"}, args...), plan)...)
		if r.code != 2 || !strings.Contains(r.stderr, args[0]+" ") {
			t.Errorf("prism run %v: exit %d, stderr %q; want exit 2 naming %s", args, r.code, r.stderr, args[0])
		}
	}
}
