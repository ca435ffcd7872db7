package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/slurm"
)

// sbatchOptions are the flags of `prism sbatch`; the batch-script fields
// go straight into slurm.BatchOptions.
type sbatchOptions struct {
	plan string // "" = the embedded quickstart
	bin  string // "" = this executable
	slurm.BatchOptions
}

func cmdSbatch(args []string, stdout, stderr io.Writer) int {
	var o sbatchOptions
	fs := flag.NewFlagSet("sbatch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.Nodes, "nodes", 1, "nodes to allocate (#SBATCH --nodes)")
	fs.IntVar(&o.NTasksPerNode, "ntasks-per-node", 1, "ranks per node (#SBATCH --ntasks-per-node)")
	fs.StringVar(&o.Time, "time", "1:00:00", "time limit: minutes, MM:SS, HH:MM:SS or D-HH:MM:SS (#SBATCH --time)")
	fs.StringVar(&o.Partition, "partition", "", "partition (#SBATCH --partition)")
	fs.StringVar(&o.Account, "account", "", "account to charge (#SBATCH --account)")
	fs.StringVar(&o.MPI, "mpi", "pmix", "srun --mpi type: pmix (OpenMPI) or pmi2 (MPICH)")
	fs.StringVar(&o.Workdir, "workdir", "", "directory under which prism creates its run directory (default: the plan's)")
	fs.StringVar(&o.Results, "results", "", "directory for manifests (default: the plan's)")
	fs.StringVar(&o.bin, "bin", "", "prism binary the job runs (default: this one, by absolute path)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) > 1 {
		fmt.Fprintf(stderr, "usage: prism sbatch [plan.toml] [--nodes N] [--ntasks-per-node M] [--time T] [--partition P] [--account A] [--mpi pmix|pmi2] [--workdir DIR] [--results DIR] [--bin PATH]\n")
		return exitUsage
	}
	if len(pos) == 1 {
		o.plan = pos[0]
	}
	script, err := runSbatch(o)
	if err != nil {
		fmt.Fprintf(stderr, "prism sbatch: %v\n", err)
		return exitUsage
	}
	if _, err := io.WriteString(stdout, script); err != nil {
		fmt.Fprintf(stderr, "prism sbatch: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// runSbatch decodes the plan (a bad plan is an error before any script is
// written), resolves every path to an absolute one, and returns the script.
func runSbatch(o sbatchOptions) (string, error) {
	src, name, err := loadSource(o.plan)
	var p *phases.Plan
	if err == nil {
		p, err = phases.DecodePlan(phases.Default(), name, src)
	}
	if err != nil {
		return "", err
	}
	b := o.BatchOptions
	b.JobName = "prism-" + p.Header.Name
	if o.plan != "" {
		if b.Plan, err = filepath.Abs(o.plan); err != nil {
			return "", err
		}
	}
	switch {
	case o.bin == "":
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("--bin: cannot find this executable (%v); name the prism binary the job should run", err)
		}
		b.Bin = exe
	case strings.ContainsRune(o.bin, '/'):
		if b.Bin, err = filepath.Abs(o.bin); err != nil {
			return "", err
		}
	default:
		b.Bin = o.bin // a bare name: the job looks it up in PATH
	}
	for _, d := range []*string{&b.Workdir, &b.Results} {
		if *d != "" {
			if *d, err = filepath.Abs(*d); err != nil {
				return "", err
			}
		}
	}
	return slurm.Script(b) // its errors name the flag
}
