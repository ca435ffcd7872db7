package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests of prism's promises against careless and hostile input
// (issue 17), through the binary as users run it.

// An unwritable results directory stops the run before any phase runs:
// exit 1, the directory named, nothing created in the workdir, and no
// "manifest:" line for a file that does not exist.
func TestResultsUnwritableBeforeRunning(t *testing.T) {
	needRoot(t) // root ignores permissions: a read-only mount it is
	dir := t.TempDir()
	ro := mountTmpfs(t, "1m")
	if out, err := exec.Command("mount", "-o", "remount,ro", ro).CombinedOutput(); err != nil {
		t.Skipf("remount ro: %v %s", err, out)
	}
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	plan := writePlan(t, dir, "[[phase]]\nkind = \"create_files\"\ncount = 50\n")
	start := time.Now()
	r := prism(t, dir, "run", plan, "--workdir", work, "--results", filepath.Join(ro, "res"))
	if r.code != 1 || !strings.Contains(r.stderr, filepath.Join(ro, "res")) || !strings.Contains(r.stderr, "read-only") {
		t.Fatalf("exit %d, stderr %q; want 1 naming the results directory", r.code, r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, "manifest:") || strings.Contains(r.stdout, "create_files") {
		t.Errorf("the run went on or named a manifest:\n%s\n%s", r.stdout, r.stderr)
	}
	if ents, _ := os.ReadDir(work); len(ents) != 0 {
		t.Errorf("the workdir holds %v after a refused run", ents)
	}
	t.Logf("refused after %s", time.Since(start).Round(time.Millisecond))
}

// A results filesystem that fills up during the run: the summary and the
// manifest's JSON go to stdout, the exit is 1, and no "manifest:" line
// names a file that does not exist.
func TestResultsFullAtTheEnd(t *testing.T) {
	dir := t.TempDir()
	res := mountTmpfs(t, "256k")
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	plan := writePlan(t, dir, "[[phase]]\nkind = \"blockio\"\nrw = \"write\"\nsize = \"1MiB\"\nbs = \"64KiB\"\ntime_based = true\nruntime = \"3s\"\n")
	cmd, out, done := startPrism(t, dir, "run", plan, "--workdir", work, "--results", res)
	// Once the run has started (its run directory exists), fill the
	// results filesystem.
	waitGlob(t, filepath.Join(work, "prism-*"), 30*time.Second)
	exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(res, "filler"), "bs=4k").Run()
	var code int
	select {
	case code = <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("prism did not finish:\n%s", out.String())
	}
	s := out.String()
	if code != 1 || !strings.Contains(s, "the manifest could not be written") || !strings.Contains(s, `"schema_version"`) || !strings.Contains(s, "blockio") {
		t.Fatalf("exit %d; want 1 with the summary and the JSON on stdout:\n%s", code, s)
	}
	for _, line := range strings.Split(s, "\n") {
		if p, ok := strings.CutPrefix(line, "manifest: "); ok {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("prints %q for a file that does not exist", line)
			}
		}
	}
}

// Inputs that are not plans: a device, a file that never answers, a
// nesting bomb, and plan names that would escape --results, all refused
// with exit 2 and the file named, in bounded time.
func TestHostileInputs(t *testing.T) {
	dir := t.TempDir()
	bomb := filepath.Join(dir, "bomb.toml")
	os.WriteFile(bomb, []byte("[plan]\nname = \"x\"\nv = "+strings.Repeat("{a = ", 5000)+"1"+strings.Repeat("}", 5000)+"\n[[phase]]\nkind = \"create_files\"\n"), 0o644)
	dots := filepath.Join(dir, "dots.toml")
	os.WriteFile(dots, []byte("[plan]\nname = \"..\"\n[[phase]]\nkind = \"create_files\"\n"), 0o644)
	cfg := filepath.Join(dir, "cfg.toml")
	os.WriteFile(cfg, []byte("[[phase]]\nkind = \"ddp_save\"\nmodel_config = \"/dev/zero\"\n"), 0o644)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"/dev/zero as the plan", []string{"check", "/dev/zero"}, "character device"},
		{"a nesting bomb", []string{"check", bomb}, "nest deeper than"},
		{"plan name ..", []string{"check", dots}, "plan.name"},
		{"model_config /dev/zero", []string{"check", cfg}, "model_config"},
		// /dev/zero exhausted memory and a FIFO blocked forever: a
		// manifest is refused unless it is a regular file.
		{"/dev/null as a manifest", []string{"report", "/dev/null"}, "not a regular file"},
		{"/dev/null as a manifest to compare", []string{"compare", "/dev/null", "/dev/null"}, "not a regular file"},
	}
	if os.Geteuid() == 0 {
		// /proc/kmsg reads block (root only): the deadline must fire.
		cases = append(cases, struct {
			name string
			args []string
			want string
		}{"/proc/kmsg as the plan", []string{"check", "/proc/kmsg"}, "no data after"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := prism(t, dir, tc.args...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d stderr %q; want 2 and %q", r.code, r.stderr, tc.want)
			}
			if el := time.Since(start); el > 60*time.Second {
				t.Errorf("took %s", el)
			}
		})
	}
}

// A plan on a pipe with -n: the launcher reads it once and hands every
// rank the bytes.
func TestPlanOnAPipeWithRanks(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(prismBin, "run", "-n", "2", "--workdir", dir, "--results", filepath.Join(dir, "res"), "/dev/stdin")
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	cmd.Stdin = strings.NewReader("[plan]\nname = \"piped\"\n[[phase]]\nkind = \"create_files\"\ncount = 20\n")
	b, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "manifest: ") {
		t.Fatalf("%v\n%s", err, b)
	}
	r := result{stdout: string(b)}
	m := loadManifest(t, r)
	if m.Comm.Ranks != 2 || len(m.Phases) != 1 || m.Phases[0].OpsByType["create"].Ops != 40 {
		t.Errorf("ranks %d, phases %+v", m.Comm.Ranks, m.Phases)
	}
}

// attackScript runs as an unprivileged member of the workdir's group. It
// finds root's run directory, waits until a delete_files Run is about to
// start (all COUNT files are there), renames the run directory away and
// puts in its place a tree of its own whose files directory is a link to
// the victim directory (which it cannot write), lets root's prism run for
// 50 ms, puts the real one back, and so on SWAPS times; it exits leaving
// the fake in place.
const attackScript = `
W=$1; VICTIM=$2; SWAPS=$3; COUNT=$4
for i in $(seq 3000); do R=$(ls -d "$W"/prism-*[0-9a-f] 2>/dev/null | head -n1); [ -n "$R" ] && [ -d "$R/01-delete_files/r0/files" ] && break; sleep 0.005; done
[ -n "$R" ] || exit 3
i=0
while [ $i -lt $SWAPS ]; do
  [ -d "$R" ] || [ -d "$R.moved" ] || break
  n=$(ls "$R/01-delete_files/r0/files" 2>/dev/null | wc -l)
  [ "$n" -ge "$COUNT" ] || continue
  F="$W/fake$i"; mkdir -p "$F/01-delete_files/r0" && ln -s "$VICTIM" "$F/01-delete_files/r0/files"
  mv "$R" "$R.moved" && mv -T "$F" "$R" && echo swapped $i
  sleep 0.05
  i=$((i+1))
  [ $i -ge $SWAPS ] && break
  mv "$R" "$F" && mv "$R.moved" "$R"
done
`

// The symlink attack of issue 17, for real: while root's prism runs a
// delete_files phase in a group-writable, non-sticky workdir, a group
// member (nobody, via setpriv) swaps the run directory for a tree whose
// files directory links to a root-owned directory of canaries named like
// prism's files, many times. Every canary must survive, the phase must fail
// saying the run directory was replaced, and nothing but prism's own
// files may be gone.
func TestSymlinkSwapDuringDelete(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv (util-linux) not installed")
	}
	base, err := os.MkdirTemp("", "prism-attack-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	work, victim, res := filepath.Join(base, "work"), filepath.Join(base, "victim"), filepath.Join(base, "res")
	os.Mkdir(work, 0o770)
	os.Chown(work, 0, 65534) // root:nogroup, group-writable, no sticky bit
	os.Chmod(work, 0o770)
	os.Mkdir(victim, 0o755)
	const count = 3000
	for i := range count {
		os.WriteFile(filepath.Join(victim, fmt.Sprintf("f0.%d", i)), []byte("precious"), 0o644)
	}
	script := filepath.Join(base, "attack.sh")
	os.WriteFile(script, []byte(attackScript), 0o755)
	plan := filepath.Join(base, "plan.toml")
	os.WriteFile(plan, []byte(fmt.Sprintf("[plan]\nallow_shared_workdir = true\ndrop_caches = \"none\"\n[[phase]]\nkind = \"delete_files\"\ncount = %d\niterations = 40\n", count)), 0o644)

	attacker := exec.Command("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "sh", script, work, victim, "8", fmt.Sprint(count))
	var aout strings.Builder
	attacker.Stdout, attacker.Stderr = &aout, &aout
	if err := attacker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { attacker.Process.Kill() })
	r := prism(t, base, "run", plan, "--workdir", work, "--results", res)
	attacker.Process.Kill() // prism is done: so is the attack
	attacker.Wait()
	t.Logf("attacker: %s", strings.TrimSpace(aout.String()))
	survivors := 0
	for i := range count {
		if b, err := os.ReadFile(filepath.Join(victim, fmt.Sprintf("f0.%d", i))); err == nil && string(b) == "precious" {
			survivors++
		}
	}
	if survivors != count {
		t.Errorf("%d of %d canaries survive: root's prism followed the attacker's link", survivors, count)
	}
	if !strings.Contains(aout.String(), "swapped") && !strings.Contains(r.stdout+r.stderr, "run directory was replaced") {
		t.Errorf("the attack did not run (the phase ended first?): %s\nprism: exit %d\n%s%s", aout.String(), r.code, r.stdout, r.stderr)
	}
	if r.code != 1 || !strings.Contains(r.stdout+r.stderr, "run directory was replaced") {
		t.Errorf("exit %d; want 1 with \"run directory was replaced\"\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "WARNING") {
		t.Errorf("no warning for a shared workdir:\n%s", r.stderr)
	}
}

// A plan whose phase needs more memory per rank than the node can give
// (64 jobs x iodepth 1024 of randrw: ~34 GB per rank) is refused before
// anything runs, naming the phase and the keys to lower; a count of 1e8
// files, whose names are prepared a chunk at a time, is not.
func TestMemoryRefusal(t *testing.T) {
	dir := t.TempDir()
	plan := writePlan(t, dir, "[[phase]]\nkind = \"blockio\"\nrw = \"randrw\"\njobs = 64\niodepth = 1024\nsize = \"4MiB\"\n")
	r := prism(t, dir, "run", "-n", "2", plan, "--workdir", dir, "--results", filepath.Join(dir, "res"))
	if r.code != 2 || !strings.Contains(r.stderr, "jobs, iodepth") || !strings.Contains(r.stderr, "per rank") {
		t.Fatalf("exit %d stderr %q; want 2 naming jobs and iodepth", r.code, r.stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "prism-*")); len(left) != 0 {
		t.Errorf("a refused plan created %v", left)
	}
	// The same plan under an explicit, larger limit passes the plan check
	// (and is not run here: check only); its environment section may say
	// that this host lacks the space or inodes for 1e8 files (exit 1).
	ok := writePlan(t, dir, "[[phase]]\nkind = \"create_files\"\ncount = 100000000\n")
	if r := prism(t, dir, "check", ok); r.code != 0 && (r.code != 1 || !strings.Contains(r.stderr, "not enough")) {
		t.Errorf("check of 1e8 files: exit %d %s", r.code, r.stderr)
	}
}

// TestHungGitServerInterrupted: git_clone from a server that accepts the
// connection and never answers (a hung forge). SIGINT ends the run in
// bounded time with exit 130 and the manifest written, and no git process
// outlives prism: git runs in its own process group, which prism kills.
func TestHungGitServerInterrupted(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	connected := make(chan struct{}, 1)
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // kept open, never written to
			mu.Unlock()
			select {
			case connected <- struct{}{}:
			default:
			}
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	// Over http git runs git-remote-http as a child: killing git alone
	// would leave it waiting on the socket.
	url := "http://" + ln.Addr().String() + "/hung.git"
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	plan := writePlan(t, dir, `
[plan]
drop_caches = "none"
[[phase]]
kind = "git_clone"
url = "`+url+`"
count = 1
`)
	cmd, out, done := startPrism(t, dir, "run", "-n", "2", plan, "--workdir", work, "--results", filepath.Join(dir, "res"))
	select {
	case <-connected:
	case code := <-done:
		t.Fatalf("exit %d before git connected\n%s", code, out.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("git never connected to %s\n%s", url, out.String())
	}
	cmd.Process.Signal(syscall.SIGINT)
	signalled := time.Now()
	var code int
	select {
	case code = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30 s after SIGINT with git hung\n%s", out.String())
	}
	if code != 130 || time.Since(signalled) > 15*time.Second {
		t.Fatalf("exit %d %v after SIGINT, want 130 within seconds\n%s", code, time.Since(signalled), out.String())
	}
	m := loadManifest(t, result{stdout: out.String()})
	if m.Status != "interrupted" || m.Phases[0].Status != "interrupted" {
		t.Errorf("manifest %s, phase %s", m.Status, m.Phases[0].Status)
	}
	// git and its helpers (git-remote-*, fetch-pack) exit with their group.
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := processesWith(url)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes still talking to %s after prism exited: %v", url, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if left, _ := filepath.Glob(filepath.Join(work, "prism-*")); len(left) != 0 {
		t.Errorf("run directory left behind: %v", left)
	}
}

// processesWith lists the command lines of live processes naming s.
func processesWith(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(b), s) {
			continue
		}
		out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
	}
	return out
}

// prism mlperf report writes into a results tree others may write: a
// symbolic link or a hard link planted at results.json or results.csv is
// replaced, not written through (root truncated the file it named), and
// a link to nothing at system-description.yaml is kept, not followed to
// create the template where it points.
func TestMLPerfReportReplacesLinks(t *testing.T) {
	dir := t.TempDir()
	res := filepath.Join(dir, "results")
	os.MkdirAll(filepath.Join(res, "proc1"), 0o755)
	os.WriteFile(filepath.Join(res, "proc1", "summary.json"), []byte(`{"benchmark":"training","model":"unet3d","datetime":"x","passed":true}`), 0o644)
	canary := filepath.Join(dir, "canary")
	os.WriteFile(canary, []byte("precious\n"), 0o600)
	absent := filepath.Join(dir, "absent")
	if err := os.Symlink(canary, filepath.Join(res, "results.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(canary, filepath.Join(res, "results.csv")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(absent, filepath.Join(res, "system-description.yaml")); err != nil {
		t.Fatal(err)
	}
	r := prism(t, dir, "mlperf", "report", res)
	if r.code != 0 || !strings.Contains(r.stdout, "1 procedures") {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if b, _ := os.ReadFile(canary); string(b) != "precious\n" {
		t.Errorf("the linked file now holds %q", b)
	}
	if _, err := os.Lstat(absent); err == nil {
		t.Error("the template was created through the dangling link")
	}
	for _, name := range []string{"results.json", "results.csv"} {
		if st, err := os.Lstat(filepath.Join(res, name)); err != nil || !st.Mode().IsRegular() {
			t.Errorf("%s: %v, want a regular file of its own", name, err)
		}
	}
}

// A shared results tree: a link planted at <results>/<plan name> sent
// root's results directory and every result file wherever it pointed.
// The plan-name directory is opened without following a link, so the
// run stops before any phase (exit 1) and nothing appears there.
func TestResultsPlanDirLinkRefused(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	res := filepath.Join(dir, "results")
	victim := filepath.Join(dir, "victim")
	for _, d := range []string{work, res, victim} {
		os.Mkdir(d, 0o755)
	}
	if err := os.Symlink(victim, filepath.Join(res, "linked")); err != nil {
		t.Fatal(err)
	}
	plan := writePlan(t, dir, "[plan]\nname = \"linked\"\n[[phase]]\nkind = \"create_files\"\ncount = 5\n")
	r := prism(t, dir, "run", "--workdir", work, "--results", res, plan)
	if r.code != 1 || !strings.Contains(r.stderr, "is a symbolic link") {
		t.Fatalf("exit %d\n%s%s; want 1 naming the link", r.code, r.stdout, r.stderr)
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 0 {
		t.Fatalf("%d entries created through the link in %s", len(ents), victim)
	}
}
