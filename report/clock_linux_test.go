package report

import (
	"errors"
	"os"
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
	before := threadAffinities(t)
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil || set.Count() < 2 {
		t.Skipf("needs 2 allowed CPUs (have %d, %v)", set.Count(), err)
	}
	if info, _ := InitClock("auto"); info.Source != "tsc" {
		t.Skipf("no usable TSC here: %s", info.Reason)
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
	// Every walk put its thread back: no thread of the process is left
	// pinned to one CPU.
	want := ""
	for _, list := range before {
		if want != "" && list != want {
			t.Skipf("threads already differ in affinity: %v", before)
		}
		want = list
	}
	for tid, list := range threadAffinities(t) {
		if list != want {
			t.Errorf("thread %s allowed on %s after the checks, the process on %s", tid, list, want)
		}
	}
}

// threadAffinities maps each thread of this process to its
// Cpus_allowed_list.
func threadAffinities(t *testing.T) map[string]string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
		if err != nil {
			continue // the thread exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				m[task.Name()] = strings.TrimSpace(v)
			}
		}
	}
	if len(m) == 0 {
		t.Fatal("no Cpus_allowed_list in /proc/self/task/*/status")
	}
	return m
}
