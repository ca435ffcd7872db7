package io

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The adversary is this test binary run again as an unprivileged user
// (nobody:nogroup, no supplementary groups, no capabilities): a member of
// the group that can write a group-writable, non-sticky workdir, who
// renames root's run directory and puts a symbolic link, or a directory
// holding one, in its place. The link leads to canary files owned by root
// in a directory the adversary cannot write, named as root's own files
// are: any op of root's that followed a path through the swapped name
// would hit a canary.

func TestMain(m *testing.M) {
	if role := os.Getenv("PRISM_IO_ADVERSARY"); role != "" {
		os.Exit(adversary(role))
	}
	os.Exit(m.Run())
}

// adversary runs one role and returns the exit status. Its paths come in
// the environment; it reports on stdout.
func adversary(role string) int {
	if os.Geteuid() == 0 {
		fmt.Println("err the adversary runs as root")
		return 1
	}
	shared, name, victim := os.Getenv("ADV_SHARED"), os.Getenv("ADV_NAME"), os.Getenv("ADV_VICTIM")
	rounds, _ := strconv.Atoi(os.Getenv("ADV_ROUNDS"))
	run := filepath.Join(shared, name)
	stolen := run + ".stolen"
	// Variant 0: the run directory's name becomes a link to the victim's
	// parent. Variant 1: a directory of the adversary's, whose "files"
	// is a link to the victim's files.
	swap := func(v int) error {
		if err := os.Rename(run, stolen); err != nil {
			return err
		}
		if v == 0 {
			return os.Symlink(victim, run)
		}
		if err := os.Mkdir(run, 0o755); err != nil {
			return err
		}
		return os.Symlink(filepath.Join(victim, "files"), filepath.Join(run, "files"))
	}
	restore := func(v int) error {
		if v == 1 {
			if err := os.Remove(filepath.Join(run, "files")); err != nil {
				return err
			}
		}
		if err := os.Remove(run); err != nil {
			return err
		}
		return os.Rename(stolen, run)
	}
	spin := func(max time.Duration) {
		for end := time.Now().Add(rand.N(max)); time.Now().Before(end); {
		}
	}
	switch role {
	case "lockstep":
		in := bufio.NewScanner(os.Stdin)
		for v := 0; in.Scan(); {
			var err error
			switch in.Text() {
			case "swap":
				err = swap(v)
			case "restore":
				err = restore(v)
				v = 1 - v
			}
			if err != nil {
				fmt.Println("err", err)
				return 1
			}
			fmt.Println("ok")
		}
		return 0
	case "race":
		for i := range rounds {
			if err := swap(i % 2); err != nil {
				fmt.Println("err", err)
				return 1
			}
			spin(300 * time.Microsecond)
			if err := restore(i % 2); err != nil {
				fmt.Println("err", err)
				return 1
			}
			spin(100 * time.Microsecond)
		}
		fmt.Println("swaps", rounds)
		return 0
	case "tree":
		// Inside a tree root is removing: rename its directories away and
		// put links to the victim in their place and beside them. Failures
		// are expected (root removes things as the adversary names them);
		// successes are counted.
		tree := os.Getenv("ADV_TREE")
		dirs, _ := strconv.Atoi(os.Getenv("ADV_DIRS"))
		done := 0
		for i := range rounds {
			k := i % dirs
			d := filepath.Join(tree, fmt.Sprintf("d%d", k))
			away := filepath.Join(tree, fmt.Sprintf("x%d", i))
			if os.Rename(d, away) == nil {
				done++
			}
			if os.Symlink(filepath.Join(victim, "files"), d) == nil {
				done++
			}
			if os.Symlink(filepath.Join(victim, "files"), filepath.Join(away, "s")) == nil {
				done++
			}
			if os.Rename(filepath.Join(away, "s2"), filepath.Join(away, "s2.away")) == nil &&
				os.Symlink(filepath.Join(victim, "files"), filepath.Join(away, "s2")) == nil {
				done++
			}
			if os.Symlink(filepath.Join(victim, "files", "f0"), filepath.Join(tree, fmt.Sprintf("l%d", i))) == nil {
				done++
			}
			spin(200 * time.Microsecond)
		}
		fmt.Println("swaps", done)
		return 0
	}
	fmt.Println("err unknown role", role)
	return 1
}

// arena is the geometry of an attack: victim/files/f* are root's canaries,
// shared is the group-writable workdir in which root's Dir root is open.
type arena struct {
	base, shared, victim string
	canaries             map[uint64]string // inode -> name
	n                    int
	uid, gid             uint32
	bin                  string
	root                 *Dir
}

func newArena(t *testing.T, canaries int) *arena {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the attack is an unprivileged user against root's run")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody to attack as: %v", err)
	}
	group, err := user.LookupGroup("nogroup")
	if err != nil {
		t.Skipf("no group nogroup: %v", err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(group.Gid)
	// Not t.TempDir: its parents are 0700, and nobody must reach shared.
	// tmpfs where there is one: the swap works through the VFS alike on
	// every filesystem, and there root's ops are fast enough for many
	// more swaps to land inside its loops than on a loaded disk.
	parent := ""
	if fs, err := StatFS("/dev/shm"); err == nil && fs.Type == "tmpfs" {
		parent = "/dev/shm"
	}
	base, err := os.MkdirTemp(parent, "io-safe-adversary-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	a := &arena{base: base, shared: filepath.Join(base, "shared"), victim: filepath.Join(base, "victim"),
		canaries: map[uint64]string{}, n: canaries, uid: uint32(uid), gid: uint32(gid), bin: filepath.Join(base, "adversary")}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(base, 0o755))
	must(os.MkdirAll(filepath.Join(a.victim, "files"), 0o755))
	for i := range canaries {
		p := filepath.Join(a.victim, "files", fmt.Sprintf("f%d", i))
		must(os.WriteFile(p, []byte("canary "+strconv.Itoa(i)), 0o644))
		a.canaries[inode(t, p)] = filepath.Base(p)
	}
	must(os.Mkdir(a.shared, 0o700))
	must(os.Chown(a.shared, 0, gid))
	must(os.Chmod(a.shared, 0o775)) // group-writable, no sticky bit
	self, err := os.Executable()
	must(err)
	b, err := os.ReadFile(self)
	must(err)
	must(os.WriteFile(a.bin, b, 0o755))
	// The workdir policy refuses this directory; the test goes on as a
	// site that passed allowShared would.
	if _, _, err := OpenWorkdir(a.shared, false); err == nil || !strings.Contains(err.Error(), "no sticky bit") {
		t.Fatalf("the policy accepted a group-writable workdir: %v", err)
	}
	root, warnings, err := OpenWorkdir(a.shared, true)
	must(err)
	if len(warnings) != 1 {
		t.Fatalf("warnings %v", warnings)
	}
	t.Cleanup(func() { root.Close() })
	a.root = root
	return a
}

func (a *arena) start(t *testing.T, role string, env ...string) (*exec.Cmd, io.WriteCloser, *bufio.Scanner) {
	cmd := exec.Command(a.bin)
	cmd.Env = append([]string{"PRISM_IO_ADVERSARY=" + role, "ADV_SHARED=" + a.shared, "ADV_NAME=prism-run", "ADV_VICTIM=" + a.victim}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: []uint32{}}}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill only: whoever reads its output waits for it.
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, in, bufio.NewScanner(out)
}

// checkCanaries: every canary is there, the same inode, with its content,
// and nothing else is in the victim's directory.
func (a *arena) checkCanaries(t *testing.T) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(a.victim, "files"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != a.n {
		t.Fatalf("the victim's directory has %d entries, want the %d canaries", len(ents), a.n)
	}
	for ino, name := range a.canaries {
		p := filepath.Join(a.victim, "files", name)
		b, err := os.ReadFile(p)
		if err != nil || string(b) != "canary "+strings.TrimPrefix(name, "f") || inode(t, p) != ino {
			t.Fatalf("canary %s: %q %v", name, b, err)
		}
	}
}

// TestAdversaryLockstep swaps the run directory 200 times, in both
// variants, and at each swap checks what must hold then: a path-based op
// would reach a canary (the attack is live), ops through the Dirs reach
// root's own files, a lookup by name below the workdir is refused with
// ELOOP, and Verify and Wrap report the swap as a *ReplacedError.
func TestAdversaryLockstep(t *testing.T) {
	a := newArena(t, 20)
	run := makeSub(t, a.root, "prism-run")
	files := makeSub(t, run, "files")
	names := make([]Name, a.n)
	for i := range names {
		names[i] = MustName(fmt.Sprintf("f%d", i))
	}
	byName := MustName("prism-run/files/f0")
	fullPath := filepath.Join(a.shared, "prism-run", "files", "f0")
	cmd, in, out := a.start(t, "lockstep")
	ask := func(what string) {
		t.Helper()
		fmt.Fprintln(in, what)
		if !out.Scan() || out.Text() != "ok" {
			t.Fatalf("adversary %s: %q %v", what, out.Text(), out.Err())
		}
	}
	var st unix.Stat_t
	for round := range 200 {
		ask("swap")
		if err := unix.Stat(fullPath, &st); err != nil || a.canaries[st.Ino] != "f0" {
			t.Fatalf("round %d: the swapped path does not lead to the canary (%v): the attack is not live", round, err)
		}
		err := files.Verify()
		var re *ReplacedError
		want := []string{"a symbolic link", "another directory"}[round%2]
		if !errors.As(err, &re) || re.Path != run.Path() || !strings.Contains(re.Now, want) {
			t.Fatalf("round %d: Verify: %v, want the run directory replaced by %s", round, err, want)
		}
		for _, n := range names {
			fd, err := files.Open(n, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
			if err != nil {
				t.Fatalf("round %d: create %s: %v", round, n, err)
			}
			Close(fd)
			if err := files.Stat(n, &st); err != nil || a.canaries[st.Ino] != "" {
				t.Fatalf("round %d: stat %s reached a canary or failed: %v", round, n, err)
			}
		}
		if err := a.root.Stat(byName, &st); err != unix.ELOOP {
			t.Fatalf("round %d: lookup by name through the swapped directory: %v, want ELOOP", round, err)
		}
		if w := files.Wrap("stat", names[0], unix.ELOOP); !errors.Is(w, ErrReplaced) || !errors.Is(w, unix.ELOOP) {
			t.Fatalf("round %d: Wrap: %v", round, w)
		}
		for _, n := range names {
			if err := files.Unlink(n); err != nil {
				t.Fatalf("round %d: unlink %s: %v", round, n, err)
			}
		}
		a.checkCanaries(t)
		ask("restore")
		if err := files.Verify(); err != nil {
			t.Fatalf("round %d: Verify after the restore: %v", round, err)
		}
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("adversary: %v", err)
	}
	a.checkCanaries(t)
}

// TestAdversaryRace lets the adversary swap as fast as it can, 2000 times,
// while root creates, stats and unlinks thousands of files with the
// canaries' names through its Dirs. Whatever the interleaving, no canary
// is touched, no op of root's fails, every Verify is nil or a
// *ReplacedError, and a lookup by name from the workdir either reaches
// root's own file or is refused.
func TestAdversaryRace(t *testing.T) {
	const n = 2000
	a := newArena(t, n)
	run := makeSub(t, a.root, "prism-run")
	files := makeSub(t, run, "files")
	names := make([]Name, n)
	for i := range names {
		names[i] = MustName(fmt.Sprintf("f%d", i))
	}
	byName := MustName("prism-run/files/f0")
	cmd, in, out := a.start(t, "race", "ADV_ROUNDS=2000")
	defer in.Close()
	exited := make(chan error, 1)
	var report string
	go func() {
		for out.Scan() {
			report = out.Text()
		}
		exited <- cmd.Wait()
	}()
	var st unix.Stat_t
	batches, replaced, refused := 0, 0, 0
	var adversaryErr error
	for running := true; running || batches < 3; batches++ {
		for _, nm := range names {
			fd, err := files.Open(nm, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
			if err != nil {
				t.Fatalf("batch %d: create %s: %v", batches, nm, err)
			}
			Close(fd)
		}
		switch err := a.root.Stat(byName, &st); {
		case err == nil:
			if a.canaries[st.Ino] != "" {
				t.Fatalf("batch %d: a lookup by name reached the canary", batches)
			}
		case err == unix.ELOOP || err == unix.ENOENT:
			refused++
		default:
			t.Fatalf("batch %d: lookup by name: %v", batches, err)
		}
		for _, nm := range names {
			if err := files.Stat(nm, &st); err != nil || a.canaries[st.Ino] != "" {
				t.Fatalf("batch %d: stat %s: %v (canary %q)", batches, nm, err, a.canaries[st.Ino])
			}
			if err := files.Unlink(nm); err != nil {
				t.Fatalf("batch %d: unlink %s: %v", batches, nm, err)
			}
		}
		switch err := files.Verify(); {
		case err == nil:
		case errors.Is(err, ErrReplaced):
			replaced++
		default:
			t.Fatalf("batch %d: Verify: %v", batches, err)
		}
		select {
		case adversaryErr = <-exited:
			running = false
		default:
		}
	}
	if adversaryErr != nil {
		t.Fatalf("adversary: %v (%s)", adversaryErr, report)
	}
	if report != "swaps 2000" {
		t.Fatalf("adversary reported %q", report)
	}
	t.Logf("%d batches of %d creates, stats and unlinks during 2000 swaps; Verify saw the swap %d times, lookups by name refused %d times", batches, n, replaced, refused)
	a.checkCanaries(t)
	if err := files.Verify(); err != nil {
		t.Fatalf("after the adversary restored the name: %v", err)
	}
}

// TestAdversaryRemoval: root empties a tree whose directories the
// adversary can write, while the adversary renames them away and puts
// links to the canaries in their place and inside them. No canary may be
// touched; once the adversary stops, one more removal leaves nothing.
func TestAdversaryRemoval(t *testing.T) {
	a := newArena(t, 50)
	run := makeSub(t, a.root, "prism-run")
	tree := makeSub(t, run, "tree")
	const dirs, perDir = 40, 100
	fillTree := func() {
		t.Helper()
		if err := unix.Fchmod(tree.Fd(), 0o777); err != nil {
			t.Fatal(err)
		}
		for k := range dirs {
			d := filepath.Join(tree.Path(), fmt.Sprintf("d%d", k))
			for _, sub := range []string{d, filepath.Join(d, "s"), filepath.Join(d, "s2")} {
				if err := os.Mkdir(sub, 0o777); err != nil {
					t.Fatal(err)
				}
				os.Chmod(sub, 0o777)
				for f := range perDir {
					if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d", f)), nil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	for round := range 3 {
		fillTree()
		cmd, in, out := a.start(t, "tree", "ADV_ROUNDS=1500", "ADV_TREE="+tree.Path(), "ADV_DIRS="+strconv.Itoa(dirs))
		exited := make(chan error, 1)
		var report string
		go func() {
			for out.Scan() {
				report = out.Text()
			}
			exited <- cmd.Wait()
		}()
		passes, failed := 0, 0
		for running := true; running; passes++ {
			if err := tree.RemoveContents(); err != nil {
				failed++ // the adversary adds entries as root removes them
				var oe *OpError
				if !errors.As(err, &oe) {
					t.Fatalf("round %d: removal failed without an *OpError: %v", round, err)
				}
			}
			a.checkCanaries(t)
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("adversary: %v", err)
				}
				running = false
			default:
			}
		}
		in.Close()
		if err := tree.RemoveContents(); err != nil {
			t.Fatalf("round %d: removal after the adversary stopped: %v", round, err)
		}
		if ents, _ := os.ReadDir(tree.Path()); len(ents) != 0 {
			t.Fatalf("round %d: left %d entries", round, len(ents))
		}
		t.Logf("round %d: adversary %s; %d removals, %d ended with an error", round, report, passes, failed)
		a.checkCanaries(t)
	}
	if err := run.Remove(); err != nil {
		t.Fatal(err)
	}
	a.checkCanaries(t)
}
