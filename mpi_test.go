package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const sweepPlan = `
[plan]
name = "sweep"
drop_caches = "none"

[[phase]]
kind = "create_files"
count = 30
ranks = [1, 2, 4]

[[phase]]
kind = "create_files"
name = "ingest"
count = 50
ranks = 1
group = "ingest"

[[phase]]
kind = "list_files"
count = 20

[[phase]]
kind = "delete_files"
count = 5
ranks = 2
`

// checkSweep asserts what a 4-rank run of sweepPlan must produce in any
// coordination mode: one result per sweep size with that many per-rank rows,
// a grouped pair on disjoint ranks, and a phase on a subset.
func checkSweep(t *testing.T, r result, kind, source string) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	m := loadManifest(t, r)
	if m.Comm.Kind != kind || m.Comm.Ranks != 4 || m.Comm.RankSource != source {
		t.Fatalf("comm %+v", m.Comm)
	}
	type row struct {
		name  string
		ranks []int
		ops   int64
	}
	want := []row{
		{"create_files", []int{0}, 30},
		{"create_files", []int{0, 1}, 60},
		{"create_files", []int{0, 1, 2, 3}, 120},
		{"ingest", []int{0}, 50},
		{"list_files", []int{1, 2, 3}, 3 + 3*20},
		{"delete_files", []int{0, 1}, 10},
	}
	if len(m.Phases) != len(want) {
		t.Fatalf("%d phase results, want %d", len(m.Phases), len(want))
	}
	for i, w := range want {
		p := m.Phases[i]
		var got []int
		for _, pr := range p.PerRank {
			got = append(got, pr.Rank)
		}
		if p.Name != w.name || p.Ranks != len(w.ranks) || p.Ops != w.ops || p.Status != "passed" || !equalInts(got, w.ranks) {
			t.Errorf("result %d: %s ranks %d rows %v ops %d status %s; want %s on %v with %d ops", i, p.Name, p.Ranks, got, p.Ops, p.Status, w.name, w.ranks, w.ops)
		}
	}
	if m.Phases[3].ConcurrentWith != "list_files" || m.Phases[4].ConcurrentWith != "ingest" || m.Phases[4].Group != "ingest" {
		t.Errorf("group marks: %q %q %q", m.Phases[3].ConcurrentWith, m.Phases[4].ConcurrentWith, m.Phases[4].Group)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSweepAndGroupRendezvous(t *testing.T) {
	dir := t.TempDir()
	plan := writePlan(t, dir, sweepPlan)
	r := prism(t, dir, "run", "-n", "4", plan, "--results", filepath.Join(dir, "res"))
	checkSweep(t, r, "rendezvous", "PRISM_RANK")
}

// needMPI skips unless the binary under test links MPI and mpirun exists;
// `make test` installs OpenMPI and builds with it, so there it runs.
func needMPI(t *testing.T) string {
	t.Helper()
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not installed (make test installs openmpi-bin)")
	}
	if v := prism(t, ".", "version"); !strings.Contains(v.stdout, "with MPI") {
		t.Skip("the prism under test was built without MPI (make test builds with mpicc)")
	}
	return mpirun
}

func mpirunArgs(np string, args ...string) []string {
	return append([]string{"--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", np,
		"-x", "OMPI_MCA_mpi_yield_when_idle=1"}, args...)
}

func runMPI(t *testing.T, mpirun, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(mpirun, args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSweepAndGroupMPI(t *testing.T) {
	mpirun := needMPI(t)
	dir := t.TempDir()
	plan := writePlan(t, dir, sweepPlan)
	r := runMPI(t, mpirun, dir, mpirunArgs("4", prismBin, plan, "--results", filepath.Join(dir, "res"))...)
	checkSweep(t, r, "mpi", "OMPI_COMM_WORLD_RANK")
	// Rank 0 alone prints: one summary, one manifest line.
	if n := strings.Count(r.stdout, "manifest: "); n != 1 {
		t.Errorf("%d manifest lines under mpirun", n)
	}
}

func TestQuickstartMPI(t *testing.T) {
	mpirun := needMPI(t)
	dir := t.TempDir()
	r := runMPI(t, mpirun, dir, mpirunArgs("4", prismBin, "run", "--results", filepath.Join(dir, "res"))...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	m := loadManifest(t, r)
	if m.Comm.Kind != "mpi" || m.Comm.Ranks != 4 || !strings.Contains(m.Host.MPILibrary, "MPI") {
		t.Fatalf("comm %+v mpi %q", m.Comm, m.Host.MPILibrary)
	}
	for _, p := range m.Phases {
		if len(p.PerRank) != 4 || p.Status != "passed" {
			t.Errorf("%s: %d rows, %s", p.Name, len(p.PerRank), p.Status)
		}
	}
}

// TestWrongLauncherDetected: a binary without MPI started by mpirun would
// silently run as N one-rank jobs; prism must refuse instead.
func TestWrongLauncherDetected(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not installed")
	}
	dir := t.TempDir()
	noMPI := filepath.Join(dir, "prism-nompi")
	build := exec.Command("go", "build", "-o", noMPI, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v %s", err, out)
	}
	plan := writePlan(t, dir, "[[phase]]\nkind = \"create_files\"\ncount = 2\n")
	r := runMPI(t, mpirun, dir, mpirunArgs("2", noMPI, plan, "--results", filepath.Join(dir, "res"))...)
	if r.code == 0 || !strings.Contains(r.stderr, "built without MPI") {
		t.Fatalf("exit %d stderr %q", r.code, r.stderr)
	}
	if strings.Contains(r.stdout, "manifest: ") {
		t.Error("a manifest was written by a mis-launched rank")
	}
}
