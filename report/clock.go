package report

import (
	"bufio"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strings"
	"time"
)

// The op clock is what timed loops read between two ops (Ticks, TickNs).
// It is either the OS monotonic clock or the CPU's time-stamp counter.
//
// Why a TSC: a Go clock read is a vDSO call that the runtime makes on the
// thread's system stack, with bookkeeping in the M for profiling. On a
// kernel that flushes the TLB at every syscall (page-table isolation
// without PCID, common on VMs), every page a loop touches between two
// syscalls costs a page walk, and those pages are several: measured on the
// test VM, one clock read per op took a bare Go unlink loop from 0.974 to
// 0.930 of a C loop (16 interleaved runs; a C clock_gettime per op costs C
// nothing measurable there), while an RDTSC per op left it at 0.966. fio
// makes the same choice for the same reason: it times ops with the TSC
// (clocksource=cpu) when the CPU says the counter is invariant and its own
// cross-CPU check passes.
//
// The TSC is used only when it can be trusted: an invariant counter
// (constant_tsc and nonstop_tsc in /proc/cpuinfo), a calibration against
// the OS clock that gives a sane rate, and every CPU this process may run
// on reading the counter in step with the others (checkTSC). Ticks are
// turned into ns with the calibrated rate, so durations stay in OS-clock
// units; ClockDrift measures, at the end of a run, how far the two clocks
// parted over the whole run.

// ClockInfo is what the manifest records about the op clock.
type ClockInfo struct {
	// Source is "tsc" or "os".
	Source string `json:"source"`
	// TicksPerSec is the calibrated TSC rate (0 for "os").
	TicksPerSec float64 `json:"ticks_per_sec,omitempty"`
	// Reason says why this source was chosen, or why the TSC was not.
	Reason string `json:"reason"`
	// DriftPPM is how far TSC time ran from OS time over the run, in parts
	// per million (0 for "os").
	DriftPPM float64 `json:"drift_ppm"`
}

// ClockModes are the values of [plan] clock.
var ClockModes = []string{"auto", "tsc", "os"}

// opClk is set by InitClock (and UseOSClock) before any timed loop runs,
// and only read afterwards.
var opClk struct {
	tsc  bool
	mult uint64 // ns per tick, 32.32 fixed point
	t0   int64  // ticks at the end of calibration
	ns0  int64  // OS ns since epoch at t0
	info ClockInfo
}

// Ticks reads the op clock: TSC ticks, or ns since epoch on the OS clock.
// Only differences of two readings (TickNs) and TicksEpochNs mean anything.
func Ticks() int64 {
	if opClk.tsc {
		return rdtsc()
	}
	return int64(time.Since(epoch))
}

// TickNs converts a difference of two Ticks readings to ns. A negative
// difference (two CPUs whose counters disagree by more than the op took)
// gives 0, which a Recorder clamps to its lowest value.
func TickNs(d int64) int64 {
	if !opClk.tsc {
		return d
	}
	if d <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(d), opClk.mult)
	return int64(hi<<32 | lo>>32)
}

// TicksEpochNs converts a Ticks reading to ns since epoch on the OS clock,
// for the in-flight stamps the stall watchdog compares with time.Now.
func TicksEpochNs(t int64) int64 {
	if !opClk.tsc {
		return t
	}
	if t >= opClk.t0 {
		return opClk.ns0 + TickNs(t-opClk.t0)
	}
	return opClk.ns0 - TickNs(opClk.t0-t)
}

// UseOSClock puts the op clock on the OS clock, with the reason recorded:
// for ranks that follow another rank that could not use its TSC.
func UseOSClock(reason string) {
	opClk.tsc = false
	opClk.info = ClockInfo{Source: "os", Reason: reason}
}

// Clock returns what InitClock chose.
func Clock() ClockInfo { return opClk.info }

// ClockDrift returns the TSC's drift from the OS clock since InitClock, in
// parts per million (0 on the OS clock or before 100 ms have passed).
func ClockDrift() float64 {
	if !opClk.tsc {
		return 0
	}
	ns, t := clockPair()
	span := ns - opClk.ns0
	if span < int64(100*time.Millisecond) {
		return 0
	}
	return float64(TicksEpochNs(t)-ns) / float64(span) * 1e6
}

// tscTestSkew adds to the counter read on a CPU during checkTSC: how a test
// makes one CPU's TSC look out of step.
var tscTestSkew = func(cpu int) int64 { return 0 }

// ErrNoTSC is returned when the plan asks for the TSC and this machine's
// counter cannot be trusted.
var ErrNoTSC = errors.New("the TSC cannot be used as the op clock")

// InitClock chooses the op clock for mode ("auto", "tsc" or "os"). It must
// run before any timed loop starts (a later call calibrates afresh); it
// takes about calibrateFor plus the walk over the allowed CPUs. "auto"
// falls back to the OS clock with the reason recorded; "tsc" fails with
// ErrNoTSC instead.
func InitClock(mode string) (ClockInfo, error) {
	opClk.tsc = false
	switch mode {
	case "os":
		opClk.info = ClockInfo{Source: "os", Reason: "plan asks for the OS clock"}
		return opClk.info, nil
	case "auto", "tsc":
	default:
		return ClockInfo{}, fmt.Errorf("unknown clock %q (allowed: %s)", mode, strings.Join(ClockModes, ", "))
	}
	var hz float64
	why := tscUsable()
	if why == "" {
		var mult uint64
		mult, hz, why = calibrate()
		if why == "" {
			opClk.mult, opClk.tsc = mult, true
			opClk.ns0, opClk.t0 = clockPair()
			if why = checkTSC(); why != "" {
				opClk.tsc = false
			}
		}
	}
	if why != "" {
		opClk.info = ClockInfo{Source: "os", Reason: "TSC not used: " + why}
		if mode == "tsc" {
			return ClockInfo{}, fmt.Errorf("%w: %s", ErrNoTSC, why)
		}
		return opClk.info, nil
	}
	opClk.info = ClockInfo{Source: "tsc", TicksPerSec: hz, Reason: "invariant TSC, calibrated against the OS clock and in step on every allowed CPU"}
	return opClk.info, nil
}

// tscSkewMax is how far apart the TSCs of the allowed CPUs may be for the
// TSC to be used: an op that migrates between two CPUs mid-flight is off by
// at most this.
const tscSkewMax = 5 * time.Microsecond

// calibrateFor is how long InitClock compares the TSC with the OS clock:
// the rate it gives is good to about 1 ppm (two clock pairs, each read
// within ~100 ns).
const calibrateFor = 20 * time.Millisecond

// calibrate measures the TSC rate against the OS clock.
func calibrate() (mult uint64, hz float64, why string) {
	n0, t0 := clockPair()
	time.Sleep(calibrateFor)
	n1, t1 := clockPair()
	if t1 <= t0 || n1 <= n0 {
		return 0, 0, "the TSC did not advance during calibration"
	}
	hz = float64(t1-t0) / (float64(n1-n0) / 1e9)
	if hz < 1e8 || hz > 1e10 {
		return 0, 0, fmt.Sprintf("calibrated rate %.0f Hz is outside 0.1-10 GHz", hz)
	}
	return uint64(float64(n1-n0) / float64(t1-t0) * (1 << 32)), hz, ""
}

// clockPair reads the OS clock (ns since epoch) and the TSC as close
// together as it can: the best of a few tries brackets the TSC read between
// two OS reads and keeps the narrowest bracket.
func clockPair() (ns, ticks int64) {
	best := int64(1 << 62)
	for range 7 {
		a := int64(time.Since(epoch))
		t := rdtsc()
		b := int64(time.Since(epoch))
		if b-a < best {
			best, ns, ticks = b-a, a+(b-a)/2, t
		}
	}
	return ns, ticks
}

// cpuFlags returns the flags line of the first CPU in /proc/cpuinfo.
func cpuFlags() (map[string]bool, error) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "flags" {
			flags := map[string]bool{}
			for _, x := range strings.Fields(v) {
				flags[x] = true
			}
			return flags, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("no flags line")
}
