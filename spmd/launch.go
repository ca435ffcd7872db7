package spmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	pio "github.com/prism-hpc/prism/io"
)

// Environment variables through which a launcher tells each rank who it is
// and where the job's rendezvous directory is.
const (
	EnvRank       = "PRISM_RANK"       // this process's rank, 0 <= rank < size
	EnvSize       = "PRISM_SIZE"       // number of ranks in the job
	EnvLocalRank  = "PRISM_LOCAL_RANK" // rank among the job's ranks on this host
	EnvRendezvous = "PRISM_RENDEZVOUS" // the job's rendezvous directory (RendezvousConfig.Dir)
	EnvCPUs       = "PRISM_CPUS"       // the CPUs Launch bound this rank to (a cpulist); unset if unbound
	// EnvJobToken (rendezvous_job.go) carries the job's random token.
)

const defaultGrace = 5 * time.Second

// LaunchConfig describes a job of N local ranks for Launch.
type LaunchConfig struct {
	// N is the number of ranks (children) to start.
	N int
	// Path is the executable every child runs, usually os.Executable().
	Path string
	// Args are every child's arguments, without argv[0].
	Args []string
	// Env is the children's base environment (os.Environ() if nil); the
	// rank variables are replaced, never inherited.
	Env []string
	// Stdout and Stderr receive the children's output (discarded if nil).
	// Writers other than files are locked, so the children may share one.
	Stdout, Stderr io.Writer
	// TmpDir is where the private rendezvous directory is created
	// (os.TempDir() if empty).
	TmpDir string
	// Grace is how long the other children get to notice a failure through
	// the abort file, and leave on their own, before they are killed
	// (default 5s). It also bounds how long they may take to stop after ctx
	// is cancelled.
	Grace time.Duration
	// Signals are forwarded to every child still running (typically
	// SIGINT and SIGTERM from signal.Notify); may be nil.
	Signals <-chan os.Signal
	// Bind gives each child a disjoint block of the launcher's CPUs
	// (CPUBlocks), when there are at least N of them. Ranks left to float
	// share every CPU with each other's helper threads, and on a node where
	// the CPUs are not equally fast (a VM's vCPUs, SMT siblings) which rank
	// lands where changes from run to run, and with it the slowest rank.
	Bind bool
}

// Launch runs a job of cfg.N copies of cfg.Path on this host, coordinated
// through a private rendezvous directory that it creates and removes. Every
// child gets EnvRank, EnvSize, EnvLocalRank, EnvRendezvous and EnvJobToken,
// a random token of this job, which its rendezvous directory records.
//
// When a child fails (non-zero status, or killed by a signal) while others
// still run, Launch writes the job's abort file naming it, so that the
// others leave their collectives with ErrAborted, and kills whatever is
// still running after Grace. Cancelling ctx sends SIGTERM to the children,
// with the same Grace before the kill.
//
// exitCode is the job's verdict in prism's exit-code contract, and err
// says why it is not 0:
//
//   - 0, nil: every child exited 0.
//   - 130 or 143, *JobError: the user interrupted the launcher (SIGINT or
//     SIGTERM on cfg.Signals, which Launch forwarded; a cancelled ctx counts
//     as SIGTERM) and some child did not exit 0. Children that finish
//     cleanly despite the interrupt make it 0.
//   - 2, *JobError: the first child to fail exited with status 2 (bad usage
//     or a bad plan, which every rank finds alike).
//   - 1, *JobError: the first child to fail exited with another status or
//     was killed by a signal (SIGKILL from the OOM killer is not the user's
//     interrupt).
//   - 1, another error: Launch itself failed (the directory or a child could
//     not be created, or ctx was done before any child started).
//
// The *JobError names the first child to fail and how, which is worth
// printing: a rank the kernel killed (SIGKILL, the OOM killer) cannot say
// so itself. main should print err and exit with exitCode.
func Launch(ctx context.Context, cfg LaunchConfig) (exitCode int, err error) {
	switch {
	case cfg.N < 1:
		return 1, fmt.Errorf("spmd: Launch: need at least one rank, got %d", cfg.N)
	case cfg.Path == "":
		return 1, errors.New("spmd: Launch: no executable")
	}
	if err := ctx.Err(); err != nil {
		return 1, fmt.Errorf("spmd: Launch: %w", err)
	}
	grace := cfg.Grace
	if grace <= 0 {
		grace = defaultGrace
	}
	rdv, err := makeRendezvousDir(cfg.TmpDir)
	if err != nil {
		return 1, fmt.Errorf("spmd: Launch: %w", err)
	}
	defer rdv.remove()
	dir := rdv.dir.Path()

	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	env = withoutRankVars(env)
	token := "launch-" + randomHex(16)
	stdout, stderr := lockWriters(cfg.Stdout, cfg.Stderr)
	var blocks [][]int
	if cfg.Bind {
		if cpus, err := Affinity(); err == nil {
			blocks = CPUBlocks(cpus, cfg.N)
		}
	}
	children := make([]*exec.Cmd, 0, cfg.N)
	for i := range cfg.N {
		cmd := exec.Command(cfg.Path, cfg.Args...)
		cmd.Env = append(env[:len(env):len(env)],
			EnvRank+"="+strconv.Itoa(i),
			EnvSize+"="+strconv.Itoa(cfg.N),
			EnvLocalRank+"="+strconv.Itoa(i),
			EnvRendezvous+"="+dir,
			EnvJobToken+"="+token)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.SysProcAttr = childProcAttr()
		// A grandchild holding the output pipe open must not keep Launch
		// waiting after the child itself is gone.
		cmd.WaitDelay = grace
		var cpus []int
		if blocks != nil {
			cpus = blocks[i]
			cmd.Env = append(cmd.Env, EnvCPUs+"="+CPUList(cpus))
		}
		if err := startBound(cmd, cpus); err != nil {
			for _, c := range children {
				c.Process.Kill()
				c.Wait()
			}
			return 1, fmt.Errorf("spmd: Launch: starting rank %d: %w", i, err)
		}
		children = append(children, cmd)
	}
	if jerr := supervise(ctx, rdv.dir, children, cfg.Signals, grace); jerr != nil {
		return jerr.ExitCode(), jerr
	}
	return 0, nil
}

// JobError is how a job that Launch ran failed.
type JobError struct {
	// Rank is the first child to fail (after an interrupt, usually of it:
	// killed by the signal, or exiting 130/143 after writing its partial
	// results).
	Rank int
	// Status is that child's exit status, or -1 if a signal killed it;
	// Signal is that signal (0 if it exited).
	Status int
	Signal syscall.Signal
	// Interrupted is the user's SIGINT or SIGTERM that Launch forwarded
	// to the children (SIGTERM for a cancelled ctx), nil if none came.
	Interrupted os.Signal
}

func (e *JobError) Error() string {
	var how string
	switch {
	case e.Signal != 0:
		how = fmt.Sprintf("rank %d was killed by signal %d (%v)", e.Rank, int(e.Signal), e.Signal)
	default:
		how = fmt.Sprintf("rank %d exited with status %d", e.Rank, e.Status)
	}
	if e.Interrupted != nil {
		return fmt.Sprintf("spmd: job interrupted by %v: %s", e.Interrupted, how)
	}
	return "spmd: job failed: " + how
}

// ExitCode maps e to prism's exit codes: 130 for SIGINT and 143 for
// SIGTERM when the user interrupted the job, 2 when the first rank to fail
// reported bad usage, else 1.
func (e *JobError) ExitCode() int {
	switch {
	case e.Interrupted == syscall.SIGINT:
		return 130
	case e.Interrupted == syscall.SIGTERM:
		return 143
	case e.Status == 2:
		return 2
	}
	return 1
}

// withoutRankVars drops the rank variables from env: a launcher started
// from inside another job must not pass that job's identity on.
func withoutRankVars(env []string) []string {
	out := make([]string, 0, len(env)+4)
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case EnvRank, EnvSize, EnvLocalRank, EnvRendezvous, EnvCPUs, EnvJobToken:
			continue
		}
		out = append(out, kv)
	}
	return out
}

// lockWriters serializes the children's writes to writers that are not
// files (exec copies to those from one goroutine per child and stream, and
// an io.Writer need not be safe for concurrent use). Files are passed to
// the children as they are.
func lockWriters(stdout, stderr io.Writer) (io.Writer, io.Writer) {
	mu := new(sync.Mutex)
	lock := func(w io.Writer) io.Writer {
		if _, isFile := w.(*os.File); isFile || w == nil {
			return w
		}
		return &lockedWriter{mu: mu, w: w}
	}
	return lock(stdout), lock(stderr)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// childExit is how one child ended.
type childExit struct {
	rank   int
	status int            // exit status, -1 if killed by a signal
	signal syscall.Signal // the signal that killed it
	how    string         // for the abort notice
}

func (e childExit) failed() bool { return e.status != 0 }

// code is the child's status as a shell reports it (128+signal), for the
// abort notice.
func (e childExit) code() int {
	if e.signal != 0 {
		return 128 + int(e.signal)
	}
	return e.status
}

func reap(rank int, cmd *exec.Cmd) childExit {
	err := cmd.Wait()
	st := cmd.ProcessState
	if st == nil {
		return childExit{rank: rank, status: 1, how: fmt.Sprintf("rank %d could not be waited for: %v", rank, err)}
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		sig := ws.Signal()
		return childExit{rank: rank, status: -1, signal: sig, how: fmt.Sprintf("rank %d killed by signal %d (%v)", rank, int(sig), sig)}
	}
	code := st.ExitCode()
	return childExit{rank: rank, status: code, how: fmt.Sprintf("rank %d exited with status %d", rank, code)}
}

// supervise waits for every child, forwarding signals and bringing the
// others down when one fails, and returns how the job failed, or nil.
func supervise(ctx context.Context, dir *pio.Dir, children []*exec.Cmd, signals <-chan os.Signal, grace time.Duration) *JobError {
	exits := make(chan childExit, len(children))
	for i, cmd := range children {
		go func() { exits <- reap(i, cmd) }()
	}
	running := make([]bool, len(children))
	for i := range running {
		running[i] = true
	}
	signalAll := func(sig os.Signal) {
		for i, cmd := range children {
			if running[i] {
				// An error means the child just exited; its exit is on
				// its way.
				_ = cmd.Process.Signal(sig)
			}
		}
	}
	var (
		first       *childExit // the first child to fail
		interrupted os.Signal
		deadline    <-chan time.Time // armed once something went wrong
		timer       *time.Timer
	)
	arm := func() {
		if timer == nil {
			timer = time.NewTimer(grace)
			deadline = timer.C
		}
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	done := ctx.Done()
	for left := len(children); left > 0; {
		select {
		case e := <-exits:
			running[e.rank] = false
			left--
			if e.failed() && first == nil {
				first = &e
				if left > 0 {
					// Should the notice fail to appear, the others still
					// get killed after the grace period.
					_ = writeAbortFile(dir, e.rank, e.code(), e.how, "launch."+strconv.Itoa(os.Getpid()))
					arm()
				}
			}
		case sig, ok := <-signals:
			if !ok {
				signals = nil
				continue
			}
			if interrupted == nil && (sig == syscall.SIGINT || sig == syscall.SIGTERM) && first == nil {
				interrupted = sig
			}
			signalAll(sig)
		case <-done:
			done = nil
			if interrupted == nil && first == nil {
				interrupted = syscall.SIGTERM
			}
			signalAll(syscall.SIGTERM)
			arm()
		case <-deadline:
			deadline = nil
			signalAll(os.Kill)
		}
	}
	if first == nil {
		return nil
	}
	return &JobError{Rank: first.rank, Status: first.status, Signal: first.signal, Interrupted: interrupted}
}

// launchDir is the private rendezvous directory Launch makes for its
// children, held open as the children's ranks hold it: the abort notice
// and the final removal go through the descriptor, so that a directory
// someone renamed or replaced meanwhile is never written or emptied.
type launchDir struct{ parent, dir *pio.Dir }

func makeRendezvousDir(tmp string) (*launchDir, error) {
	if tmp == "" {
		tmp = os.TempDir()
	}
	parent, err := pio.OpenDir(tmp)
	if err != nil {
		return nil, err
	}
	for range 100 {
		// 0700, as os.MkdirTemp makes it: the job's own.
		d, err := parent.MakeSub("prism-rendezvous-"+randomHex(8), 0o700)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			parent.Close()
			return nil, err
		}
		return &launchDir{parent: parent, dir: d}, nil
	}
	parent.Close()
	return nil, fmt.Errorf("no fresh rendezvous directory name in %s after 100 tries", tmp)
}

func (l *launchDir) remove() {
	_ = l.dir.Remove()
	l.dir.Close()
	l.parent.Close()
}
