package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prism-hpc/prism/examples"
	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/all"
	"github.com/prism-hpc/prism/spmd"
)

type runOptions struct {
	n       int
	plan    string // "" = embedded quickstart
	workdir string
	results string
	json    bool
	wide    bool   // every column of the summary, however wide
	bind    string // local launcher: "cpus" or "none"
	// progress is --progress as given, mode what it resolves to on this
	// process (auto is resolved once, by the launcher under -n, whose
	// ranks write into pipes); every is --progress-interval.
	progress string
	mode     phases.Progress
	every    time.Duration
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o runOptions
	fs := newFlags("run")
	fs.IntVar(&o.n, "n", 0, "start `N` local ranks (rendezvous through a private directory)")
	fs.StringVar(&o.workdir, "workdir", "", "directory under which prism creates its run directory (overrides [plan] workdir)")
	fs.StringVar(&o.results, "results", "", "directory for manifests (overrides [plan] results)")
	fs.BoolVar(&o.json, "json", false, "print the manifest JSON instead of the text summary")
	fs.BoolVar(&o.wide, "wide", false, "print every column of the summary (kind, errors, mean, p90, p99.9, cache) and whole names, however wide the lines get; by default it fits 100 columns")
	fs.StringVar(&o.bind, "bind", "cpus", "with -n: `cpus` binds each rank to a disjoint block of CPUs (when N <= CPUs), none leaves them unbound; local: under mpirun or srun, each rank binds itself to its local rank's block of the CPUs the launcher gave it")
	fs.StringVar(&o.progress, "progress", "auto", "live progress on stderr: `auto` (tty on a terminal, line otherwise), tty (one line redrawn every second), line (a line every 10 s) or none")
	fs.DurationVar(&o.every, "progress-interval", 0, "how often progress is shown (default 1s for tty, 10s for line)")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	f, isFile := stderr.(*os.File)
	if o.mode, err = phases.ParseProgress(o.progress, isFile && phases.IsTerminal(f)); err != nil {
		return usageErrorf("run: %v", err)
	}
	if o.every < 0 || o.every > 0 && o.every < 10*time.Millisecond {
		return usageErrorf("run: --progress-interval %s: want 10ms or more", o.every)
	}
	if len(pos) > 1 {
		return usageErrorf("run: one plan at a time, got %v", pos)
	}
	if len(pos) == 1 {
		o.plan = pos[0]
	}
	if o.bind != "cpus" && o.bind != "none" && o.bind != "local" {
		return usageErrorf("run: --bind %q: want cpus, none or local", o.bind)
	}
	if o.bind == "local" {
		if err := bindLocal(stderr); err != nil {
			return err
		}
	}
	if o.n < 0 || o.n > 4096 {
		return usageErrorf("run: -n %d out of range (1 .. 4096)", o.n)
	}
	return runRun(ctx, o, stdout, stderr)
}

// bindLocal, for --bind local, binds this rank to its local rank's block
// of the CPUs the launcher allowed (spmd.CPUBlocks, as prism run -n
// does): the rank starts again bound, with PRISM_CPUS saying so. Without
// a launcher's local rank, or with fewer CPUs than local ranks, the rank
// runs as it is and says why.
func bindLocal(stderr io.Writer) error {
	if os.Getenv(spmd.EnvCPUs) != "" {
		return nil // bound already (the start again, or prism run -n)
	}
	rank, size, ok := spmd.LocalSlot(os.Getenv)
	if !ok {
		return usageErrorf("run: --bind local: no launcher's local rank here (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID): start prism with mpirun or srun, or use prism run -n")
	}
	cpus, err := spmd.Affinity()
	blocks := spmd.CPUBlocks(cpus, size)
	if err != nil || blocks == nil {
		fmt.Fprintf(stderr, "prism: --bind local: %d local ranks on %d CPUs (%v): running unbound\n", size, len(cpus), err)
		return nil
	}
	return spmd.BindSelf(blocks[rank], append(os.Environ(), spmd.EnvCPUs+"="+spmd.CPUList(blocks[rank])))
}

// loadSource returns the plan text and the name to use in messages.
func loadSource(plan string) ([]byte, string, error) {
	if plan == "" {
		b, err := examples.FS.ReadFile(examples.Quickstart)
		return b, "quickstart.toml (embedded)", err
	}
	name := plan
	if n := os.Getenv(envPlanName); n != "" {
		name = n // a rank of prism run -n: the launcher's copy of the plan
	}
	b, err := pio.ReadInput(plan, pio.MaxInput, pio.InputTimeout)
	if err != nil {
		// The PlanError names the file; its message need not again.
		return nil, name, &phases.PlanError{File: name, Msg: strings.TrimPrefix(err.Error(), plan+": ")}
	}
	return b, name, nil
}

// envPlanName carries the plan's name as the user gave it to the ranks of
// prism run -n, which read the launcher's copy of its text: the launcher
// reads the plan once (it may be a pipe) and hands every rank those bytes.
const envPlanName = "PRISM_PLAN_NAME"

// envCommandLine carries the user's command line (JSON, one string per
// argument) to the ranks of prism run -n, whose own command line is the
// launcher's re-run of itself on a copy of the plan.
const envCommandLine = "PRISM_COMMAND_LINE"

// commandLine is what the manifest records as the command the user ran.
func commandLine() []string {
	if s := os.Getenv(envCommandLine); s != "" {
		var args []string
		if err := json.Unmarshal([]byte(s), &args); err == nil {
			return args
		}
	}
	return os.Args
}

func runRun(ctx context.Context, o runOptions, stdout, stderr io.Writer) error {
	reg := all.Registry()
	src, name, srcErr := loadSource(o.plan)
	var local *phases.Plan
	if srcErr == nil {
		local, srcErr = phases.DecodePlan(reg, name, src)
	}
	child := os.Getenv(spmd.EnvRank) != ""

	// The embedded default runs in a private temporary directory. The local
	// launcher makes it and hands it to its ranks; under MPI or Slurm rank 0
	// makes it and broadcasts it once the communicator exists.
	tempDefault := o.plan == "" && o.workdir == "" && !child
	if tempDefault && o.n > 1 {
		tmp, err := os.MkdirTemp("", "prism-quickstart-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		o.workdir = tmp
		tempDefault = false
	}
	if srcErr == nil && !child && !tempDefault {
		wd := o.workdir
		if wd == "" {
			wd = cmp.Or(local.Header.NodeLocalWorkdir, local.Header.Workdir)
		}
		if wd == "" {
			wd = "."
		}
		// The ranks check it again (and print any warning): this is only
		// so that a refused workdir fails before ranks are started.
		if _, err := phases.CheckWorkdir(wd, local.Header.AllowSharedWorkdir); err != nil {
			return asUsage(err)
		}
	}
	if o.n > 1 && !child {
		if srcErr != nil {
			return asUsage(srcErr)
		}
		return launchLocal(ctx, o, src, name, stdout, stderr)
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var caught atomic.Value
	go func() {
		for s := range sigs {
			if caught.Load() != nil {
				// A second signal means "now": the user does not want to
				// wait for partial results.
				os.Exit(exitCode(interrupted{s}, io.Discard))
			}
			caught.Store(s)
			cancel()
		}
	}()

	timeout := time.Duration(0)
	rdv := ""
	if local != nil {
		timeout, rdv = time.Duration(local.Header.CoordinationTimeout), local.Header.Rendezvous
	}
	comm, id, err := spmd.Open(ctx, spmd.OpenOptions{Rendezvous: rdv, Timeout: timeout})
	if err != nil {
		return asUsage(err)
	}
	defer comm.Close()

	if tempDefault {
		wd, cleanup, err := sharedTempDir(ctx, comm)
		if err != nil {
			return fmt.Errorf("rank %d: %w", comm.Rank(), err)
		}
		defer cleanup()
		o.workdir = wd
	}
	// Rank 0's plan text is the plan: ranks on nodes that cannot read the
	// file, or read an edited copy, still run the same phases.
	plan, err := agreePlan(ctx, comm, reg, name, src, srcErr)
	if err != nil {
		if comm.Rank() != 0 {
			return &exitError{code: exitUsage} // rank 0 says why
		}
		return asUsage(err)
	}
	out, err := phases.Execute(runCtx, phases.Options{
		Plan: plan, Comm: comm, RankSource: id.Source, MPILibrary: spmd.MPILibraryVersion(),
		Workdir: o.workdir, Results: o.results, JSON: o.json, Wide: o.wide, Version: fullVersion(),
		CommandLine: commandLine(), Stdout: stdout, Stderr: stderr,
		Progress: o.mode, ProgressEvery: o.every,
		Interrupted: func() os.Signal {
			if s, ok := caught.Load().(os.Signal); ok {
				return s
			}
			return nil
		},
	})
	if err != nil {
		var pe *phases.PlanError
		if errors.As(err, &pe) {
			if comm.Rank() != 0 {
				return &exitError{code: exitUsage}
			}
			return err
		}
		if !phases.IsPeerFailure(err) {
			fmt.Fprintf(stderr, "prism: rank %d: %v\n", comm.Rank(), err)
		}
		// Under MPI nothing times out: after an error that not every rank
		// shares (rank 0 could not write the results, an MPI call failed on
		// one rank) the others would wait in a collective forever, and
		// MPI_Finalize in comm.Close would wait for them. So under MPI any
		// error here takes the job down.
		mpiJob := comm.Kind() == "mpi" && comm.Size() > 1
		if phases.IsCoordination(err) || mpiJob {
			// The communicator can no longer be trusted: take the job down
			// so no peer waits out its timeout. Rank 0 has written what it
			// had by now; under MPI the other ranks give it time to, since
			// MPI_Abort ends every rank at once.
			if r, ok := comm.(*spmd.Rendezvous); ok {
				r.AbortWith(exitFailed, fmt.Sprintf("rank %d: %v", comm.Rank(), err))
			}
			if mpiJob && comm.Rank() != 0 {
				time.Sleep(mpiAbortGrace)
			}
			comm.Abort(exitFailed)
		}
		return errReported
	}
	switch {
	case out.Signal != nil:
		return interrupted{out.Signal}
	case out.Status != "passed" || out.ExpectFailed:
		return errReported
	}
	return nil
}

// mpiAbortGrace is how long a rank other than 0 waits before MPI_Abort
// after an error, so that rank 0 can write the manifest first (rank 0
// aborts as soon as it has, which ends the wait).
const mpiAbortGrace = 5 * time.Second

// agreePlan broadcasts rank 0's plan text (or its failure to read it) and
// decodes it on every rank, so all ranks fail or succeed together.
func agreePlan(ctx context.Context, comm spmd.Comm, reg *phases.Registry, name string, src []byte, srcErr error) (*phases.Plan, error) {
	msg := append([]byte{0}, src...)
	if srcErr != nil {
		msg = append([]byte{1}, srcErr.Error()...)
	}
	got, err := comm.Bcast(ctx, 0, msg)
	if err != nil {
		return nil, err
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("empty plan broadcast")
	}
	if got[0] == 1 {
		return nil, errors.New(string(got[1:]))
	}
	return phases.DecodePlan(reg, name, got[1:])
}

// sharedTempDir makes a temporary workdir on rank 0 and tells every rank
// its path; a rank on another node that does not see it makes the same
// path locally. Each rank removes only what it made.
func sharedTempDir(ctx context.Context, comm spmd.Comm) (string, func(), error) {
	var path []byte
	made := false
	if comm.Rank() == 0 {
		tmp, err := os.MkdirTemp("", "prism-quickstart-")
		if err == nil {
			path, made = []byte(tmp), true
		}
	}
	path, err := comm.Bcast(ctx, 0, path)
	if err != nil {
		return "", func() {}, err
	}
	if len(path) == 0 {
		return "", func() {}, fmt.Errorf("rank 0 could not create a temporary directory")
	}
	dir := string(path)
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", func() {}, err
		}
		made = true
	}
	return dir, func() {
		if made {
			os.RemoveAll(dir)
		}
	}, nil
}

// launchLocal starts o.n copies of this binary as ranks of one job.
func launchLocal(ctx context.Context, o runOptions, src []byte, name string, stdout, stderr io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"run"}
	if o.workdir != "" {
		args = append(args, "--workdir", o.workdir)
	}
	if o.results != "" {
		args = append(args, "--results", o.results)
	}
	if o.json {
		args = append(args, "--json")
	}
	if o.wide {
		args = append(args, "--wide")
	}
	mode := string(o.mode)
	if o.mode == phases.ProgressNone {
		mode = "none"
	}
	args = append(args, "--progress", mode)
	if o.every > 0 {
		args = append(args, "--progress-interval", o.every.String())
	}
	env := os.Environ()
	if o.plan != "" {
		// The ranks read this copy, not the plan: it may have been a pipe
		// (prism run -n 4 /dev/stdin), or edited since the launcher read it.
		f, err := os.CreateTemp("", "prism-plan-*.toml")
		if err != nil {
			return err
		}
		defer os.Remove(f.Name())
		_, err = f.Write(src)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		args = append(args, f.Name())
		env = append(env, envPlanName+"="+name)
	}
	if b, err := json.Marshal(os.Args); err == nil {
		env = append(env, envCommandLine+"="+string(b))
	}
	sigs := make(chan os.Signal, 4)
	// SIGUSR1 (progress snapshot) is forwarded like the others; without
	// this its default action would kill the launcher and so every rank.
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGUSR1)
	defer signal.Stop(sigs)
	code, err := spmd.Launch(ctx, spmd.LaunchConfig{
		N: o.n, Path: self, Args: args, Env: env, Stdout: stdout, Stderr: stderr, Signals: sigs,
		Bind: o.bind == "cpus",
	})
	var je *spmd.JobError
	switch {
	case errors.As(err, &je):
		// A rank failed, died or was interrupted: the ranks have said why
		// (a dead rank could not), the launcher's code follows the
		// contract (1, 2 for bad usage, 130/143 for the user's signal).
		if je.Signal != 0 {
			fmt.Fprintf(stderr, "prism: %v\n", je)
		}
		return &exitError{code: je.ExitCode()}
	case err != nil:
		if code == 0 {
			code = exitFailed
		}
		return &exitError{code: code, err: fmt.Errorf("launcher: %w", err)}
	case code != 0:
		return &exitError{code: code}
	}
	return nil
}
