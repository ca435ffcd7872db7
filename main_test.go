package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prism-hpc/prism/report"
	"github.com/prism-hpc/prism/spmd"
)

// prismBin is the binary under test: $PRISM_BIN (make test passes bin/prism,
// built with MPI when mpicc exists), else one built here without tags.
var prismBin string

func TestMain(m *testing.M) {
	prismBin = os.Getenv("PRISM_BIN")
	var tmp string
	if prismBin == "" {
		var err error
		tmp, err = os.MkdirTemp("", "prism-test-bin-")
		if err != nil {
			panic(err)
		}
		prismBin = filepath.Join(tmp, "prism")
		if out, err := exec.Command("go", "build", "-o", prismBin, ".").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building prism: %v\n%s", err, out)
			os.Exit(2)
		}
	}
	code := m.Run()
	if tmp != "" {
		os.RemoveAll(tmp)
	}
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

func prism(t *testing.T, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(prismBin, args...)
	cmd.Dir = dir
	// A rank identity inherited from an outer launcher would change the
	// mode under test.
	cmd.Env = cleanEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("prism %v: %v", args, err)
	}
	return r
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PRISM_") || strings.HasPrefix(k, "OMPI_COMM_WORLD") || strings.HasPrefix(k, "PMI") || strings.HasPrefix(k, "SLURM_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

var manifestLine = regexp.MustCompile(`(?m)^manifest: (.+)$`)

func loadManifest(t *testing.T, r result) *report.Manifest {
	t.Helper()
	m := manifestLine.FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no manifest line (exit %d)\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	man, err := report.ReadManifest(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return man
}

func writePlan(t *testing.T, dir, text string) string {
	t.Helper()
	p := filepath.Join(dir, "plan.toml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const metaPlan = `
[plan]
name = "meta"
drop_caches = "none"

[[phase]]
kind = "create_files"
count = 40
size = "1KiB"
iterations = 2
warmup = 1

[[phase]]
kind = "list_files"
count = 30
shared_dir = true

[[phase]]
kind = "move_files"
count = 25

[[phase]]
kind = "delete_files"
count = 20

[[phase]]
kind = "folder_bench"
depth = 2
breadth = 3
files_per_dir = 2
`

// TestRunFourRanks runs a metadata plan on 4 local ranks and checks the
// manifest's arithmetic: 4 per-rank rows per phase whose ops sum to the
// phase total, op types that sum to it too, and counts that follow from the
// plan (warm-up excluded).
func TestRunFourRanks(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	sentinel := filepath.Join(work, "do-not-touch")
	os.WriteFile(sentinel, []byte("mine"), 0o600)
	os.Mkdir(filepath.Join(work, "prism-old"), 0o755) // looks like prism's, is not this run's
	plan := writePlan(t, dir, metaPlan)

	r := prism(t, dir, "run", "-n", "4", plan, "--workdir", work, "--results", filepath.Join(dir, "res"))
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	m := loadManifest(t, r)
	if m.Status != "passed" || m.Comm.Kind != "rendezvous" || m.Comm.Ranks != 4 || m.Comm.RankSource != "PRISM_RANK" {
		t.Fatalf("status %s comm %+v", m.Status, m.Comm)
	}
	// Every rank reads the same kind of op clock, and the manifest says which
	// and why; a TSC that parted from the OS clock by 0.1% would be wrong.
	switch c := m.Clock; {
	case c.Source == "tsc" && c.TicksPerSec > 0 && c.DriftPPM > -1000 && c.DriftPPM < 1000 && c.Reason != "":
	case c.Source == "os" && strings.HasPrefix(c.Reason, "TSC not used: "):
	default:
		t.Errorf("clock %+v", c)
	}
	if !strings.Contains(r.stdout, "op clock "+m.Clock.Source) {
		t.Errorf("the summary does not name the op clock:\n%s", r.stdout)
	}
	want := map[string]map[string]int64{
		"create_files": {"create": 4 * 40 * 2},
		"list_files":   {"readdir": 4, "stat": 4 * 4 * 30},
		"move_files":   {"rename": 4 * 25},
		"delete_files": {"unlink": 4 * 20},
		"folder_bench": {"mkdir": 4 * 12, "create": 4 * 24, "unlink": 4 * 24, "rmdir": 4 * 12},
	}
	if len(m.Phases) != len(want) {
		t.Fatalf("%d phases", len(m.Phases))
	}
	for _, p := range m.Phases {
		if p.Status != "passed" || p.Ranks != 4 || p.PerRank.Len() != 4 {
			t.Errorf("%s: status %s ranks %d rows %d", p.Name, p.Status, p.Ranks, p.PerRank.Len())
		}
		var sum, typed int64
		for i, pr := range p.PerRank.All() {
			if pr.Rank != i || pr.Seconds <= 0 {
				t.Errorf("%s: row %d = %+v", p.Name, i, pr)
			}
			sum += pr.Ops
		}
		for op, st := range p.OpsByType {
			typed += st.Ops
			if w := want[p.Kind][op]; st.Ops != w {
				t.Errorf("%s: %d %s ops, want %d", p.Name, st.Ops, op, w)
			}
			if st.Latency.P50 <= 0 || st.Latency.Max < st.Latency.P99 || st.Latency.P99 < st.Latency.P50 {
				t.Errorf("%s/%s: latency %+v", p.Name, op, st.Latency)
			}
			h, err := report.DecodeHistogram(p.Histograms[op])
			if err != nil || h.TotalCount() != st.Ops {
				t.Errorf("%s/%s: histogram count %v, want %d (%v)", p.Name, op, h, st.Ops, err)
			}
		}
		if sum != p.Ops || typed != p.Ops || len(p.OpsByType) != len(want[p.Kind]) {
			t.Errorf("%s: per-rank sum %d, per-type sum %d, phase %d; types %v", p.Name, sum, typed, p.Ops, p.OpsByType)
		}
		if p.Kind == "create_files" && (len(p.Iterations) != 2 || p.WarmupIterations != 1 || p.Bytes != 4*40*2*1024) {
			t.Errorf("create_files: iterations %v warmup %d bytes %d", p.Iterations, p.WarmupIterations, p.Bytes)
		}
		if p.Cache.Requested != "none" || p.Cache.Applied != "none" {
			t.Errorf("%s: cache %+v", p.Name, p.Cache)
		}
	}
	if !strings.Contains(r.stdout, "create_files") || !strings.HasSuffix(strings.TrimSpace(r.stdout), "report.html") {
		t.Errorf("summary/last lines:\n%s", r.stdout)
	}
	// Cleanup: prism's run directory is gone; what was there before stays.
	ents, _ := os.ReadDir(work)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "do-not-touch,prism-old" {
		t.Errorf("workdir after the run holds %v", names)
	}
	if b, _ := os.ReadFile(sentinel); string(b) != "mine" {
		t.Error("sentinel file changed")
	}
}

// [plan] clock = "os" puts every rank on the OS clock, and the manifest
// says the plan asked for it.
func TestPlanChoosesOSClock(t *testing.T) {
	dir := t.TempDir()
	plan := writePlan(t, dir, "[plan]\nclock = \"os\"\ndrop_caches = \"none\"\n[[phase]]\nkind = \"delete_files\"\ncount = 50\n")
	r := prism(t, dir, "run", "-n", "2", plan, "--workdir", dir, "--results", filepath.Join(dir, "res"))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	m := loadManifest(t, r)
	if m.Clock.Source != "os" || m.Clock.TicksPerSec != 0 || !strings.Contains(m.Clock.Reason, "plan asks") {
		t.Fatalf("clock %+v", m.Clock)
	}
	if ph := m.Phases[0]; ph.OpsByType["unlink"].Ops != 100 || ph.OpsByType["unlink"].Latency.P50 <= 0 {
		t.Fatalf("unlink on the OS clock: %+v", ph.OpsByType["unlink"])
	}
}

func TestKeepLeavesRunDir(t *testing.T) {
	dir := t.TempDir()
	plan := writePlan(t, dir, "[plan]\nkeep = true\ndrop_caches = \"none\"\n[[phase]]\nkind = \"create_files\"\ncount = 5\n")
	r := prism(t, dir, "run", plan, "--results", filepath.Join(dir, "res"))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	m := loadManifest(t, r)
	b, err := os.ReadFile(filepath.Join(m.RunDir, ".prism-run"))
	if err != nil || strings.TrimSpace(string(b)) != m.RunID || !m.Kept || m.Comm.Kind != "single" {
		t.Fatalf("kept run dir marker %q (%v), manifest kept=%v comm=%s", b, err, m.Kept, m.Comm.Kind)
	}
}

// TestPlanErrorsExitTwo: malformed plans stop before any rank starts, with
// exit code 2 and the key or line in the message.
func TestPlanErrorsExitTwo(t *testing.T) {
	cases := []struct{ plan, want string }{
		{"", "no [[phase]]"},
		{"[[phase]]\nkind = \"nope\"\n", "plan.toml:2:1"},
		{"[[phase]]\nkind = \"create_files\"\ncont = 3\n", "cont"},
		{"[[phase]]\nkind = \"create_files\"\ncount = -3\n", "count"},
		{"[[phase]]\nkind = \"create_files\"\nsize = \"12 parsecs\"\n", "size"},
		{"[[phase]]\nkind = \"create_files\"\ncount = 1.5\n", "count"},
		{"[[phase]]\nkind = \"create_files\"\niterations = \"3\"\n", "iterations"},
		{"[plan]\ndrop_caches = \"yes\"\n[[phase]]\nkind = \"create_files\"\n", "drop_caches"},
		{"[plan]\ncoordination_timeout = \"soon\"\n[[phase]]\nkind = \"create_files\"\n", "coordination_timeout"},
		{"[[phase]]\nkind = \"list_files\"\nshared_dir = \"yes\"\n", "shared_dir"},
		{"[[phase]]\nkind = \"folder_bench\"\ndepth = 0\n", "depth"},
		{"[[phase]]\nkind = \"create_files\"\n[phase.expect]\nmin_bandwidth = \"fast\"\n", "expect"},
		{"[[phase]]\nkind = \"create_files\"\nranks = 0\n", "ranks"},
		{"[[phase]\nkind = \"create_files\"\n", "plan.toml:"},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			dir := t.TempDir()
			plan := writePlan(t, dir, tc.plan)
			for _, args := range [][]string{{"run", "-n", "2", plan}, {"check", plan}, {plan}} {
				r := prism(t, dir, args...)
				if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
					t.Errorf("prism %v: exit %d, stderr %q; want exit 2 mentioning %q", args[:len(args)-1], r.code, r.stderr, tc.want)
				}
				if entries, _ := filepath.Glob(filepath.Join(dir, "prism-*")); len(entries) != 0 {
					t.Errorf("a bad plan left %v", entries)
				}
			}
		})
	}
}

func TestRanksBeyondJobIsUsageError(t *testing.T) {
	dir := t.TempDir()
	plan := writePlan(t, dir, "[[phase]]\nkind = \"create_files\"\ncount = 2\nranks = 8\n")
	r := prism(t, dir, "run", "-n", "2", plan, "--results", filepath.Join(dir, "res"))
	if r.code != 2 || !strings.Contains(r.stderr, "asks for 8 ranks but the job has 2") {
		t.Fatalf("exit %d stderr %s", r.code, r.stderr)
	}
}

func TestWorkdirRefused(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "afile")
	os.WriteFile(file, nil, 0o644)
	plan := writePlan(t, dir, "[[phase]]\nkind = \"create_files\"\ncount = 2\n")
	for _, wd := range []string{"/", file, filepath.Join(dir, "missing")} {
		r := prism(t, dir, "run", plan, "--workdir", wd)
		if r.code != 2 || !strings.Contains(r.stderr, "workdir") {
			t.Errorf("--workdir %s: exit %d stderr %q", wd, r.code, r.stderr)
		}
	}
}

func TestCheckPrintsFootprint(t *testing.T) {
	r := prism(t, ".", "check", "-n", "4", "examples/quickstart.toml")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	// create_files: 500 files of 4KiB per rank, 2000 files and 7.81MiB on 4 ranks.
	if !strings.Contains(r.stdout, "at 4 ranks: 500 files, 1.95MiB per rank; 2000 files, 7.81MiB in all") {
		t.Errorf("check output:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "count=500 size=4KiB shared_dir=false") {
		t.Errorf("resolved parameters missing:\n%s", r.stdout)
	}
	// The embedded default is what `prism check` with no plan checks.
	if r2 := prism(t, ".", "check"); r2.code != 0 || !strings.Contains(r2.stdout, "plan quickstart") {
		t.Errorf("check of the embedded default: %d %s", r2.code, r2.stderr)
	}
}

func TestListNamesEveryKind(t *testing.T) {
	r := prism(t, ".", "list")
	for _, want := range []string{"create_files", "list_files", "move_files", "delete_files", "folder_bench", "files_per_dir", "iterations", "p99", "coordination_timeout"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("prism list lacks %q", want)
		}
	}
	// The defaults listed are the ones a plan gets (phases.DefaultHeader).
	for _, re := range []string{`clock\s+string\s+"auto"`, `stall_after\s+duration\s+5s`, `coordination_timeout\s+duration\s+3m0s`, `kb_base\s+int\s+1024`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("prism list does not show the default %s", re)
		}
	}
	// The units of sizes are stated, as fio reads them.
	if !strings.Contains(r.stdout, "K = KB = 1024") || !strings.Contains(r.stdout, "kb_base = 1000") {
		t.Errorf("prism list does not say what K and KB mean:\n%.600s", r.stdout)
	}
	if v := prism(t, ".", "version"); v.code != 0 || !strings.HasPrefix(v.stdout, "prism ") {
		t.Errorf("version: %d %q", v.code, v.stdout)
	}
	if u := prism(t, ".", "frobnicate"); u.code != 2 {
		t.Errorf("unknown verb exit %d", u.code)
	}
}

// TestDefaultRun runs the embedded quickstart as `make run` does and checks
// that its temporary workdir is gone afterwards.
func TestDefaultRun(t *testing.T) {
	dir := t.TempDir()
	r := prism(t, dir, "run", "-n", "2", "--results", filepath.Join(dir, "res"))
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	m := loadManifest(t, r)
	if m.Status != "passed" || len(m.Phases) < 5 || m.Comm.Ranks != 2 {
		t.Fatalf("status %s phases %d ranks %d", m.Status, len(m.Phases), m.Comm.Ranks)
	}
	if _, err := os.Stat(m.Host.Workdir); !os.IsNotExist(err) {
		t.Errorf("temporary workdir %s still exists (%v)", m.Host.Workdir, err)
	}
}

// TestRunBindsRanks: `prism run -n 2` gives each rank a disjoint block of
// the launcher's CPUs, and the manifest records every rank's affinity;
// --bind none leaves every rank on all of them.
func TestRunBindsRanks(t *testing.T) {
	own, err := spmd.Affinity()
	if err != nil {
		t.Fatal(err)
	}
	all := spmd.CPUList(own)
	dir := t.TempDir()
	plan := writePlan(t, dir, "[plan]\ndrop_caches = \"none\"\n[[phase]]\nkind = \"create_files\"\ncount = 5\n")
	var host report.HostInfo
	cpusOf := func(args ...string) []string {
		t.Helper()
		r := prism(t, dir, append([]string{"run", "-n", "2", plan, "--results", filepath.Join(dir, "res")}, args...)...)
		if r.code != 0 {
			t.Fatalf("prism run -n 2 %v: exit %d\n%s", args, r.code, r.stderr)
		}
		m := loadManifest(t, r)
		host = m.Host
		var got []string
		for _, pr := range m.Phases[0].PerRank.All() {
			got = append(got, pr.CPUs)
		}
		if len(got) != 2 {
			t.Fatalf("%d per-rank rows", len(got))
		}
		return got
	}

	bound := cpusOf()
	// The host is described as a host, not as rank 0's share of it, and
	// prism's own binding is not mistaken for a launcher's unasked one.
	if host.LogicalCores < len(own) {
		t.Errorf("host.logical_cores = %d on a host where the test runs on %d CPUs", host.LogicalCores, len(own))
	}
	for _, w := range host.Warnings {
		if strings.Contains(w, "GOMAXPROCS") {
			t.Errorf("a rank bound by prism run -n warns: %s", w)
		}
	}
	if len(own) < 2 {
		// Fewer CPUs than ranks: nothing to split, the ranks float.
		if bound[0] != all || bound[1] != all {
			t.Fatalf("on CPUs %s, 2 ranks bound to %v; want both unbound", all, bound)
		}
	} else {
		seen := map[int]int{}
		for rank, list := range bound {
			cpus, err := spmd.ParseCPUList(list)
			if err != nil || len(cpus) == 0 {
				t.Fatalf("rank %d: cpus %q is not a cpulist (%v)", rank, list, err)
			}
			for _, c := range cpus {
				if prev, dup := seen[c]; dup {
					t.Fatalf("CPU %d given to ranks %d and %d (%v)", c, prev, rank, bound)
				}
				seen[c] = rank
			}
		}
		if len(seen) != len(own) {
			t.Fatalf("ranks bound to %v, which covers %d of the %d CPUs %s", bound, len(seen), len(own), all)
		}
	}

	if unbound := cpusOf("--bind", "none"); unbound[0] != all || unbound[1] != all {
		t.Fatalf("--bind none: ranks on %v, want both on %s", unbound, all)
	}
	if r := prism(t, dir, "run", "-n", "2", "--bind", "core", plan); r.code != 2 || !strings.Contains(r.stderr, "--bind") {
		t.Fatalf("--bind core: exit %d, stderr %q; want a usage error naming --bind", r.code, r.stderr)
	}
}
