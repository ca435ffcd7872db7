package phases

import (
	"context"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prism-hpc/prism/report"
)

// YieldEvery is how long a timed loop runs before it yields its P. It must
// stay below the Go runtime's 10 ms preemption slice (forcePreemptNS).
const YieldEvery = int64(5 * time.Millisecond)

// Yielder keeps a goroutine that loops over short syscalls from looking
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
type Yielder struct{ next int64 }

// Due reports whether the loop, now ns into its run, should yield; the
// caller yields (Yield) outside any op's timed span.
func (y *Yielder) Due(now int64) bool {
	if now < y.next {
		return false
	}
	y.next = now + YieldEvery
	return true
}

// Pacer paces a loop over many ops outside their timed spans: every 64th
// op it checks the context (a cancelled phase stops within 64 ops, not at
// the loop's end) and yields when a Yielder says so.
type Pacer struct {
	y     Yielder
	begin time.Time
}

// NewPacer starts a Pacer at the loop's start.
func NewPacer() Pacer {
	p := Pacer{begin: time.Now()}
	p.y.Due(0)
	return p
}

// Started is when the loop started (NewPacer's time).
func (p *Pacer) Started() time.Time { return p.begin }

// Tick is called before op i; it returns ctx's error once ctx is done.
func (p *Pacer) Tick(ctx context.Context, i int) error {
	if i&63 != 63 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.y.Due(int64(time.Since(p.begin))) {
		Yield()
	}
	return nil
}

// Yield gives up the P for a moment (runtime.Gosched), outside any op's
// timed span.
func Yield() { yieldFn() }

// yieldFn is a variable so that a test can make a yield take measurable
// time.
var yieldFn = runtime.Gosched

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
	var y Yielder
	start := time.Now()
	y.Due(0)
	for {
		since := int64(time.Since(start))
		if since >= int64(settleFor) {
			return
		}
		if y.Due(since) {
			Yield()
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

// OpClock times a loop of ops with one clock read per op: an op's end is
// the next op's start (report.Recorder.BeginAt), so an op's latency also
// carries the few tens of ns of bookkeeping between two syscalls, and the
// latencies of a loop add up to its wall time, but for the yields (see
// Yielder), which are charged to no op. It reads the op clock
// (report.Ticks): the TSC where it can be trusted, because a Go read of
// the OS clock costs a loop of 10 µs unlinks ~4% on a kernel that flushes
// the TLB at every syscall (see report/clock.go).
//
// The loop's context is polled at the yields too, not before every op: a
// cancelled loop still stops within YieldEvery plus one op, and the op
// itself touches no channel. On a kernel that flushes the TLB on every
// syscall (page-table isolation without PCID, as on many VMs), every cache
// line and page the loop touches between two syscalls costs a refill, so
// the fewer it touches, the closer it runs to a bare C loop.
type OpClock struct {
	base, last int64 // report.Ticks readings: the loop's start, the last op's end
	y          Yielder
	done       <-chan struct{}
	stop       bool // the context was found done at a yield
}

func NewOpClock(ctx context.Context) OpClock {
	t := report.Ticks()
	c := OpClock{base: t, last: t, done: ctx.Done(), stop: ctx.Err() != nil}
	c.y.Due(0)
	return c
}

// Lap reads the op clock once and returns the ns since the last lap (or
// since NewOpClock); last becomes the next op's start.
func (c *OpClock) Lap() int64 {
	t := report.Ticks()
	d := report.TickNs(t - c.last)
	c.last = t
	if c.y.Due(report.TickNs(t - c.base)) {
		Yield()
		select {
		case <-c.done:
			c.stop = true
		default:
		}
		c.last = report.Ticks()
	}
	return d
}

// Skip restarts the clock for the next op: the time since the last op's
// end (work a loop does between two ops, such as preparing the next chunk
// of names) is charged to no op.
func (c *OpClock) Skip() { c.last = report.Ticks() }

// Last is the op clock reading at the end of the last op (the start of
// the next): pass it to Recorder.BeginAt.
func (c *OpClock) Last() int64 { return c.last }

// Stopped reports that a yield found the loop's context done: the loop
// returns ctx.Err() before its next op.
func (c *OpClock) Stopped() bool { return c.stop }
