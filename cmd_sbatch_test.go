package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/slurm"
)

func sbatchCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"sbatch"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// TestSbatchVerb: the script names the plan, the binary, the workdir and
// the results by absolute path, whatever characters they hold, and equals
// what slurm.Script writes for those options (whose golden files pin the
// text).
func TestSbatchVerb(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "it's a \"plan\" $dir `x`")
	os.MkdirAll(dir, 0o755)
	plan := writePlan(t, dir, "[plan]\nname = \"nightly\"\n[[phase]]\nkind = \"create_files\"\ncount = 3\n")
	t.Chdir(dir)
	code, out, errs := sbatchCmd(t, "plan.toml", "--nodes", "4", "--ntasks-per-node", "8", "--time", "2:00:00",
		"--partition", "gpu", "--account", "proj", "--mpi", "pmi2", "--workdir", "scratch dir", "--results", "res", "--bin", "./bin/prism")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	want, err := slurm.Script(slurm.BatchOptions{
		Plan: plan, Bin: filepath.Join(dir, "bin/prism"), JobName: "prism-nightly", Nodes: 4, NTasksPerNode: 8, Time: "2:00:00",
		Partition: "gpu", Account: "proj", MPI: "pmi2", Workdir: filepath.Join(dir, "scratch dir"), Results: filepath.Join(dir, "res"),
	})
	if err != nil || out != want {
		t.Fatalf("script (%v):\n%s\nwant:\n%s", err, out, want)
	}
	// Flags before the plan work too; the default binary is this executable.
	code, out, _ = sbatchCmd(t, "--nodes", "2", plan)
	exe, _ := os.Executable()
	if code != 0 || !strings.Contains(out, slurm.ShellQuote(exe)) || !strings.Contains(out, "#SBATCH --nodes=2\n") || !strings.Contains(out, "#SBATCH --time=1:00:00\n") {
		t.Errorf("defaults: exit %d\n%s", code, out)
	}
	// A bare --bin name is left for PATH lookup.
	if _, out, _ = sbatchCmd(t, plan, "--bin", "prism"); !strings.Contains(out, "PRISM_BIN=${PRISM_BIN:-'prism'}") {
		t.Errorf("bare --bin:\n%s", out)
	}
	// No plan: the embedded quickstart (an empty PRISM_PLAN).
	if code, out, _ = sbatchCmd(t); code != 0 || !strings.Contains(out, "PRISM_PLAN=${PRISM_PLAN-''}") || !strings.Contains(out, "--job-name=prism-quickstart") {
		t.Errorf("quickstart: exit %d\n%s", code, out)
	}
}

func TestSbatchVerbErrors(t *testing.T) {
	dir := t.TempDir()
	good := writePlan(t, dir, "[[phase]]\nkind = \"create_files\"\ncount = 3\n")
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[[phase]]\nkind = \"create_files\"\ncoutn = 3\n"), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{bad}, "coutn"},
		{[]string{filepath.Join(dir, "missing.toml")}, "missing.toml"},
		{[]string{good, "--nodes", "0"}, "--nodes"},
		{[]string{good, "--ntasks-per-node", "0"}, "--ntasks-per-node"},
		{[]string{good, "--time", "soon"}, "--time"},
		{[]string{good, "--time", "1:99:00"}, "--time"},
		{[]string{good, "--mpi", "openmpi"}, "--mpi"},
		{[]string{good, "--partition", "a;b"}, "--partition"},
		{[]string{good, "--account", "x y"}, "--account"},
		{[]string{good, "--frobnicate"}, "frobnicate"},
		{[]string{good, good}, "usage"},
	}
	for _, tc := range cases {
		code, out, errs := sbatchCmd(t, tc.args...)
		if code != exitUsage || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 naming %q", tc.args, code, out, errs, tc.want)
		}
	}
}
