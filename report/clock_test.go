package report

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// keepClock restores the op clock a test changed.
func keepClock(t *testing.T) {
	saved := opClk
	savedSkew := tscTestSkew
	t.Cleanup(func() { opClk, tscTestSkew = saved, savedSkew })
}

// The fixed-point conversion is exact to a ns for a second and does not
// overflow for a day of ticks; a negative difference comes out as 0 and
// epoch stamps work on both sides of the calibration point.
func TestTickNsConversion(t *testing.T) {
	keepClock(t)
	const hz = 2_500_000_000
	opClk.tsc = true
	mult := 1e9 / float64(hz) * (1 << 32)
	opClk.mult = uint64(mult)
	opClk.t0, opClk.ns0 = 1_000_000, 5_000
	cases := []struct{ ticks, ns int64 }{
		{hz, 1e9},
		{hz / 1000, 1e6},
		{hz * 86400, 86400e9},
		{25, 10},
	}
	for _, c := range cases {
		got := TickNs(c.ticks)
		if d := got - c.ns; d < -1-c.ns/1e9 || d > 1+c.ns/1e9 {
			t.Errorf("TickNs(%d) = %d, want %d", c.ticks, got, c.ns)
		}
	}
	if got := TickNs(-5); got != 0 {
		t.Errorf("TickNs(-5) = %d, want 0", got)
	}
	if got := TicksEpochNs(opClk.t0 + hz); got < 5_000+1e9-1 || got > 5_000+1e9+1 {
		t.Errorf("a second after t0 is %d ns since epoch, want %d", got, int64(5_000+1e9))
	}
	if got := TicksEpochNs(opClk.t0 - hz/1000); got < 5_000-1e6-1 || got > 5_000-1e6+1 {
		t.Errorf("a ms before t0 is %d ns since epoch, want %d", got, int64(5_000-1e6))
	}
}

// On the OS clock, ticks are ns since epoch.
func TestInitClockOS(t *testing.T) {
	keepClock(t)
	info, err := InitClock("os")
	if err != nil || info.Source != "os" || !strings.Contains(info.Reason, "plan") {
		t.Fatalf("InitClock(os) = %+v, %v", info, err)
	}
	a := Ticks()
	b := int64(time.Since(epoch))
	if a > b || b-a > int64(time.Second) || TickNs(b-a) != b-a || TicksEpochNs(a) != a {
		t.Fatalf("OS ticks %d vs ns since epoch %d", a, b)
	}
	if _, err := InitClock("rdtsc"); err == nil || !strings.Contains(err.Error(), "auto, tsc, os") {
		t.Fatalf("unknown mode: %v", err)
	}
}

// Where the TSC is chosen, durations read with it agree with the OS clock:
// this is a check of the calibration, not of any speed.
func TestTSCAgreesWithOSClock(t *testing.T) {
	keepClock(t)
	info, err := InitClock("auto")
	if err != nil {
		t.Fatal(err)
	}
	if info.Source != "tsc" {
		if _, err := InitClock("tsc"); !errors.Is(err, ErrNoTSC) {
			t.Fatalf("auto chose %q (%s) but clock = tsc gave %v", info.Source, info.Reason, err)
		}
		t.Skipf("no usable TSC here: %s", info.Reason)
	}
	if info.TicksPerSec < 1e8 || info.Reason == "" {
		t.Fatalf("info %+v", info)
	}
	// The TSC interval lies inside the OS one, which is longer by two clock
	// reads, give or take the calibration's error (~1 ppm). A preemption
	// between two reads can only lengthen the OS side, so the closest of
	// three tries is the one judged.
	gap := time.Hour
	for range 3 {
		w0, t0 := time.Now(), Ticks()
		time.Sleep(50 * time.Millisecond)
		t1, w1 := Ticks(), time.Now()
		os := w1.Sub(w0)
		tsc := time.Duration(TickNs(t1 - t0))
		if tsc > os+os/50_000+time.Microsecond {
			t.Fatalf("50 ms sleep: TSC says %v, longer than the OS clock's %v", tsc, os)
		}
		gap = min(gap, os-tsc)
	}
	if gap > 200*time.Microsecond {
		t.Fatalf("50 ms sleeps: the TSC came out at least %v short of the OS clock", gap)
	}
	off := time.Hour
	for range 3 {
		e := time.Duration(TicksEpochNs(Ticks()) - int64(time.Since(epoch)))
		off = min(off, max(e, -e))
	}
	if off > tscSkewMax {
		t.Fatalf("TSC epoch stamps are %v off the OS clock", off)
	}
}
