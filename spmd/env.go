package spmd

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Identity is a rank's place in the job as the environment tells it.
type Identity struct {
	Rank, Size, LocalRank int
	// Source names the variable the rank came from (PRISM_RANK,
	// OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID) or "none".
	Source string
}

// rankSources lists the launchers' variables in order of trust: prism's own
// launcher, then MPI launchers, then Slurm (which may start a non-MPI binary).
var rankSources = []struct{ rank, size, local string }{
	{"PRISM_RANK", "PRISM_SIZE", "PRISM_LOCAL_RANK"},
	{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
	{"PMIX_RANK", "", ""},
	{"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
	{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
}

// Discover reads the rank identity from the environment (getenv is
// os.Getenv in production). A variable that is set but not a sane number is
// an error naming it.
func Discover(getenv func(string) string) (Identity, error) {
	for _, s := range rankSources {
		rs := getenv(s.rank)
		if rs == "" {
			continue
		}
		id := Identity{Source: s.rank, Size: 1}
		var err error
		if id.Rank, err = envInt(s.rank, rs, 0); err != nil {
			return Identity{}, err
		}
		if s.size != "" && getenv(s.size) != "" {
			if id.Size, err = envInt(s.size, getenv(s.size), 1); err != nil {
				return Identity{}, err
			}
		} else if s.rank == "PMIX_RANK" {
			// PMIx exports no size variable; the MPI library supplies it.
			id.Size = 0
		}
		if s.local != "" && getenv(s.local) != "" {
			if id.LocalRank, err = envInt(s.local, getenv(s.local), 0); err != nil {
				return Identity{}, err
			}
		}
		if id.Size > 0 && id.Rank >= id.Size {
			return Identity{}, fmt.Errorf("spmd: %s=%d but %s=%d: rank out of range", s.rank, id.Rank, s.size, id.Size)
		}
		return id, nil
	}
	return Identity{Size: 1, Source: "none"}, nil
}

func envInt(name, v string, min int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > 1<<24 {
		return 0, fmt.Errorf("spmd: environment variable %s=%q is not a valid rank number", name, v)
	}
	return n, nil
}

// launchedByMPI reports whether an MPI launcher (mpirun, srun --mpi=pmix)
// started this process, in which case MPI must be initialised.
func launchedByMPI(getenv func(string) string) bool {
	for _, v := range []string{"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "HYDRA_CONTROL_FD"} {
		if getenv(v) != "" {
			return true
		}
	}
	return false
}

// OpenOptions say how to reach the other ranks.
type OpenOptions struct {
	// Rendezvous is the plan's shared directory for jobs without MPI;
	// PRISM_RENDEZVOUS wins.
	Rendezvous string
	// Timeout bounds every wait of a collective, under MPI as in the
	// rendezvous (the plan's coordination_timeout; 0 means 3 minutes).
	Timeout time.Duration
	Getenv  func(string) string
}

// Open returns the world communicator this process belongs to:
// rendezvous under prism's own launcher (or when a shared directory is
// configured for a multi-task job), MPI under an MPI launcher, else Single.
// A rendezvous rank joins with its job token (JobToken), so that jobs
// sharing the plan's directory are refused instead of merged.
// It refuses the silent failure mode of SPMD tools: a multi-task launch in
// which every process believes it is alone.
func Open(ctx context.Context, o OpenOptions) (Comm, Identity, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	id, err := Discover(getenv)
	if err != nil {
		return nil, id, err
	}
	token, source := JobToken(getenv)
	rdv := func() (Comm, Identity, error) {
		dir, err := rendezvousDir(getenv, o.Rendezvous, token)
		if err != nil {
			return nil, id, err
		}
		c, err := NewRendezvous(ctx, RendezvousConfig{Dir: dir, Rank: id.Rank, Size: id.Size, Timeout: o.Timeout,
			Token: token, TokenSource: source})
		return c, id, err
	}
	noDir := getenv(EnvRendezvous) == "" && o.Rendezvous == ""
	switch {
	case getenv("PRISM_RANK") != "":
		if noDir {
			return nil, id, fmt.Errorf("spmd: PRISM_RANK is set but PRISM_RENDEZVOUS is not: start ranks with `prism run -n N`")
		}
		return rdv()
	case launchedByMPI(getenv):
		if !MPIAvailable() {
			if id.Size > 1 || id.Size == 0 {
				return nil, id, fmt.Errorf("spmd: started by an MPI launcher (%s) as one of several ranks, but this prism was built without MPI: %w", id.Source, ErrNoMPI)
			}
			return NewSingle(), id, nil
		}
		m, err := NewMPI()
		if err != nil {
			return nil, id, err
		}
		m.SetTimeout(o.Timeout)
		if id.Size > 0 && m.Size() != id.Size {
			m.Close()
			return nil, id, fmt.Errorf("spmd: the launcher says %s=%d but MPI sees %d ranks: the MPI library prism was built with does not match the launcher's (e.g. MPICH's mpirun starting an OpenMPI build); every process would run alone", id.Source, id.Size, m.Size())
		}
		return m, id, nil
	case id.Source == "SLURM_PROCID" && id.Size > 1:
		if noDir {
			return nil, id, fmt.Errorf("spmd: srun started %d tasks without MPI (no PMIx/PMI in the environment): use `srun --mpi=pmix`, or set [plan] rendezvous (or PRISM_RENDEZVOUS) to a directory every node shares", id.Size)
		}
		return rdv()
	}
	return NewSingle(), id, nil
}

// rendezvousDir is the rendezvous directory of this rank: PRISM_RENDEZVOUS,
// which a launcher sets for one job, else the plan's, with %j replaced by
// the job token. The plan's directory is shared by every job that runs the
// plan, so a rank without a token, whose job cannot be told from another,
// is refused there.
func rendezvousDir(getenv func(string) string, plan, token string) (string, error) {
	dir := getenv(EnvRendezvous)
	if dir == "" {
		dir = plan
		if token == "" && !strings.Contains(dir, "%j") {
			return "", fmt.Errorf("spmd: the plan's rendezvous directory %s is shared by every job that runs this plan, "+
				"and this rank has no job token to tell its job's ranks from another job's: set %s to a value unique "+
				"to this job and the same on every rank, or PRISM_RENDEZVOUS to a directory of this job's own",
				dir, EnvRendezvousToken)
		}
	}
	return expandJobDir(dir, token)
}
