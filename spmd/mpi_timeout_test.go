//go:build mpi

package spmd

// Tests of bounded collectives under real mpirun (see mpi_test.go for how a
// test re-executes itself as the ranks): a rank that stops (SIGSTOP) or is
// merely slow, and what its peers learn, how Abort and Close end the job,
// and that no process is left behind.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	// boundTimeout is the communicator timeout of these tests: long enough
	// that three ranks on a loaded machine finish their in-step collectives
	// well within it, short enough to keep the tests quick.
	boundTimeout = 4 * time.Second
	// boundSlack is what a rank may take beyond the timeout and the probe
	// window to return, on a loaded machine (scheduling, and the backoff's
	// last sleep).
	boundSlack = 5 * time.Second
)

// stoppedPidRE matches the line rank 2 prints before it stops itself.
var stoppedPidRE = regexp.MustCompile(`(?m)^rank 2 stopping, pid (\d+)$`)

// stopSelf stops this process with SIGSTOP sent to the calling thread: sent
// to the process, the kernel may pick another thread to begin the group
// stop, and this one runs on for a while.
func stopSelf() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}

// splitPair makes the communicator of ranks 0 and 1 (nil on rank 2), on
// which they meet after their checks: the first to Abort or exit makes
// mpirun resume rank 2 (SIGCONT, then SIGTERM a second later), which must
// not happen while the other still probes it.
func splitPair(r *rankT) Comm {
	color := 0
	if r.rank == 2 {
		color = Undefined
	}
	pair, err := r.c.Split(context.Background(), color, 0)
	r.no(err, "Split")
	if pair != nil {
		pair.(*MPI).SetTimeout(time.Minute)
	}
	return pair
}

// reapStopped makes sure the process a test stopped is gone: it reports
// whether the process was still there after mpirun ended (so the job left
// it behind), and kills it in any case.
func reapStopped(t *testing.T, out string) (lingered bool) {
	t.Helper()
	m := stoppedPidRE.FindStringSubmatch(out)
	if m == nil {
		t.Errorf("rank 2 never said it was stopping\n%s", out)
		return false
	}
	pid, _ := strconv.Atoi(m[1])
	deadline := time.Now().Add(5 * time.Second)
	for {
		if !alive(pid) {
			return false
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGCONT)
	syscall.Kill(pid, syscall.SIGKILL)
	return true
}

// alive reports whether pid is a process that has not exited (a zombie
// waiting for its parent counts as exited).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(stat), ") Z ")
}

// TestMPITimeoutStoppedRank: with -np 3, rank 2 stops itself (SIGSTOP)
// before a collective. Ranks 0 and 1 must get a *TimeoutError from it no
// sooner than the timeout and within the probe window and some slack after
// it, one that errors.Is ErrTimeout and errors.As a *RankError naming rank
// 2, and lists exactly rank 2, with its host, as not answering the probe.
// The communicator is out of step after that: the next collective fails at
// once. Then either rank 0 calls Abort, or both call Close (which must not
// hang, and fails) and exit: mpirun must end the job with a non-zero
// status, and the stopped rank must not outlive it.
func TestMPITimeoutStoppedRank(t *testing.T) {
	cases := []struct {
		name string
		// run is the collective rank 2 never joins.
		run func(ctx context.Context, c *MPI) error
		// abort: rank 0 calls Abort; otherwise ranks 0 and 1 Close and exit.
		abort bool
	}{
		{"barrier", func(ctx context.Context, c *MPI) error { return c.Barrier(ctx) }, true},
		{"allreduce", func(ctx context.Context, c *MPI) error {
			return c.AllreduceInt64(ctx, Sum, []int64{1, 2, 3, 4})
		}, false},
		{"gather", func(ctx context.Context, c *MPI) error {
			_, err := c.Gather(ctx, 0, []byte("record"))
			return err
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !mpiChild(t) {
				bound := boundTimeout + probeWindow(boundTimeout) + boundSlack + 20*time.Second
				res := runUnderMPI(t, 3, bound)
				t.Logf("mpirun exit %d after %v", res.exitCode, res.elapsed.Round(time.Millisecond))
				lingered := reapStopped(t, res.out)
				if res.timedOut {
					t.Fatalf("mpirun still running after %v: the job hung\n%s", bound, res.out)
				}
				if res.exitCode == 0 {
					t.Errorf("mpirun exited 0")
				}
				for _, r := range []int{0, 1} {
					if !strings.Contains(res.out, fmt.Sprintf("timed out ok rank %d", r)) {
						t.Errorf("rank %d did not report its timeout as expected", r)
					}
				}
				if lingered {
					t.Errorf("the stopped rank 2 was still there 5s after mpirun ended")
				}
				if t.Failed() {
					t.Logf("output:\n%s", res.out)
				}
				return
			}
			r, wd := startRank(t)
			defer wd.Stop()
			c, ctx := r.c, context.Background()
			c.SetTimeout(boundTimeout)
			pair := splitPair(r)
			r.no(c.Barrier(ctx), "Barrier before the stop")
			if r.rank == 2 {
				fmt.Printf("rank 2 stopping, pid %d\n", os.Getpid())
				stopSelf()
				// mpirun's kill sends SIGCONT before SIGTERM; wait for
				// the SIGTERM.
				time.Sleep(time.Hour)
			}
			start := time.Now()
			err := tc.run(ctx, c)
			took := time.Since(start)
			checkStoppedTimeout(r, err, took)
			if err := c.Barrier(ctx); err == nil || !errors.Is(err, ErrTimeout) {
				r.fatalf("the Barrier after the timeout returned %v, want an out-of-step error wrapping the timeout", err)
			}
			fmt.Printf("timed out ok rank %d after %v: %v\n", r.rank, took.Round(time.Millisecond), err)
			r.no(pair.Barrier(ctx), "pair Barrier")
			wd.Stop()
			if tc.abort {
				if r.rank == 0 {
					c.Abort(5)
				}
				time.Sleep(time.Minute) // Abort on rank 0 must end this
				fmt.Fprintf(os.Stderr, "FAIL rank %d: still alive a minute after rank 0's Abort\n", r.rank)
				os.Exit(1)
			}
			cstart := time.Now()
			cerr := c.Close()
			if d := time.Since(cstart); cerr == nil || d > boundSlack {
				fmt.Fprintf(os.Stderr, "FAIL rank %d: Close after the timeout took %v and returned %v, want an error at once\n", r.rank, d, cerr)
			}
			fmt.Printf("rank %d closed: %v\n", r.rank, cerr)
			time.Sleep(time.Second) // the other rank's Close is as quick
			os.Exit(1)
		})
	}
}

// checkStoppedTimeout checks what a collective returned on rank 0 or 1 when
// rank 2 was stopped.
func checkStoppedTimeout(r *rankT, err error, took time.Duration) {
	var te *TimeoutError
	if !errors.As(err, &te) {
		r.fatalf("got %v (%T) after %v, want a *TimeoutError", err, err, took)
	}
	var re *RankError
	switch {
	case !errors.Is(err, ErrTimeout):
		r.fatalf("%v: not errors.Is ErrTimeout", err)
	case !errors.As(err, &re) || re.Rank != 2 || !errors.Is(re, ErrPeerDead):
		r.fatalf("%v: errors.As *RankError gives %+v, want rank 2 wrapping ErrPeerDead", err, re)
	case len(te.Missing) != 1 || te.Missing[0].Rank != 2 || te.Missing[0].Answered || te.Missing[0].Host != r.c.Host():
		r.fatalf("%v: missing %+v, want rank 2 on host %s, not answering", err, te.Missing, r.c.Host())
	case te.Rank != r.rank || te.Timeout != boundTimeout || te.Probe != probeWindow(boundTimeout) || te.Seq < 2:
		r.fatalf("%v: %+v", err, te)
	case took < boundTimeout || took > boundTimeout+te.Probe+boundSlack:
		r.fatalf("returned after %v, want within [%v, %v]", took, boundTimeout, boundTimeout+te.Probe+boundSlack)
	case !strings.Contains(err.Error(), "rank 2 (host "+r.c.Host()+")"):
		r.fatalf("message %q does not name rank 2 and its host", err)
	}
}

// TestMPITimeoutSlowRank: a rank that is late but alive. First rank 2
// sleeps twice the probe window, outside any collective, before a Barrier
// that its peers entered at once: it arrives before the deadline, so the
// Barrier succeeds on every rank and nobody is reported. Then it sleeps
// past the deadline: ranks 0 and 1 time out and name rank 2, but as a rank
// that answered the probe (its responder runs while it sleeps) and is
// outside any collective, not as a dead one. Rank 0 then aborts.
func TestMPITimeoutSlowRank(t *testing.T) {
	if !mpiChild(t) {
		bound := 3*boundTimeout + probeWindow(boundTimeout) + boundSlack + 20*time.Second
		res := runUnderMPI(t, 3, bound)
		t.Logf("mpirun exit %d after %v", res.exitCode, res.elapsed.Round(time.Millisecond))
		if res.timedOut {
			t.Fatalf("mpirun still running after %v: the job hung\n%s", bound, res.out)
		}
		if res.exitCode == 0 {
			t.Errorf("mpirun exited 0, want Abort's status")
		}
		for _, r := range []int{0, 1, 2} {
			if !strings.Contains(res.out, fmt.Sprintf("late barrier ok rank %d", r)) {
				t.Errorf("rank %d did not pass the late Barrier", r)
			}
		}
		for _, r := range []int{0, 1} {
			if !strings.Contains(res.out, fmt.Sprintf("slow rank named ok rank %d", r)) {
				t.Errorf("rank %d did not report the slow rank as expected", r)
			}
		}
		if t.Failed() {
			t.Logf("output:\n%s", res.out)
		}
		return
	}
	r, wd := startRank(t)
	defer wd.Stop()
	c, ctx := r.c, context.Background()
	c.SetTimeout(boundTimeout)
	pair := splitPair(r)
	r.no(c.Barrier(ctx), "first Barrier")
	late := 2 * probeWindow(boundTimeout)
	if r.rank == 2 {
		time.Sleep(late)
	}
	start := time.Now()
	r.no(c.Barrier(ctx), "Barrier with a late rank")
	fmt.Printf("late barrier ok rank %d after %v\n", r.rank, time.Since(start).Round(time.Millisecond))

	if r.rank == 2 {
		time.Sleep(time.Minute) // rank 0's Abort ends this
		fmt.Fprintf(os.Stderr, "FAIL rank 2: still alive a minute later\n")
		os.Exit(1)
	}
	err := c.Barrier(ctx)
	var te *TimeoutError
	var re *RankError
	switch {
	case !errors.As(err, &te) || !errors.As(err, &re) || re.Rank != 2 || errors.Is(re, ErrPeerDead):
		r.fatalf("got %v, want a *TimeoutError naming rank 2 as alive", err)
	case len(te.Missing) != 1 || !te.Missing[0].Answered || !strings.Contains(te.Missing[0].Detail, "outside any collective"):
		r.fatalf("%v: missing %+v, want rank 2, answering, outside any collective", err, te.Missing)
	}
	fmt.Printf("slow rank named ok rank %d: %v\n", r.rank, err)
	r.no(pair.Barrier(ctx), "pair Barrier")
	wd.Stop()
	if r.rank == 0 {
		c.Abort(6)
	}
	time.Sleep(time.Minute)
	fmt.Fprintf(os.Stderr, "FAIL rank %d: still alive a minute after rank 0's Abort\n", r.rank)
	os.Exit(1)
}

// TestMPIFinalizeStoppedRank: rank 2 stops after the last collective, so
// it never reaches MPI_Finalize, which waits for every rank. Close on ranks
// 0 and 1 must fail with ErrTimeout after the timeout instead of hanging;
// the ranks then exit, and mpirun ends the job, stopped rank included.
func TestMPIFinalizeStoppedRank(t *testing.T) {
	if !mpiChild(t) {
		bound := boundTimeout + boundSlack + 20*time.Second
		res := runUnderMPI(t, 3, bound)
		t.Logf("mpirun exit %d after %v", res.exitCode, res.elapsed.Round(time.Millisecond))
		lingered := reapStopped(t, res.out)
		if res.timedOut {
			t.Fatalf("mpirun still running after %v: the job hung\n%s", bound, res.out)
		}
		if res.exitCode == 0 {
			t.Errorf("mpirun exited 0")
		}
		for _, r := range []int{0, 1} {
			if !strings.Contains(res.out, fmt.Sprintf("close timed out ok rank %d", r)) {
				t.Errorf("rank %d did not report Close's timeout as expected", r)
			}
		}
		if lingered {
			t.Errorf("the stopped rank 2 was still there 5s after mpirun ended")
		}
		if t.Failed() {
			t.Logf("output:\n%s", res.out)
		}
		return
	}
	r, wd := startRank(t)
	defer wd.Stop()
	c, ctx := r.c, context.Background()
	c.SetTimeout(boundTimeout)
	r.no(c.Barrier(ctx), "Barrier")
	if r.rank == 2 {
		fmt.Printf("rank 2 stopping, pid %d\n", os.Getpid())
		stopSelf()
		time.Sleep(time.Hour)
	}
	start := time.Now()
	err := c.Close()
	took := time.Since(start)
	if !errors.Is(err, ErrTimeout) || took < boundTimeout || took > boundTimeout+boundSlack {
		fmt.Fprintf(os.Stderr, "FAIL rank %d: Close returned %v after %v, want ErrTimeout after %v\n", r.rank, err, took, boundTimeout)
		os.Exit(1)
	}
	fmt.Printf("close timed out ok rank %d after %v: %v\n", r.rank, took.Round(time.Millisecond), err)
	// Both Close calls started together and time out alike; the first to
	// exit ends the job, so give the other time to report.
	time.Sleep(3 * time.Second)
	os.Exit(1)
}
