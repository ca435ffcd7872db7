//go:build mpi

package spmd

// MPI tests re-execute the test binary under mpirun: a test run normally
// (the parent) launches `mpirun -np 4 <test binary> -test.run '^TestX$'`
// and checks mpirun's exit code and that every rank printed "ok rank N";
// the same test run by mpirun (the child, recognized by OMPI_COMM_WORLD_SIZE
// and mpiChildEnv naming it) does the MPI work on each rank.
//
// A child never uses t.Fatal: a rank that stopped early would leave its peers
// blocked in the next collective, so failures print and call Abort, which
// takes the whole job down. A watchdog aborts the job if a collective hangs.
// There is no TestMain (the package has other test files, and a package can
// have only one); each child finalizes MPI itself at its end.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mpiChildEnv names the test a rank process must run; it keeps a child from
// re-launching mpirun and lets other tests skip when the binary is run
// under mpirun by hand.
const mpiChildEnv = "PRISM_SPMD_MPI_CHILD"

const mpiTestRanks = 4

// mpiChild reports whether this process is a rank launched by runUnderMPI
// for this test; a process under mpirun for another test skips.
func mpiChild(t *testing.T) bool {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") == "" {
		return false
	}
	if os.Getenv(mpiChildEnv) != t.Name() {
		t.Skipf("under mpirun for %q, not this test", os.Getenv(mpiChildEnv))
	}
	return true
}

// mpiRun is the result of one mpirun of the test binary.
type mpiRun struct {
	out      string
	exitCode int
	elapsed  time.Duration
	timedOut bool
}

// runUnderMPI runs this test's child side on np ranks and returns what
// mpirun did. mpirun is stopped with SIGTERM (which it forwards to the
// ranks) if it outlives timeout.
func runUnderMPI(t *testing.T, np int, timeout time.Duration) mpiRun {
	t.Helper()
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not on PATH (install openmpi-bin); MPI tests need it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := []string{
		"--allow-run-as-root", // the test machines run as root
		"--oversubscribe",     // 4 ranks on 2 cores
		"--bind-to", "none",   // else ranks are pinned to cores and starve
		"-np", strconv.Itoa(np),
		"-x", "OMPI_MCA_mpi_yield_when_idle=1", // oversubscribed ranks must yield
		"-x", mpiChildEnv + "=" + t.Name(),
		os.Args[0], "-test.run", "^" + t.Name() + "$", "-test.v", "-test.timeout", "90s",
	}
	cmd := exec.CommandContext(ctx, mpirun, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	r := mpiRun{out: string(out), elapsed: time.Since(start), timedOut: ctx.Err() != nil}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.exitCode = ee.ExitCode()
		if r.exitCode == 0 { // killed by a signal, or WaitDelay expired
			r.exitCode = -1
		}
	default:
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	return r
}

var okRankRE = regexp.MustCompile(`(?m)^ok rank (\d+)\s*$`)

// okRanks returns the ranks that printed "ok rank N".
func okRanks(out string) map[int]bool {
	got := map[int]bool{}
	for _, m := range okRankRE.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		got[n] = true
	}
	return got
}

// wantEveryRankOK is the parent side of a test whose every rank prints
// "ok rank N" when its checks pass: mpirun must exit 0 in time, and every
// rank must have said so.
func wantEveryRankOK(t *testing.T) {
	t.Helper()
	res := runUnderMPI(t, mpiTestRanks, 120*time.Second)
	t.Logf("mpirun exit %d after %v\n%s", res.exitCode, res.elapsed.Round(time.Millisecond), res.out)
	if res.exitCode != 0 || res.timedOut {
		t.Fatalf("mpirun failed (exit %d, timed out %v)", res.exitCode, res.timedOut)
	}
	got := okRanks(res.out)
	for i := 0; i < mpiTestRanks; i++ {
		if !got[i] {
			t.Errorf("rank %d did not report ok", i)
		}
	}
}

// rankT is a child's handle for asserting: any failure aborts the job.
type rankT struct {
	c    *MPI
	rank int
}

func (r *rankT) fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL rank %d: %s\n", r.rank, fmt.Sprintf(format, args...))
	r.c.Abort(1)
}

func (r *rankT) no(err error, what string) {
	if err != nil {
		r.fatalf("%s: %v", what, err)
	}
}

// startRank initializes MPI in a child and arms a watchdog that aborts the
// job if the test hangs.
func startRank(t *testing.T) (*rankT, *time.Timer) {
	c, err := NewMPI()
	if err != nil {
		// MPI is not up, so Abort is impossible; exiting non-zero makes
		// mpirun kill the other ranks.
		fmt.Fprintf(os.Stderr, "FAIL NewMPI: %v\n", err)
		os.Exit(1)
	}
	r := &rankT{c: c, rank: c.Rank()}
	wd := time.AfterFunc(60*time.Second, func() { r.fatalf("watchdog: test hung") })
	return r, wd
}

func TestMPICollectives(t *testing.T) {
	if !mpiChild(t) {
		res := runUnderMPI(t, mpiTestRanks, 120*time.Second)
		t.Logf("mpirun exit %d after %v", res.exitCode, res.elapsed.Round(time.Millisecond))
		if res.exitCode != 0 || res.timedOut {
			t.Fatalf("mpirun failed (exit %d, timed out %v):\n%s", res.exitCode, res.timedOut, res.out)
		}
		got := okRanks(res.out)
		for i := 0; i < mpiTestRanks; i++ {
			if !got[i] {
				t.Errorf("rank %d did not report ok", i)
			}
		}
		if t.Failed() {
			t.Logf("output:\n%s", res.out)
		}
		return
	}
	mpiCollectivesChild(t)
}

func mpiCollectivesChild(t *testing.T) {
	r, wd := startRank(t)
	defer wd.Stop()
	c, rank := r.c, r.rank
	ctx := context.Background()

	// Identity.
	if c.Size() != mpiTestRanks {
		r.fatalf("size %d, want %d", c.Size(), mpiTestRanks)
	}
	if want, _ := strconv.Atoi(os.Getenv("OMPI_COMM_WORLD_RANK")); rank != want {
		r.fatalf("rank %d, OMPI_COMM_WORLD_RANK %d", rank, want)
	}
	if c.Kind() != "mpi" || c.Host() == "" {
		r.fatalf("kind %q host %q", c.Kind(), c.Host())
	}
	if c2, err := NewMPI(); err != nil || c2 != c {
		r.fatalf("second NewMPI: %p %v, want the same world %p", c2, err, c)
	}
	if v := MPILibraryVersion(); v == "" || strings.Contains(v, "\n") {
		r.fatalf("MPILibraryVersion %q", v)
	}
	// OpenMPI's MPI_Wtime counts from its first call, so only the
	// difference means anything.
	w0 := c.Wtime()
	time.Sleep(2 * time.Millisecond)
	if d := c.Wtime() - w0; d < 0.001 || d > 5 {
		r.fatalf("Wtime advanced %vs over a 2ms sleep", d)
	}

	// OpenMPI must not have replaced Go's SIGSEGV handler: a nil
	// dereference has to stay a recoverable panic.
	func() {
		defer func() {
			if recover() == nil {
				r.fatalf("nil dereference did not panic")
			}
		}()
		var p *int
		_ = *p
	}()

	r.no(c.Barrier(ctx), "Barrier")

	// AllreduceInt64: values beyond 32 bits catch an MPI_INT/MPI_LONG mixup.
	big := int64(1) << 40
	iv := func() []int64 { return []int64{int64(rank), int64(rank) * big, -int64(rank) * big, 1} }
	for _, tc := range []struct {
		op   Op
		want []int64
	}{
		{Sum, []int64{6, 6 * big, -6 * big, 4}},
		{Min, []int64{0, 0, -3 * big, 1}},
		{Max, []int64{3, 3 * big, 0, 1}},
	} {
		v := iv()
		r.no(c.AllreduceInt64(ctx, tc.op, v), "AllreduceInt64 "+tc.op.String())
		if fmt.Sprint(v) != fmt.Sprint(tc.want) {
			r.fatalf("AllreduceInt64 %v = %v, want %v", tc.op, v, tc.want)
		}
	}
	r.no(c.AllreduceInt64(ctx, Sum, nil), "AllreduceInt64 empty")

	for _, tc := range []struct {
		op   Op
		want []float64
	}{
		{Sum, []float64{8, -4}},
		{Min, []float64{0.5, -1.75}},
		{Max, []float64{3.5, -0.25}},
	} {
		v := []float64{float64(rank) + 0.5, -float64(rank)/2 - 0.25}
		r.no(c.AllreduceFloat64(ctx, tc.op, v), "AllreduceFloat64 "+tc.op.String())
		if fmt.Sprint(v) != fmt.Sprint(tc.want) {
			r.fatalf("AllreduceFloat64 %v = %v, want %v", tc.op, v, tc.want)
		}
	}
	if err := c.AllreduceInt64(ctx, Op(42), []int64{1}); err == nil {
		r.fatalf("AllreduceInt64 with unknown op succeeded")
	}

	// ReduceInt64: a histogram-sized array to root 0 (sum) and root 3 (min,
	// max); non-root arrays stay untouched.
	const n = 40000
	hist := func() []int64 {
		v := make([]int64, n)
		for i := range v {
			v[i] = int64(i)*int64(rank+1) + big
		}
		return v
	}
	for _, tc := range []struct {
		root int
		op   Op
		want func(i int) int64
	}{
		{0, Sum, func(i int) int64 { return int64(i)*10 + 4*big }},
		{3, Max, func(i int) int64 { return int64(i)*4 + big }},
		{3, Min, func(i int) int64 { return int64(i) + big }},
	} {
		v := hist()
		r.no(c.ReduceInt64(ctx, tc.root, tc.op, v), fmt.Sprintf("ReduceInt64 root %d %v", tc.root, tc.op))
		orig := hist()
		for i := range v {
			want := orig[i]
			if rank == tc.root {
				want = tc.want(i)
			}
			if v[i] != want {
				r.fatalf("ReduceInt64 root %d %v: v[%d] = %d, want %d", tc.root, tc.op, i, v[i], want)
			}
		}
	}
	if err := c.ReduceInt64(ctx, mpiTestRanks, Sum, []int64{1}); err == nil {
		r.fatalf("ReduceInt64 to root %d succeeded", mpiTestRanks)
	}

	// Gather with differing lengths, one of them empty, to two roots; then
	// with every piece empty.
	lens := []int{3, 0, 100000, 7}
	piece := func(rk int) []byte { return bytes.Repeat([]byte{byte('a' + rk)}, lens[rk]) }
	for _, root := range []int{1, 0} {
		got, err := c.Gather(ctx, root, piece(rank))
		r.no(err, fmt.Sprintf("Gather root %d", root))
		if rank != root {
			if got != nil {
				r.fatalf("Gather root %d: non-root got %d pieces", root, len(got))
			}
			continue
		}
		if len(got) != mpiTestRanks {
			r.fatalf("Gather root %d: %d pieces", root, len(got))
		}
		for rk, b := range got {
			if !bytes.Equal(b, piece(rk)) || cap(b) != len(b) {
				r.fatalf("Gather root %d: piece %d len %d cap %d, want len %d", root, rk, len(b), cap(b), lens[rk])
			}
		}
	}
	got, err := c.Gather(ctx, 2, nil)
	r.no(err, "Gather empty")
	if rank == 2 {
		if len(got) != mpiTestRanks {
			r.fatalf("Gather empty: %d pieces", len(got))
		}
		for rk, b := range got {
			if len(b) != 0 {
				r.fatalf("Gather empty: piece %d has %d bytes", rk, len(b))
			}
		}
	}

	// Bcast from root 2: 1 MiB, then nothing. Non-roots pass junk of
	// another length and must get a fresh slice.
	mib := make([]byte, 1<<20)
	for i := range mib {
		mib[i] = byte(i*7 + i>>8)
	}
	in := []byte("junk")
	if rank == 2 {
		in = mib
	}
	out, err := c.Bcast(ctx, 2, in)
	r.no(err, "Bcast 1MiB")
	if !bytes.Equal(out, mib) {
		r.fatalf("Bcast 1MiB: got %d bytes, not root's", len(out))
	}
	if rank != 2 && &out[0] == &in[0] {
		r.fatalf("Bcast: non-root result aliases its input")
	}
	in = []byte("junk")
	if rank == 2 {
		in = nil
	}
	out, err = c.Bcast(ctx, 2, in)
	r.no(err, "Bcast empty")
	if len(out) != 0 {
		r.fatalf("Bcast empty: got %d bytes", len(out))
	}

	// LocalRank: one host, so local ranks are 0..size-1, each once, and
	// agree with what mpirun says.
	seen := make([]int64, mpiTestRanks)
	if lr := c.LocalRank(); lr < 0 || lr >= mpiTestRanks {
		r.fatalf("LocalRank %d", lr)
	} else {
		seen[lr] = 1
	}
	r.no(c.AllreduceInt64(ctx, Sum, seen), "Allreduce local ranks")
	for lr, k := range seen {
		if k != 1 {
			r.fatalf("local rank %d held by %d ranks", lr, k)
		}
	}
	if env := os.Getenv("OMPI_COMM_WORLD_LOCAL_RANK"); env != "" && env != strconv.Itoa(c.LocalRank()) {
		r.fatalf("LocalRank %d, OMPI_COMM_WORLD_LOCAL_RANK %s", c.LocalRank(), env)
	}

	// Split into even and odd ranks with keys reversing the order, and run
	// collectives on the halves.
	sc, err := c.Split(ctx, rank%2, -rank)
	r.no(err, "Split even/odd")
	if sc == nil {
		r.fatalf("Split even/odd: nil comm")
	}
	wantSub := 1 // world 0 and 1 are last in their halves
	if rank >= 2 {
		wantSub = 0
	}
	if sc.Size() != 2 || sc.Rank() != wantSub || sc.LocalRank() != wantSub || sc.Kind() != "mpi" || sc.Host() != c.Host() {
		r.fatalf("sub comm: size %d rank %d local %d kind %q host %q; want size 2 rank %d",
			sc.Size(), sc.Rank(), sc.LocalRank(), sc.Kind(), sc.Host(), wantSub)
	}
	sum := []int64{int64(rank)}
	r.no(sc.AllreduceInt64(ctx, Sum, sum), "sub Allreduce")
	if want := int64(2 + 2*(rank%2)); sum[0] != want { // 0+2 or 1+3
		r.fatalf("sub Allreduce = %d, want %d", sum[0], want)
	}
	sg, err := sc.Gather(ctx, 0, []byte{byte(rank)})
	r.no(err, "sub Gather")
	if sc.Rank() == 0 {
		want := fmt.Sprint([][]byte{{byte(rank)}, {byte(rank - 2)}})
		if fmt.Sprint(sg) != want {
			r.fatalf("sub Gather = %v, want %v", sg, want)
		}
	}
	r.no(sc.Barrier(ctx), "sub Barrier")
	r.no(sc.Close(), "sub Close")
	r.no(sc.Close(), "sub Close again")
	if err := sc.Barrier(ctx); err == nil {
		r.fatalf("Barrier on a closed sub comm succeeded")
	}

	// Undefined color: rank 0 opts out and gets a nil interface.
	color := 5
	if rank == 0 {
		color = Undefined
	}
	uc, err := c.Split(ctx, color, 0)
	r.no(err, "Split undefined")
	if rank == 0 {
		if uc != nil {
			r.fatalf("Split Undefined: got %#v, want nil", uc)
		}
	} else {
		if uc == nil || uc.Size() != 3 || uc.Rank() != rank-1 {
			r.fatalf("Split color 5: %v", uc)
		}
		r.no(uc.Barrier(ctx), "Barrier on 3-rank comm")
		r.no(uc.Close(), "Close 3-rank comm")
	}

	// A failing MPI call comes back as *MPIError (MPI_ERRORS_RETURN) and
	// does not abort the job. Every rank passes the same bad color, so the
	// local argument check fails everywhere alike.
	if _, err := c.Split(ctx, -5, 0); err == nil {
		r.fatalf("Split with color -5 succeeded")
	} else {
		var me *MPIError
		if !errors.As(err, &me) || me.Op != "MPI_Comm_split" || me.Msg == "" || me.Code == 0 {
			r.fatalf("Split color -5: %v (%T), want *MPIError from MPI_Comm_split", err, err)
		}
	}
	r.no(c.Barrier(ctx), "Barrier after MPI error")

	// A cancelled context fails before any MPI call, on every rank alike.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Barrier(cctx); !errors.Is(err, context.Canceled) {
		r.fatalf("Barrier with cancelled ctx: %v", err)
	}
	if _, err := c.Bcast(cctx, 0, nil); !errors.Is(err, context.Canceled) {
		r.fatalf("Bcast with cancelled ctx: %v", err)
	}

	r.no(c.Barrier(ctx), "final Barrier")
	wd.Stop()
	if err := c.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL rank %d: Close: %v\n", rank, err)
		os.Exit(1)
	}
	if err := c.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL rank %d: second Close: %v\n", rank, err)
		os.Exit(1)
	}
	if err := c.Barrier(ctx); err == nil {
		fmt.Fprintf(os.Stderr, "FAIL rank %d: Barrier after Finalize succeeded\n", rank)
		os.Exit(1)
	}
	if _, err := NewMPI(); err == nil {
		fmt.Fprintf(os.Stderr, "FAIL rank %d: NewMPI after Finalize succeeded\n", rank)
		os.Exit(1)
	}
	fmt.Printf("ok rank %d\n", rank)
}

// TestMPIAbort checks that Abort on one rank brings down the job, including
// the ranks blocked in a Barrier that will never complete, and that mpirun
// reports failure.
func TestMPIAbort(t *testing.T) {
	const abortCode = 7
	if !mpiChild(t) {
		const bound = 20 * time.Second
		res := runUnderMPI(t, mpiTestRanks, bound)
		t.Logf("mpirun exit %d after %v", res.exitCode, res.elapsed.Round(time.Millisecond))
		if res.timedOut {
			t.Fatalf("mpirun still running after %v: Abort did not bring the job down\n%s", bound, res.out)
		}
		if res.exitCode == 0 {
			t.Fatalf("mpirun exited 0 after Abort\n%s", res.out)
		}
		if got := okRanks(res.out); len(got) != 0 {
			t.Fatalf("ranks %v got past the Barrier\n%s", got, res.out)
		}
		if !strings.Contains(res.out, "rank 1 aborting") {
			t.Fatalf("rank 1 never reached Abort\n%s", res.out)
		}
		return
	}
	r, wd := startRank(t)
	defer wd.Stop()
	ctx := context.Background()
	r.no(r.c.Barrier(ctx), "Barrier")
	if r.rank == 1 {
		time.Sleep(500 * time.Millisecond) // let the others block
		fmt.Printf("rank 1 aborting\n")
		r.c.Abort(abortCode)
		fmt.Fprintf(os.Stderr, "FAIL rank 1: Abort returned\n")
		os.Exit(1)
	}
	err := r.c.Barrier(ctx)
	// Reaching here means the Barrier completed without rank 1.
	fmt.Printf("ok rank %d (barrier returned %v)\n", r.rank, err)
	os.Exit(1)
}

func TestMPIErrorFormat(t *testing.T) {
	e := &MPIError{Op: "MPI_Bcast", Code: 6, Class: 6, Msg: "MPI_ERR_ROOT: invalid root"}
	want := "spmd: MPI_Bcast: MPI_ERR_ROOT: invalid root (code 6, class 6)"
	if got := e.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	e = &MPIError{Op: "MPI_Barrier", Code: 1234, Class: 16}
	want = "spmd: MPI_Barrier: unknown MPI error (code 1234, class 16)"
	if got := e.Error(); got != want {
		t.Errorf("Error() without Msg = %q, want %q", got, want)
	}
	var me *MPIError
	if err := fmt.Errorf("phase x: %w", e); !errors.As(err, &me) || me.Class != 16 {
		t.Errorf("errors.As through wrapping: %v", me)
	}
}

func TestMPIAvailable(t *testing.T) {
	if !MPIAvailable() {
		t.Fatal("MPIAvailable() is false in the mpi build")
	}
	// MPI_Get_library_version may be called before MPI_Init.
	v := MPILibraryVersion()
	if v == "" || strings.ContainsAny(v, "\n\x00") || v != strings.TrimSpace(v) {
		t.Fatalf("MPILibraryVersion() = %q", v)
	}
	t.Logf("MPI library: %s", v)
}

// TestMPIAlert checks the MPI Alerter: an alert reaches the watchers of its
// tag on every other rank, within a fraction of a second, without blocking
// the alerter; watchers of other tags, and of other communicators, do not
// fire; an alert that arrived before its Watch fires it at once; and Close
// finishes (so mpirun exits 0) with alerts nobody received and a watcher
// left running.
func TestMPIAlert(t *testing.T) {
	if !mpiChild(t) {
		wantEveryRankOK(t)
		return
	}
	mpiAlertChild(t)
}

func mpiAlertChild(t *testing.T) {
	r, wd := startRank(t)
	defer wd.Stop()
	c, rank := r.c, r.rank
	ctx := context.Background()
	const (
		alertDelay = 200 * time.Millisecond
		bound      = 5 * time.Second // generous: 4 ranks share 2 cores
		quiet      = 300 * time.Millisecond
	)
	var al Alerter = c
	expect := func(f <-chan int, want int, what string, since time.Time) time.Duration {
		select {
		case got := <-f:
			if got != want {
				r.fatalf("%s: alert from rank %d, want %d", what, got, want)
			}
			return time.Since(since)
		case <-time.After(bound):
			r.fatalf("%s: no alert within %v", what, bound)
		}
		return 0
	}
	silent := func(f <-chan int, what string) {
		select {
		case got := <-f:
			r.fatalf("%s fired (rank %d)", what, got)
		case <-time.After(quiet):
		}
	}

	// 1. Rank 2 alerts "a"; the others watch "a" and "b" at once on the
	// same communicator, so the two watchers share one listener.
	var fa, fb <-chan int
	var stopA, stopB func()
	if rank != 2 {
		fa, stopA = al.Watch("a")
		fb, stopB = al.Watch("b")
	}
	r.no(c.Barrier(ctx), "Barrier 1")
	start := time.Now()
	if rank == 2 {
		time.Sleep(alertDelay)
		t0 := time.Now()
		al.Alert("a")
		// Nobody ever watches "nobody" on ranks 0 and 3: Close drains it.
		al.Alert("nobody")
		if d := time.Since(t0); d > 100*time.Millisecond {
			r.fatalf("Alert blocked for %v", d)
		}
	} else {
		d := expect(fa, 2, `watcher of "a"`, start)
		fmt.Printf("rank %d: alert received %v after it was sent\n", rank, (d - alertDelay).Round(time.Millisecond))
		silent(fb, `watcher of "b"`)
		stopA()
		stopA() // idempotent
		stopB()
		stopB()
	}
	r.no(c.Barrier(ctx), "Barrier 2")

	// 2. An alert that arrived before its Watch fires it at once (rank 1
	// either received "nobody" with the listener of step 1 or receives it
	// now); a stale alert of another tag fires nothing (rank 3 receives
	// "nobody" while watching "c").
	switch rank {
	case 1:
		f, stop := al.Watch("nobody")
		expect(f, 2, `late watcher of "nobody"`, time.Now())
		stop()
	case 3:
		f, stop := al.Watch("c")
		silent(f, `watcher of "c"`)
		stop()
	}
	r.no(c.Barrier(ctx), "Barrier 3")

	// 3. Sub-communicators: the odd half {1, 3} and the even half {0, 2}.
	// World rank 3 alerts "x" on the odd half; world rank 1 learns world
	// rank 3 (as the rendezvous names world ranks); the even half's
	// watchers of "x", on their own communicator, do not fire.
	sc, err := c.Split(ctx, rank%2, rank)
	r.no(err, "Split")
	sal, ok := sc.(Alerter)
	if !ok {
		r.fatalf("a sub-communicator of *MPI is not an Alerter")
	}
	var fx <-chan int
	var stopX func()
	if rank != 3 {
		fx, stopX = sal.Watch("x")
	}
	r.no(sc.Barrier(ctx), "sub Barrier")
	switch rank {
	case 3:
		sal.Alert("x")
	case 1:
		expect(fx, 3, `sub watcher of "x"`, time.Now())
	default:
		silent(fx, `even half's watcher of "x"`)
	}
	if stopX != nil {
		stopX()
	}
	r.no(sc.Barrier(ctx), "sub Barrier 2")
	r.no(sc.Close(), "sub Close")
	if f, stop := sal.Watch("y"); f == nil {
		r.fatalf("Watch on a closed communicator returned a nil channel")
	} else {
		stop()
	}
	sal.Alert("y") // a no-op once closed

	// 4. Close with an alert nobody receives and, on rank 3, a watcher
	// never stopped: Close drains and stops, and MPI_Finalize returns.
	if rank == 0 {
		al.Alert("late")
	}
	if rank == 3 {
		al.Watch("never")
	}
	r.no(c.Barrier(ctx), "final Barrier")
	wd.Stop()
	if err := c.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL rank %d: Close: %v\n", rank, err)
		os.Exit(1)
	}
	fmt.Printf("ok rank %d\n", rank)
}

// TestMPIReport: every word of a report (ReportWords of them) reaches rank
// 0 as sent, the newest of each rank for the tag Collect asks for, and a
// report of another tag is left out.
func TestMPIReport(t *testing.T) {
	if !mpiChild(t) {
		wantEveryRankOK(t)
		return
	}
	r, wd := startRank(t)
	defer wd.Stop()
	c, rank := r.c, r.rank
	ctx := context.Background()
	// Rank r's report: r*100 + word index + 1, so every word differs.
	words := func(r int) []int64 {
		v := make([]int64, ReportWords)
		for i := range v {
			v[i] = int64(r*100 + i + 1)
		}
		return v
	}
	if rank != 0 {
		c.Report("0.4.0.progress", make([]int64, ReportWords)) // replaced by the next
		c.Report("0.4.0.progress", words(rank))
		c.Report("0.4.1.progress", []int64{-7, -7, -7, -7, -7, -7}) // another tag
	}
	r.no(c.Barrier(ctx), "Barrier")
	if rank == 0 {
		latest := make([][]int64, c.Size())
		for i := range latest {
			latest[i] = make([]int64, ReportWords)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			c.Collect("0.4.0.progress", latest)
			all := true
			for s := 1; s < c.Size(); s++ {
				if fmt.Sprint(latest[s]) != fmt.Sprint(words(s)) {
					all = false
				}
			}
			if all {
				break
			}
			if time.Now().After(deadline) {
				r.fatalf("reports collected %v, want rank r's r*100+1 .. r*100+%d", latest, ReportWords)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	r.no(c.Barrier(ctx), "final Barrier")
	wd.Stop()
	if err := c.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL rank %d: Close: %v\n", rank, err)
		os.Exit(1)
	}
	fmt.Printf("ok rank %d\n", rank)
}
