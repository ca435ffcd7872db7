package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prism-hpc/prism/examples"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/spmd"
)

type runOptions struct {
	n       int
	plan    string // "" = embedded quickstart
	workdir string
	results string
	json    bool
	bind    string // local launcher: "cpus" or "none"
}

// parseFlags parses fs allowing flags before and after the one positional
// argument, as users type `prism run plan.toml -n 4`.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	var o runOptions
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.n, "n", 0, "start `N` local ranks (rendezvous through a private directory)")
	fs.StringVar(&o.workdir, "workdir", "", "directory under which prism creates its run directory (overrides [plan] workdir)")
	fs.StringVar(&o.results, "results", "", "directory for manifests (overrides [plan] results)")
	fs.BoolVar(&o.json, "json", false, "print the manifest JSON instead of the text summary")
	fs.StringVar(&o.bind, "bind", "cpus", "with -n: `cpus` binds each rank to a disjoint block of CPUs (when N <= CPUs), none leaves them unbound")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) > 1 {
		fmt.Fprintf(stderr, "prism run: one plan at a time, got %v\n", pos)
		return exitUsage
	}
	if len(pos) == 1 {
		o.plan = pos[0]
	}
	if o.bind != "cpus" && o.bind != "none" {
		fmt.Fprintf(stderr, "prism run: --bind %q: want cpus or none\n", o.bind)
		return exitUsage
	}
	if o.n < 0 || o.n > 4096 {
		fmt.Fprintf(stderr, "prism run: -n %d out of range (1 .. 4096)\n", o.n)
		return exitUsage
	}
	return runRun(context.Background(), o, stdout, stderr)
}

// loadSource returns the plan text and the name to use in messages.
func loadSource(plan string) ([]byte, string, error) {
	if plan == "" {
		b, err := examples.FS.ReadFile(examples.Quickstart)
		return b, "quickstart.toml (embedded)", err
	}
	b, err := os.ReadFile(plan)
	if err != nil {
		return nil, plan, &phases.PlanError{File: plan, Msg: err.Error()}
	}
	return b, plan, nil
}

func runRun(ctx context.Context, o runOptions, stdout, stderr io.Writer) int {
	reg := phases.Default()
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
			fmt.Fprintf(stderr, "prism: %v\n", err)
			return exitFailed
		}
		defer os.RemoveAll(tmp)
		o.workdir = tmp
		tempDefault = false
	}
	if srcErr == nil && !child && !tempDefault {
		wd := o.workdir
		if wd == "" {
			wd = local.Header.Workdir
		}
		if wd == "" {
			wd = "."
		}
		if err := phases.CheckWorkdir(wd); err != nil {
			fmt.Fprintf(stderr, "prism: %v\n", err)
			return exitUsage
		}
	}
	if o.n > 1 && !child {
		if srcErr != nil {
			fmt.Fprintf(stderr, "prism: %v\n", srcErr)
			return exitUsage
		}
		return launchLocal(ctx, o, stdout, stderr)
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
				os.Exit(exitCodeFor(s))
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
		fmt.Fprintf(stderr, "prism: %v\n", err)
		return exitUsage
	}
	defer comm.Close()

	if tempDefault {
		wd, cleanup, err := sharedTempDir(ctx, comm)
		if err != nil {
			fmt.Fprintf(stderr, "prism: rank %d: %v\n", comm.Rank(), err)
			return exitFailed
		}
		defer cleanup()
		o.workdir = wd
	}
	// Rank 0's plan text is the plan: ranks on nodes that cannot read the
	// file, or read an edited copy, still run the same phases.
	plan, err := agreePlan(ctx, comm, reg, name, src, srcErr)
	if err != nil {
		if comm.Rank() == 0 {
			fmt.Fprintf(stderr, "prism: %v\n", err)
		}
		return exitUsage
	}
	out, err := phases.Execute(runCtx, phases.Options{
		Plan: plan, Comm: comm, RankSource: id.Source, MPILibrary: spmd.MPILibraryVersion(),
		Workdir: o.workdir, Results: o.results, JSON: o.json, Version: fullVersion(),
		Stdout: stdout, Stderr: stderr,
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
			if comm.Rank() == 0 {
				fmt.Fprintf(stderr, "prism: %v\n", err)
			}
			return exitUsage
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
		return exitFailed
	}
	switch {
	case out.Signal != nil:
		return exitCodeFor(out.Signal)
	case out.Status != "passed" || out.ExpectFailed:
		return exitFailed
	}
	return exitOK
}

// mpiAbortGrace is how long a rank other than 0 waits before MPI_Abort
// after an error, so that rank 0 can write the manifest first (rank 0
// aborts as soon as it has, which ends the wait).
const mpiAbortGrace = 5 * time.Second

func exitCodeFor(s os.Signal) int {
	if s == syscall.SIGTERM {
		return exitTerminated
	}
	return exitInterrupted
}

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
func launchLocal(ctx context.Context, o runOptions, stdout, stderr io.Writer) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "prism: %v\n", err)
		return exitFailed
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
	if o.plan != "" {
		abs, err := filepath.Abs(o.plan)
		if err == nil {
			o.plan = abs
		}
		args = append(args, o.plan)
	}
	sigs := make(chan os.Signal, 4)
	// SIGUSR1 (progress snapshot) is forwarded like the others; without
	// this its default action would kill the launcher and so every rank.
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGUSR1)
	defer signal.Stop(sigs)
	code, err := spmd.Launch(ctx, spmd.LaunchConfig{
		N: o.n, Path: self, Args: args, Env: os.Environ(), Stdout: stdout, Stderr: stderr, Signals: sigs,
		Bind: o.bind == "cpus",
	})
	if err != nil {
		fmt.Fprintf(stderr, "prism: launcher: %v\n", err)
		if code == 0 {
			code = exitFailed
		}
	}
	return code
}
