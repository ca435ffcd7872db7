package spmd

// Launch tests re-execute the test binary as the job's ranks: TestMain
// recognizes a child by childModeEnv and runs the behaviour it names
// instead of the tests. Children report what they saw in files under
// childOutEnv, since their exit codes are what Launch summarizes.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	childModeEnv = "PRISM_SPMD_LAUNCH_CHILD"
	childOutEnv  = "PRISM_SPMD_LAUNCH_OUT"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childModeEnv); mode != "" {
		os.Exit(launchChild(mode))
	}
	os.Exit(m.Run())
}

// launchChild is one rank of a launched job; it returns the rank's exit
// code.
func launchChild(mode string) int {
	rank, _ := strconv.Atoi(os.Getenv(EnvRank))
	size, _ := strconv.Atoi(os.Getenv(EnvSize))
	reportPath := func(r int) string { return filepath.Join(os.Getenv(childOutEnv), "rank"+strconv.Itoa(r)) }
	report := func(format string, args ...any) {
		os.WriteFile(reportPath(rank), fmt.Appendf(nil, format, args...), 0o666)
	}
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "rank %d: %v\n", rank, err)
		return 1
	}
	ctx := context.Background()
	c, err := NewRendezvous(ctx, RendezvousConfig{
		Dir:       os.Getenv(EnvRendezvous),
		Token:     os.Getenv(EnvJobToken),
		Rank:      rank,
		Size:      size,
		Timeout:   20 * time.Second,
		Heartbeat: 50 * time.Millisecond,
		DeadAfter: 2 * time.Second,
	})
	var re *RankError
	if mode == "exit3" && errors.Is(err, ErrAborted) && errors.As(err, &re) {
		// Rank 1 leaves as soon as it has joined: a rank that a loaded
		// machine held up in NewRendezvous's collective sees the abort
		// notice there, which is seeing it too.
		report("aborted by %d", re.Rank)
		return 1
	}
	if err != nil {
		return fail(err)
	}
	switch mode {
	case "ok":
		if lr, _ := strconv.Atoi(os.Getenv(EnvLocalRank)); lr != c.LocalRank() {
			return fail(fmt.Errorf("local rank %d, %s says %d", c.LocalRank(), EnvLocalRank, lr))
		}
		for range 3 {
			if err := c.Barrier(ctx); err != nil {
				return fail(err)
			}
			v := []int64{int64(rank)}
			if err := c.AllreduceInt64(ctx, Sum, v); err != nil {
				return fail(err)
			}
			if want := int64(size * (size - 1) / 2); v[0] != want {
				return fail(fmt.Errorf("allreduce = %d, want %d", v[0], want))
			}
			all, err := c.Gather(ctx, 0, []byte(strconv.Itoa(rank)))
			if err != nil {
				return fail(err)
			}
			for r, b := range all {
				if string(b) != strconv.Itoa(r) {
					return fail(fmt.Errorf("gather part %d = %q", r, b))
				}
			}
		}
		claim, err := os.ReadFile(filepath.Join(os.Getenv(EnvRendezvous), jobFile))
		if err != nil {
			return fail(err)
		}
		if err := c.Close(); err != nil {
			return fail(err)
		}
		token, _, _ := strings.Cut(string(claim), "\n")
		report("done %s %s", os.Getenv(EnvJobToken), token)
		return 0
	case "exit3":
		if rank == 1 {
			return 3
		}
		err := c.Barrier(ctx)
		if errors.Is(err, ErrAborted) && errors.As(err, &re) {
			report("aborted by %d", re.Rank)
		} else {
			report("unexpected: %v", err)
		}
		return 1
	case "kill":
		report("pid %d", os.Getpid())
		switch rank {
		case 2:
			// Dies once every other rank has reported: one that a loaded
			// machine left behind in NewRendezvous would see the abort
			// notice there and rightly leave without a report.
			for r, deadline := 0, time.Now().Add(20*time.Second); r < size && time.Now().Before(deadline); {
				if b, _ := os.ReadFile(reportPath(r)); len(b) > 0 {
					r++
					continue
				}
				time.Sleep(time.Millisecond)
			}
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		case 3:
			// Leaves on the abort notice; the others ignore it and
			// must be killed once the grace period is over.
			err := c.Barrier(ctx)
			return fail(err)
		}
		time.Sleep(time.Hour)
	case "term":
		report("ready")
		time.Sleep(time.Hour)
	case "trap":
		// Finishes cleanly on the interrupt, as a rank that had little
		// left to do would.
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		report("ready")
		<-sigs
		return 0
	case "exit2":
		if rank == 0 {
			return 2 // bad usage, as main reports it
		}
		c.Barrier(ctx)
		return 1
	case "selfterm":
		// A SIGTERM that is not the user's interrupt of the launcher.
		if rank == 1 {
			syscall.Kill(os.Getpid(), syscall.SIGTERM)
			time.Sleep(time.Hour)
		}
		c.Barrier(ctx)
		return 1
	}
	return fail(fmt.Errorf("unknown mode %q", mode))
}

type launchResult struct {
	code int
	err  error
	took time.Duration
}

// startLaunch launches n children in mode and returns the directory they
// report in and a function waiting for Launch's result.
func startLaunch(t *testing.T, ctx context.Context, mode string, n int, grace time.Duration, signals <-chan os.Signal) (string, func() launchResult) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, tmp := t.TempDir(), t.TempDir()
	var output bytes.Buffer
	done := make(chan launchResult, 1)
	start := time.Now()
	go func() {
		code, err := Launch(ctx, LaunchConfig{
			N:       n,
			Path:    exe,
			Env:     append(os.Environ(), childModeEnv+"="+mode, childOutEnv+"="+out),
			Stdout:  &output,
			Stderr:  &output,
			TmpDir:  tmp,
			Grace:   grace,
			Signals: signals,
		})
		done <- launchResult{code, err, time.Since(start)}
	}()
	return out, func() launchResult {
		t.Helper()
		select {
		case r := <-done:
			if output.Len() > 0 {
				t.Logf("children's output:\n%s", output.String())
			}
			var je *JobError
			if r.err != nil && !errors.As(r.err, &je) {
				t.Fatalf("Launch: %v", r.err)
			}
			if (r.code == 0) != (r.err == nil) {
				t.Errorf("Launch returned %d with error %v", r.code, r.err)
			}
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Errorf("Launch left %v in its TmpDir", left)
			}
			return r
		case <-time.After(60 * time.Second):
			t.Fatal("Launch did not return within 60s")
			return launchResult{}
		}
	}
}

// reports waits until every rank has reported and returns the reports.
func reports(t *testing.T, out string, ranks ...int) map[int]string {
	t.Helper()
	got := make(map[int]string)
	deadline := time.Now().Add(slack)
	for _, r := range ranks {
		for {
			b, err := os.ReadFile(filepath.Join(out, "rank"+strconv.Itoa(r)))
			if err == nil {
				got[r] = string(b)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rank %d did not report", r)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return got
}

// TestLaunchOK: a job whose ranks all succeed, twice. Every rank of a job
// gets the same job token, which its rendezvous directory records, and the
// two jobs get different ones.
func TestLaunchOK(t *testing.T) {
	var tokens []string
	for range 2 {
		out, wait := startLaunch(t, context.Background(), "ok", 4, 0, nil)
		if r := wait(); r.code != 0 || r.err != nil {
			t.Fatalf("exit code %d, %v; want 0", r.code, r.err)
		}
		want := ""
		for r, rep := range reports(t, out, 0, 1, 2, 3) {
			var env, file string
			if _, err := fmt.Sscanf(rep, "done %s %s", &env, &file); err != nil || env != file || !strings.HasPrefix(env, "launch-") {
				t.Errorf("rank %d: %q, want done and its token twice", r, rep)
			}
			if want == "" {
				want = env
			} else if env != want {
				t.Errorf("rank %d has token %q, rank 0 %q", r, env, want)
			}
		}
		tokens = append(tokens, want)
	}
	if tokens[0] == tokens[1] {
		t.Errorf("two jobs got the same token %q", tokens[0])
	}
}

func TestLaunchChildFails(t *testing.T) {
	out, wait := startLaunch(t, context.Background(), "exit3", 4, 5*time.Second, nil)
	r := wait()
	var je *JobError
	if r.code != 1 || !errors.As(r.err, &je) || je.Rank != 1 || je.Status != 3 || je.Interrupted != nil {
		t.Errorf("exit code %d, %v; want 1 naming rank 1's status 3", r.code, r.err)
	}
	if r.took > slack {
		t.Errorf("Launch took %v", r.took)
	}
	for rank, rep := range reports(t, out, 0, 2, 3) {
		if rep != "aborted by 1" {
			t.Errorf("rank %d: %q, want it to see rank 1's abort", rank, rep)
		}
	}
}

func TestLaunchChildKilled(t *testing.T) {
	const grace = time.Second
	out, wait := startLaunch(t, context.Background(), "kill", 4, grace, nil)
	r := wait()
	// A rank the kernel killed is a failed rank, not an interrupted job.
	var je *JobError
	if r.code != 1 || !errors.As(r.err, &je) || je.Rank != 2 || je.Signal != syscall.SIGKILL || je.Status != -1 || je.Interrupted != nil {
		t.Errorf("exit code %d, %v; want 1 naming rank 2 killed by SIGKILL", r.code, r.err)
	}
	if r.err != nil && !strings.Contains(r.err.Error(), "rank 2 was killed by signal 9 (killed)") {
		t.Errorf("message %q", r.err)
	}
	if r.took > grace+slack {
		t.Errorf("Launch took %v", r.took)
	}
	for rank, rep := range reports(t, out, 0, 1, 2, 3) {
		var pid int
		if _, err := fmt.Sscanf(rep, "pid %d", &pid); err != nil {
			t.Fatalf("rank %d: report %q", rank, rep)
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("rank %d (pid %d) still there: %v", rank, pid, err)
		}
	}
}

func TestLaunchForwardsSignals(t *testing.T) {
	signals := make(chan os.Signal, 1)
	out, wait := startLaunch(t, context.Background(), "term", 3, 0, signals)
	reports(t, out, 0, 1, 2) // every child is up
	signals <- syscall.SIGTERM
	var je *JobError
	if r := wait(); r.code != 143 || !errors.As(r.err, &je) || je.Interrupted != syscall.SIGTERM || je.Signal != syscall.SIGTERM {
		t.Errorf("exit code %d, %v; want 143, interrupted by SIGTERM", r.code, r.err)
	}
}

func TestLaunchCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, wait := startLaunch(t, ctx, "term", 2, 0, nil)
	reports(t, out, 0, 1)
	cancel()
	var je *JobError
	if r := wait(); r.code != 143 || !errors.As(r.err, &je) || je.Interrupted != syscall.SIGTERM {
		t.Errorf("exit code %d, %v; want 143, interrupted by SIGTERM", r.code, r.err)
	}
}

// TestLaunchExitCodes: the launcher's exit code follows prism's contract,
// whatever the children's statuses: 2 passes through as bad usage, 130/143
// only for the user's interrupt, 1 for any other failure (a rank's own
// SIGTERM included), 0 when every rank ends cleanly, even interrupted.
func TestLaunchExitCodes(t *testing.T) {
	for _, tc := range []struct {
		mode      string
		interrupt os.Signal // sent to the launcher once every rank is up
		code      int
		rank      int // first rank to fail
		status    int
		signal    syscall.Signal
	}{
		{mode: "exit2", code: 2, rank: 0, status: 2},
		{mode: "selfterm", code: 1, rank: 1, status: -1, signal: syscall.SIGTERM},
		{mode: "term", interrupt: syscall.SIGINT, code: 130, status: -1, signal: syscall.SIGINT},
		{mode: "trap", interrupt: syscall.SIGTERM, code: 0},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			signals := make(chan os.Signal, 1)
			out, wait := startLaunch(t, context.Background(), tc.mode, 3, 5*time.Second, signals)
			if tc.interrupt != nil {
				reports(t, out, 0, 1, 2)
				signals <- tc.interrupt
			}
			r := wait()
			var je *JobError
			if r.code != tc.code {
				t.Errorf("exit code %d (%v), want %d", r.code, r.err, tc.code)
			}
			if tc.code == 0 {
				return
			}
			if !errors.As(r.err, &je) || je.Status != tc.status || je.Signal != tc.signal || je.Interrupted != tc.interrupt ||
				(tc.interrupt == nil && je.Rank != tc.rank) || je.ExitCode() != tc.code {
				t.Errorf("error %#v, want rank %d status %d signal %v interrupted %v", r.err, tc.rank, tc.status, tc.signal, tc.interrupt)
			}
		})
	}
}

func TestLaunchBadConfig(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []LaunchConfig{
		{N: 0, Path: "/bin/true"},
		{N: 1},
		{N: 2, Path: filepath.Join(t.TempDir(), "missing")},
		{N: 1, Path: "/bin/true", TmpDir: filepath.Join(t.TempDir(), "missing")},
	} {
		if code, err := Launch(ctx, cfg); err == nil || code == 0 {
			t.Errorf("Launch(%+v) = %d, %v; want an error", cfg, code, err)
		}
	}
}

func TestWithoutRankVars(t *testing.T) {
	env := withoutRankVars([]string{"A=1", EnvRank + "=3", EnvSize + "=4", EnvLocalRank + "=0", EnvRendezvous + "=/x", EnvJobToken + "=t", "PRISM_RANKS=ok"})
	if got := strings.Join(env, " "); got != "A=1 PRISM_RANKS=ok" {
		t.Errorf("got %q", got)
	}
}
