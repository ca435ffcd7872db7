package report

import (
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// tscSkewMax is how far any allowed CPU's TSC may sit from the OS clock
// (after calibration) for the TSC to be used: an op that migrates between
// two CPUs mid-flight is off by at most this.
const tscSkewMax = 5 * time.Microsecond

// tscUsable reports why this machine's TSC cannot be the op clock ("" if
// it may be, pending calibration).
func tscUsable() string {
	if runtime.GOARCH != "amd64" {
		return "not an x86-64 CPU"
	}
	flags, err := cpuFlags()
	if err != nil {
		return "cannot read /proc/cpuinfo: " + err.Error()
	}
	for _, f := range []string{"constant_tsc", "nonstop_tsc"} {
		if !flags[f] {
			return "the CPU does not report " + f + " (no invariant TSC)"
		}
	}
	return ""
}

// checkTSC moves this thread over every CPU the process may run on, twice,
// and compares the TSC there with the OS clock, as fio's clock test does
// for its clocksource=cpu. Counters that are not synchronised across
// sockets or vCPUs would make an op that migrates mid-flight come out too
// long or negative.
func checkTSC() string {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		return "cannot read the CPU affinity: " + err.Error()
	}
	defer unix.SchedSetaffinity(0, &orig)
	var cpus []int
	for c := 0; c < len(orig)*64; c++ {
		if orig.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	worst, worstCPU := int64(0), -1
	for range 2 {
		for _, c := range cpus {
			var one unix.CPUSet
			one.Set(c)
			if err := unix.SchedSetaffinity(0, &one); err != nil {
				return fmt.Sprintf("cannot move to CPU %d to check its TSC: %v", c, err)
			}
			ns, t := clockPair()
			off := TicksEpochNs(t+tscTestSkew(c)) - ns
			if off < 0 {
				off = -off
			}
			if off > worst {
				worst, worstCPU = off, c
			}
		}
	}
	if worst > int64(tscSkewMax) {
		return fmt.Sprintf("CPU %d's TSC is %v away from the OS clock (more than %v)", worstCPU, time.Duration(worst), tscSkewMax)
	}
	return ""
}
