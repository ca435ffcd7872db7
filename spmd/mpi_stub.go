//go:build !mpi

package spmd

import (
	"context"
	"os"
	"time"
)

// MPI is the communicator of the MPI build. In this build (no "mpi" tag)
// it exists only so that code choosing between communicators compiles
// either way: NewMPI always fails with ErrNoMPI, and the methods of a value
// obtained some other way fail the same way.
type MPI struct{}

// MPIAvailable reports whether this binary was built with MPI support; it
// lets callers fail early (or choose another Comm) before asking for MPI.
func MPIAvailable() bool { return false }

// NewMPI always fails with ErrNoMPI in this build, whose message says how to
// rebuild prism with MPI.
func NewMPI() (*MPI, error) { return nil, ErrNoMPI }

// MPILibraryVersion is "" in this build: there is no MPI library to ask.
func MPILibraryVersion() string { return "" }

// start is the reference point of Wtime in this build.
var mpiStubStart = time.Now()

// Wtime returns seconds since the process started, standing in for
// MPI_Wtime so timing code needs no build tags.
func (m *MPI) Wtime() float64 { return time.Since(mpiStubStart).Seconds() }

// Rank is 0: an MPI value cannot be created in this build.
func (m *MPI) Rank() int { return 0 }

// Size is 1: an MPI value cannot be created in this build.
func (m *MPI) Size() int { return 1 }

// LocalRank is 0: an MPI value cannot be created in this build.
func (m *MPI) LocalRank() int { return 0 }

// Host is the host name, as the MPI build would report it.
func (m *MPI) Host() string { h, _ := os.Hostname(); return h }

// Kind is "mpi" so the manifest would record what was asked for.
func (m *MPI) Kind() string { return "mpi" }

// Barrier fails with ErrNoMPI.
func (m *MPI) Barrier(ctx context.Context) error { return ErrNoMPI }

// AllreduceInt64 fails with ErrNoMPI.
func (m *MPI) AllreduceInt64(ctx context.Context, op Op, v []int64) error { return ErrNoMPI }

// AllreduceFloat64 fails with ErrNoMPI.
func (m *MPI) AllreduceFloat64(ctx context.Context, op Op, v []float64) error { return ErrNoMPI }

// ReduceInt64 fails with ErrNoMPI.
func (m *MPI) ReduceInt64(ctx context.Context, root int, op Op, v []int64) error { return ErrNoMPI }

// Gather fails with ErrNoMPI.
func (m *MPI) Gather(ctx context.Context, root int, b []byte) ([][]byte, error) {
	return nil, ErrNoMPI
}

// Bcast fails with ErrNoMPI.
func (m *MPI) Bcast(ctx context.Context, root int, b []byte) ([]byte, error) {
	return nil, ErrNoMPI
}

// Split fails with ErrNoMPI.
func (m *MPI) Split(ctx context.Context, color, key int) (Comm, error) { return nil, ErrNoMPI }

// Abort exits the process: without MPI there is no job beyond it.
func (m *MPI) Abort(code int) { os.Exit(code) }

// SetTimeout does nothing: there are no collectives to bound.
func (m *MPI) SetTimeout(d time.Duration) {}

// Timeout is the default bound of the MPI build's collectives.
func (m *MPI) Timeout() time.Duration { return defaultTimeout }

// Align fails with ErrNoMPI.
func (m *MPI) Align(ctx context.Context) error { return ErrNoMPI }

// Close does nothing: nothing was opened.
func (m *MPI) Close() error { return nil }

var _ Comm = (*MPI)(nil)
