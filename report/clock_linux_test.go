package report

import (
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A CPU whose counter is out of step with the others keeps the TSC out:
// auto falls back to the OS clock naming the CPU, and clock = "tsc" fails.
// The skew is injected, since no machine here has one.
func TestSkewedCPUKeepsTSCOut(t *testing.T) {
	keepClock(t)
	// Stay on one thread, so that the affinity checked at the end is the
	// one checkTSC changed and restored.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if info, _ := InitClock("auto"); info.Source != "tsc" {
		t.Skipf("no usable TSC here: %s", info.Reason)
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil || set.Count() < 2 {
		t.Skipf("needs 2 allowed CPUs (have %d, %v)", set.Count(), err)
	}
	last := -1
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			last = c
		}
	}
	tscTestSkew = func(cpu int) int64 {
		if cpu == last {
			return 1_000_000 // ~0.3-1 ms at 1-3 GHz
		}
		return 0
	}
	info, err := InitClock("auto")
	if err != nil || info.Source != "os" || !strings.Contains(info.Reason, "CPU "+strconv.Itoa(last)) {
		t.Fatalf("auto with CPU %d skewed: %+v, %v", last, info, err)
	}
	if Ticks() > int64(time.Since(epoch)) {
		t.Fatal("the fallback still reads the TSC")
	}
	if _, err := InitClock("tsc"); !errors.Is(err, ErrNoTSC) {
		t.Fatalf("clock = tsc with a skewed CPU: %v", err)
	}
	// The check put the thread back where it was allowed to run.
	var after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &after); err != nil || after != set {
		t.Fatalf("affinity after the check %v, before %v (%v)", after, set, err)
	}
}
