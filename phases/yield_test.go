package phases

import (
	"context"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/prism-hpc/prism/report"
)

// The Yielder fires at most once per YieldEvery and again as soon as a
// full period has passed, so a loop never runs 10 ms without a yield.
func TestYielderPeriod(t *testing.T) {
	var y Yielder
	if !y.Due(0) {
		t.Fatal("a fresh Yielder is due at once")
	}
	for _, now := range []int64{1, YieldEvery / 2, YieldEvery - 1} {
		if y.Due(now) {
			t.Fatalf("due at %d ns, %d ns after the last yield", now, now)
		}
	}
	if !y.Due(YieldEvery) {
		t.Fatalf("not due one period (%d ns) after the last yield", YieldEvery)
	}
	// A loop that stalled for a long op yields right after it, then waits
	// a whole period again.
	if !y.Due(10 * YieldEvery) {
		t.Fatal("not due after a long gap")
	}
	if y.Due(11*YieldEvery - 1) {
		t.Fatal("due before a period passed since the last yield")
	}
	if YieldEvery >= int64(10*time.Millisecond) {
		t.Fatalf("YieldEvery %s is not below the Go runtime's 10 ms preemption slice", time.Duration(YieldEvery))
	}
}

// The time spent yielding is charged to no op: with yields made to take 2
// ms each, the laps of a loop add up to its wall time less the yields.
func TestOpClockYieldIsNoOpsTime(t *testing.T) {
	const pause = 2 * time.Millisecond
	saved := yieldFn
	yieldFn = func() { time.Sleep(pause) }
	defer func() { yieldFn = saved }()

	clk := NewOpClock(context.Background())
	start := time.Now()
	var sum int64
	yields := 0
	// Loop until three yields happened (a loaded machine only makes that
	// take longer); the bound only stops a broken Yielder from hanging.
	for yields < 3 {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("only %d yields in 30 s with a period of %s", yields, time.Duration(YieldEvery))
		}
		before := clk.y.next
		sum += clk.Lap()
		if clk.y.next != before {
			yields++
		}
	}
	wall := time.Duration(report.TickNs(clk.Last() - clk.base))
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
	if clk := NewOpClock(done); !clk.Stopped() {
		t.Fatal("a loop started with a cancelled context would run its first op")
	}

	clk := NewOpClock(ctx)
	yields := 0
	for start := time.Now(); yields < 2; {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("only %d yields in 30 s", yields)
		}
		before := clk.y.next
		clk.Lap()
		if clk.y.next != before {
			yields++
		}
		if clk.Stopped() {
			t.Fatal("the loop stopped with its context live")
		}
	}
	cancel()
	laps := 0
	for start := time.Now(); !clk.Stopped(); laps++ {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("cancelled context not seen after %d laps in 30 s (yield period %s)", laps, time.Duration(YieldEvery))
		}
		clk.Lap()
	}
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

// A Pacer looks at its context and the clock only every 64th op: a
// cancelled loop stops at the next 64th op with ctx's error, and a loop
// that has run a full YieldEvery yields there, never in between.
func TestPacer(t *testing.T) {
	saved := yieldFn
	yields := 0
	yieldFn = func() { yields++ }
	defer func() { yieldFn = saved }()

	p := NewPacer()
	time.Sleep(time.Duration(2 * YieldEvery))
	for i := range 63 {
		if err := p.Tick(context.Background(), i); err != nil || yields != 0 {
			t.Fatalf("op %d: %v, %d yields: want neither before the 64th op", i, err, yields)
		}
	}
	if err := p.Tick(context.Background(), 63); err != nil || yields != 1 {
		t.Fatalf("op 63, %v after the start: %v, %d yields, want one yield", 2*time.Duration(YieldEvery), err, yields)
	}
	if time.Since(p.Started()) < 2*time.Duration(YieldEvery) {
		t.Errorf("Started %v is not the loop's start", p.Started())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 64; i < 127; i++ {
		if err := p.Tick(ctx, i); err != nil {
			t.Fatalf("op %d: %v before the next 64th op", i, err)
		}
	}
	if err := p.Tick(ctx, 127); err != context.Canceled {
		t.Fatalf("op 127 of a cancelled loop: %v, want context.Canceled", err)
	}
}
