package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prism-hpc/prism/report"
	"github.com/prism-hpc/prism/slurm"
)

// The multi-node tests' cluster: its own state directory, interface
// prefix, network and ports, so that it runs beside a cluster a developer
// brought up with `make slurm-up` or `make cluster-up`.
const (
	multiNodeState  = "/var/tmp/prism-multinode"
	multiNodePrefix = "clustert" // node K's network namespace: clustert-nodeK
)

var multiNodeVars = []string{
	"PRISM_SLURM_DIR=" + multiNodeState,
	"PRISM_CLUSTER_PREFIX=" + multiNodePrefix,
	"PRISM_CLUSTER_NET=10.213.48",
	"PRISM_SLURM_PORT=6837",
}

// multiCluster is a running emulated cluster of slurm/cluster.sh.
type multiCluster struct {
	script string
	env    []string          // for sinfo, sbatch, srun and mpirun
	vars   map[string]string // what `cluster.sh env` printed
	nodes  []string
	shared string // the shared filesystem: the same path on the head and every node
	dir    string // this test binary's directory on it
	bin    string // prism, copied onto the shared filesystem
}

// multiNodeUp brings up the 4-node cluster for t and its subtests and
// takes it down when t ends, unless it was up before.
func multiNodeUp(t *testing.T) *multiCluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: slurm/cluster.sh makes network namespaces, mounts sshfs and starts munged, slurmctld, slurmd and sshd (make test runs as root in CI)")
	}
	script, err := filepath.Abs("slurm/cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	c := &multiCluster{script: script}
	base := append(cleanEnv(), multiNodeVars...)
	run := func(args ...string) ([]byte, error) {
		cmd := exec.Command(script, args...)
		cmd.Env = base
		return cmd.CombinedOutput()
	}
	_, statusErr := run("status")
	wasUp := statusErr == nil
	start := time.Now()
	out, err := run("up", "--nodes", "4")
	t.Logf("slurm/cluster.sh up --nodes 4: %.1fs", time.Since(start).Seconds())
	if !wasUp {
		// Registered before the check, so a half-started cluster goes too.
		t.Cleanup(func() {
			start := time.Now()
			if out, err := run("down"); err != nil {
				t.Errorf("slurm/cluster.sh down: %v\n%s", err, out)
			}
			t.Logf("slurm/cluster.sh down: %.1fs", time.Since(start).Seconds())
			if left := clusterLeftovers(multiNodeState, multiNodePrefix); len(left) > 0 {
				t.Errorf("after slurm/cluster.sh down: %s", strings.Join(left, "; "))
			}
		})
	}
	if err != nil {
		t.Fatalf("slurm/cluster.sh up --nodes 4: %v\n%s", err, out)
	}
	out, err = run("env")
	if err != nil {
		t.Fatalf("slurm/cluster.sh env: %v\n%s", err, out)
	}
	c.vars = map[string]string{}
	c.env = base
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		kv, ok := strings.CutPrefix(line, "export ")
		k, v, ok2 := strings.Cut(kv, "=")
		if !ok || !ok2 {
			t.Fatalf("slurm/cluster.sh env printed %q", line)
		}
		c.vars[k] = v
		c.env = append(c.env, kv)
	}
	c.env = append(c.env, "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	c.nodes = strings.Split(c.vars["PRISM_CLUSTER_NODES"], ",")
	c.shared = c.vars["PRISM_CLUSTER_SHARED"]
	if len(c.nodes) != 4 || c.shared == "" || c.vars["PRISM_CLUSTER_AGENT"] == "" {
		t.Fatalf("slurm/cluster.sh env: %v", c.vars)
	}
	// The head sees the shared filesystem as the file server's directory;
	// the binary goes there as users keep theirs on a shared filesystem.
	if c.dir, err = os.MkdirTemp(c.shared, "test-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(c.dir) })
	c.bin = filepath.Join(c.dir, "bin", "prism")
	if err := copyFile(prismBin, c.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return c
}

// clusterLeftovers lists what a cluster of state directory state and
// interface prefix prefix still holds: network namespaces, interfaces,
// mounts under state, and processes whose command line names state.
func clusterLeftovers(state, prefix string) []string {
	var left []string
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), prefix+"-") {
		left = append(left, "network namespaces: "+strings.Join(strings.Fields(string(out)), " "))
	}
	if out, _ := exec.Command("ip", "-o", "link", "show").Output(); strings.Contains(string(out), " "+prefix+"-") {
		left = append(left, "interfaces named "+prefix+"-*")
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), state+"/") || strings.Contains(string(b), state+" ") {
		left = append(left, "mounts under "+state)
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if _, state2, _, ok := procStat(pid); ok && state2 != "Z" && strings.Contains(string(cmdline), state+"/") {
			left = append(left, fmt.Sprintf("process %d: %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
		}
	}
	return left
}

// TestClusterDownAfterHalfUp: `down` removes what an `up` killed half-way
// made (namespaces, bridge, veths, mounts, daemons), whenever it was killed.
func TestClusterDownAfterHalfUp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: slurm/cluster.sh makes network namespaces and mounts")
	}
	script, _ := filepath.Abs("slurm/cluster.sh")
	const state, prefix = "/var/tmp/prism-halfup", "clusterh"
	env := append(cleanEnv(), "PRISM_SLURM_DIR="+state, "PRISM_CLUSTER_PREFIX="+prefix, "PRISM_CLUSTER_NET=10.213.49", "PRISM_SLURM_PORT=6847")
	down := func() {
		cmd := exec.Command(script, "down")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("slurm/cluster.sh down: %v\n%s", err, out)
		}
	}
	t.Cleanup(func() { down(); os.RemoveAll(state) })
	// Killed once the first node's namespace exists, then once the second
	// node's does (the first one's mount and slurmd may be up by then).
	for _, when := range []string{prefix + "-node1", prefix + "-node2"} {
		up := exec.Command(script, "up", "--nodes", "2")
		up.Env = env
		if err := up.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat("/run/netns/" + when); err == nil {
				break
			}
			if time.Now().After(deadline) {
				up.Process.Kill()
				up.Wait()
				t.Fatalf("no network namespace %s 2 minutes into slurm/cluster.sh up", when)
			}
		}
		time.Sleep(200 * time.Millisecond)
		up.Process.Kill()
		up.Wait()
		if left := clusterLeftovers(state, prefix); len(left) == 0 {
			t.Fatalf("up killed after making %s left nothing to remove: the test saw no half-made cluster", when)
		}
		down()
		if left := clusterLeftovers(state, prefix); len(left) > 0 {
			t.Errorf("down after up was killed past %s left: %s", when, strings.Join(left, "; "))
		}
	}
}

func copyFile(from, to string, mode os.FileMode) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// subdir makes a fresh directory for one subtest on the shared filesystem.
func (c *multiCluster) subdir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp(c.dir, strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())+"-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(d, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// cluster runs one of slurm/cluster.sh's verbs.
func (c *multiCluster) cluster(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(c.script, args...)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("slurm/cluster.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// command runs a Slurm client command (or anything else) in dir with the
// cluster's environment, killed after bound.
func (c *multiCluster) command(t *testing.T, bound time.Duration, dir string, extraEnv []string, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(append([]string{}, c.env...), extraEnv...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s %v: still running after %v\nstdout:\n%s\nstderr:\n%s", name, args, bound, r.stdout, r.stderr)
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return r
}

// mpirunArgs is mpirunArgs with the cluster's agent and network, on hosts.
func (c *multiCluster) mpirunArgs(np, hosts string, args ...string) []string {
	net := c.vars["PRISM_CLUSTER_NET"]
	return mpirunArgs(np, append([]string{"--host", hosts, "--display-map",
		"--mca", "plm_rsh_agent", c.vars["PRISM_CLUSTER_AGENT"],
		"--mca", "oob_tcp_if_include", net, "--mca", "btl_tcp_if_include", net}, args...)...)
}

// jobMap reads mpirun --display-map's placement: the node of every rank.
// mpirun prints the map once per daemon; every copy must agree.
func jobMap(t *testing.T, out string) map[int]string {
	t.Helper()
	nodeRe := regexp.MustCompile(`^\s*Data for node: (\S+)`)
	rankRe := regexp.MustCompile(`Process rank: (\d+)`)
	placement := map[int]string{}
	node := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if m := nodeRe.FindStringSubmatch(line); m != nil {
			node = m[1]
			continue
		}
		if strings.Contains(line, "====") {
			node = ""
		}
		if m := rankRe.FindStringSubmatch(line); m != nil && node != "" {
			r, _ := strconv.Atoi(m[1])
			if prev, ok := placement[r]; ok && prev != node {
				t.Fatalf("mpirun's maps disagree: rank %d on %s and %s", r, prev, node)
			}
			placement[r] = node
		}
	}
	return placement
}

// nodeProcs finds the processes running bin on node, by its network
// namespace (their parent is the node's slurmstepd, not the test's srun).
func nodeProcs(t *testing.T, node, bin string) []procID {
	t.Helper()
	out, err := exec.Command("ip", "netns", "pids", multiNodePrefix+"-"+node).Output()
	if err != nil {
		t.Fatalf("ip netns pids %s-%s: %v", multiNodePrefix, node, err)
	}
	var procs []procID
	for _, f := range strings.Fields(string(out)) {
		pid, _ := strconv.Atoi(f)
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if _, _, start, ok := procStat(pid); ok && err == nil && filepath.Clean(exe) == filepath.Clean(bin) {
			procs = append(procs, procID{pid: pid, start: start})
		}
	}
	return procs
}

// clientVars are the cluster's variables as NAME=VALUE, for env(1).
func (c *multiCluster) clientVars() []string {
	var kv []string
	for k, v := range c.vars {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return kv
}

// ranksPerHost counts a phase's per-rank rows by host.
func ranksPerHost(p report.PhaseResult) map[string]int {
	n := map[string]int{}
	for _, pr := range p.PerRank.All() {
		n[pr.Host]++
	}
	return n
}

const multiNodePlan = `
[plan]
name = "multinode"
drop_caches = "none"

[[phase]]
kind = "create_files"
count = 40
size = "4KiB"

[[phase]]
kind = "blockio"
rw = "randrw"
bs = "4KiB"
size = "2MiB"

[[phase]]
kind = "fsdp_save"
model = "gpt2"
scale = 0.01

[[phase]]
kind = "fsdp_load"
model = "gpt2"
scale = 0.01
`

// sharedDirPlan runs the metadata storm in one directory shared by every
// rank of every node, then a checkpoint round trip.
const sharedDirPlan = `
[plan]
name = "shared-dir"
drop_caches = "none"

[[phase]]
kind = "create_files"
count = 30
size = "1KiB"
shared_dir = true

[[phase]]
kind = "list_files"
count = 30
shared_dir = true

[[phase]]
kind = "move_files"
count = 30
shared_dir = true

[[phase]]
kind = "delete_files"
count = 30
shared_dir = true

[[phase]]
kind = "ddp_save"
model = "gpt2"
scale = 0.01

[[phase]]
kind = "ddp_load"
model = "gpt2"
scale = 0.01
`

// TestMultiNode runs prism across the 4 emulated nodes of slurm/cluster.sh
// (hostnames node1..node4, a private /tmp each, a shared sshfs mount with
// attribute and directory caching): under mpirun through the cluster's rsh
// agent, under sbatch/srun with PMIx, under srun without MPI through a
// rendezvous directory on the shared mount; the partition check against
// the real Slurm; and the faults of a real cluster: a node that dies in the
// middle of a phase, and one that cannot be reached at start.
func TestMultiNode(t *testing.T) {
	hosts, _ := os.ReadFile("/etc/hosts")
	c := multiNodeUp(t)
	t.Cleanup(func() {
		if now, _ := os.ReadFile("/etc/hosts"); string(now) != string(hosts) {
			t.Errorf("/etc/hosts changed:\n%s", now)
		}
	})

	t.Run("one node seen by slurmd and by the agent", func(t *testing.T) {
		dir := c.subdir(t)
		// A task Slurm started on node2 leaves a file in node2's /tmp ...
		token := fmt.Sprintf("prism-multinode-%d", os.Getpid())
		r := c.command(t, time.Minute, dir, nil, "srun", "-w", "node2", "-t", "1", "sh", "-c", "hostname; echo "+token+" > /tmp/"+token)
		if r.code != 0 || strings.TrimSpace(r.stdout) != "node2" {
			t.Fatalf("srun -w node2 hostname: exit %d %q %s", r.code, r.stdout, r.stderr)
		}
		// ... which OpenMPI's agent finds on node2, under the same name,
		// and no other node (nor the host) has.
		agent := c.vars["PRISM_CLUSTER_AGENT"]
		r = c.command(t, time.Minute, dir, nil, agent, "node2", "hostname; cat /tmp/"+token+"; getent hosts node3")
		if f := strings.Fields(r.stdout); r.code != 0 || len(f) != 4 || f[0] != "node2" || f[1] != token || f[3] != "node3" || !strings.HasPrefix(f[2], "10.213.48.") {
			t.Errorf("agent node2: exit %d %q %s", r.code, r.stdout, r.stderr)
		}
		if r = c.command(t, time.Minute, dir, nil, agent, "node1", "cat /tmp/"+token); r.code == 0 {
			t.Errorf("node1 sees node2's /tmp/%s: %q", token, r.stdout)
		}
		if _, err := os.Stat("/tmp/" + token); err == nil {
			t.Errorf("the host sees node2's /tmp/%s", token)
		}
		if r = c.command(t, time.Minute, dir, nil, agent, "node9", "true"); r.code != 255 || !strings.Contains(r.stderr, "node9") {
			t.Errorf("agent node9: exit %d %q, want 255 (as ssh) naming node9", r.code, r.stderr)
		}
	})

	t.Run("mpirun 8 ranks on 4 hosts", func(t *testing.T) {
		mpirun := needMPI(t)
		dir := c.subdir(t)
		plan := writePlan(t, dir, multiNodePlan)
		j := startMPI(t, mpirun, dir, c.mpirunArgs("8", "node1:2,node2:2,node3:2,node4:2", c.bin, plan,
			"--workdir", filepath.Join(dir, "work"), "--results", filepath.Join(dir, "res"))...)
		if !j.wait(3 * time.Minute) {
			t.Fatalf("mpirun still running after 3m\n%s", j.output())
		}
		r := j.result()
		t.Logf("mpirun -np 8 on 4 hosts: exit %d in %.1fs", r.code, r.elapsed.Seconds())
		if r.code != 0 {
			t.Fatalf("exit %d\n%s", r.code, j.output())
		}
		m := loadManifest(t, r)
		if m.Status != "passed" || m.Comm.Kind != "mpi" || m.Comm.Ranks != 8 || m.Comm.Hosts != 4 || m.Comm.RankSource != "OMPI_COMM_WORLD_RANK" {
			t.Fatalf("status %s comm %+v", m.Status, m.Comm)
		}
		// The workdir really is the network filesystem, seen from rank 0's node.
		if m.Host.Hostname != "node1" || !strings.Contains(m.Host.FSType, "fuse") {
			t.Errorf("rank 0 on %q, workdir filesystem %q (mount %s), want node1 on sshfs", m.Host.Hostname, m.Host.FSType, m.Host.MountPoint)
		}
		placement := jobMap(t, r.stdout+r.stderr)
		if len(placement) != 8 {
			t.Fatalf("mpirun's map places %d ranks: %v\n%s", len(placement), placement, r.stdout)
		}
		for _, p := range m.Phases {
			if p.Status != "passed" || p.PerRank.Len() != 8 {
				t.Errorf("%s: status %s, %d rows: %s", p.Name, p.Status, p.PerRank.Len(), p.Error)
				continue
			}
			for _, pr := range p.PerRank.All() {
				if pr.Host != placement[pr.Rank] {
					t.Errorf("%s: rank %d reports host %q, mpirun placed it on %q", p.Name, pr.Rank, pr.Host, placement[pr.Rank])
				}
			}
			if hosts := ranksPerHost(p); len(hosts) != 4 {
				t.Errorf("%s: ranks on %v, want 2 on each of 4 hosts", p.Name, hosts)
			}
			// per_host: one row per node, each with its two ranks, adding
			// up to the phase.
			var bytes, ops int64
			for _, h := range p.PerHost {
				bytes, ops = bytes+h.Bytes, ops+h.Ops
				for _, r := range h.Ranks {
					if placement[r] != h.Host {
						t.Errorf("%s: per_host %s lists rank %d, placed on %s", p.Name, h.Host, r, placement[r])
					}
				}
				if len(h.Ranks) != 2 {
					t.Errorf("%s: per_host %s has ranks %v", p.Name, h.Host, h.Ranks)
				}
			}
			if len(p.PerHost) != 4 || bytes != p.Bytes || ops != p.Ops {
				t.Errorf("%s: %d per_host rows with %d bytes %d ops; the phase has %d bytes %d ops", p.Name, len(p.PerHost), bytes, ops, p.Bytes, p.Ops)
			}
		}
		if ops := m.Phases[0].OpsByType["create"].Ops; ops != 8*40 {
			t.Errorf("create_files: %d creates, want %d", ops, 8*40)
		}
		if ents, _ := os.ReadDir(filepath.Join(dir, "work")); len(ents) != 0 {
			t.Errorf("workdir not cleaned: %v\n%s", ents, j.output())
		}
	})

	t.Run("sbatch prism.sbatch on 2 nodes", func(t *testing.T) {
		needMPI(t)
		dir := c.subdir(t)
		plan := writePlan(t, dir, slurmPlan)
		example, _ := filepath.Abs("examples/prism.sbatch")
		start := time.Now()
		id, out := sbatchWait(t, c.env, dir, "-N", "2", "--ntasks-per-node=2",
			"--export=ALL,PRISM_PLAN="+plan+",PRISM_BIN="+c.bin+",PRISM_WORKDIR="+filepath.Join(dir, "work")+",PRISM_RESULTS="+filepath.Join(dir, "res"), example)
		t.Logf("sbatch -N 2 --ntasks-per-node=2 examples/prism.sbatch: job %s in %.1fs", id, time.Since(start).Seconds())
		m := loadManifest(t, result{stdout: out})
		if m.Status != "passed" || m.Comm.Kind != "mpi" || m.Comm.Ranks != 4 || m.Comm.Hosts != 2 || m.Comm.RankSource != "PMIX_RANK" {
			t.Fatalf("status %s comm %+v\n%s", m.Status, m.Comm, out)
		}
		nodes, err := slurm.ExpandHostList(m.Host.SlurmNodeList)
		if m.Host.SlurmJobID != id || err != nil || len(nodes) != 2 || m.Host.SlurmTasks != "2(x2)" ||
			m.Host.SlurmNodeCount != 2 || strings.Join(m.Host.SlurmNodes, ",") != strings.Join(nodes, ",") {
			t.Errorf("slurm fields: job %q (submitted %s), nodes %q (%v), tasks per node %q", m.Host.SlurmJobID, id, m.Host.SlurmNodeList, err, m.Host.SlurmTasks)
		}
		for _, p := range m.Phases {
			hosts := ranksPerHost(p)
			if p.Status != "passed" || len(hosts) != 2 {
				t.Errorf("%s: status %s, ranks per host %v", p.Name, p.Status, hosts)
			}
			for _, n := range nodes {
				if hosts[n] != 2 {
					t.Errorf("%s: %d ranks on %s, want 2 (ranks per host %v)", p.Name, hosts[n], n, hosts)
				}
			}
		}
	})

	t.Run("srun without MPI, rendezvous on the shared mount", func(t *testing.T) {
		dir := c.subdir(t)
		plan := writePlan(t, dir, slurmPlan)
		rdv := filepath.Join(dir, "rendezvous")
		if err := os.Mkdir(rdv, 0o755); err != nil {
			t.Fatal(err)
		}
		r := c.command(t, 2*time.Minute, dir, []string{"PRISM_RENDEZVOUS=" + rdv}, "srun", "-N", "2", "--ntasks-per-node=2", "--mpi=none", "-t", "5",
			c.bin, plan, "--workdir", filepath.Join(dir, "work"), "--results", filepath.Join(dir, "res"))
		t.Logf("srun -N 2 -n 4 --mpi=none: exit %d in %.1fs", r.code, r.elapsed.Seconds())
		if r.code != 0 {
			t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
		m := loadManifest(t, r)
		if m.Status != "passed" || m.Comm.Kind != "rendezvous" || m.Comm.Ranks != 4 || m.Comm.Hosts != 2 || m.Comm.RankSource != "SLURM_PROCID" {
			t.Fatalf("status %s comm %+v", m.Status, m.Comm)
		}
		want := map[string]int64{"create_files": 4 * 25, "list_files": 4 + 4*4*25}
		for _, p := range m.Phases {
			if p.Status != "passed" || len(ranksPerHost(p)) != 2 || p.Ops != want[p.Kind] {
				t.Errorf("%s: status %s, ranks per host %v, %d ops (want %d)", p.Name, p.Status, ranksPerHost(p), p.Ops, want[p.Kind])
			}
		}
	})

	t.Run("shared directory from 2 nodes at once", func(t *testing.T) {
		mpirun := needMPI(t)
		dir := c.subdir(t)
		plan := writePlan(t, dir, sharedDirPlan)
		j := startMPI(t, mpirun, dir, c.mpirunArgs("4", "node2:2,node3:2", c.bin, plan,
			"--workdir", filepath.Join(dir, "work"), "--results", filepath.Join(dir, "res"))...)
		if !j.wait(3 * time.Minute) {
			t.Fatalf("mpirun still running after 3m\n%s", j.output())
		}
		r := j.result()
		t.Logf("mpirun -np 4 on node2, node3: exit %d in %.1fs", r.code, r.elapsed.Seconds())
		if r.code != 0 {
			t.Fatalf("exit %d\n%s", r.code, j.output())
		}
		m := loadManifest(t, r)
		if m.Status != "passed" || m.Comm.Ranks != 4 || m.Comm.Hosts != 2 {
			t.Fatalf("status %s comm %+v", m.Status, m.Comm)
		}
		want := map[string]map[string]int64{
			"create_files": {"create": 4 * 30},
			"list_files":   {"readdir": 4, "stat": 4 * 4 * 30},
			"move_files":   {"rename": 4 * 30},
			"delete_files": {"unlink": 4 * 30},
		}
		for _, p := range m.Phases {
			if hosts := ranksPerHost(p); p.Status != "passed" || hosts["node2"] != 2 || hosts["node3"] != 2 {
				t.Errorf("%s: status %s, ranks per host %v: %s", p.Name, p.Status, hosts, p.Error)
			}
			for op, n := range want[p.Kind] {
				if got := p.OpsByType[op].Ops; got != n {
					t.Errorf("%s: %d %s ops, want %d", p.Name, got, op, n)
				}
			}
		}
	})

	// Ranks placed round-robin (--map-by node: ranks 0 and 2 on node1):
	// nodes = [1, 2] still runs on the ranks of the first host, then of
	// both, however the launcher numbered them.
	t.Run("node sweep, ranks round-robin", func(t *testing.T) {
		mpirun := needMPI(t)
		dir := c.subdir(t)
		plan := writePlan(t, dir, "[plan]\nname = \"nodesweep\"\ndrop_caches = \"none\"\n[[phase]]\nkind = \"create_files\"\ncount = 20\nsize = \"4KiB\"\nnodes = [1, 2]\n")
		j := startMPI(t, mpirun, dir, c.mpirunArgs("4", "node1:2,node2:2", append([]string{"--map-by", "node", c.bin, plan},
			"--workdir", filepath.Join(dir, "work"), "--results", filepath.Join(dir, "res"))...)...)
		if !j.wait(3 * time.Minute) {
			t.Fatalf("mpirun still running after 3m\n%s", j.output())
		}
		r := j.result()
		if r.code != 0 {
			t.Fatalf("exit %d\n%s", r.code, j.output())
		}
		placement := jobMap(t, r.stdout+r.stderr)
		if placement[1] != "node2" || placement[2] != "node1" {
			t.Fatalf("mpirun placed ranks %v, want round-robin", placement)
		}
		m := loadManifest(t, r)
		if len(m.Phases) != 2 {
			t.Fatalf("%d results, want one per node count", len(m.Phases))
		}
		for i, want := range []map[string]int{{"node1": 2}, {"node1": 2, "node2": 2}} {
			p := m.Phases[i]
			hosts := ranksPerHost(p)
			if p.Status != "passed" || p.Nodes != i+1 || len(hosts) != len(want) || hosts["node1"] != 2 || hosts["node2"] != want["node2"] {
				t.Errorf("nodes = %d: status %s (%s), nodes %d, ranks per host %v, want %v", i+1, p.Status, p.Error, p.Nodes, hosts, want)
			}
		}
	})

	// node_local_workdir: each node's /tmp is its own; the first rank of
	// each host makes its run directory there, the host's other rank
	// joins it, results reach rank 0, and every node's copy is removed.
	t.Run("node-local workdir", func(t *testing.T) {
		mpirun := needMPI(t)
		dir := c.subdir(t)
		plan := writePlan(t, dir, "[plan]\nname = \"nodelocal\"\ndrop_caches = \"none\"\nnode_local_workdir = \"/tmp\"\n"+
			"[[phase]]\nkind = \"create_files\"\ncount = 20\nsize = \"4KiB\"\n[[phase]]\nkind = \"blockio\"\nrw = \"write\"\nbs = \"64KiB\"\nsize = \"1MiB\"\n")
		j := startMPI(t, mpirun, dir, c.mpirunArgs("4", "node2:2,node3:2", c.bin, plan, "--results", filepath.Join(dir, "res"))...)
		if !j.wait(3 * time.Minute) {
			t.Fatalf("mpirun still running after 3m\n%s", j.output())
		}
		r := j.result()
		if r.code != 0 {
			t.Fatalf("exit %d\n%s", r.code, j.output())
		}
		m := loadManifest(t, r)
		for _, p := range m.Phases {
			if hosts := ranksPerHost(p); p.Status != "passed" || hosts["node2"] != 2 || hosts["node3"] != 2 {
				t.Errorf("%s: status %s (%s), ranks per host %v", p.Name, p.Status, p.Error, hosts)
			}
		}
		if got := m.Phases[0].OpsByType["create"].Ops; got != 4*20 {
			t.Errorf("%d creates, want 80", got)
		}
		for _, n := range []string{"node2", "node3"} {
			if l := c.command(t, time.Minute, dir, nil, c.vars["PRISM_CLUSTER_AGENT"], n, "ls -d /tmp/prism-"+m.RunID+" 2>/dev/null; true"); strings.TrimSpace(l.stdout) != "" {
				t.Errorf("%s: run directory left in its /tmp: %q", n, l.stdout)
			}
		}
	})

	t.Run("partition check", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		parts, err := slurm.QueryPartitions(ctx, c.env)
		if err != nil {
			t.Fatal(err)
		}
		if len(parts) != 1 || parts[0].Name != "debug" || !parts[0].Default || len(parts[0].Nodes) != 4 {
			t.Fatalf("partitions %+v", parts)
		}
		if err := slurm.Check(parts, slurm.Request{Nodes: 4, NTasksPerNode: 2, Time: "5"}); err != nil {
			t.Errorf("4 nodes x 2 tasks on an idle 4-node partition: %v", err)
		}
		// What Check predicts is what Slurm does: 8 nodes pend with
		// PartitionNodeLimit, 9 tasks per node on 8-CPU nodes are refused.
		var ce *slurm.CapacityError
		err = slurm.Check(parts, slurm.Request{Nodes: 8})
		if !errors.As(err, &ce) || ce.Reason != "PartitionNodeLimit" || !ce.Never || !strings.Contains(err.Error(), "has 4 nodes") {
			t.Fatalf("8 nodes: %v", err)
		}
		t.Logf("8 nodes: %v", err)
		dir := c.subdir(t)
		sub := c.command(t, time.Minute, dir, nil, "sbatch", "--parsable", "-N", "8", "-t", "1", "--output=/dev/null", "--wrap", "true")
		id := strings.TrimSpace(sub.stdout)
		if sub.code != 0 || id == "" {
			t.Fatalf("sbatch -N 8: exit %d %s", sub.code, sub.stderr)
		}
		defer c.command(t, time.Minute, dir, nil, "scancel", id)
		reason := ""
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if reason = strings.TrimSpace(c.command(t, time.Minute, dir, nil, "squeue", "-h", "-j", id, "-o", "%r").stdout); reason == ce.Reason {
				break
			}
		}
		if reason != ce.Reason {
			t.Errorf("Slurm's pending reason for -N 8 is %q, Check said %q", reason, ce.Reason)
		}
		err = slurm.Check(parts, slurm.Request{Nodes: 1, NTasksPerNode: 9})
		if !errors.As(err, &ce) || !ce.Never || ce.Reason != "" {
			t.Errorf("9 tasks per node: %v", err)
		}
		if sub := c.command(t, time.Minute, dir, nil, "sbatch", "-N", "1", "--ntasks-per-node=9", "-t", "1", "--output=/dev/null", "--wrap", "true"); sub.code == 0 ||
			!strings.Contains(sub.stderr, "Requested node configuration is not available") {
			t.Errorf("sbatch --ntasks-per-node=9 on 8-CPU nodes: exit %d %s (Check predicted a refusal)", sub.code, sub.stderr)
		}
		// A drained node: 4 nodes wait, 3 still start.
		c.command(t, time.Minute, dir, nil, "scontrol", "update", "nodename=node4", "state=drain", "reason=prism-multinode-test")
		defer c.command(t, time.Minute, dir, nil, "scontrol", "update", "nodename=node4", "state=resume")
		if parts, err = slurm.QueryPartitions(ctx, c.env); err != nil {
			t.Fatal(err)
		}
		err = slurm.Check(parts, slurm.Request{Nodes: 4})
		if !errors.As(err, &ce) || ce.Never || ce.Reason != "ReqNodeNotAvail" || !strings.Contains(err.Error(), "of which 3 can run jobs now") {
			t.Errorf("4 nodes with node4 drained: %v", err)
		}
		if err := slurm.Check(parts, slurm.Request{Nodes: 3}); err != nil {
			t.Errorf("3 nodes with node4 drained: %v", err)
		}
	})

	t.Run("node unreachable at start", func(t *testing.T) {
		mpirun := needMPI(t)
		dir := c.subdir(t)
		plan := writePlan(t, dir, slurmPlan)
		c.cluster(t, "link", "node4", "down")
		t.Cleanup(func() { c.cluster(t, "link", "node4", "up") })
		j := startMPI(t, mpirun, dir, c.mpirunArgs("8", "node1:2,node2:2,node3:2,node4:2", c.bin, plan,
			"--workdir", filepath.Join(dir, "work"), "--results", filepath.Join(dir, "res"))...)
		const bound = 60 * time.Second // a hang guard
		if !j.wait(bound) {
			t.Fatalf("mpirun still running %v after start with node4 unreachable\n%s", bound, j.output())
		}
		r := j.result()
		t.Logf("mpirun with node4's link down: exit %d after %.1fs", r.code, r.elapsed.Seconds())
		if r.code == 0 || !strings.Contains(r.stderr, "node4") {
			t.Fatalf("exit %d, want non-zero with an error naming node4\n%s", r.code, j.output())
		}
		if strings.Contains(r.stdout, "manifest: ") {
			t.Errorf("a run with an unreachable node wrote a manifest\n%s", r.stdout)
		}
	})

	t.Run("node crash under srun, rendezvous", func(t *testing.T) {
		dir := c.subdir(t)
		work, rdv, res := filepath.Join(dir, "work"), filepath.Join(dir, "rendezvous"), filepath.Join(dir, "res")
		os.Mkdir(rdv, 0o755)
		// Iterations of seconds each over sshfs, so the survivors are most
		// likely in the middle of a loop, far from any collective, when
		// node2 dies; at most 1000 files per rank at a time, so that
		// removing the run directory over sshfs afterwards is quick.
		plan := writePlan(t, dir, "[plan]\ndrop_caches = \"none\"\n[[phase]]\nkind = \"create_files\"\ncount = 1000\nsize = 0\niterations = 1000\n")
		envBin, err := exec.LookPath("env")
		if err != nil {
			t.Fatal(err)
		}
		// startMPI runs any launcher; env(1) gives srun the cluster's variables.
		job := "prism-crash-" + strconv.Itoa(os.Getpid())
		args := append(c.clientVars(), "PRISM_RENDEZVOUS="+rdv, "srun", "-J", job, "-w", "node1,node2", "--ntasks-per-node=2", "--mpi=none", "-t", "5",
			c.bin, plan, "--workdir", work, "--results", res)
		j := startMPI(t, envBin, dir, args...)
		// Cleanups run last first: the job goes, then node2 comes back.
		t.Cleanup(func() { c.cluster(t, "up", "--nodes", "4") })
		t.Cleanup(func() { c.command(t, time.Minute, dir, nil, "scancel", "-n", job) })
		if j.waitForPath(filepath.Join(work, "prism-*", "01-create_files", "r3", "files"), 90*time.Second) == "" {
			t.Fatalf("rank 3 never entered the phase\n%s", j.output())
		}
		survivors := nodeProcs(t, "node1", c.bin)
		if len(survivors) != 2 {
			t.Fatalf("%d prism processes on node1, want 2", len(survivors))
		}
		time.Sleep(time.Second)
		crashed := time.Now()
		c.cluster(t, "crash", "node2")
		// The ranks on node1 must notice (node2's heartbeats stop) and leave
		// with a manifest, before Slurm declares node2 dead (SlurmdTimeout,
		// 30 s here; 300 s by default) and kills them.
		const bound = 30 * time.Second
		for deadline := crashed.Add(bound); ; time.Sleep(100 * time.Millisecond) {
			left := 0
			for _, p := range survivors {
				if p.alive() {
					left++
				}
			}
			if left == 0 {
				t.Logf("ranks on node1 out %.1fs after node2 crashed", time.Since(crashed).Seconds())
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d ranks on node1 still running %v after node2 crashed\n%s", left, bound, j.output())
			}
		}
		manifests, _ := filepath.Glob(filepath.Join(res, "*", "*", "manifest.json"))
		if len(manifests) != 1 {
			t.Fatalf("manifests %v after node2 crashed\n%s", manifests, j.output())
		}
		m, err := report.ReadManifest(manifests[0])
		if err != nil {
			t.Fatal(err)
		}
		if m.Status != "failed" || len(m.Phases) != 1 || m.Phases[0].Status != "failed" {
			t.Fatalf("status %s, %d phases", m.Status, len(m.Phases))
		}
		t.Logf("manifest finished %.1fs after the crash", m.FinishedAt.Sub(crashed).Seconds())
		p := m.Phases[0]
		if !regexp.MustCompile(`rank [23]\b`).MatchString(p.Error) || !strings.Contains(p.Error, "node2") ||
			p.FailedRank == nil || (*p.FailedRank != 2 && *p.FailedRank != 3) {
			t.Errorf("failed_rank %v, error %q: want rank 2 or 3 of node2, named with its host", p.FailedRank, p.Error)
		}
		// srun would wait for Slurm to give up on node2; the job is over.
		c.command(t, time.Minute, dir, nil, "scancel", "-n", job)
		if !j.wait(time.Minute) {
			t.Fatalf("srun still running a minute after scancel\n%s", j.output())
		}
		if r := j.result(); r.code == 0 {
			t.Errorf("srun exited 0 after node2 crashed")
		}
	})

	t.Run("node crash under mpirun", func(t *testing.T) {
		mpirun := needMPI(t)
		dir := c.subdir(t)
		work := filepath.Join(dir, "work")
		// Long enough never to finish: 1000 iterations of 2000 creates.
		plan := writePlan(t, dir, "[plan]\ndrop_caches = \"none\"\n[[phase]]\nkind = \"create_files\"\ncount = 2000\nsize = 0\niterations = 1000\n")
		j := startMPI(t, mpirun, dir, c.mpirunArgs("8", "node1:2,node2:2,node3:2,node4:2", c.bin, plan,
			"--workdir", work, "--results", filepath.Join(dir, "res"))...)
		// Whatever happens, node3 comes back for the tests after this one.
		t.Cleanup(func() { c.cluster(t, "up", "--nodes", "4") })
		if j.waitForPath(filepath.Join(work, "prism-*", "01-create_files", "r5", "files"), 90*time.Second) == "" {
			t.Fatalf("rank 5 never entered the phase\n%s", j.output())
		}
		var ranks map[int]procID
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if ranks = mpiRankProcs(j.cmd.Process.Pid, c.bin); len(ranks) == 8 {
				break
			}
		}
		if len(ranks) != 8 {
			t.Fatalf("found rank processes %v under mpirun, want 8", ranks)
		}
		t.Cleanup(func() {
			for _, p := range ranks {
				if p.alive() {
					syscall.Kill(p.pid, syscall.SIGKILL)
				}
			}
		})
		placement := jobMap(t, j.stdout.String())
		time.Sleep(time.Second) // well into the phase's loop
		select {
		case <-j.done:
			t.Fatalf("the job ended before the crash (exit %d)\n%s", j.code, j.output())
		default:
		}
		crashed := time.Now()
		c.cluster(t, "crash", "node3")
		const bound = 30 * time.Second
		ok := j.wait(bound)
		var left []string
		for deadline := time.Now().Add(bound - time.Since(crashed)); ; time.Sleep(100 * time.Millisecond) {
			left = left[:0]
			for rk, p := range ranks {
				if p.alive() {
					left = append(left, fmt.Sprintf("%d (%s)", rk, placement[rk]))
				}
			}
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
		}
		sort.Strings(left)
		if !ok || len(left) > 0 {
			t.Fatalf("%v after node3 crashed: mpirun exited %v, ranks still running: %v\n%s", bound, ok, left, j.output())
		}
		r := j.result()
		t.Logf("mpirun exit %d, %.1fs after node3 crashed", r.code, time.Since(crashed).Seconds())
		if r.code == 0 || !strings.Contains(r.stderr, "node3") {
			t.Errorf("exit %d, want non-zero with an error naming node3\n%s", r.code, r.stderr)
		}
		// Rank 0 (node1) may not outlive the job: mpirun ends every rank
		// when it loses a node. If it wrote a manifest, it names the node.
		if manifestLine.MatchString(r.stdout) {
			m := loadManifest(t, r)
			if m.Status != "failed" || len(m.Phases) == 0 || !strings.Contains(m.Phases[0].Error, "node3") {
				t.Errorf("manifest after node3 crashed: status %s, phases %d, error %q", m.Status, len(m.Phases), func() string {
					if len(m.Phases) > 0 {
						return m.Phases[0].Error
					}
					return m.Error
				}())
			}
		} else {
			t.Logf("no manifest: rank 0 on %s was ended with the job", placement[0])
		}
	})
}
