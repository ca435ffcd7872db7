package slurm

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// BatchOptions describe the batch script Script writes for one plan. Paths
// are used as given: the caller makes them absolute, so the job finds them
// whatever directory it is submitted from.
type BatchOptions struct {
	Plan          string // the plan file; "" runs prism's embedded quickstart
	Bin           string // the prism binary (a path, or a name looked up in PATH)
	JobName       string // --job-name
	Nodes         int    // --nodes, at least 1
	NTasksPerNode int    // --ntasks-per-node, at least 1
	Time          string // --time: minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]
	Partition     string // --partition, optional
	Account       string // --account, optional
	MPI           string // srun --mpi: "pmix" (OpenMPI) or "pmi2" (MPICH)
	Workdir       string // prism --workdir, optional (default: the plan's)
	Results       string // prism --results, optional (default: the plan's)
}

// OptionError is a bad batch option; Flag names the `prism sbatch` flag.
type OptionError struct {
	Flag  string
	Value string
	Msg   string
}

func (e *OptionError) Error() string { return fmt.Sprintf("--%s %q: %s", e.Flag, e.Value, e.Msg) }

// MPITypes are the srun --mpi values a script may use.
var MPITypes = []string{"pmix", "pmi2"}

var (
	// Slurm's --time forms: "minutes", "minutes:seconds",
	// "hours:minutes:seconds", "days-hours", "days-hours:minutes",
	// "days-hours:minutes:seconds".
	timeRe = regexp.MustCompile(`^(?:(\d{1,7})|(\d{1,7}):(\d{1,2})|(\d{1,5}):(\d{1,2}):(\d{1,2})|(\d{1,4})-(\d{1,2})(?::(\d{1,2})(?::(\d{1,2}))?)?)$`)
	// Names that go on #SBATCH lines, which sbatch parses itself.
	slurmName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,200}$`)
)

// ValidTime reports whether t is a --time value Slurm accepts (also
// "UNLIMITED"/"INFINITE"), with minutes and seconds below 60 where they
// follow a larger unit and hours below 24 after days.
func ValidTime(t string) error {
	switch strings.ToUpper(t) {
	case "UNLIMITED", "INFINITE":
		return nil
	}
	m := timeRe.FindStringSubmatch(t)
	if m == nil {
		return fmt.Errorf("not a Slurm time limit (write minutes \"30\", \"MM:SS\", \"HH:MM:SS\" such as \"1:00:00\", or \"D-HH:MM:SS\")")
	}
	below := func(s string, lim int, what string) error {
		if s == "" {
			return nil
		}
		if v, _ := strconv.Atoi(s); v >= lim {
			return fmt.Errorf("%s %s out of range (0 .. %d)", what, s, lim-1)
		}
		return nil
	}
	for _, c := range []struct {
		s    string
		lim  int
		what string
	}{{m[3], 60, "seconds"}, {m[5], 60, "minutes"}, {m[6], 60, "seconds"}, {m[8], 24, "hours"}, {m[9], 60, "minutes"}, {m[10], 60, "seconds"}} {
		if err := below(c.s, c.lim, c.what); err != nil {
			return err
		}
	}
	if strings.Trim(t, "0:-") == "" {
		return fmt.Errorf("a zero time limit would never run")
	}
	return nil
}

// Validate checks every option; the error names the flag.
func (o *BatchOptions) Validate() error {
	switch {
	case o.Nodes < 1 || o.Nodes > 1<<20:
		return &OptionError{Flag: "nodes", Value: strconv.Itoa(o.Nodes), Msg: "must be at least 1"}
	case o.NTasksPerNode < 1 || o.NTasksPerNode > 1<<16:
		return &OptionError{Flag: "ntasks-per-node", Value: strconv.Itoa(o.NTasksPerNode), Msg: "must be at least 1"}
	case !slices.Contains(MPITypes, o.MPI):
		return &OptionError{Flag: "mpi", Value: o.MPI, Msg: "allowed: pmix (OpenMPI), pmi2 (MPICH)"}
	case o.Partition != "" && !slurmName.MatchString(o.Partition):
		return &OptionError{Flag: "partition", Value: o.Partition, Msg: "use letters, digits, '.', '_' and '-'"}
	case o.Account != "" && !slurmName.MatchString(o.Account):
		return &OptionError{Flag: "account", Value: o.Account, Msg: "use letters, digits, '.', '_' and '-'"}
	case o.JobName != "" && !slurmName.MatchString(o.JobName):
		return &OptionError{Flag: "job-name", Value: o.JobName, Msg: "use letters, digits, '.', '_' and '-'"}
	case o.Bin == "":
		return &OptionError{Flag: "bin", Value: o.Bin, Msg: "the prism binary is needed"}
	}
	if err := ValidTime(o.Time); err != nil {
		return &OptionError{Flag: "time", Value: o.Time, Msg: err.Error()}
	}
	for _, p := range []struct{ flag, v string }{{"plan", o.Plan}, {"bin", o.Bin}, {"workdir", o.Workdir}, {"results", o.Results}} {
		if strings.ContainsRune(p.v, 0) {
			return &OptionError{Flag: p.flag, Value: p.v, Msg: "holds a NUL byte"}
		}
	}
	return nil
}

// Script returns a bash batch script that runs prism on the plan with srun
// on every task of the allocation. Every path is single-quoted for bash, so
// spaces, quotes, $ and backticks reach prism unchanged; PRISM_PLAN,
// PRISM_BIN, PRISM_WORKDIR, PRISM_RESULTS and PRISM_MPI in the job's
// environment (sbatch --export) override the values written here.
func Script(o BatchOptions) (string, error) {
	if err := o.Validate(); err != nil {
		return "", err
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("#!/bin/bash\n")
	w("# Written by `prism sbatch`; edit freely, then submit with: sbatch THIS_FILE\n")
	w("# Values in the environment override the defaults below, e.g.\n")
	w("#   sbatch --export=ALL,PRISM_PLAN=/path/other.toml THIS_FILE\n")
	if o.JobName != "" {
		w("#SBATCH --job-name=%s\n", o.JobName)
	}
	w("#SBATCH --nodes=%d\n", o.Nodes)
	w("#SBATCH --ntasks-per-node=%d\n", o.NTasksPerNode)
	w("#SBATCH --time=%s\n", o.Time)
	if o.Partition != "" {
		w("#SBATCH --partition=%s\n", o.Partition)
	}
	if o.Account != "" {
		w("#SBATCH --account=%s\n", o.Account)
	}
	w("#SBATCH --output=prism-%%j.out\n")
	w("set -euo pipefail\n\n")
	w("PRISM_BIN=${PRISM_BIN:-%s}\n", ShellQuote(o.Bin))
	w("PRISM_PLAN=${PRISM_PLAN-%s}  # empty: the embedded quickstart plan\n", ShellQuote(o.Plan))
	w("PRISM_WORKDIR=${PRISM_WORKDIR-%s}  # empty: the plan's workdir\n", ShellQuote(o.Workdir))
	w("PRISM_RESULTS=${PRISM_RESULTS-%s}  # empty: the plan's results\n", ShellQuote(o.Results))
	w("PRISM_MPI=${PRISM_MPI:-%s}  # srun --mpi: pmix for OpenMPI, pmi2 for MPICH\n", o.MPI)
	b.WriteString(scriptBody)
	return b.String(), nil
}

// scriptBody is the part of every generated script that does not depend on
// the options; examples/prism.sbatch carries the same logic, commented.
const scriptBody = `
args=()
[ -n "$PRISM_PLAN" ] && args+=("$PRISM_PLAN")
[ -n "$PRISM_WORKDIR" ] && args+=(--workdir "$PRISM_WORKDIR")
[ -n "$PRISM_RESULTS" ] && args+=(--results "$PRISM_RESULTS")

# More ranks than cores on this node: MPI ranks must yield while they wait,
# or a barrier costs ~10 ms instead of ~100 µs.
tasks=${SLURM_TASKS_PER_NODE:-1}
tasks=${tasks%%[(,]*}
if [ "$tasks" -gt "$(getconf _NPROCESSORS_ONLN)" ]; then
  export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
fi

echo "prism: job ${SLURM_JOB_ID:-?} on ${SLURM_JOB_NODELIST:-?}: ${SLURM_NTASKS:-?} tasks, srun --mpi=$PRISM_MPI $PRISM_BIN ${args[*]}" >&2
srun --mpi="$PRISM_MPI" "$PRISM_BIN" "${args[@]}"
# Or, with OpenMPI's launcher inside the allocation (a dead rank leaves
# the others to write a manifest naming it):
# mpirun --bind-to none --mca orte_abort_on_non_zero_status 0 "$PRISM_BIN" "${args[@]}"
`

// ShellQuote returns s as one bash word that expands to exactly s: s in
// single quotes, each single quote of s closed, escaped and reopened:
//
//	it's  ->  'it'\''s'
//
// The empty string becomes a pair of single quotes.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
