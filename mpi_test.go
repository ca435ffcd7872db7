package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prism-hpc/prism/spmd"
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
		for _, pr := range p.PerRank.All() {
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
	return runIn(t, dir, append(cleanEnv(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"), mpirun, args...)
}

// runIn runs name with args in dir with env and returns its output and
// exit code (failing the test when it cannot start).
func runIn(t *testing.T, dir string, env []string, name string, args ...string) result {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
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
		if p.PerRank.Len() != 4 || p.Status != "passed" {
			t.Errorf("%s: %d rows, %s", p.Name, p.PerRank.Len(), p.Status)
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

// mpiJob is an mpirun started in the background, for tests that act on the
// job while it runs.
type mpiJob struct {
	cmd            *exec.Cmd
	stdout, stderr *lockedBuilder
	started        time.Time
	done           chan struct{}
	code           int
	elapsed        time.Duration
}

type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startMPI starts mpirun as runMPI does, without waiting. If the test
// ends first, mpirun gets SIGTERM (which it forwards to the ranks), then
// SIGKILL.
func startMPI(t *testing.T, mpirun, dir string, args ...string) *mpiJob {
	t.Helper()
	j := &mpiJob{stdout: &lockedBuilder{}, stderr: &lockedBuilder{}, done: make(chan struct{})}
	j.cmd = exec.Command(mpirun, args...)
	j.cmd.Dir = dir
	j.cmd.Env = append(cleanEnv(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	j.cmd.Stdout, j.cmd.Stderr = j.stdout, j.stderr
	j.started = time.Now()
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := j.cmd.Wait()
		j.elapsed = time.Since(j.started)
		if ee, ok := err.(*exec.ExitError); ok {
			j.code = ee.ExitCode() // -1 if mpirun itself died by a signal
		}
		close(j.done)
	}()
	t.Cleanup(func() {
		select {
		case <-j.done:
			return
		default:
		}
		j.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-j.done:
		case <-time.After(10 * time.Second):
			j.cmd.Process.Kill()
			<-j.done
		}
	})
	return j
}

// wait waits up to bound for mpirun to exit and reports whether it did.
func (j *mpiJob) wait(bound time.Duration) bool {
	select {
	case <-j.done:
		return true
	case <-time.After(bound):
		return false
	}
}

func (j *mpiJob) result() result {
	return result{code: j.code, stdout: j.stdout.String(), stderr: j.stderr.String(), elapsed: j.elapsed}
}

// procID names a process across pid reuse: its pid and its start time in
// clock ticks since boot (field 22 of /proc/<pid>/stat).
type procID struct {
	pid   int
	start string
}

// procStat returns the parent pid, state and start time of pid.
func procStat(pid int) (ppid int, state, start string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", "", false
	}
	// The command name (field 2) may hold spaces and parentheses; the
	// fields after its last ')' are plain: state ppid ... starttime (22).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, "", "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, "", "", false
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0], f[19], true
}

// alive reports whether the process is still there (a zombie counts as
// gone: it runs nothing and holds nothing but its pid).
func (p procID) alive() bool {
	_, state, start, ok := procStat(p.pid)
	return ok && start == p.start && state != "Z" && state != "X"
}

// mpiRankProcs finds the rank processes of the mpirun with pid root: the
// processes below it in the process tree that run bin and carry
// OMPI_COMM_WORLD_RANK in their environment, keyed by that rank.
func mpiRankProcs(root int, bin string) map[int]procID {
	ents, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	starts := map[int]string{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, start, ok := procStat(pid); ok {
			parent[pid], starts[pid] = ppid, start
		}
	}
	below := func(pid int) bool {
		for depth := 0; depth < 8 && pid > 1; depth++ {
			pid = parent[pid]
			if pid == root {
				return true
			}
		}
		return false
	}
	ranks := map[int]procID{}
	for pid := range parent {
		if !below(pid) {
			continue
		}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || filepath.Clean(exe) != filepath.Clean(bin) {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			if v, ok := strings.CutPrefix(kv, "OMPI_COMM_WORLD_RANK="); ok {
				if r, err := strconv.Atoi(v); err == nil {
					ranks[r] = procID{pid: pid, start: starts[pid]}
				}
			}
		}
	}
	return ranks
}

// waitForPath polls for the one path matching pattern while the job runs.
func (j *mpiJob) waitForPath(pattern string, bound time.Duration) string {
	for deadline := time.Now().Add(bound); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if m, _ := filepath.Glob(pattern); len(m) == 1 {
			return m[0]
		}
		select {
		case <-j.done:
			return ""
		default:
		}
	}
	return ""
}

// output is the job's output so far, for failure messages.
func (j *mpiJob) output() string {
	return "stdout:\n" + j.stdout.String() + "\nstderr:\n" + j.stderr.String()
}

// TestRankFailureStopsPeersMPI is TestRankFailureImmutableDir under
// mpirun: rank 2's directory is made immutable while it creates files; it
// fails with EPERM, its MPI alert stops ranks 0 and 1 in the middle of
// their loops, long before they finish, every rank leaves the phase together, rank 0 writes the manifest
// naming rank 2, and mpirun exits non-zero.
func TestRankFailureStopsPeersMPI(t *testing.T) {
	mpirun := needMPI(t)
	needRoot(t)
	if _, err := exec.LookPath("chattr"); err != nil {
		t.Skip("chattr not installed (e2fsprogs)")
	}
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	if out, err := exec.Command("chattr", "+i", work).CombinedOutput(); err != nil {
		t.Skipf("chattr +i unsupported here: %s", out)
	}
	exec.Command("chattr", "-i", work).Run()
	const count = 200000
	plan := writePlan(t, dir, fmt.Sprintf("[plan]\ndrop_caches = \"none\"\n[[phase]]\nkind = \"create_files\"\ncount = %d\nsize = 0\n", count))

	j := startMPI(t, mpirun, dir, mpirunArgs("3", prismBin, "run", plan, "--workdir", work, "--results", filepath.Join(dir, "res"))...)
	target := j.waitForPath(filepath.Join(work, "prism-*", "01-create_files", "r2", "files"), 60*time.Second)
	if target == "" {
		t.Fatalf("rank 2's directory never appeared\n%s", j.output())
	}
	// Freeze it once rank 2 is well into its loop, so that its peers are
	// too and must be stopped in the middle of theirs.
	if j.waitForPath(filepath.Join(target, "f2.2000"), 60*time.Second) == "" {
		t.Fatalf("rank 2 never created its 2001st file\n%s", j.output())
	}
	// And once ranks 0 and 1 have created a file each: a rank the loaded
	// machine wakes late could otherwise be stopped before its first op,
	// and rightly report none.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Millisecond) {
		peers, _ := filepath.Glob(filepath.Join(work, "prism-*", "01-create_files", "r[01]", "files"))
		if len(peers) == 2 && hasEntry(peers[0]) && hasEntry(peers[1]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ranks 0 and 1 never created a file\n%s", j.output())
		}
	}
	if b, err := exec.Command("chattr", "+i", target).CombinedOutput(); err != nil {
		t.Fatalf("chattr: %v %s", err, b)
	}
	t.Cleanup(func() {
		exec.Command("chattr", "-i", target).Run()
		os.RemoveAll(work)
	})
	const bound = 120 * time.Second // a hang guard: a stuck job never ends
	if !j.wait(bound) {
		t.Fatalf("mpirun still running %v after the failure\n%s", bound, j.output())
	}
	r := j.result()
	t.Logf("mpirun exit %d after %v", r.code, r.elapsed.Round(time.Millisecond))
	// Every rank exits 1 (a failed phase); mpirun reports that.
	if r.code == 0 {
		t.Fatalf("mpirun exited 0 after a rank failed\n%s\n%s", r.stdout, r.stderr)
	}
	m := loadManifest(t, r)
	if m.Comm.Kind != "mpi" || m.Status != "failed" || len(m.Phases) != 1 {
		t.Fatalf("comm %s status %s phases %d", m.Comm.Kind, m.Status, len(m.Phases))
	}
	p := m.Phases[0]
	if p.FailedRank == nil || *p.FailedRank != 2 || !strings.Contains(p.Error, "operation not permitted") || !strings.Contains(p.Error, "rank 2") {
		t.Fatalf("failed rank %v error %q", p.FailedRank, p.Error)
	}
	if p.PerRank.Len() != 3 {
		t.Fatalf("%d per-rank rows", p.PerRank.Len())
	}
	// Ranks 0 and 1 were alerted and stopped early instead of finishing
	// their creates; they report what they did, without an error of their
	// own.
	// Their run step lasted about as long as rank 2's: the alert takes
	// ~20 ms; the bound is generous for loaded machines, and far below the
	// time of 200000 creates.
	failedAt := p.PerRank.At(2).Seconds
	for _, pr := range p.PerRank.All() {
		t.Logf("rank %d: %d ops in %.3fs, error %q", pr.Rank, pr.Ops, pr.Seconds, pr.Error)
		if pr.Rank == 2 {
			continue
		}
		if pr.Error != "" || pr.Ops == 0 || pr.Ops >= count {
			t.Errorf("rank %d: ops %d error %q: not stopped early", pr.Rank, pr.Ops, pr.Error)
		}
		if pr.Seconds > failedAt+5 {
			t.Errorf("rank %d ran %.3fs, rank 2 failed after %.3fs: not stopped by the alert", pr.Rank, pr.Seconds, failedAt)
		}
	}
}

// TestRankKilledMPI: a rank killed with SIGKILL, or stopped with SIGSTOP,
// in the middle of a phase must bring the whole job down: mpirun exits
// non-zero within a bound and no other rank is left running (waiting in a
// collective for the dead one).
//
// By default mpirun ends every rank at once when one dies by a signal,
// with a SIGTERM and a SIGKILL a second later (odls_base_sigkill_timeout):
// nothing survives to write a manifest. With orte_abort_on_non_zero_status
// off (what prism.sbatch's mpirun line and the README give), the
// survivors' bounded collectives notice the dead rank within
// coordination_timeout: rank 0 writes the manifest naming it, removes the
// run directory, and aborts the job. A stopped rank is found the same way,
// by a liveness probe it cannot answer.
func TestRankKilledMPI(t *testing.T) {
	mpirun := needMPI(t)
	for _, c := range []struct {
		name     string
		sig      syscall.Signal
		mca      []string
		manifest bool
	}{
		{"killed", syscall.SIGKILL, nil, false},
		{"killed, survivors write", syscall.SIGKILL, []string{"--mca", "orte_abort_on_non_zero_status", "0"}, true},
		{"stopped", syscall.SIGSTOP, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rankSignalledMPI(t, mpirun, c.sig, c.mca, c.manifest)
		})
	}
}

func rankSignalledMPI(t *testing.T, mpirun string, sig syscall.Signal, mca []string, wantManifest bool) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	// Long enough never to finish: 1000 iterations of 5000 creates and
	// their removal, with at most 5000 files per rank on disk at a time.
	plan := writePlan(t, dir, "[plan]\ndrop_caches = \"none\"\ncoordination_timeout = \"5s\"\n[[phase]]\nkind = \"create_files\"\ncount = 5000\nsize = 0\niterations = 1000\n")
	args := append(mca, mpirunArgs("3", prismBin, "run", plan, "--workdir", work, "--results", filepath.Join(dir, "res"))...)
	j := startMPI(t, mpirun, dir, args...)

	if j.waitForPath(filepath.Join(work, "prism-*", "01-create_files", "r1", "files"), 60*time.Second) == "" {
		t.Fatalf("rank 1 never entered the phase\n%s", j.output())
	}
	var ranks map[int]procID
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ranks = mpiRankProcs(j.cmd.Process.Pid, prismBin); len(ranks) == 3 {
			break
		}
	}
	if len(ranks) != 3 {
		t.Fatalf("found rank processes %v under mpirun %d, want 3", ranks, j.cmd.Process.Pid)
	}
	t.Cleanup(func() { // never leave a rank behind, whatever happened
		for _, p := range ranks {
			if p.alive() {
				syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
	})
	time.Sleep(500 * time.Millisecond) // well into the phase's loop
	select {
	case <-j.done:
		t.Fatalf("the job ended before the signal (exit %d)\n%s", j.code, j.output())
	default:
	}
	signalled := time.Now()
	if err := syscall.Kill(ranks[1].pid, sig); err != nil {
		t.Fatal(err)
	}
	const bound = 60 * time.Second
	if !j.wait(bound) {
		var left []int
		for r, p := range ranks {
			if p.alive() {
				left = append(left, r)
			}
		}
		t.Fatalf("mpirun still running %v after rank 1 got %v; ranks alive: %v\n%s", bound, sig, left, j.output())
	}
	r := j.result()
	t.Logf("mpirun exit %d, %v after the signal", r.code, time.Since(signalled).Round(time.Millisecond))
	if r.code == 0 {
		t.Errorf("mpirun exited 0 after rank 1 got %v\n%s", sig, r.stderr)
	}
	// mpirun kills the other ranks before it exits; allow a moment for
	// the kernel to finish them.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var left []int
		for rk, p := range ranks {
			if p.alive() {
				left = append(left, rk)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ranks %v still running after mpirun exited", left)
		}
	}
	if !wantManifest {
		return
	}
	if !manifestLine.MatchString(r.stdout) {
		t.Fatalf("no manifest from the survivors\n%s", j.output())
	}
	m := loadManifest(t, r)
	p := m.Phases[0]
	if m.Status != "failed" || p.Status != "failed" || !strings.Contains(p.Error, "rank 1 (host ") || !strings.Contains(p.Error, "liveness probe") {
		t.Errorf("manifest %s, phase %s, error %q: want rank 1 named as not answering", m.Status, p.Status, p.Error)
	}
	if left, _ := filepath.Glob(filepath.Join(work, "prism-*")); len(left) != 0 {
		t.Errorf("the survivors left the run directory %v", left)
	}
}

// TestResultsUnwritableMPI: rank 0 alone fails after the phases (it cannot
// write the results), while the other ranks wait in the run's last
// Barrier. Under MPI nothing times out, so unless the failing rank aborts
// the job, the others wait forever and rank 0's MPI_Finalize waits for
// them: mpirun must instead exit non-zero within seconds.
func TestResultsUnwritableMPI(t *testing.T) {
	mpirun := needMPI(t)
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	notDir := filepath.Join(dir, "afile")
	os.WriteFile(notDir, []byte("x"), 0o644)
	plan := writePlan(t, dir, "[plan]\ndrop_caches = \"none\"\n[[phase]]\nkind = \"create_files\"\ncount = 10\n")
	j := startMPI(t, mpirun, dir, mpirunArgs("3", prismBin, "run", plan, "--workdir", work, "--results", filepath.Join(notDir, "res"))...)
	const bound = 60 * time.Second
	if !j.wait(bound) {
		t.Fatalf("mpirun still running %v after rank 0 failed to write the results\n%s", bound, j.output())
	}
	r := j.result()
	t.Logf("mpirun exit %d after %v", r.code, r.elapsed.Round(time.Millisecond))
	if r.code == 0 || !strings.Contains(r.stderr, "not a directory") {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
}

// TestBindLocalMPI: under mpirun with --bind-to none, --bind local has each
// rank bind itself to its local rank's block of the CPUs it was allowed:
// the ranks' recorded CPUs are disjoint, non-empty, and cover the node.
func TestBindLocalMPI(t *testing.T) {
	mpirun := needMPI(t)
	cpus, err := spmd.Affinity()
	if err != nil || len(cpus) < 2 {
		t.Skipf("%d CPUs (%v): nothing to split between 2 ranks", len(cpus), err)
	}
	dir := t.TempDir()
	plan := writePlan(t, dir, "[plan]\ndrop_caches = \"none\"\n[[phase]]\nkind = \"create_files\"\ncount = 10\n")
	r := runMPI(t, mpirun, dir, mpirunArgs("2", prismBin, "run", "--bind", "local", plan, "--workdir", dir, "--results", filepath.Join(dir, "res"))...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	m := loadManifest(t, r)
	seen := map[int]int{}
	total := 0
	for _, pr := range m.Phases[0].PerRank.All() {
		got, err := spmd.ParseCPUList(pr.CPUs)
		if err != nil || len(got) == 0 {
			t.Fatalf("rank %d: cpus %q (%v)", pr.Rank, pr.CPUs, err)
		}
		for _, c := range got {
			if o, dup := seen[c]; dup {
				t.Errorf("CPU %d bound to ranks %d and %d", c, o, pr.Rank)
			}
			seen[c] = pr.Rank
		}
		total += len(got)
	}
	if total != len(cpus) {
		t.Errorf("ranks bound to %d CPUs in all, the node allows %d: %v", total, len(cpus), seen)
	}
	// Without a launcher there is no local rank to bind by.
	if r := prism(t, dir, "run", "--bind", "local", plan, "--workdir", dir); r.code != 2 || !strings.Contains(r.stderr, "local rank") {
		t.Errorf("--bind local without a launcher: exit %d %s", r.code, r.stderr)
	}
}
