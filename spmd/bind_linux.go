package spmd

import (
	"os/exec"
	"runtime"

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
