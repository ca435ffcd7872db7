package phases

import (
	"context"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/prism-hpc/prism/report"
)

// The yielder fires at most once per yieldEvery and again as soon as a
// full period has passed, so a loop never runs 10 ms without a yield.
func TestYielderPeriod(t *testing.T) {
	var y yielder
	if !y.due(0) {
		t.Fatal("a fresh yielder is due at once")
	}
	for _, now := range []int64{1, yieldEvery / 2, yieldEvery - 1} {
		if y.due(now) {
			t.Fatalf("due at %d ns, %d ns after the last yield", now, now)
		}
	}
	if !y.due(yieldEvery) {
		t.Fatalf("not due one period (%d ns) after the last yield", yieldEvery)
	}
	// A loop that stalled for a long op yields right after it, then waits
	// a whole period again.
	if !y.due(10 * yieldEvery) {
		t.Fatal("not due after a long gap")
	}
	if y.due(11*yieldEvery - 1) {
		t.Fatal("due before a period passed since the last yield")
	}
	if yieldEvery >= int64(10*time.Millisecond) {
		t.Fatalf("yieldEvery %s is not below the Go runtime's 10 ms preemption slice", time.Duration(yieldEvery))
	}
}

// The time spent yielding is charged to no op: with yields made to take 2
// ms each, the laps of a loop add up to its wall time less the yields.
func TestOpClockYieldIsNoOpsTime(t *testing.T) {
	const pause = 2 * time.Millisecond
	saved := yield
	yield = func() { time.Sleep(pause) }
	defer func() { yield = saved }()

	clk := newOpClock(context.Background())
	start := time.Now()
	var sum int64
	yields := 0
	// Loop until three yields happened (a loaded machine only makes that
	// take longer); the bound only stops a broken yielder from hanging.
	for yields < 3 {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("only %d yields in 30 s with a period of %s", yields, time.Duration(yieldEvery))
		}
		before := clk.y.next
		sum += clk.lap()
		if clk.y.next != before {
			yields++
		}
	}
	wall := time.Duration(report.TickNs(clk.last - clk.base))
	if max := wall - time.Duration(yields)*pause; time.Duration(sum) > max {
		t.Fatalf("laps sum to %s over a wall of %s with %d yields of %s: the yields were charged to ops",
			time.Duration(sum), wall, yields, pause)
	}
}

// A timed loop polls its context at the yields: a context cancelled before
// the loop stops it before its first op, one cancelled during the loop is
// seen at the next yield, and a live one never stops it.
func TestOpClockSeesCancelAtYield(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done, stop := context.WithCancel(context.Background())
	stop()
	if clk := newOpClock(done); !clk.stop {
		t.Fatal("a loop started with a cancelled context would run its first op")
	}

	clk := newOpClock(ctx)
	yields := 0
	for start := time.Now(); yields < 2; {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("only %d yields in 30 s", yields)
		}
		before := clk.y.next
		clk.lap()
		if clk.y.next != before {
			yields++
		}
		if clk.stop {
			t.Fatal("the loop stopped with its context live")
		}
	}
	cancel()
	laps := 0
	for start := time.Now(); !clk.stop; laps++ {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("cancelled context not seen after %d laps in 30 s (yield period %s)", laps, time.Duration(yieldEvery))
		}
		clk.lap()
	}
}

// settle keeps the CPU for settleFor: it does not return early, and it
// spins rather than sleeps (a sleep would park the runtime's sysmon again,
// which is what settle is there to get past), so the thread running it is
// on the CPU for most of that time. A loaded machine can take the CPU away
// for a while, so a short CPU time is tried again before it counts.
func TestSettleSpins(t *testing.T) {
	runtime.LockOSThread() // RUSAGE_THREAD is this thread's CPU time
	defer runtime.UnlockOSThread()
	cpu := func() time.Duration {
		var ru unix.Rusage
		unix.Getrusage(unix.RUSAGE_THREAD, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var used, wall time.Duration
	for try := 0; try < 3; try++ {
		c0, start := cpu(), time.Now()
		settle()
		wall, used = time.Since(start), cpu()-c0
		if wall < settleFor {
			t.Fatalf("settle returned after %s, want at least %s", wall, settleFor)
		}
		if used >= settleFor/4 {
			return
		}
	}
	t.Fatalf("settle used %s of CPU over %s (3 tries): it sleeps instead of spinning", used, wall)
}

// TestQuiesceHeapLeavesNothingToScavenge drops 64 MiB of garbage, as a
// Setup that rebuilds its paths does, and checks that quiesceHeap leaves
// no free heap memory that the background scavenger could return to the OS
// during a timed Run.
func TestQuiesceHeapLeavesNothingToScavenge(t *testing.T) {
	const garbage = 64 << 20
	free := func() uint64 {
		s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	keep := make([][]byte, 0, 1024)
	for i := 0; i < 1024; i++ {
		b := make([]byte, garbage/1024)
		b[0] = 1
		keep = append(keep, b)
	}
	runtime.KeepAlive(keep)
	keep = nil
	runtime.GC() // the garbage is free now, but still mapped
	if before := free(); before < garbage/2 {
		t.Skipf("only %d B free-but-mapped after dropping %d B: the runtime returned it already", before, garbage)
	}
	quiesceHeap()
	if after := free(); after > 4<<20 {
		t.Fatalf("%d B of free heap still mapped after quiesceHeap: the scavenger would return it during the Run", after)
	}
}
