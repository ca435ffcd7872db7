//go:build !linux

package spmd

import (
	"errors"
	"os/exec"
)

// Affinity is not available here.
func Affinity() ([]int, error) { return nil, errors.New("spmd: CPU affinity is Linux-only") }

// startBound starts cmd unbound: there is no affinity to inherit here.
func startBound(cmd *exec.Cmd, cpus []int) error { return cmd.Start() }

// BindSelf cannot bind here.
func BindSelf(cpus []int, env []string) error { return errors.New("spmd: CPU affinity is Linux-only") }
