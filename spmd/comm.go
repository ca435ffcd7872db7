package spmd

import (
	"context"
	"errors"
	"fmt"
)

// Op is a reduction operator.
type Op int

// Reduction operators understood by every Comm.
const (
	Sum Op = iota
	Min
	Max
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Min:
		return "min"
	case Max:
		return "max"
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// Undefined is the color passed to Split by ranks that want no part in the
// new communicator; they get a nil Comm back.
const Undefined = -1

// Comm is a communicator: a fixed, ordered group of ranks that run
// collectives together. Every collective must be called by every rank of the
// communicator, in the same order; a Comm is not safe for concurrent
// collectives (concurrent groups use communicators of their own from Split).
//
// Reductions work in place: on return v holds the result (on every rank for
// Allreduce, on root for Reduce; other ranks' v is unspecified for Reduce).
type Comm interface {
	Rank() int
	Size() int
	// LocalRank is the rank among the ranks on the same host.
	LocalRank() int
	Host() string
	// Kind is "mpi", "rendezvous" or "single", as the manifest records it.
	Kind() string

	Barrier(ctx context.Context) error
	AllreduceInt64(ctx context.Context, op Op, v []int64) error
	AllreduceFloat64(ctx context.Context, op Op, v []float64) error
	// ReduceInt64 reduces v element-wise onto root (histogram count arrays).
	ReduceInt64(ctx context.Context, root int, op Op, v []int64) error
	// Gather returns every rank's b, indexed by rank, on root; nil elsewhere.
	Gather(ctx context.Context, root int, b []byte) ([][]byte, error)
	// Bcast returns root's b on every rank.
	Bcast(ctx context.Context, root int, b []byte) ([]byte, error)
	// Split partitions the ranks by color, ordered by key then old rank.
	// Ranks passing Undefined get a nil Comm. Unlike MPI_Comm_split it takes a
	// context, because the rendezvous implementation must exchange colors
	// under a timeout.
	Split(ctx context.Context, color, key int) (Comm, error)
	// Abort brings every rank of the job down (not only this communicator's)
	// with the given exit code. It does not return.
	Abort(code int)
	// Close releases the communicator (MPI_Finalize for the world Comm).
	Close() error
}

// Aligner is implemented by communicators whose Barrier may release the
// ranks noticeably apart (the rendezvous: up to its 2 ms poll period; MPI:
// up to the 1 ms sleep of its bounded wait). Align is a Barrier that
// releases them together, for the start of a timed step, where any skew
// adds to the wall time. Single needs no such thing.
type Aligner interface {
	Align(ctx context.Context) error
}

var (
	_ Aligner = (*Rendezvous)(nil)
	_ Aligner = (*MPI)(nil)
)

// Align is c's Align when it has one, else its Barrier.
func Align(ctx context.Context, c Comm) error {
	if a, ok := c.(Aligner); ok {
		return a.Align(ctx)
	}
	return c.Barrier(ctx)
}

// ErrAborted is returned by collectives when another rank aborted the job.
var ErrAborted = errors.New("spmd: job aborted by another rank")

// ErrTimeout is returned when a collective waited longer than the
// coordination timeout (under MPI inside a *TimeoutError).
var ErrTimeout = errors.New("spmd: coordination timeout")

// RankError says which rank a failure concerns (a peer that died, a peer
// that aborted, a collective that timed out waiting for it).
type RankError struct {
	Rank int
	Op   string
	Err  error
}

func (e *RankError) Error() string {
	return fmt.Sprintf("spmd: %s: rank %d: %v", e.Op, e.Rank, e.Err)
}

func (e *RankError) Unwrap() error { return e.Err }

// fold combines src into dst element-wise; shared by implementations that
// reduce in Go (rendezvous, tree reductions in benchmarks).
func fold[T int64 | float64](op Op, dst, src []T) {
	switch op {
	case Sum:
		for i, x := range src {
			dst[i] += x
		}
	case Min:
		for i, x := range src {
			dst[i] = min(dst[i], x)
		}
	case Max:
		for i, x := range src {
			dst[i] = max(dst[i], x)
		}
	}
}
