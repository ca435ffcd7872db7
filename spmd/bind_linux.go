package spmd

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxCPUs is the size of unix.CPUSet: the CPU numbers it can hold.
const maxCPUs = len(unix.CPUSet{}) * 64

// Affinity returns the CPUs this process may run on (its scheduler
// affinity), ascending.
func Affinity() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var cpus []int
	for c := 0; c < maxCPUs; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// startBound starts cmd bound to cpus. os/exec has no affinity attribute,
// but a child inherits the affinity of the thread that forks it: the
// goroutine pins itself to its thread, narrows that thread's affinity for
// the fork, and puts it back before the thread runs anything else.
func startBound(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	var orig, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		runtime.UnlockOSThread()
		return cmd.Start()
	}
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		return cmd.Start() // e.g. a cpuset changed under us: run unbound
	}
	err := cmd.Start()
	if unix.SchedSetaffinity(0, &orig) == nil {
		runtime.UnlockOSThread()
	} // else the narrowed thread stays wired to this goroutine, out of the pool
	return err
}

// BindSelf binds this whole process to cpus and starts it again: it
// narrows the calling thread's affinity and executes the binary anew with
// env, and a process image inherits the affinity of the thread that
// executed it, so every thread of the new image runs on cpus (binding the
// running process would reach only the threads made after the call). It
// returns only on failure, with the thread's affinity put back.
func BindSelf(cpus []int, env []string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("spmd: bind: %w", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var orig, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		return fmt.Errorf("spmd: bind: %w", err)
	}
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("spmd: bind to %s: %w", CPUList(cpus), err)
	}
	err = syscall.Exec(exe, os.Args, env)
	unix.SchedSetaffinity(0, &orig)
	return fmt.Errorf("spmd: bind: exec %s: %w", exe, err)
}
