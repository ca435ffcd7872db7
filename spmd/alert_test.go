package spmd

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A step's watch fires when a peer's heartbeat stands still (its node
// crashed, it was SIGKILLed), not only at the next collective; that
// collective then knows the peer is dead at once and names its host.
func TestWatchSeesDeadPeer(t *testing.T) {
	ranks := startRanks(t, 3, RendezvousConfig{Dir: quickDir(t), Heartbeat: testHeartbeat, DeadAfter: testDeadAfter, Host: "nodeX"})
	defer closeAll(t, ranks)
	ranks[2].job.stopHeartbeat()
	fired, stop := ranks[0].Watch("0.3.0.run")
	defer stop()
	select {
	case r := <-fired:
		if r != 2 {
			t.Fatalf("watch fired for rank %d, want 2", r)
		}
	case <-time.After(20 * testDeadAfter):
		t.Fatalf("the watch did not fire %v after rank 2's heartbeat stopped", 20*testDeadAfter)
	}
	err := ranks[0].Barrier(context.Background())
	var re *RankError
	if !errors.Is(err, ErrPeerDead) || !errors.As(err, &re) || re.Rank != 2 || !strings.Contains(err.Error(), "host nodeX") {
		t.Errorf("barrier after the watch: %v; want rank 2 dead, on host nodeX", err)
	}
}

// A peer that left before this rank ever read its heartbeat (it failed in
// a collective that the others had already got past, and closed) fires
// the watch too: during a step every rank has joined, so a missing
// heartbeat is a peer gone.
func TestWatchSeesPeerGoneUnseen(t *testing.T) {
	ranks := startRanks(t, 2, RendezvousConfig{Heartbeat: testHeartbeat, DeadAfter: testDeadAfter})
	defer ranks[0].Close()
	if err := ranks[1].Close(); err != nil {
		t.Fatal(err)
	}
	fired, stop := ranks[0].Watch("0.2.0.run")
	defer stop()
	select {
	case r := <-fired:
		if r != 1 {
			t.Fatalf("watch fired for rank %d, want 1", r)
		}
	case <-time.After(20 * testDeadAfter):
		t.Fatalf("the watch did not fire %v after rank 1 left", 20*testDeadAfter)
	}
}
