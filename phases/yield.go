package phases

import (
	"runtime"
	"runtime/debug"
	"time"
)

// yieldEvery is how long a timed loop runs before it yields its P. It must
// stay below the Go runtime's 10 ms preemption slice (forcePreemptNS).
const yieldEvery = int64(5 * time.Millisecond)

// yielder keeps a goroutine that loops over short syscalls from looking
// like a CPU hog to the Go runtime. sysmon preempts a goroutine that has
// not been rescheduled for 10 ms; finding it inside a syscall, it takes its
// P away (waking another thread to run the P, and sending the loop through
// the slow exitsyscall path) and drops its own polling period back to
// 20 µs, waking every few tens of µs for the next 10-20 ms. On a node where
// every CPU runs a rank, each of those wake-ups preempts a rank's worker:
// measured on a 2-vCPU VM, 2-rank stat storms ran 15% below a C loop of
// the same syscalls, and a 1-rank one 7%. A Gosched every 5 ms moves the
// scheduling tick on, so none of it happens, at the cost of one thread
// wake-up per yield.
type yielder struct{ next int64 }

// due reports whether the loop, now ns into its run, should yield; the
// caller yields (runtime.Gosched) outside any op's timed span.
func (y *yielder) due(now int64) bool {
	if now < y.next {
		return false
	}
	y.next = now + yieldEvery
	return true
}

// yield is runtime.Gosched; a variable so that a test can make a yield
// take measurable time.
var yield = runtime.Gosched

// settleFor is how long a rank keeps its CPU busy between the aligned
// start of a timed Run and its clock; see settle.
const settleFor = 15 * time.Millisecond

// settle spins for settleFor, yielding like a timed loop. A rank that
// waited in a barrier had every P idle, which parks the Go runtime's sysmon;
// the next syscall wakes it into its fast mode, polling every 20 µs (about
// 7 wake-ups per ms on the test VM) and backing off over the next 10-15 ms.
// With a rank bound to each CPU, every wake-up preempts the rank: uprobes on
// runtime.retake counted 50-90 of them in the first 15 ms of each 2-rank
// stat Run, and spinning through them first took the 2-rank stat storm
// from 0.97 to 1.02 of the C floor (8 interleaved runs). Every rank spins
// the same time, so they stay aligned. A single rank goes from Setup
// straight to Run without waiting, and does not settle.
func settle() {
	var y yielder
	start := time.Now()
	y.due(0)
	for {
		since := int64(time.Since(start))
		if since >= int64(settleFor) {
			return
		}
		if y.due(since) {
			yield()
		}
	}
}

// quiesceHeap collects the garbage of Setup and returns every free heap
// page to the OS before a timed Run, so that the Go runtime's background
// scavenger has nothing left to return while the Run is timed. Otherwise,
// after a Setup that dropped megabytes (a metadata phase rebuilds its
// 20,000 paths every iteration), the scavenger madvises the excess away in
// the middle of the Run: on the test VM, 30 madvise calls and 63 TLB
// flushes landed inside one of four 20,000-op unlink Runs, and none with
// this. The price: what a Run allocates comes from fresh pages, faulted
// in, rather than from freed ones; prism's Runs make their buffers in
// Setup and allocate only small per-epoch or per-command records. It also
// costs a full collection per iteration, outside the timed window, before
// the ranks align.
func quiesceHeap() { debug.FreeOSMemory() }
