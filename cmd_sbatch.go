package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/all"
	"github.com/prism-hpc/prism/slurm"
)

// sbatchOptions are the flags of `prism sbatch`; the batch-script fields
// go straight into slurm.BatchOptions.
type sbatchOptions struct {
	plan   string // "" = the embedded quickstart
	bin    string // "" = this executable
	submit bool   // check the request against the partition and submit it
	slurm.BatchOptions
}

func cmdSbatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o sbatchOptions
	fs := newFlags("sbatch")
	fs.IntVar(&o.Nodes, "nodes", 1, "nodes to allocate (#SBATCH --nodes)")
	fs.IntVar(&o.NTasksPerNode, "ntasks-per-node", 1, "ranks per node (#SBATCH --ntasks-per-node)")
	fs.StringVar(&o.Time, "time", "1:00:00", "time limit: minutes, MM:SS, HH:MM:SS or D-HH:MM:SS (#SBATCH --time)")
	fs.StringVar(&o.Partition, "partition", "", "partition (#SBATCH --partition)")
	fs.StringVar(&o.Account, "account", "", "account to charge (#SBATCH --account)")
	fs.StringVar(&o.MPI, "mpi", "pmix", "srun --mpi type: pmix (OpenMPI) or pmi2 (MPICH)")
	fs.StringVar(&o.Workdir, "workdir", "", "directory under which prism creates its run directory (default: the plan's)")
	fs.StringVar(&o.Results, "results", "", "directory for manifests (default: the plan's)")
	fs.StringVar(&o.bin, "bin", "", "prism binary the job runs (default: this one, by absolute path)")
	fs.BoolVar(&o.submit, "submit", false, "check the request against the partition (sinfo) and submit the script with sbatch, instead of printing it")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageErrorf("%s", usageLine("sbatch"))
	}
	if len(pos) == 1 {
		o.plan = pos[0]
	}
	script, err := runSbatch(o)
	if err != nil {
		return asUsage(fmt.Errorf("sbatch: %w", err))
	}
	if o.submit {
		return submitSbatch(ctx, o, script, stdout)
	}
	_, err = io.WriteString(stdout, script)
	return err
}

// submitSbatch checks the request against what sinfo says the partition
// has — a request it can never meet (more nodes than the partition, more
// tasks than a node's CPUs) is refused with the reason Slurm would pend
// on, instead of a job that waits forever — then submits the script and
// prints the job id. sbatch copies the script at submission, so the file
// given to it is removed after.
func submitSbatch(ctx context.Context, o sbatchOptions, script string, stdout io.Writer) error {
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	parts, err := slurm.QueryPartitions(qctx, os.Environ())
	if err != nil {
		return fmt.Errorf("sbatch --submit: %w", err)
	}
	if err := slurm.Check(parts, slurm.Request{Partition: o.Partition, Nodes: o.Nodes, NTasksPerNode: o.NTasksPerNode, Time: o.Time}); err != nil {
		return asUsage(fmt.Errorf("sbatch --submit: %w", err))
	}
	f, err := os.CreateTemp("", "prism-*.sbatch")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(script); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	sctx, cancel2 := context.WithTimeout(ctx, time.Minute)
	defer cancel2()
	cmd := exec.CommandContext(sctx, "sbatch", "--parsable", f.Name())
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("sbatch --submit: sbatch: %v: %s", err, strings.TrimSpace(errb.String()))
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	_, err = fmt.Fprintf(stdout, "submitted batch job %s (%d nodes x %d tasks, output prism-%s.out)\n", id, o.Nodes, o.NTasksPerNode, id)
	return err
}

// runSbatch decodes the plan (a bad plan is an error before any script is
// written), resolves every path to an absolute one, and returns the script.
func runSbatch(o sbatchOptions) (string, error) {
	src, name, err := loadSource(o.plan)
	var p *phases.Plan
	if err == nil {
		p, err = phases.DecodePlan(all.Registry(), name, src)
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
