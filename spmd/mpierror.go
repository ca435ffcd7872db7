package spmd

import (
	"errors"
	"fmt"
)

// MPIError is the typed error of every failed MPI call. The communicators of
// the MPI build run with MPI_ERRORS_RETURN, so a failing call comes back here
// instead of killing the job, and callers can tell an MPI failure (errors.As)
// from a prism one. It lives outside the build-tagged files so that code
// inspecting it compiles with and without MPI.
type MPIError struct {
	// Op names the MPI function (or collective) that failed, e.g. "MPI_Bcast".
	Op string
	// Code is the implementation-specific error code the call returned.
	Code int
	// Class is the standard error class of Code (MPI_Error_class), the
	// portable value to compare against (e.g. 13 is MPI_ERR_ARG in OpenMPI).
	Class int
	// Msg is the library's text for Code (MPI_Error_string).
	Msg string
}

// Error names the failed call first, since the code and class only mean
// something next to the library's text.
func (e *MPIError) Error() string {
	msg := e.Msg
	if msg == "" {
		msg = "unknown MPI error"
	}
	return fmt.Sprintf("spmd: %s: %s (code %d, class %d)", e.Op, msg, e.Code, e.Class)
}

// ErrNoMPI is returned by NewMPI, and by every method of the stub MPI type,
// when prism was built without MPI support. It is declared in both builds so
// callers can test for it with errors.Is without build tags of their own.
var ErrNoMPI = errors.New("spmd: prism was built without MPI support; " +
	"rebuild with `make build` with mpicc on PATH, " +
	"or `CGO_ENABLED=1 CC=mpicc go build -tags mpi`")
