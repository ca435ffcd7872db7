package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/all"
	"github.com/prism-hpc/prism/report"
	"github.com/prism-hpc/prism/spmd"
)

// comparePlan writes 64 KiB files: on tmpfs a create is a memory copy; on
// ext4 mounted sync,dirsync every create is a journal commit that reaches
// the disk (~15 ms here against ~0.2 ms), so the slow side is slow for a
// reason that does not depend on the machine's load.
const comparePlan = `
[plan]
name = "compare"
drop_caches = "none"

[[phase]]
kind = "create_files"
count = 20
size = "64KiB"
iterations = 5
`

// samePlan is comparePlan with ten times the work per iteration, twice the
// iterations and a warm-up, for the two runs on the same storage: an
// iteration of a few milliseconds is at the mercy of one scheduler hiccup
// on a shared machine, one of tens of milliseconds much less; and the first
// iteration of a process pays for growing its heap and tmpfs for its pages.
const samePlan = `
[plan]
name = "compare"
drop_caches = "none"

[[phase]]
kind = "create_files"
count = 2000
size = "4KiB"
iterations = 8
warmup = 1
`

// runEngine runs plan in-process on one rank with workdir as the storage
// under test and returns the manifest's path.
func runEngine(t *testing.T, plan, workdir string) string {
	t.Helper()
	p, err := phases.DecodePlan(all.Registry(), "compare.toml", []byte(plan))
	if err != nil {
		t.Fatal(err)
	}
	out, err := phases.Execute(context.Background(), phases.Options{
		Plan: p, Comm: spmd.NewSingle(), Workdir: workdir, Results: t.TempDir(),
		Stdout: io.Discard, Stderr: io.Discard, Version: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != report.StatusPassed || out.ManifestPath == "" {
		t.Fatalf("run on %s: status %s", workdir, out.Status)
	}
	return out.ManifestPath
}

func compare(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"compare"}, args...), &out, &errb)
	return code, out.String() + errb.String()
}

// mountFS runs mount(8), skipping the test when this machine cannot.
func mountFS(t *testing.T, args ...string) {
	t.Helper()
	dir := args[len(args)-1]
	if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
		t.Skipf("cannot mount here (%v: %s): a test filesystem is needed", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}

// mountSyncExt4 mounts a fresh ext4 image through a loop device with
// -o sync,dirsync: every metadata change and write is committed before the
// call returns.
func mountSyncExt4(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found (apt-get install mount e2fsprogs)", tool)
		}
	}
	img := filepath.Join(t.TempDir(), "ext4.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).Output()
	if err != nil {
		t.Skipf("no loop device here: %v", err)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", loop).Run() })
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", loop).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	dir := t.TempDir()
	mountFS(t, "-o", "sync,dirsync", loop, dir)
	return dir
}

// TestCompareRealRuns runs the same plan on tmpfs twice and once on
// synchronously mounted ext4: the two tmpfs runs must not be called a
// regression (exit 0), the ext4 run must (exit 1).
func TestCompareRealRuns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount tmpfs and a loop device")
	}
	fast := mountTmpfs(t, "128m")
	slow := mountSyncExt4(t)
	base := runEngine(t, comparePlan, fast)
	slowed := runEngine(t, comparePlan, slow)

	t.Run("same storage", func(t *testing.T) {
		// Four runs at the same time, so that whatever else the machine
		// does (other tests, other users) weighs on all alike; three are
		// the base history, the fourth the new run. One base run is not
		// enough for this promise: its noise comes from its iterations,
		// which cannot see run-to-run interference (two concurrent runs
		// here were seen 18.7% apart on p50 in every one of 8 iterations,
		// ±15% noise), and prism says so; the history's spread can.
		runs := make([]string, 4)
		var wg sync.WaitGroup
		for i := range runs {
			wg.Add(1)
			go func() { defer wg.Done(); runs[i] = runEngine(t, samePlan, fast) }()
		}
		wg.Wait()
		for _, r := range runs {
			if r == "" {
				t.FailNow()
			}
		}
		// The central figures (mean, median, bandwidth, op rate) must
		// never be called a regression between runs on the same storage,
		// at the default threshold. The tail is reported but not
		// asserted: p99 of concurrent runs on a shared 2-core machine was
		// seen to differ by 2x (147 vs 309 µs) while every central figure
		// agreed within 7%.
		code, out := compare(t, append([]string{"--json"}, runs...)...)
		var c report.Comparison
		if err := json.Unmarshal([]byte(out), &c); err != nil || len(c.Rows) == 0 {
			t.Fatalf("exit %d, %v:\n%s", code, err, out)
		}
		for _, r := range c.Rows {
			central := r.Metric == "mean_ns" || r.Metric == "p50_ns" || r.Metric == "bytes_per_sec" || r.Metric == "ops_per_sec"
			if central && r.Verdict == report.VerdictRegression {
				t.Errorf("same storage called a regression over 3 base runs: %+v", r)
			}
			if central && r.BaseRuns != 3 {
				t.Errorf("%s: %d base runs, want 3", r.Metric, r.BaseRuns)
			}
		}
		_, out = compare(t, runs...)
		t.Logf("four runs on tmpfs (3 base, 1 new):\n%s", out)
		// A single base run is compared too, with the warning that its
		// verdict misses run-to-run variance.
		_, out = compare(t, runs[0], runs[3])
		if !strings.Contains(out, "one base run") {
			t.Errorf("one base run compared without the warning:\n%s", out)
		}
		t.Logf("one base run:\n%s", out)
	})
	t.Run("slow storage", func(t *testing.T) {
		code, out := compare(t, base, slowed)
		if code != exitFailed {
			t.Fatalf("exit %d, want %d:\n%s", code, exitFailed, out)
		}
		code, js := compare(t, "--json", base, slowed)
		var c report.Comparison
		if err := json.Unmarshal([]byte(js), &c); err != nil || code != exitFailed {
			t.Fatalf("exit %d, %v:\n%s", code, err, js)
		}
		got := map[string]string{}
		for _, r := range c.Rows {
			got[r.Metric] = r.Verdict
			if r.Metric == "mean_ns" && r.ChangePercent < 200 {
				t.Errorf("sync ext4 only %+.0f%% slower than tmpfs: %+v", r.ChangePercent, r)
			}
		}
		for _, m := range []string{"mean_ns", "p50_ns", "bytes_per_sec", "ops_per_sec"} {
			if got[m] != report.VerdictRegression {
				t.Errorf("%s: %q, want regression\n%s", m, got[m], out)
			}
		}
		if c.Base.FSType != "tmpfs" || c.New.FSType != "ext4" {
			t.Errorf("fs types %s → %s", c.Base.FSType, c.New.FSType)
		}
	})
	t.Run("improvement is not a failure", func(t *testing.T) {
		code, out := compare(t, "--threshold", "25%", slowed, base)
		if code != exitOK || !strings.Contains(out, "improvement") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
}

func TestCompareUsage(t *testing.T) {
	m := runEngine(t, comparePlan, t.TempDir())
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{m}, "usage: prism compare"},
		{[]string{"--threshold", "ten", m, m}, "want a percentage"},
		{[]string{"--threshold", "-5%", m, m}, "want a percentage"},
		{[]string{"--label", "one", m, m}, "two names"},
		{[]string{m, filepath.Join(t.TempDir(), "missing.json")}, "no such file"},
	} {
		code, out := compare(t, tc.args...)
		if code != exitUsage || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d\n%s", tc.args, code, out)
		}
	}
	code, out := compare(t, "--label", "monday,tuesday", "--threshold", "15", m, m)
	if code != exitOK || !strings.Contains(out, "base monday") || !strings.Contains(out, "threshold 15%") {
		t.Errorf("exit %d\n%s", code, out)
	}
	// The verb is wired into the CLI.
	if r := prism(t, ".", "compare", m, m); r.code != exitOK || !strings.Contains(r.stdout, "create_files") {
		t.Errorf("prism compare: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
