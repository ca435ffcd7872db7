package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// slurmUp brings up the single-node test cluster (slurm/cluster.sh, which
// installs Slurm when missing) and brings it down when the test ends, pass
// or fail, unless it was already running before. It returns the
// environment for Slurm's client commands.
func slurmUp(t *testing.T) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: slurm/cluster.sh installs Slurm and starts munged, slurmctld and slurmd (make test runs as root in CI)")
	}
	script, err := filepath.Abs("slurm/cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	state := os.Getenv("PRISM_SLURM_DIR")
	if state == "" {
		state = "/var/tmp/prism-slurm"
	}
	env := append(cleanEnv(), "SLURM_CONF="+filepath.Join(state, "slurm.conf"), "PRISM_SLURM_DIR="+state)
	cluster := func(verb string) ([]byte, error) {
		cmd := exec.Command(script, verb)
		cmd.Env = env
		return cmd.CombinedOutput()
	}
	_, statusErr := cluster("status")
	wasUp := statusErr == nil
	start := time.Now()
	out, err := cluster("up")
	t.Logf("slurm/cluster.sh up: %.1fs", time.Since(start).Seconds())
	if !wasUp {
		// Registered before the check, so a half-started cluster goes too.
		t.Cleanup(func() {
			if out, err := cluster("down"); err != nil {
				t.Errorf("slurm/cluster.sh down: %v\n%s", err, out)
			}
		})
	}
	if err != nil {
		t.Fatalf("slurm/cluster.sh up: %v\n%s", err, out)
	}
	return env
}

// sbatchWait submits a batch script with `sbatch --wait --parsable` and
// returns the job id and the job's output file.
func sbatchWait(t *testing.T, env []string, dir string, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out := filepath.Join(dir, "job-%j.out")
	full := append([]string{"--wait", "--parsable", "--chdir=" + dir, "--output=" + out, "--time=5"}, args...)
	cmd := exec.CommandContext(ctx, "sbatch", full...)
	cmd.Env = env
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	id, _, _ := strings.Cut(strings.TrimSpace(stdout.String()), ";")
	jobOut := strings.ReplaceAll(out, "%j", id)
	b, _ := os.ReadFile(jobOut)
	if err != nil || !regexp.MustCompile(`^\d+$`).MatchString(id) {
		if ctx.Err() != nil && id != "" {
			exec.Command("scancel", id).Run()
		}
		t.Fatalf("sbatch %v: %v (job %q)\nstderr: %s\njob output:\n%s", args, err, id, stderr.String(), b)
	}
	return id, string(b)
}

const slurmPlan = `
[plan]
name = "slurm"
drop_caches = "none"

[[phase]]
kind = "create_files"
count = 25
size = "1KiB"

[[phase]]
kind = "list_files"
count = 25
shared_dir = true
`

// TestSlurmBatch is the users' first command on a real (single-node)
// Slurm: sbatch examples/prism.sbatch with the plan, binary and
// directories passed through --export, 4 MPI ranks started by
// srun --mpi=pmix. Then the same with a script written by `prism sbatch`
// for paths full of shell metacharacters.
func TestSlurmBatch(t *testing.T) {
	needMPI(t)
	env := slurmUp(t)
	dir := t.TempDir()
	plan := writePlan(t, dir, slurmPlan)
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	res := filepath.Join(dir, "res")
	example, _ := filepath.Abs("examples/prism.sbatch")

	start := time.Now()
	id, out := sbatchWait(t, env, dir, "--nodes=1", "--ntasks=4", "--ntasks-per-node=4",
		"--export=ALL,PRISM_PLAN="+plan+",PRISM_BIN="+prismBin+",PRISM_WORKDIR="+work+",PRISM_RESULTS="+res, example)
	t.Logf("sbatch --wait examples/prism.sbatch: job %s in %.1fs", id, time.Since(start).Seconds())
	m := loadManifest(t, result{stdout: out})
	if m.Status != "passed" || m.Comm.Kind != "mpi" || m.Comm.Ranks != 4 {
		t.Fatalf("status %s comm %+v\n%s", m.Status, m.Comm, out)
	}
	switch m.Comm.RankSource {
	case "PMIX_RANK", "PMI_RANK", "SLURM_PROCID":
	default:
		t.Errorf("rank_source %q, want a PMIx or Slurm variable", m.Comm.RankSource)
	}
	if m.Host.SlurmJobID != id || m.Host.SlurmNodeList != "localhost" || m.Host.SlurmTasks != "4" {
		t.Errorf("host slurm fields: job %q (submitted %s) nodes %q tasks %q", m.Host.SlurmJobID, id, m.Host.SlurmNodeList, m.Host.SlurmTasks)
	}
	want := map[string]int64{"create_files": 4 * 25, "list_files": 4 + 4*4*25}
	for _, p := range m.Phases {
		if p.Status != "passed" || p.PerRank.Len() != 4 || p.Ops != want[p.Kind] {
			t.Errorf("%s: status %s, %d ranks, %d ops (want %d)", p.Name, p.Status, p.PerRank.Len(), p.Ops, want[p.Kind])
		}
	}
	if ents, _ := os.ReadDir(work); len(ents) != 0 {
		t.Errorf("workdir not cleaned: %v", ents)
	}

	// prism sbatch --submit checks the request against the partition
	// first: 2 nodes on this one-node cluster are refused with the reason
	// Slurm would pend on forever, and nothing is queued; 1 node is
	// submitted and runs.
	t.Run("prism sbatch --submit", func(t *testing.T) {
		submit := func(args ...string) result {
			return runIn(t, dir, env, prismBin, append([]string{"sbatch", "--submit", "--bin", prismBin, "--time", "5"}, args...)...)
		}
		squeue := func() string {
			cmd := exec.Command("squeue", "-h", "-o", "%i %j")
			cmd.Env = env
			out, _ := cmd.Output()
			return strings.TrimSpace(string(out))
		}
		before := squeue()
		r := submit(plan, "--nodes", "2")
		if r.code != 2 || !strings.Contains(r.stderr, "PartitionNodeLimit") || !strings.Contains(r.stderr, "has 1 node") {
			t.Errorf("--nodes 2 on one node: exit %d, stderr %q; want 2 with the partition's limit", r.code, r.stderr)
		}
		if q := squeue(); q != before {
			t.Errorf("a refused request was queued: squeue %q (before %q)", q, before)
		}
		r = submit(plan, "--nodes", "1", "--ntasks-per-node", "2", "--workdir", work, "--results", res)
		m := regexp.MustCompile(`^submitted batch job (\d+) `).FindStringSubmatch(r.stdout)
		if r.code != 0 || m == nil {
			t.Fatalf("--nodes 1: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		id := m[1]
		for deadline := time.Now().Add(90 * time.Second); strings.Contains(squeue(), id+" "); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				exec.Command("scancel", id).Run()
				t.Fatalf("job %s still queued or running after 90s", id)
			}
		}
		b, _ := os.ReadFile(filepath.Join(dir, "prism-"+id+".out"))
		jm := loadManifest(t, result{stdout: string(b)})
		if jm.Status != "passed" || jm.Comm.Ranks != 2 || jm.Host.SlurmJobID != id {
			t.Errorf("job %s: status %s, %d ranks, slurm job %q\n%s", id, jm.Status, jm.Comm.Ranks, jm.Host.SlurmJobID, b)
		}
	})

	t.Run("prism sbatch", func(t *testing.T) {
		// Paths a shell would mangle if the script quoted them wrongly.
		odd := filepath.Join(dir, "it's a \"dir\" with $HOME and `id`")
		os.MkdirAll(filepath.Join(odd, "work"), 0o755)
		oddPlan := writePlan(t, odd, slurmPlan)
		r := prism(t, dir, "sbatch", oddPlan, "--nodes", "1", "--ntasks-per-node", "2", "--time", "5",
			"--bin", prismBin, "--workdir", filepath.Join(odd, "work"), "--results", filepath.Join(odd, "res"))
		if r.code != 0 {
			t.Fatalf("prism sbatch: exit %d: %s", r.code, r.stderr)
		}
		script := filepath.Join(dir, "job.sbatch")
		os.WriteFile(script, []byte(r.stdout), 0o644)
		id, out := sbatchWait(t, env, dir, script)
		m := loadManifest(t, result{stdout: out})
		if m.Status != "passed" || m.Comm.Kind != "mpi" || m.Comm.Ranks != 2 || m.Host.SlurmJobID != id {
			t.Fatalf("status %s comm %+v job %q (submitted %s)", m.Status, m.Comm, m.Host.SlurmJobID, id)
		}
		if m.Host.Workdir != filepath.Join(odd, "work") || !strings.HasPrefix(m.RunDir, filepath.Join(odd, "work")) {
			t.Errorf("workdir %q run dir %q", m.Host.Workdir, m.RunDir)
		}
		if _, err := os.Stat(filepath.Join(odd, "res", "slurm", m.RunID, "manifest.json")); err != nil {
			t.Errorf("manifest not under --results: %v", err)
		}
	})
}
