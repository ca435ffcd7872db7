package slurm

import (
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// nasty holds every character bash treats specially inside a path.
const nasty = "/scratch/my plans/{a}}it's \"quoted\" $HOME `id` \\ ;&|<>*?[a] !x ~ #c\ttab"

var goldenCases = []struct {
	name string
	opts BatchOptions
}{
	{"minimal", BatchOptions{Plan: "/home/ada/plan.toml", Bin: "/opt/prism/bin/prism", Nodes: 1, NTasksPerNode: 1, Time: "30", MPI: "pmix"}},
	{"full", BatchOptions{Plan: "/lustre/ada/nightly.toml", Bin: "/opt/prism/bin/prism", JobName: "prism-nightly", Nodes: 4, NTasksPerNode: 8, Time: "1-02:00:00",
		Partition: "gpu", Account: "proj-42", MPI: "pmi2", Workdir: "/lustre/scratch/prism", Results: "/home/ada/results"}},
	{"quoting", BatchOptions{Plan: nasty + "/plan.toml", Bin: nasty + "/prism", Nodes: 2, NTasksPerNode: 4, Time: "1:00:00", MPI: "pmix", Workdir: nasty, Results: nasty + "/res'"}},
	{"quickstart", BatchOptions{Bin: "prism", Nodes: 1, NTasksPerNode: 4, Time: "10:00", MPI: "pmix"}},
}

func TestScriptGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Script(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "sbatch-"+tc.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./slurm -run Golden -update)", err)
			}
			if got != string(want) {
				t.Errorf("script differs from %s (go test ./slurm -run Golden -update rewrites it):\n%s", path, got)
			}
			if out, err := exec.Command("bash", "-n", path).CombinedOutput(); err != nil {
				t.Errorf("bash -n %s: %v\n%s", path, err, out)
			}
		})
	}
}

// runScript runs a generated script under bash with a fake srun that
// records its arguments, and returns them.
func runScript(t *testing.T, script string, env ...string) []string {
	t.Helper()
	dir := t.TempDir()
	fake := filepath.Join(dir, "bin", "srun")
	os.MkdirAll(filepath.Dir(fake), 0o755)
	os.WriteFile(fake, []byte("#!/bin/bash\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done > \"$SRUN_ARGS\"\n"), 0o755)
	sp := filepath.Join(dir, "job.sbatch")
	os.WriteFile(sp, []byte(script), 0o644)
	out := filepath.Join(dir, "args")
	cmd := exec.Command("bash", sp)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + filepath.Dir(fake) + ":/usr/bin:/bin", "SRUN_ARGS=" + out, "HOME=/nonexistent"}, env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bash job.sbatch: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// TestScriptQuotingRoundTrip: paths with spaces, quotes, $, backticks and
// globs reach srun byte for byte, and the environment overrides them.
func TestScriptQuotingRoundTrip(t *testing.T) {
	o := goldenCases[2].opts
	s, err := Script(o)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--mpi=pmix", o.Bin, o.Plan, "--workdir", o.Workdir, "--results", o.Results}
	if got := runScript(t, s); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("srun got\n%q\nwant\n%q", got, want)
	}
	got := runScript(t, s, "PRISM_PLAN=/other plan.toml", "PRISM_BIN=/x/prism", "PRISM_WORKDIR=", "PRISM_RESULTS=/r", "PRISM_MPI=pmi2")
	want = []string{"--mpi=pmi2", "/x/prism", "/other plan.toml", "--results", "/r"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("with overrides srun got %q, want %q", got, want)
	}
	// An empty PRISM_PLAN runs the embedded quickstart (no plan argument).
	q, _ := Script(goldenCases[3].opts)
	if got := runScript(t, q, "PRISM_BIN=/x/prism"); strings.Join(got, "|") != "--mpi=pmix|/x/prism" {
		t.Errorf("quickstart srun got %q", got)
	}
}

// TestScriptOversubscribed: more tasks on the node than cores sets
// OMPI_MCA_mpi_yield_when_idle for the ranks; fewer leaves it unset.
func TestScriptOversubscribed(t *testing.T) {
	s, _ := Script(goldenCases[0].opts)
	dir := t.TempDir()
	fake := filepath.Join(dir, "srun")
	os.WriteFile(fake, []byte("#!/bin/bash\necho \"yield=${OMPI_MCA_mpi_yield_when_idle:-unset}\"\n"), 0o755)
	sp := filepath.Join(dir, "job.sbatch")
	os.WriteFile(sp, []byte(s), 0o644)
	for tasks, want := range map[string]string{"100000(x2),1": "yield=1", "1": "yield=unset"} {
		cmd := exec.Command("bash", sp)
		cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin", "SLURM_TASKS_PER_NODE=" + tasks}
		out, err := cmd.Output()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("SLURM_TASKS_PER_NODE=%s: %q %v, want %s", tasks, out, err, want)
		}
	}
}

func TestScriptValidation(t *testing.T) {
	base := goldenCases[0].opts
	cases := []struct {
		flag string
		mod  func(o *BatchOptions)
	}{
		{"nodes", func(o *BatchOptions) { o.Nodes = 0 }},
		{"ntasks-per-node", func(o *BatchOptions) { o.NTasksPerNode = -1 }},
		{"mpi", func(o *BatchOptions) { o.MPI = "none" }},
		{"time", func(o *BatchOptions) { o.Time = "1h" }},
		{"time", func(o *BatchOptions) { o.Time = "1:60:00" }},
		{"time", func(o *BatchOptions) { o.Time = "2-24" }},
		{"time", func(o *BatchOptions) { o.Time = "0" }},
		{"time", func(o *BatchOptions) { o.Time = "" }},
		{"partition", func(o *BatchOptions) { o.Partition = "gpu\n#SBATCH --x" }},
		{"account", func(o *BatchOptions) { o.Account = "a b" }},
		{"bin", func(o *BatchOptions) { o.Bin = "" }},
		{"plan", func(o *BatchOptions) { o.Plan = "a\x00b" }},
	}
	for _, tc := range cases {
		o := base
		tc.mod(&o)
		_, err := Script(o)
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Flag != tc.flag || !strings.HasPrefix(err.Error(), "--"+tc.flag+" ") {
			t.Errorf("%+v: error %v, want one naming --%s", o, err, tc.flag)
		}
	}
	for _, ok := range []string{"30", "1:00:00", "30:00", "2-0", "2-12:30", "7-00:00:00", "UNLIMITED", "infinite", "100:00:00"} {
		if err := ValidTime(ok); err != nil {
			t.Errorf("time %q: %v", ok, err)
		}
	}
}

func TestShellQuote(t *testing.T) {
	for _, s := range []string{"", "plain", nasty, "'", "''", "a'b'c", "\n"} {
		out, err := exec.Command("bash", "-c", "printf %s "+ShellQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("%q quoted as %s came back %q (%v)", s, ShellQuote(s), out, err)
		}
	}
}
