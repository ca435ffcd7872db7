package report

import (
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

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

// checkTSC moves a thread over every CPU the process may run on, twice,
// and compares the TSC there with the OS clock, as fio's clock test does
// for its clocksource=cpu. Counters that are not synchronised across
// sockets or vCPUs would make an op that migrates mid-flight come out too
// long or negative. The walk runs on a goroutine of its own, locked to its
// thread: if the thread's affinity could not be restored, the thread exits
// with the goroutine instead of going back to the runtime pinned to one CPU.
func checkTSC() string {
	res := make(chan string)
	go func() {
		runtime.LockOSThread()
		why, restored := walkCPUs()
		if restored {
			runtime.UnlockOSThread()
		}
		res <- why
	}()
	return <-res
}

// walkCPUs does checkTSC's walk on the calling (locked) thread and reports
// whether it put the thread's affinity back. Every CPU's reading is
// compared with the line through two readings on the first CPU, one before
// and one after the walk, so a walk that takes long on a busy node (each
// move may wait for a time slice) adds no calibration error; the spread of
// the offsets, the first CPU's (0) included, must stay within tscSkewMax.
func walkCPUs() (why string, restored bool) {
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		return "cannot read the CPU affinity: " + err.Error(), true
	}
	var cpus []int
	for c := 0; c < len(orig)*64; c++ {
		if orig.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	type reading struct {
		cpu       int
		ns, ticks int64
	}
	var rs []reading
	visit := func(c int) error {
		var one unix.CPUSet
		one.Set(c)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			return fmt.Errorf("cannot move to CPU %d to check its TSC: %v", c, err)
		}
		ns, t := clockPair()
		rs = append(rs, reading{c, ns, t + tscTestSkew(c)})
		return nil
	}
	var err error
	for pass := 0; pass < 2 && err == nil; pass++ {
		for _, c := range cpus {
			if err = visit(c); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = visit(cpus[0])
	}
	if rerr := unix.SchedSetaffinity(0, &orig); rerr != nil {
		return "cannot restore the CPU affinity after checking the TSC: " + rerr.Error(), false
	}
	if err != nil {
		return err.Error(), true
	}
	first, last := rs[0], rs[len(rs)-1]
	if last.ns <= first.ns || last.ticks <= first.ticks {
		return "the TSC did not advance while it was checked", true
	}
	nsPerTick := float64(last.ns-first.ns) / float64(last.ticks-first.ticks)
	lo, hi := 0.0, 0.0
	loCPU, hiCPU := cpus[0], cpus[0]
	for _, r := range rs {
		want := float64(first.ticks) + float64(r.ns-first.ns)/nsPerTick
		off := (float64(r.ticks) - want) * nsPerTick
		if off < lo {
			lo, loCPU = off, r.cpu
		}
		if off > hi {
			hi, hiCPU = off, r.cpu
		}
	}
	if spread := time.Duration(hi - lo); spread > tscSkewMax {
		return fmt.Sprintf("the TSCs of CPU %d and CPU %d are %v apart (more than %v)", hiCPU, loCPU, spread, tscSkewMax), true
	}
	return "", true
}
