// Package phases owns what a plan is and how it runs: the Phase interface
// (Config, Setup, Run, Verify, Teardown), the explicit Registry of phase
// kinds, strict TOML plan decoding, the engine that drives every phase on
// every rank (barriers, timing window, error agreement, gathering results at
// rank 0) and the phase families themselves, one file per family.
//
// Timed loops follow one shape: prepare everything in Setup, then between
// two clock reads issue exactly one operation and call Recorder.Observe.
// A loop of short syscalls yields its P every 5 ms (yielder, yield.go),
// outside any op's time, or the Go runtime's sysmon takes it for a CPU hog
// and wakes up every few tens of µs, preempting ranks on a full node. The
// metadata loops poll their context at those yields, not before every op.
// With more than one rank, each spins 15 ms (settle) between the aligned
// start and its clock, so sysmon's burst of polling after the barrier wait
// is over before anything is timed. Before the aligned start every rank
// returns its free heap to the OS (quiesceHeap), so the runtime's
// scavenger does not madvise Setup's garbage away during the Run.
// Phases never print; they return errors that name the phase, rank and path.
package phases
