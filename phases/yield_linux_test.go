package phases

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// settle keeps the CPU for settleFor: it does not return early, and it
// spins rather than sleeps (a sleep would park the runtime's sysmon again,
// which is what settle is there to get past), so the thread running it is
// on the CPU for most of that time. A loaded machine takes the CPU away
// from any thread, so settle's CPU time is held against a plain spin of the
// same length run just before it: a sleeping settle gets a small fraction
// of what the spin got, a spinning one about the same.
func TestSettleSpins(t *testing.T) {
	runtime.LockOSThread() // RUSAGE_THREAD is this thread's CPU time
	defer runtime.UnlockOSThread()
	cpu := func() time.Duration {
		var ru unix.Rusage
		unix.Getrusage(unix.RUSAGE_THREAD, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var used, spun, wall time.Duration
	for try := 0; try < 5; try++ {
		c0, start := cpu(), time.Now()
		for time.Since(start) < settleFor {
		}
		spun = cpu() - c0
		c0, start = cpu(), time.Now()
		settle()
		wall, used = time.Since(start), cpu()-c0
		if wall < settleFor {
			t.Fatalf("settle returned after %s, want at least %s", wall, settleFor)
		}
		if spun >= settleFor/20 && used >= spun/3 {
			return
		}
	}
	t.Fatalf("settle used %s of CPU over %s, a plain spin as long %s (5 tries): it sleeps instead of spinning", used, wall, spun)
}
