package phases

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prism-hpc/prism/report"
)

// The monitor watches one step of one rank from outside the timed loop: it
// reports ops stuck longer than stall_after while they are still stuck (the
// PRISM paper's 5-second openat stall), abandons the step when an op passes
// op_timeout, prints rank 0's progress on long steps, and answers SIGUSR1
// with a snapshot. It only reads the recorders' atomic live counters.

const (
	monitorTick   = 500 * time.Millisecond
	progressAfter = 5 * time.Second // steps shorter than this print no progress
	progressEvery = 5 * time.Second
)

type monitor struct {
	timedOut chan error
	quit     chan struct{}
	wg       sync.WaitGroup
}

func (m *monitor) stop() {
	close(m.quit)
	m.wg.Wait()
}

// usr1 delivers SIGUSR1 to whichever step is running; registered once.
var (
	usr1Once sync.Once
	usr1     chan os.Signal
)

// watchUSR1 takes SIGUSR1 over from its default action (terminate) for the
// whole run, so a user asking for a snapshot never kills a rank.
func watchUSR1() {
	usr1Once.Do(func() {
		usr1 = make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
	})
}

func (e *engine) startMonitor(env *Env, what string, rank0 bool) *monitor {
	watchUSR1()
	m := &monitor{timedOut: make(chan error, 1), quit: make(chan struct{})}
	stallAfter, opTimeout := e.stallLimits(env.spec)
	started := time.Now()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(monitorTick)
		defer t.Stop()
		reported := map[string]bool{}
		lastProgress := started
		drewBar := false
		for {
			select {
			case <-m.quit:
				if drewBar {
					fmt.Fprintln(e.o.Stderr)
				}
				return
			case <-usr1:
				e.printSnapshot(env, what, started, time.Now(), "snapshot")
				continue
			case <-t.C:
			}
			now := time.Now()
			for _, l := range env.live(now) {
				if l.InFlight <= 0 {
					continue
				}
				key := fmt.Sprintf("%s@%d", l.Op, now.Add(-l.InFlight).UnixNano()/int64(time.Millisecond))
				if opTimeout > 0 && l.InFlight >= opTimeout {
					m.timedOut <- env.Errorf("%s: op %s on %s still running after %s: op_timeout = %s exceeded; the storage is not answering", what, l.Op, orUnknown(l.Target), l.InFlight.Round(time.Millisecond), opTimeout)
					return
				}
				if stallAfter > 0 && l.InFlight >= stallAfter && !reported[key] {
					reported[key] = true
					env.addStall()
					fmt.Fprintf(e.o.Stderr, "prism: stall: rank %d: %s %q %s: op %s on %s in flight for %s (stall_after = %s)\n",
						env.WorldRank, env.Kind, env.Name, what, l.Op, orUnknown(l.Target), l.InFlight.Round(time.Millisecond), stallAfter)
				}
			}
			if rank0 && what == "run" && now.Sub(started) >= progressAfter {
				switch {
				case e.tty:
					// On a terminal: one bar, redrawn in place every tick.
					e.printBar(env, started, now)
					drewBar = true
				case now.Sub(lastProgress) >= progressEvery:
					// Under Slurm or in a file: a plain line every 5 s.
					lastProgress = now
					e.printSnapshot(env, what, started, now, "progress")
				}
			}
		}
	}()
	return m
}

// printSnapshot prints this rank's counters for the running step. On rank
// 0 during a run it is the live progress line; the aggregate is estimated
// as rank 0's share times the ranks, and says so.
func (e *engine) printSnapshot(env *Env, what string, started, now time.Time, label string) {
	var done, bytes int64
	for _, l := range env.live(now) {
		done += l.Done
		bytes += l.Bytes
	}
	el := now.Sub(started).Seconds()
	rate, bw := 0.0, 0.0
	if el > 0 {
		rate, bw = float64(done)/el, float64(bytes)/el/(1<<20)
	}
	eta := ""
	if x, ok := env.spec.Phase.(interface{ ExpectedOps() int64 }); ok && rate > 0 && what == "run" {
		if left := x.ExpectedOps() - done; left > 0 {
			eta = fmt.Sprintf(", ETA %s", (time.Duration(float64(left)/rate) * time.Second).Round(time.Second))
		}
	}
	fmt.Fprintf(e.o.Stderr, "prism: %s: rank %d: %s %q %s iter %d: %d ops, %s, %.0f ops/s, %.1f MiB/s, %s elapsed%s (x%d ranks: ~%.0f ops/s)\n",
		label, env.WorldRank, env.Kind, env.Name, what, env.Iteration, done, report.FormatBytes(bytes), rate, bw,
		time.Duration(el*float64(time.Second)).Round(100*time.Millisecond), eta, env.Size, rate*float64(env.Size))
}

// printBar redraws rank 0's progress bar (a terminal only).
func (e *engine) printBar(env *Env, started, now time.Time) {
	var done, bytes int64
	for _, l := range env.live(now) {
		done += l.Done
		bytes += l.Bytes
	}
	el := now.Sub(started)
	frac, eta := -1.0, ""
	if x, ok := env.spec.Phase.(interface{ ExpectedOps() int64 }); ok && x.ExpectedOps() > 0 {
		frac = float64(done) / float64(x.ExpectedOps())
		if frac > 0 && frac < 1 {
			eta = " ETA " + time.Duration(float64(el)*(1-frac)/frac).Round(time.Second).String()
		}
	}
	const width = 30
	bar := strings.Repeat("·", width)
	pct := ""
	if frac >= 0 {
		n := int(min(frac, 1) * width)
		bar = strings.Repeat("#", n) + strings.Repeat("·", width-n)
		pct = fmt.Sprintf(" %3.0f%%", min(frac, 1)*100)
	}
	rate := float64(done) / el.Seconds()
	fmt.Fprintf(e.o.Stderr, "\r%s [%s]%s %d ops %s %.0f ops/s (rank 0) %s%s   ", env.Name, bar, pct, done, report.FormatBytes(bytes), rate, el.Round(time.Second), eta)
}

func orUnknown(s string) string {
	if s == "" {
		return "(file not named by the phase)"
	}
	return s
}

// stallLimits returns the phase's stall_after and op_timeout, the phase's
// own values winning over the plan's.
func (e *engine) stallLimits(s *Spec) (stall, timeout time.Duration) {
	stall, timeout = time.Duration(e.o.Plan.Header.StallAfter), time.Duration(e.o.Plan.Header.OpTimeout)
	if s != nil && s.StallAfter != nil {
		stall = time.Duration(*s.StallAfter)
	}
	if s != nil && s.OpTimeout != nil {
		timeout = time.Duration(*s.OpTimeout)
	}
	return stall, timeout
}
