package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/prism-hpc/prism/spmd"
)

// version is set by the Makefile (-ldflags -X main.version=…).
var version = "0.1.0-dev"

// fullVersion adds the VCS revision the binary was built from, if known.
func fullVersion() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += "+" + s.Value[:12]
			}
		}
	}
	return v
}

func cmdVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version")
	if _, err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	mpi := "without MPI (rendezvous and local launcher only)"
	if spmd.MPIAvailable() {
		mpi = "with MPI: " + spmd.MPILibraryVersion()
	}
	_, err := fmt.Fprintf(stdout, "prism %s %s/%s %s, built %s\n", fullVersion(), runtime.GOOS, runtime.GOARCH, runtime.Version(), mpi)
	return err
}
