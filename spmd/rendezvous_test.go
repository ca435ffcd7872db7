package spmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Quick timings for tests that wait for a dead or missing rank; the others
// use the defaults, which they never come near.
const (
	testHeartbeat = 20 * time.Millisecond
	testDeadAfter = 300 * time.Millisecond
	// slack absorbs scheduling on a loaded machine and -race; the tests
	// check that waits end, not how fast.
	slack = 10 * time.Second
)

// quickDir is a fresh directory for a rendezvous whose live ranks must not
// be taken for dead after testDeadAfter: in /dev/shm (tmpfs) where there
// is one. A heartbeat is a file written and renamed every testHeartbeat;
// on a disk that fsync-heavy tests share (make test runs packages side by
// side), a journal commit can hold that rename past testDeadAfter, and a
// live bystander would be named dead instead of the rank the test stopped.
func quickDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/dev/shm", "prism-spmd-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// startRanks makes n in-process ranks of one job in a fresh directory,
// each with a Rendezvous of its own, as n processes would.
func startRanks(t *testing.T, n int, cfg RendezvousConfig) []*Rendezvous {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	cfg.Size = n
	ranks := make([]*Rendezvous, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			cfg := cfg
			cfg.Rank = r
			ranks[r], errs[r] = NewRendezvous(context.Background(), cfg)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: NewRendezvous: %v", r, err)
		}
	}
	return ranks
}

// onEach runs f on every rank concurrently and fails the test with every
// rank's error.
func onEach(t *testing.T, ranks []*Rendezvous, f func(c *Rendezvous) error) {
	t.Helper()
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for r, c := range ranks {
		if c == nil {
			continue
		}
		wg.Go(func() { errs[r] = f(c) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

func closeAll(t *testing.T, ranks []*Rendezvous) {
	t.Helper()
	onEach(t, ranks, func(c *Rendezvous) error { return c.Close() })
}

func TestRendezvousCollectives(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) {
			ranks := startRanks(t, n, RendezvousConfig{Host: "node"})
			ctx := context.Background()
			sumRanks := int64(n * (n - 1) / 2)
			wantFloat := 0.0 // summed in rank order, as rank 0 does
			for r := range n {
				wantFloat += 0.1 * float64(r)
			}
			last := n - 1
			onEach(t, ranks, func(c *Rendezvous) error {
				r := c.Rank()
				if c.Size() != n || c.LocalRank() != r || c.Host() != "node" || c.Kind() != "rendezvous" {
					return fmt.Errorf("identity: size %d local %d host %q kind %q", c.Size(), c.LocalRank(), c.Host(), c.Kind())
				}
				if err := c.Barrier(ctx); err != nil {
					return err
				}

				for _, tc := range []struct {
					op   Op
					want []int64
				}{
					{Sum, []int64{sumRanks, int64(n), -sumRanks}},
					{Min, []int64{0, 1, int64(-last)}},
					{Max, []int64{int64(last), 1, 0}},
				} {
					v := []int64{int64(r), 1, int64(-r)}
					if err := c.AllreduceInt64(ctx, tc.op, v); err != nil {
						return err
					}
					if !equal(v, tc.want) {
						return fmt.Errorf("AllreduceInt64 %v = %v, want %v", tc.op, v, tc.want)
					}
				}
				empty := []int64{}
				if err := c.AllreduceInt64(ctx, Sum, empty); err != nil {
					return fmt.Errorf("empty AllreduceInt64: %w", err)
				}

				for _, tc := range []struct {
					op   Op
					want []float64
				}{
					{Sum, []float64{wantFloat, -float64(n)}},
					{Min, []float64{0, -1}},
					{Max, []float64{0.1 * float64(last), -1}},
				} {
					v := []float64{0.1 * float64(r), -1}
					if err := c.AllreduceFloat64(ctx, tc.op, v); err != nil {
						return err
					}
					// Exact comparison: every rank must get the same bits.
					if !equal(v, tc.want) {
						return fmt.Errorf("AllreduceFloat64 %v = %v, want %v", tc.op, v, tc.want)
					}
				}

				for _, root := range []int{0, last} {
					v := []int64{int64(r + 1), int64(r)}
					if err := c.ReduceInt64(ctx, root, Sum, v); err != nil {
						return err
					}
					if want := []int64{sumRanks + int64(n), sumRanks}; r == root && !equal(v, want) {
						return fmt.Errorf("ReduceInt64 root %d = %v, want %v", root, v, want)
					}
				}

				for _, root := range []int{last, 0} {
					mine := bytes.Repeat([]byte{byte('a' + r)}, r) // rank 0's is empty
					all, err := c.Gather(ctx, root, mine)
					if err != nil {
						return err
					}
					if r != root {
						if all != nil {
							return fmt.Errorf("Gather root %d: non-root got %q", root, all)
						}
						continue
					}
					if len(all) != n {
						return fmt.Errorf("Gather root %d: %d parts, want %d", root, len(all), n)
					}
					for i, b := range all {
						if want := bytes.Repeat([]byte{byte('a' + i)}, i); !bytes.Equal(b, want) {
							return fmt.Errorf("Gather root %d: part %d = %q, want %q", root, i, b, want)
						}
					}
				}

				for _, msg := range []string{"from the last rank", ""} {
					var b []byte
					if r == last {
						b = []byte(msg)
					}
					got, err := c.Bcast(ctx, last, b)
					if err != nil {
						return err
					}
					if string(got) != msg {
						return fmt.Errorf("Bcast = %q, want %q", got, msg)
					}
				}
				return nil
			})
			closeAll(t, ranks)
		})
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRendezvousLocalRank(t *testing.T) {
	hosts := []string{"a", "b", "a", "b", "a"}
	want := []int{0, 0, 1, 1, 2}
	dir := t.TempDir()
	ranks := make([]*Rendezvous, len(hosts))
	var wg sync.WaitGroup
	for r, h := range hosts {
		wg.Go(func() {
			c, err := NewRendezvous(context.Background(), RendezvousConfig{Dir: dir, Rank: r, Size: len(hosts), Host: h})
			if err != nil {
				t.Error(err)
			}
			ranks[r] = c
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	onEach(t, ranks, func(c *Rendezvous) error {
		r := c.Rank()
		if c.Host() != hosts[r] || c.LocalRank() != want[r] {
			return fmt.Errorf("host %q local rank %d, want %q %d", c.Host(), c.LocalRank(), hosts[r], want[r])
		}
		// Rank 0 leaves, so ranks 2 and 4 are host a's first and second.
		color := 0
		if r == 0 {
			color = 1
		}
		sub, err := c.Split(context.Background(), color, r)
		if err != nil {
			return err
		}
		defer sub.Close()
		wantLocal := []int{0, 0, 0, 1, 1}[r]
		if sub.LocalRank() != wantLocal {
			return fmt.Errorf("sub-communicator local rank %d, want %d", sub.LocalRank(), wantLocal)
		}
		return nil
	})
	closeAll(t, ranks)
}

func TestRendezvousSplit(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) {
			ranks := startRanks(t, n, RendezvousConfig{})
			ctx := context.Background()
			onEach(t, ranks, func(c *Rendezvous) error {
				r := c.Rank()
				// Two colors by parity, keys reversing the order.
				sub, err := c.Split(ctx, r%2, -r)
				if err != nil {
					return err
				}
				var members []int // old ranks of this color, in new rank order
				for o := n - 1; o >= 0; o-- {
					if o%2 == r%2 {
						members = append(members, o)
					}
				}
				wantRank := 0
				for i, o := range members {
					if o == r {
						wantRank = i
					}
				}
				if sub.Rank() != wantRank || sub.Size() != len(members) || sub.LocalRank() != wantRank {
					return fmt.Errorf("split: rank %d size %d local %d, want rank %d size %d",
						sub.Rank(), sub.Size(), sub.LocalRank(), wantRank, len(members))
				}
				v := []int64{int64(r)}
				if err := sub.AllreduceInt64(ctx, Sum, v); err != nil {
					return err
				}
				var want int64
				for _, o := range members {
					want += int64(o)
				}
				if v[0] != want {
					return fmt.Errorf("allreduce on color %d = %d, want %d", r%2, v[0], want)
				}
				// Bcast from sub-rank 0, which is the highest old rank.
				got, err := sub.Bcast(ctx, 0, []byte(fmt.Sprint(r)))
				if err != nil {
					return err
				}
				if string(got) != fmt.Sprint(members[0]) {
					return fmt.Errorf("sub Bcast = %q, want %d", got, members[0])
				}
				if err := sub.Close(); err != nil {
					return err
				}

				// Odd ranks opt out.
				color := 0
				if r%2 == 1 {
					color = Undefined
				}
				sub, err = c.Split(ctx, color, r)
				if err != nil {
					return err
				}
				if color == Undefined {
					if sub != nil {
						return fmt.Errorf("Undefined color got %v, want nil", sub)
					}
					return c.Barrier(ctx)
				}
				if err := sub.Barrier(ctx); err != nil {
					return err
				}
				if sub.Rank() != r/2 || sub.Size() != (n+1)/2 {
					return fmt.Errorf("even split: rank %d size %d", sub.Rank(), sub.Size())
				}
				if err := sub.Close(); err != nil {
					return err
				}
				return c.Barrier(ctx)
			})
			closeAll(t, ranks)
		})
	}
}

// TestRendezvousCleanup runs many collectives and checks that their files
// do not pile up, and that nothing is left once every rank has closed.
func TestRendezvousCleanup(t *testing.T) {
	dir := t.TempDir()
	const n = 3
	ranks := startRanks(t, n, RendezvousConfig{Dir: dir})
	ctx := context.Background()
	onEach(t, ranks, func(c *Rendezvous) error {
		for i := range 200 {
			v := []int64{int64(i)}
			if err := c.AllreduceInt64(ctx, Max, v); err != nil {
				return err
			}
			if v[0] != int64(i) {
				return fmt.Errorf("collective %d: got %d", i, v[0])
			}
			if _, err := c.Gather(ctx, n-1, []byte("x")); err != nil {
				return err
			}
		}
		return nil
	})
	if files := countFiles(t, filepath.Join(dir, commDir)); files > 2*n {
		t.Errorf("%d files left under %s after 400 collectives, want at most %d", files, commDir, 2*n)
	}
	closeAll(t, ranks)
	if files := countFiles(t, dir); files != 0 {
		t.Errorf("%d files left in %s after Close", files, dir)
	}
}

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			t.Logf("left: %s", path)
			n++
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return n
}

// waitOthers runs a Barrier on every rank but skip and returns their errors
// and how long the slowest took.
func waitOthers(ranks []*Rendezvous, skip int, ctx context.Context) (map[int]error, time.Duration) {
	start := time.Now()
	errs := make(map[int]error)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for r, c := range ranks {
		if r == skip {
			continue
		}
		wg.Go(func() {
			err := c.Barrier(ctx)
			mu.Lock()
			errs[r] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	return errs, time.Since(start)
}

// checkRankErrors checks that every error is a RankError naming rank and
// wrapping target.
func checkRankErrors(t *testing.T, errs map[int]error, target error, rank int) {
	t.Helper()
	for r, err := range errs {
		t.Logf("rank %d: %v", r, err)
		var re *RankError
		if !errors.Is(err, target) || !errors.As(err, &re) || re.Rank != rank || re.Op != "Barrier" {
			t.Errorf("rank %d: got %v, want a Barrier RankError for rank %d wrapping %q", r, err, rank, target)
		}
	}
}

func TestRendezvousTimeout(t *testing.T) {
	for _, missing := range []int{2, 0} {
		t.Run(fmt.Sprint("missing=", missing), func(t *testing.T) {
			dir := t.TempDir()
			const timeout = 500 * time.Millisecond
			ranks := startRanks(t, 3, RendezvousConfig{Dir: dir, Timeout: timeout})
			defer closeAll(t, ranks)
			errs, took := waitOthers(ranks, missing, context.Background())
			checkRankErrors(t, errs, ErrTimeout, missing)
			for r, err := range errs {
				if err != nil && !strings.Contains(err.Error(), dir) {
					t.Errorf("rank %d: error %q does not name the directory", r, err)
				}
			}
			if took > timeout+slack {
				t.Errorf("timeout took %v", took)
			}
			// The communicator is out of step now, and says so.
			if err := ranks[(missing+1)%3].Barrier(context.Background()); !errors.Is(err, ErrTimeout) {
				t.Errorf("after a timeout: %v, want the original timeout", err)
			}
		})
	}
}

func TestRendezvousAbort(t *testing.T) {
	ranks := startRanks(t, 3, RendezvousConfig{})
	defer closeAll(t, ranks)
	ctx := context.Background()
	if err := ranks[1].writeAbort(5, "disk on fire"); err != nil {
		t.Fatal(err)
	}
	// A second abort does not replace the first, which is the cause.
	if err := ranks[2].writeAbort(6, "consequence"); err != nil {
		t.Fatal(err)
	}
	// Rank 1 never arrives (it would have exited); rank 2's wait in a
	// collective is where it notices.
	errs, took := waitOthers(ranks, 1, ctx)
	checkRankErrors(t, errs, ErrAborted, 1)
	for r, err := range errs {
		if err != nil && !strings.Contains(err.Error(), "disk on fire") {
			t.Errorf("rank %d: error %q lacks the reason", r, err)
		}
	}
	if took > slack {
		t.Errorf("noticing the abort took %v", took)
	}
	// A new job in the same directory refuses to start.
	_, err := NewRendezvous(ctx, RendezvousConfig{Dir: ranks[0].job.dir, Rank: 0, Size: 1})
	if !errors.Is(err, ErrAborted) {
		t.Errorf("NewRendezvous in an aborted job's directory: %v", err)
	}
}

func TestRendezvousDeadPeer(t *testing.T) {
	for _, dead := range []int{2, 0} {
		t.Run(fmt.Sprint("dead=", dead), func(t *testing.T) {
			ranks := startRanks(t, 3, RendezvousConfig{Dir: quickDir(t), Heartbeat: testHeartbeat, DeadAfter: testDeadAfter})
			defer closeAll(t, ranks)
			ranks[dead].job.stopHeartbeat()
			errs, took := waitOthers(ranks, dead, context.Background())
			checkRankErrors(t, errs, ErrPeerDead, dead)
			if took > testDeadAfter+slack {
				t.Errorf("detecting the dead peer took %v", took)
			}
		})
	}
}

func TestRendezvousCancel(t *testing.T) {
	for _, waiter := range []int{0, 1} {
		t.Run(fmt.Sprint("waiter=", waiter), func(t *testing.T) {
			ranks := startRanks(t, 2, RendezvousConfig{})
			defer closeAll(t, ranks)
			ctx, cancel := context.WithCancel(context.Background())
			cancelledAt := make(chan time.Time, 1)
			time.AfterFunc(50*time.Millisecond, func() {
				cancelledAt <- time.Now()
				cancel()
			})
			err := ranks[waiter].Barrier(ctx) // the other rank never comes
			returned := time.Now()
			cancelled := <-cancelledAt
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			t.Logf("returned %v after cancel", returned.Sub(cancelled))
			if returned.Sub(cancelled) > 2*time.Second {
				t.Errorf("returned %v after cancel", returned.Sub(cancelled))
			}
			// A context cancelled before the collective leaves the
			// communicator usable: nothing was sent.
			if err := ranks[1-waiter].Barrier(ctx); !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled before start: %v", err)
			}
		})
	}
}

func TestRendezvousMismatch(t *testing.T) {
	ranks := startRanks(t, 3, RendezvousConfig{})
	defer closeAll(t, ranks)
	ctx := context.Background()
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r, c := range ranks {
		wg.Go(func() {
			if r == 2 {
				errs[r] = c.AllreduceInt64(ctx, Sum, []int64{1, 2})
			} else {
				errs[r] = c.AllreduceInt64(ctx, Sum, []int64{1})
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		var re *RankError
		if !errors.As(err, &re) || re.Rank != 2 || !strings.Contains(err.Error(), "out of step") {
			t.Errorf("rank %d: got %v, want an out-of-step error naming rank 2", r, err)
		}
	}
}

func TestRendezvousBadInput(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, cfg := range []RendezvousConfig{
		{Rank: 0, Size: 1},
		{Dir: dir, Rank: 0, Size: 0},
		{Dir: dir, Rank: 2, Size: 2},
		{Dir: dir, Rank: -1, Size: 2},
		{Dir: dir, Rank: 0, Size: 1, Timeout: -time.Second},
		{Dir: dir, Rank: 0, Size: 1, Heartbeat: time.Second, DeadAfter: time.Second},
		{Dir: filepath.Join(dir, "file", "sub"), Rank: 0, Size: 1},
	} {
		if cfg.Dir != "" {
			os.WriteFile(filepath.Join(dir, "file"), nil, 0o666)
		}
		if c, err := NewRendezvous(ctx, cfg); err == nil {
			c.Close()
			t.Errorf("NewRendezvous(%+v) succeeded", cfg)
		}
	}

	ranks := startRanks(t, 2, RendezvousConfig{})
	c := ranks[0]
	if err := c.ReduceInt64(ctx, 2, Sum, nil); err == nil {
		t.Error("ReduceInt64 with root 2 of 2 succeeded")
	}
	if _, err := c.Gather(ctx, -1, nil); err == nil {
		t.Error("Gather with root -1 succeeded")
	}
	if _, err := c.Bcast(ctx, 5, nil); err == nil {
		t.Error("Bcast with root 5 succeeded")
	}
	if err := c.AllreduceFloat64(ctx, Op(9), []float64{1}); err == nil {
		t.Error("AllreduceFloat64 with an unknown op succeeded")
	}
	// A bad color fails on every rank, not just the one that passed it.
	errs := make([]error, 2)
	onEach(t, ranks, func(c *Rendezvous) error {
		_, errs[c.Rank()] = c.Split(ctx, -7*c.Rank(), 0)
		return nil
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "color -7") {
			t.Errorf("rank %d: Split with color -7 on rank 1: %v", r, err)
		}
	}
	closeAll(t, ranks)
	if err := c.Barrier(ctx); err == nil {
		t.Error("Barrier after Close succeeded")
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestPack(t *testing.T) {
	parts := [][]byte{nil, []byte("a"), bytes.Repeat([]byte{7}, 300), {}}
	got, err := unpack(pack(parts), len(parts))
	if err != nil {
		t.Fatal(err)
	}
	for i := range parts {
		if !bytes.Equal(got[i], parts[i]) {
			t.Errorf("part %d: %q", i, got[i])
		}
	}
	for _, bad := range [][]byte{{0x80}, {5, 'a'}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}} {
		if _, err := unpack(bad, 1); err == nil {
			t.Errorf("unpack(%v) succeeded", bad)
		}
	}
	if _, err := unpack(pack(parts), 3); err == nil {
		t.Error("unpack with the wrong count succeeded")
	}
	var v [1]float64
	if err := decodeWords([]byte{1, 2, 3}, v[:]); err == nil {
		t.Error("decodeWords of 3 bytes succeeded")
	}
}

func TestRendezvousAlert(t *testing.T) {
	dir := t.TempDir()
	comms := make([]*Rendezvous, 3)
	var wg sync.WaitGroup
	for i := range comms {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := NewRendezvous(context.Background(), RendezvousConfig{Dir: dir, Rank: i, Size: 3})
			if err != nil {
				t.Error(err)
				return
			}
			comms[i] = c
		}(i)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	w0, stop0 := comms[0].Watch("phase-1.run")
	defer stop0()
	other, stopOther := comms[1].Watch("phase-2.run")
	defer stopOther()
	comms[2].Alert("phase-1.run")
	select {
	case r := <-w0:
		if r != 2 {
			t.Fatalf("alert from rank %d, want 2", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("alert never arrived")
	}
	select {
	case r := <-other:
		t.Fatalf("a watcher of another tag fired (rank %d)", r)
	case <-time.After(3 * alertPoll):
	}
	for i := range comms {
		wg.Add(1)
		go func(i int) { defer wg.Done(); comms[i].Close() }(i)
	}
	wg.Wait()
	if ents, _ := os.ReadDir(filepath.Join(dir, commDir)); len(ents) != 0 {
		t.Errorf("alert files left behind: %v", ents)
	}
}

// Align's second barrier polls at alignPoll at most, while the plain
// barrier before it backs off to pollMax for a rank that waits long: that
// cap is what releases the ranks together.
func TestRendezvousAlign(t *testing.T) {
	ranks := startRanks(t, 2, RendezvousConfig{Host: "node"})
	var mu sync.Mutex
	maxDelay := map[string]time.Duration{} // collective directory -> longest sleep
	backedOff := make(chan struct{})
	var once sync.Once
	waitSleepHook = func(rank int, dir string, d time.Duration) {
		mu.Lock()
		maxDelay[dir] = max(maxDelay[dir], d)
		mu.Unlock()
		if rank == 1 && d >= pollMax {
			once.Do(func() { close(backedOff) })
		}
	}
	defer func() { waitSleepHook = nil }()

	ctx := context.Background()
	seq := ranks[1].seq
	onEach(t, ranks, func(c *Rendezvous) error {
		if c.Rank() == 0 {
			// Rank 1 waits in the first barrier until its polling has
			// backed off to pollMax: waited for, not slept for, as a
			// loaded machine may start rank 1 later than any sleep.
			select {
			case <-backedOff:
			case <-time.After(slack):
			}
		}
		return c.Align(ctx)
	})
	// The same communicator still works: Align left every rank in step.
	onEach(t, ranks, func(c *Rendezvous) error { return c.Barrier(ctx) })

	first, second := ranks[1].seqDir(seq), ranks[1].seqDir(seq+1)
	mu.Lock()
	defer mu.Unlock()
	if maxDelay[first] <= alignPoll {
		t.Fatalf("the plain barrier's polling reached only %s; the test shows nothing", maxDelay[first])
	}
	if d, ok := maxDelay[second]; ok && d > alignPoll {
		t.Fatalf("Align's second barrier polled at %s, more than alignPoll %s", d, alignPoll)
	}
}
