package phases

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pio "github.com/prism-hpc/prism/io"
)

// The claim protocol of persistclaim.go, driven on one rank per job: each
// Env is an independent job (its own run id and host) on one workdir.

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type claimParams struct {
	Seed int64 `json:"seed"`
}

// fastLease polls and renews every 20ms for the test; the lease stays 5s,
// so that a live claim never looks abandoned on a loaded machine.
func fastLease(t *testing.T) {
	r, l := persistRenew, persistLease
	persistRenew, persistLease = 20*time.Millisecond, 5*time.Second
	t.Cleanup(func() { persistRenew, persistLease = r, l })
}

func jobEnv(t *testing.T, work, run, host string) (*Env, *lockedBuffer) {
	t.Helper()
	log := &lockedBuffer{}
	env := NewEnv("create_dataset", t.TempDir(), log)
	wd, err := pio.OpenDir(work)
	if err != nil {
		t.Fatal(err)
	}
	env.Workdir, env.RunID, env.Host = wd, run, host
	t.Cleanup(func() { wd.Close(); env.Close() })
	return env, log
}

func create(env *Env, wait time.Duration) (*Persistent, error) {
	return CreatePersistent(context.Background(), env, "dataset", "tiny", claimParams{1}, wait)
}

func complete(t *testing.T, env *Env, p *Persistent) {
	t.Helper()
	if err := p.Complete(env, "dataset", "tiny", claimParams{1}, []byte("[]"), 0, 0); err != nil {
		t.Fatalf("complete: %v", err)
	}
}

// deadClaim is a claim on work's dataset whose creator died: never
// renewed, never released, its marker an hour old.
func deadClaim(t *testing.T, work string) *Persistent {
	t.Helper()
	dead, _ := jobEnv(t, work, "run-dead", "hostX")
	pd, err := create(dead, 0)
	if err != nil {
		t.Fatal(err)
	}
	pd.claim.stopRenewing()
	pd.claim = nil // never released: the process is gone
	age(t, pd)
	return pd
}

// age sets the partial marker's times an hour back: a dead creator's.
func age(t *testing.T, p *Persistent) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(p.Root.Path(), PersistPartial), old, old); err != nil {
		t.Fatal(err)
	}
}

// TestPersistClaimRefusedAtOnce: with persist_wait = 0 a second job fails
// at once, naming the directory and the creator's run, host, pid, rank and
// lease; the creator's claim is untouched and completes.
func TestPersistClaimRefusedAtOnce(t *testing.T) {
	fastLease(t)
	work := t.TempDir()
	a, _ := jobEnv(t, work, "run-A", "hostA")
	b, _ := jobEnv(t, work, "run-B", "hostB")
	pa, err := create(a, 0)
	if err != nil || pa.Info != nil || pa.claim == nil {
		t.Fatalf("first job: %v, %+v", err, pa)
	}
	defer pa.Close()
	_, err = create(b, 0)
	if err == nil {
		t.Fatal("second job created it too")
	}
	for _, want := range []string{pa.Root.Path() + " is being created by run run-A on host hostA, pid ", ", rank 0 (its lease renewed ", "persist_wait = 0s: not waiting"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	complete(t, a, pa)
	if _, err := os.Stat(filepath.Join(pa.Root.Path(), PersistPartial)); !os.IsNotExist(err) {
		t.Errorf("partial marker after Complete: %v", err)
	}
}

// TestPersistClaimWaitsThenReuses: a second job waits for the creator and
// reuses the directory once complete, its wait recorded; the creator's
// lease is renewed while it holds it.
func TestPersistClaimWaitsThenReuses(t *testing.T) {
	fastLease(t)
	work := t.TempDir()
	a, _ := jobEnv(t, work, "run-A", "hostA")
	b, logB := jobEnv(t, work, "run-B", "hostB")
	pa, err := create(a, 0)
	if err != nil {
		t.Fatal(err)
	}
	partial := filepath.Join(pa.Root.Path(), PersistPartial)
	fi0, _ := os.Stat(partial)
	var pb *Persistent
	var errB error
	done := make(chan struct{})
	go func() {
		pb, errB = create(b, time.Minute)
		close(done)
	}()
	// Complete only once B is waiting, and after a renewal was seen.
	for !strings.Contains(logB.String(), "waiting for it") {
		time.Sleep(5 * time.Millisecond)
	}
	for tries := 0; ; tries++ {
		if fi, _ := os.Stat(partial); fi.ModTime() != fi0.ModTime() {
			break
		}
		if tries == 2000 { // 10s of 20ms renewals: a hang, not a slow machine
			t.Fatal("the creator's lease is never renewed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	complete(t, a, pa)
	pa.Close()
	<-done
	if errB != nil {
		t.Fatalf("second job: %v\n%s", errB, logB)
	}
	defer pb.Close()
	if pb.Info == nil || pb.Info.RunID != "run-A" || pb.claim != nil {
		t.Errorf("second job did not reuse run-A's dataset: %+v", pb)
	}
	if pb.Waited <= 0 {
		t.Errorf("waited %v", pb.Waited)
	}
}

// TestPersistClaimReleased: a creator whose phase failed (Close without
// Complete) releases the claim; the next job claims it without waiting
// and says it writes an unfinished creation again.
func TestPersistClaimReleased(t *testing.T) {
	fastLease(t)
	work := t.TempDir()
	a, _ := jobEnv(t, work, "run-A", "hostA")
	b, logB := jobEnv(t, work, "run-B", "hostB")
	pa, err := create(a, 0)
	if err != nil {
		t.Fatal(err)
	}
	pa.Close()
	if st := statusOf(mustOpen(t, filepath.Join(work, PersistDir, "tiny-"+hashOf())), "tiny-"+hashOf()); st.Status != "partial" {
		t.Errorf("a released creation is %q, want partial", st.Status)
	}
	pb, err := create(b, 0)
	if err != nil || pb.Info != nil || pb.claim == nil {
		t.Fatalf("after a release: %v, %+v", err, pb)
	}
	defer pb.Close()
	if pb.Waited != 0 || !strings.Contains(logB.String(), "unfinished creation: writing it again") {
		t.Errorf("waited %v; log:\n%s", pb.Waited, logB)
	}
	complete(t, b, pb)
	left, _ := filepath.Glob(filepath.Join(pb.Root.Path(), PersistPartial+"*"))
	if len(left) != 0 {
		t.Errorf("left: %v", left)
	}
}

func hashOf() string {
	_, h, _ := PersistDirName("dataset", "tiny", claimParams{1})
	return h
}

func mustOpen(t *testing.T, dir string) *pio.Dir {
	t.Helper()
	d, err := pio.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestPersistClaimStaleTakenOver: a creator that died (no renewal, an old
// mtime) is taken over even with persist_wait = 0; the dead creator, were
// it to come back, can neither complete nor release the new claim.
func TestPersistClaimStaleTakenOver(t *testing.T) {
	fastLease(t)
	work := t.TempDir()
	a, _ := jobEnv(t, work, "run-A", "hostA")
	b, logB := jobEnv(t, work, "run-B", "hostB")
	pa, err := create(a, 0)
	if err != nil {
		t.Fatal(err)
	}
	pa.claim.stopRenewing() // its process froze, or died
	age(t, pa)
	pb, err := create(b, 0)
	if err != nil || pb.Info != nil || pb.claim == nil {
		t.Fatalf("taking over a dead claim: %v, %+v\n%s", err, pb, logB)
	}
	defer pb.Close()
	if !strings.Contains(logB.String(), "making sure it is abandoned") || !strings.Contains(logB.String(), "unfinished creation: writing it again") {
		t.Errorf("log:\n%s", logB)
	}
	err = pa.Complete(a, "dataset", "tiny", claimParams{1}, []byte("[]"), 0, 0)
	if err == nil || !strings.Contains(err.Error(), "taken over by run run-B on host hostB") {
		t.Errorf("the dead creator's Complete: %v", err)
	}
	if _, err := os.Stat(filepath.Join(pb.Root.Path(), PersistList)); !os.IsNotExist(err) {
		t.Errorf("the dead creator wrote its file list: %v", err)
	}
	pa.Close() // must not release run-B's claim
	if _, err := os.Stat(filepath.Join(pb.Root.Path(), PersistMarker)); !os.IsNotExist(err) {
		t.Errorf("the dead creator wrote a marker: %v", err)
	}
	if pb.claim.check() != nil {
		t.Fatalf("run-B's claim lost: %v", pb.claim.check())
	}
	complete(t, b, pb)
}

// TestPersistClaimTakersRace: many jobs find one dead claim at once:
// exactly one takes it over and writes; every other waits and reuses.
func TestPersistClaimTakersRace(t *testing.T) {
	fastLease(t)
	work := t.TempDir()
	pd := deadClaim(t, work)
	const n = 8
	var wg sync.WaitGroup
	ps := make([]*Persistent, n)
	errs := make([]error, n)
	envs := make([]*Env, n)
	for i := range n {
		envs[i], _ = jobEnv(t, work, "run-"+string(rune('a'+i)), "host")
	}
	for i := range n {
		wg.Go(func() {
			ps[i], errs[i] = create(envs[i], time.Minute)
			if errs[i] == nil && ps[i].Info == nil {
				// The writer completes after a while, so the others are
				// seen waiting on its fresh claim, not on the dead one.
				time.Sleep(100 * time.Millisecond)
				errs[i] = ps[i].Complete(envs[i], "dataset", "tiny", claimParams{1}, []byte("[]"), 0, 0)
			}
		})
	}
	wg.Wait()
	written := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("job %d: %v", i, errs[i])
			continue
		}
		if ps[i].Info == nil || ps[i].Info.RunID == envs[i].RunID {
			written++
		}
		ps[i].Close()
	}
	if written != 1 {
		t.Errorf("%d jobs wrote the dataset, want 1", written)
	}
	b, _ := os.ReadFile(filepath.Join(pd.Root.Path(), PersistMarker))
	var info PersistInfo
	if json.Unmarshal(b, &info) != nil || info.RunID == "run-dead" {
		t.Errorf("marker: %s", b)
	}
}

// TestPersistClaimSkewedClockKept: a live creator whose clock is an hour
// behind (its renewals stamp old times) is never taken over: the second
// job sees the lease change as it watches, and gives up after
// persist_wait naming the clocks.
func TestPersistClaimSkewedClockKept(t *testing.T) {
	fastLease(t)
	// Renewals every 200ms watched for 1s: margin for a loaded machine.
	persistRenew = 200 * time.Millisecond
	work := t.TempDir()
	a, _ := jobEnv(t, work, "run-A", "hostA")
	b, _ := jobEnv(t, work, "run-B", "hostB")
	pa, err := create(a, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Close()
	pa.claim.stopRenewing()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // run-A's renewals, by its clock
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(persistRenew / 4):
			}
			then := time.Now().Add(-time.Hour)
			os.Chtimes(filepath.Join(pa.Root.Path(), PersistPartial), then, then)
		}
	}()
	age(t, pa)
	pb, err := create(b, 200*time.Millisecond)
	close(stop)
	<-done
	if pb != nil {
		pb.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "its lease is renewed, though its time is 1h0m0s behind") {
		t.Errorf("second job: %v", err)
	}
	if pa.claim.check() != nil {
		t.Errorf("run-A's claim was taken: %v", pa.claim.check())
	}
}

// TestPersistTakeOverLate: a taker that judged a claim stale but comes
// after another taker won it must not replace the winner's fresh claim,
// although its election name is free again (the winner's file became the
// marker).
func TestPersistTakeOverLate(t *testing.T) {
	fastLease(t)
	work := t.TempDir()
	pd := deadClaim(t, work)
	judged, err := readClaim(pd.Root)
	if err != nil || judged == nil {
		t.Fatal(judged, err)
	}
	x, _ := jobEnv(t, work, "run-X", "hostX")
	y, _ := jobEnv(t, work, "run-Y", "hostY")
	clx, err := takeOver(x, pd.Root, judged, PersistInfo{Prism: "persistent", RunID: "run-X"})
	if err != nil || clx == nil {
		t.Fatalf("first taker: %v %v", clx, err)
	}
	defer clx.release()
	cly, err := takeOver(y, pd.Root, judged, PersistInfo{Prism: "persistent", RunID: "run-Y"})
	if cly != nil || err != nil {
		t.Errorf("the late taker won too (%v)", err)
		cly.release()
	}
	if err := clx.check(); err != nil {
		t.Errorf("the winner's claim: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(pd.Root.Path(), claimTaken+"*")); len(left) != 0 {
		t.Errorf("election files left: %v", left)
	}
}

// TestPersistRemoveRefusesClaimed: prism datasets rm leaves a directory
// whose creation holds a fresh lease, naming the creator, and removes it
// once the claim is released.
func TestPersistRemoveRefusesClaimed(t *testing.T) {
	fastLease(t)
	work := t.TempDir()
	a, _ := jobEnv(t, work, "run-A", "hostA")
	pa, err := create(a, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = RemovePersistent(work, "tiny")
	if err == nil || !strings.Contains(err.Error(), "it is being created by run run-A on host hostA") {
		t.Errorf("rm under a creation: %v", err)
	}
	pa.Close()
	if _, err := RemovePersistent(work, "tiny"); err != nil {
		t.Errorf("rm after the release: %v", err)
	}
}
