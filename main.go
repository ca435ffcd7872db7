// Command prism qualifies POSIX storage for AI research clusters: it runs a
// TOML plan of checkpoint, data-loading, block-I/O and metadata phases on
// every rank of an MPI, Slurm or local job and writes one manifest.
//
// main.go holds the verb table, help and the one mapping from errors to
// exit codes (exitCode); each verb lives in its own cmd_*.go file, parses
// its flags into an options struct and calls runX(ctx, opts, …) error,
// which tests call without the CLI.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/prism-hpc/prism/phases"
)

// Exit codes, as the README documents them.
const (
	exitOK          = 0
	exitFailed      = 1 // a phase or an expectation failed, a rank died
	exitUsage       = 2 // bad usage or bad plan: nothing ran
	exitInterrupted = 130
	exitTerminated  = 143
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// verb is one prism command.
type verb struct {
	name     string
	synopsis string // the usage line after "prism "
	summary  string // one line for `prism help`
	run      func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// verbs in the order `prism help` lists them.
var verbs []verb

func init() {
	// Assigned in init because the verbs' help refers back to this table.
	verbs = []verb{
		{"run", "run [-n N] [--bind cpus|none] [--workdir DIR] [--results DIR] [--json] [--wide] [plan.toml]",
			"run a plan (the embedded quickstart when none is given); -n N starts N local ranks", cmdRun},
		{"check", "check [-n N] [--workdir DIR] [plan.toml]", "validate a plan, print it resolved (files and bytes per phase) and check this host for it (workdir, free space and inodes, cache policy)", cmdCheck},
		{"list", "list [--width N] [KIND|FAMILY ...]", "phase kinds with their parameters, types, defaults and docs (only the kinds named)", cmdList},
		{"report", "report [--out FILE] [--label a,b] [--summary [--wide]] manifest.json [more.json ...]",
			"re-render report.html of a run, or overlay several runs; --summary prints their text summaries instead", cmdReport},
		{"compare", "compare [--threshold 10%] [--json] [--label base,new] [--base-dir DIR] base.json [more-base.json ...] new.json",
			"per-phase changes of a run against one or several earlier runs (noise from the spread between them); exit 1 on a regression", cmdCompare},
		{"sbatch", "sbatch [--nodes N] [--ntasks-per-node M] [--time T] [--partition P] ... [plan.toml]",
			"print a Slurm batch script that runs the plan with srun", cmdSbatch},
		{"datasize", "datasize [--workload W] [--accelerator A] [--accelerators N] [--hosts N] [--memory SIZE]",
			"MLPerf Storage's minimum training dataset (files, bytes) for a job", cmdDatasize},
		{"mlperf", "mlperf [--runs N] [--results DIR] [--workdir DIR] [-n N] [--launch CMD] [--memory SIZE] [--what-if] training|checkpointing plan.toml | mlperf report DIR",
			"MLPerf Storage's procedure over a plan: datasize, datagen (or reuse), runs with the cache dropped before each, summary with pass/fail, [plan] mlperf = closed|open checks; report writes results.json/.csv over a results tree", cmdMLPerf},
		{"datagen", "datagen [-n N] [--workdir DIR] [--results DIR] plan.toml",
			"run only the plan's create_dataset phases with persist: write their datasets once (a complete one is reused)", cmdDatagen},
		{"datasets", "datasets [--workdir DIR] [--json] list | rm NAME",
			"the persistent datasets and checkpoints of a workdir (<workdir>/prism-datasets/); rm removes only a directory carrying prism's marker", cmdDatasets},
		{"version", "version", "version, Go version, and whether MPI is linked", cmdVersion},
		{"help", "help [VERB]", "this help, or one verb's", cmdHelp},
	}
}

func lookupVerb(name string) (verb, bool) {
	for _, v := range verbs {
		if v.name == name {
			return v, true
		}
	}
	return verb{}, false
}

// usage is what `prism help` prints.
func usage(w io.Writer) {
	fmt.Fprintf(w, "prism qualifies storage for AI clusters: it runs a TOML plan of checkpoint,\n")
	fmt.Fprintf(w, "data-loading, block-I/O and metadata phases on every rank and writes one manifest.\n\nusage:\n")
	for _, v := range verbs {
		fmt.Fprintf(w, "  prism %s\n      %s\n", v.synopsis, v.summary)
	}
	fmt.Fprintf(w, `
  prism plan.toml                  the same as prism run plan.toml
  prism VERB --help                a verb's flags

With no plan, prism run uses the embedded quickstart plan in a temporary directory.
Under mpirun or srun --mpi=pmix every rank runs the plan; -n N starts N local ranks.
Exit codes: 0 passed, 1 a phase or expectation failed, 2 bad usage or plan, 130/143 interrupted.
`)
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx := context.Background()
	name := "run"
	switch {
	case len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help"):
		usage(stdout)
		return exitOK
	case len(args) > 0 && (args[0] == "--version" || args[0] == "-version"):
		name, args = "version", args[1:]
	case len(args) > 0 && !strings.HasPrefix(args[0], "-") && !strings.HasSuffix(args[0], ".toml"):
		name, args = args[0], args[1:]
	}
	v, ok := lookupVerb(name)
	if !ok {
		if st, err := os.Stat(name); err == nil && !st.IsDir() {
			// prism plan-file: a plan whose name does not end in .toml.
			v, _ = lookupVerb("run")
			args = append([]string{name}, args...)
		} else {
			fmt.Fprintf(stderr, "prism: unknown verb %q (prism help lists them)\n", name)
			return exitUsage
		}
	}
	return exitCode(v.run(ctx, args, stdout, stderr), stderr)
}

func cmdHelp(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stdout)
		return nil
	}
	v, ok := lookupVerb(args[0])
	if !ok || v.name == "help" {
		return usageErrorf("help: unknown verb %q (prism help lists them)", args[0])
	}
	return v.run(context.Background(), []string{"--help"}, stdout, stderr)
}

// exitError is an error that chooses its exit code. A nil err means its
// message is already out (a flag parse error, a summary that says which
// phase failed), so nothing more is printed.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageErrorf is bad usage: exit 2, nothing ran.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// asUsage marks err (a plan that cannot be read, a bad flag value) as bad
// usage; nil stays nil.
func asUsage(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: exitUsage, err: err}
}

// errReported is a failure whose cause is already on the output (a failed
// phase in the summary, a rank's own message): exit 1, nothing printed.
var errReported = &exitError{code: exitFailed}

// interrupted is a run stopped by a signal; its results are written.
type interrupted struct{ sig os.Signal }

func (i interrupted) Error() string { return "interrupted by " + i.sig.String() }

// exitCode is the one mapping from a verb's error to the exit code: nil →
// 0; --help → 0; bad usage or a bad plan → 2; a signal → 130 / 143;
// anything else → 1. It prints the error on stderr unless its message is
// already out.
func exitCode(err error, stderr io.Writer) int {
	var ee *exitError
	var pe *phases.PlanError
	var sig interrupted
	code := exitFailed
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &sig):
		if sig.sig == syscall.SIGTERM {
			return exitTerminated
		}
		return exitInterrupted
	case errors.As(err, &ee):
		if ee.err == nil {
			return ee.code
		}
		code = ee.code
	case errors.As(err, &pe):
		code = exitUsage
	}
	fmt.Fprintf(stderr, "prism: %v\n", err)
	return code
}

// newFlags returns a verb's flag set. Its messages are buffered, so that
// parse reports --help on stdout (exit 0) and a bad flag on stderr (exit 2).
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		v, _ := lookupVerb(name)
		fmt.Fprintf(fs.Output(), "usage: prism %s\n  %s\n", v.synopsis, v.summary)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses fs allowing flags before and after the positional
// arguments, as users type `prism run plan.toml -n 4`. Help goes to stdout
// (flag.ErrHelp, exit 0), a parse error with the usage to stderr (exit 2).
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) ([]string, error) {
	var msg strings.Builder
	fs.SetOutput(&msg)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				io.WriteString(stdout, msg.String())
				return nil, err
			}
			io.WriteString(stderr, msg.String())
			return nil, &exitError{code: exitUsage}
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// usageLine is a verb's synopsis, for errors about its arguments.
func usageLine(name string) string {
	v, _ := lookupVerb(name)
	return "usage: prism " + v.synopsis
}
