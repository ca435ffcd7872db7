package spmd

import (
	"strconv"
	"strings"
	"sync"
	"time"
)

// Alerter is implemented by communicators that can tell every member,
// outside of any collective, that one rank has failed: the others then stop
// a long step early instead of finishing it before the error agreement.
// Alerts are best effort; the agreement that follows every step remains
// the source of truth.
type Alerter interface {
	// Alert tells the members watching tag that this rank failed.
	Alert(tag string)
	// Watch delivers the rank of the first alert for tag on the channel,
	// until stop is called.
	Watch(tag string) (fired <-chan int, stop func())
}

var _ Alerter = (*Rendezvous)(nil)

// alertPoll is how often a watcher looks for the alert file: rare enough
// to cost the shared file server little, quick enough that a failed rank
// stops its peers within a fraction of a second.
const alertPoll = 100 * time.Millisecond

func (c *Rendezvous) alertName(tag string) string {
	return "alert." + strings.NewReplacer("/", "_", "\x00", "_").Replace(tag)
}

// Alert publishes an alert file in the communicator's directory, which is
// removed with the communicator.
func (c *Rendezvous) Alert(tag string) {
	if c.Size() == 1 {
		return
	}
	_ = c.publish(c.commRel(), c.alertName(tag), []byte(strconv.Itoa(c.job.rank)))
}

// Watch polls for the alert file of tag by its exact name, for the job's
// abort file, and for the heartbeats of this communicator's other ranks: a
// peer whose heartbeat stands still for DeadAfter (its node crashed, it
// was SIGKILLed) fires the watch with its rank, so a long step stops
// instead of running on until its end meets a collective.
func (c *Rendezvous) Watch(tag string) (<-chan int, func()) {
	fired := make(chan int, 1)
	done := make(chan struct{})
	var once sync.Once
	stop := func() { once.Do(func() { close(done) }) }
	if c.Size() == 1 {
		return fired, stop
	}
	rel := c.commRel() + "/" + c.alertName(tag)
	peers := make([]int, 0, c.Size()-1)
	for r := 0; r < c.Size(); r++ {
		if r != c.rank {
			peers = append(peers, r)
		}
	}
	go func() {
		t := time.NewTicker(alertPoll)
		defer t.Stop()
		lastBeat := time.Now()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if now := time.Now(); now.Sub(lastBeat) >= c.job.beatEvery() {
				lastBeat = now
				if f := c.deadPeer(peers, now, true); f != nil {
					fired <- f.rank
					return
				}
			}
			// An aborted job (a rank that died under the launcher, a
			// peer's Abort) is an alert for every step: its ranks leave
			// their loops and learn the cause at the next collective.
			if f := c.job.aborted(); f != nil {
				fired <- f.rank
				return
			}
			b, err := c.job.read(rel)
			if err != nil {
				continue
			}
			rank, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				rank = -1
			}
			fired <- rank
			return
		}
	}()
	return fired, stop
}
