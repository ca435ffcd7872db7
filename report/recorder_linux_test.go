package report

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// A new Recorder's histogram is mapped in before its first timed op: its
// first records across the whole range, which land on every page of the
// counts array, take no page fault (a fresh, unfaulted array takes one per
// page, 66 without it).
func TestNewRecorderPagesMapped(t *testing.T) {
	runtime.LockOSThread() // RUSAGE_THREAD counts this thread's faults only
	defer runtime.UnlockOSThread()
	r := NewRecorder("stat")
	var before, after unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &before); err != nil {
		t.Skip("no RUSAGE_THREAD:", err)
	}
	n := 0
	for v := int64(LowestNs); v < HighestNs; v += v/8 + 1 {
		r.ObserveNs(v, 0, nil)
		n++
	}
	h := r.Hist()
	unix.Getrusage(unix.RUSAGE_THREAD, &after)
	if h.TotalCount() != int64(n) {
		t.Fatalf("histogram holds %d of %d values", h.TotalCount(), n)
	}
	if f := after.Minflt - before.Minflt; f > 4 {
		t.Fatalf("%d page faults recording %d values into a new Recorder; its counts were not mapped in by NewRecorder", f, n)
	}
}
