// Command prism qualifies POSIX storage for AI research clusters: it runs a
// TOML plan of checkpoint, data-loading, block-I/O and metadata phases on
// every rank of an MPI, Slurm or local job and writes one manifest.
//
// main.go holds the verb dispatch and exit codes only; each verb lives in
// its own cmd_*.go file as runX(ctx, opts, …) so tests can call it.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// Exit codes, as the README documents them.
const (
	exitOK          = 0
	exitFailed      = 1 // a phase or an expectation failed
	exitUsage       = 2 // bad usage or bad plan
	exitInterrupted = 130
	exitTerminated  = 143
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  prism [run] [-n N] [plan.toml] [--workdir DIR] [--results DIR] [--json]
  prism check [-n N] plan.toml     validate; print the resolved plan and its files/bytes
  prism list                       phase kinds, their parameters and defaults
  prism report [--out FILE] [--label a,b] manifest.json [more.json …]
                                   report.html of a run, or several runs overlaid
  prism compare [--threshold 10%] [--json] base.json new.json
                                   per-phase changes; exit 1 on a regression
  prism sbatch [--nodes N] [--ntasks-per-node M] [--time T] [--partition P] … plan.toml
                                   print a Slurm batch script that runs the plan with srun
  prism datasize [--workload unet3d] [--accelerator h100] [--accelerators N] [--hosts N] [--memory SIZE]
                                   MLPerf's minimum training dataset (num_files, bytes) for a job
  prism version

With no plan, prism run uses the embedded quickstart plan in a temporary directory.
Under mpirun or srun --mpi=pmix every rank runs the plan; -n N starts N local ranks.
Exit codes: 0 passed, 1 a phase or expectation failed, 2 bad usage or plan, 130/143 interrupted.
`

func run(args []string, stdout, stderr io.Writer) int {
	verb := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") && !strings.HasSuffix(args[0], ".toml") {
		verb, args = args[0], args[1:]
	}
	switch verb {
	case "run":
		return cmdRun(args, stdout, stderr)
	case "check":
		return cmdCheck(args, stdout, stderr)
	case "list":
		return cmdList(args, stdout, stderr)
	case "report":
		return cmdReport(args, stdout, stderr)
	case "compare":
		return cmdCompare(args, stdout, stderr)
	case "sbatch":
		return cmdSbatch(args, stdout, stderr)
	case "datasize":
		return cmdDatasize(args, stdout, stderr)
	case "version":
		return cmdVersion(args, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	if st, err := os.Stat(verb); err == nil && !st.IsDir() {
		return cmdRun(append([]string{verb}, args...), stdout, stderr)
	}
	fmt.Fprintf(stderr, "prism: unknown verb %q\n%s", verb, usage)
	return exitUsage
}
