package phases

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prism-hpc/prism/report"
	"github.com/prism-hpc/prism/spmd"
)

// The monitor watches one step of one rank from outside the timed loop: it
// reports ops stuck longer than stall_after while they are still stuck (the
// PRISM paper's 5-second openat stall), abandons the step when an op passes
// op_timeout, prints rank 0's progress on long steps, and answers SIGUSR1
// with a snapshot. It only reads the recorders' atomic live counters.
// Live progress of the timed Run, over all ranks, is the progress type's
// below.

const monitorTick = 500 * time.Millisecond

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

func (e *engine) startMonitor(env *Env, what string) *monitor {
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
		for {
			select {
			case <-m.quit:
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
					m.timedOut <- env.Errorf("%s: op %s on %s still running after %s: op_timeout = %s exceeded; the storage is not answering", what, l.Op, whole(l.Target, env.Dir), l.InFlight.Round(time.Millisecond), opTimeout)
					return
				}
				if stallAfter > 0 && l.InFlight >= stallAfter && !reported[key] {
					reported[key] = true
					env.addStall()
					fmt.Fprintf(e.o.Stderr, "prism: stall: rank %d: %s %q %s: op %s on %s in flight for %s (stall_after = %s)\n",
						env.WorldRank, env.Kind, env.Name, what, l.Op, whole(l.Target, env.Dir), l.InFlight.Round(time.Millisecond), stallAfter)
				}
			}
		}
	}()
	return m
}

// printSnapshot prints this rank's counters for the running step (the
// answer to SIGUSR1, on every rank); the aggregate is estimated as this
// rank's share times the ranks, and says so.
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
	if x, ok := env.spec.Phase.(OpCounter); ok && rate > 0 && what == "run" {
		if left := x.ExpectedOps() - done; left > 0 {
			eta = fmt.Sprintf(", ETA %s", (time.Duration(float64(left)/rate) * time.Second).Round(time.Second))
		}
	}
	fmt.Fprintf(e.o.Stderr, "prism: %s: rank %d: %s %q %s iter %d: %d ops, %s, %.0f ops/s, %.1f MiB/s, %s elapsed%s (x%d ranks: ~%.0f ops/s)\n",
		label, env.WorldRank, env.Kind, env.Name, what, env.Iteration, done, report.FormatBytes(bytes), rate, bw,
		time.Duration(el*float64(time.Second)).Round(100*time.Millisecond), eta, env.Size, rate*float64(env.Size))
}

// whole names a stalled op's file for the operator: the recorder's target
// is whole when the phase named its directory (Recorder.Under); a name
// still relative is below the phase's directory.
func whole(target, phaseDir string) string {
	switch {
	case target == "":
		return "(file not named by the phase)"
	case report.WholeTarget(target):
		return target
	}
	return target + " (below " + phaseDir + ")"
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

// Progress is how rank 0 of each phase shows the timed Run's progress on
// Options.Stderr (stderr keeps stdout's summary and manifest line for
// scripts).
type Progress string

// The progress modes. The zero value prints nothing.
const (
	ProgressNone Progress = ""
	// ProgressTTY redraws one line in place (\r) every interval, and clears
	// it when the phase's Run ends.
	ProgressTTY Progress = "tty"
	// ProgressLine prints one line per interval, for logs and Slurm.
	ProgressLine Progress = "line"
)

// The default progress intervals: fio's once a second on a terminal, and
// a line every 10 s in a log.
const (
	ProgressTTYEvery  = time.Second
	ProgressLineEvery = 10 * time.Second
)

// ParseProgress reads --progress: auto (tty when stderr is a terminal,
// line otherwise), tty, line or none.
func ParseProgress(s string, stderrTTY bool) (Progress, error) {
	switch s {
	case "auto":
		if stderrTTY {
			return ProgressTTY, nil
		}
		return ProgressLine, nil
	case "tty":
		return ProgressTTY, nil
	case "line":
		return ProgressLine, nil
	case "none":
		return ProgressNone, nil
	}
	return ProgressNone, fmt.Errorf("--progress %q: want auto, tty, line or none", s)
}

// IsTerminal tells whether f is a terminal.
func IsTerminal(f *os.File) bool { return isTerminal(f.Fd()) }

// The numbers of one rank's progress report (spmd.Reporter): ops and
// bytes of the timed recorders so far, ns since its Run started, 1 once
// its Run has returned, its rank in the job (a sweep's or a group's
// communicator numbers its ranks its own way), and its own ExpectedOps
// (0: not count-bounded), which ranks of one phase need not share: a
// ddp_save's rank 0 writes the whole checkpoint and the others nothing,
// an fsdp_save's ranks each their own shard.
const (
	repOps = iota
	repBytes
	repElapsed
	repDone
	repWorld
	repWant
)

// progress shows one timed Run's progress. Every rank of the phase reports
// its recorders' live counters to the phase's rank 0 over the
// communicator's side channel (spmd.Reporter: a file per rank under the
// rendezvous, an MPI_Isend on the alert communicator under MPI), at most
// once a second, from this goroutine: never a collective, so ranks that
// finish at different times wait for nobody, and nothing is added to the
// timed loop, which only bumps its atomic counters as it always does.
// Rank 0 adds its own counters and prints every interval until the
// agreement after the Run, so a rank 0 that finished first still shows
// the stragglers.
type progress struct {
	e        *engine
	env      *Env
	tag      string
	label    string // [i/N] name
	started  time.Time
	want     int64 // this rank's ExpectedOps, read once Setup has run
	finished chan struct{}
	quit     chan struct{}
	wg       sync.WaitGroup
}

// startProgress starts the progress of env's Run on this rank, which
// started its timed Run at t0; nil when progress is off.
func (e *engine) startProgress(env *Env, t0 time.Time) *progress {
	if e.o.Progress == ProgressNone {
		return nil
	}
	p := &progress{e: e, env: env, started: t0, finished: make(chan struct{}), quit: make(chan struct{}),
		tag: fmt.Sprintf("%d.%d.%d.progress", env.Index, env.Size, env.Iteration), label: e.instance(env.spec) + " " + env.Name}
	if x, ok := env.spec.Phase.(OpCounter); ok {
		p.want = max(x.ExpectedOps(), 0)
	}
	env.mu.Lock()
	env.merged, env.outside = [2]int64{}, [2]int64{}
	env.mu.Unlock()
	every := e.progressEvery()
	p.wg.Add(1)
	if env.Rank == 0 {
		go p.lead(every)
	} else {
		// A quarter of the interval, so that rank 0's line is at most that
		// stale; at most a second, so a 10 s line costs 10 reports.
		go p.follow(max(min(every/4, time.Second), time.Millisecond))
	}
	return p
}

func (e *engine) progressEvery() time.Duration {
	switch {
	case e.o.ProgressEvery > 0:
		return e.o.ProgressEvery
	case e.o.Progress == ProgressTTY:
		return ProgressTTYEvery
	}
	return ProgressLineEvery
}

// finish says this rank's Run has returned. Off rank 0 it returns once
// the last report is sent, so that it is on its way before this rank
// enters the agreement that ends the Run.
func (p *progress) finish() {
	if p == nil {
		return
	}
	close(p.finished)
	if p.env.Rank != 0 {
		p.wg.Wait()
	}
}

// stop ends the progress once the ranks have agreed on the Run's end.
func (p *progress) stop() {
	if p == nil {
		return
	}
	close(p.quit)
	p.wg.Wait()
}

// sample is this rank's report: its timed recorders only (the untimed
// ones of Setup are not the Run's progress).
func (p *progress) sample(now time.Time, done bool) [spmd.ReportWords]int64 {
	var v [spmd.ReportWords]int64
	p.env.mu.Lock()
	defer p.env.mu.Unlock()
	v[repOps], v[repBytes] = p.env.merged[0]+p.env.outside[0], p.env.merged[1]+p.env.outside[1]
	for _, s := range append([]*report.Set{p.env.set}, p.env.extra...) {
		for _, l := range s.Snapshot(now) {
			v[repOps] += l.Done
			v[repBytes] += l.Bytes
		}
	}
	v[repElapsed] = int64(now.Sub(p.started))
	if done {
		v[repDone] = 1
	}
	v[repWorld] = int64(p.env.WorldRank)
	v[repWant] = p.want
	return v
}

// follow reports every period, and once more when the Run has returned.
func (p *progress) follow(period time.Duration) {
	defer p.wg.Done()
	r, ok := p.env.Comm.(spmd.Reporter)
	if !ok {
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			return
		case <-p.finished:
			v := p.sample(time.Now(), true)
			r.Report(p.tag, v[:])
			return
		case <-t.C:
			v := p.sample(time.Now(), false)
			r.Report(p.tag, v[:])
		}
	}
}

// lead collects the reports and prints every period.
func (p *progress) lead(period time.Duration) {
	defer p.wg.Done()
	n := p.env.Size
	latest := make([][]int64, n)
	for i := range latest {
		latest[i] = make([]int64, spmd.ReportWords)
	}
	st := &progressState{prev: make([][spmd.ReportWords]int64, n), rate: make([]float64, n), brate: make([]float64, n)}
	r, _ := p.env.Comm.(spmd.Reporter)
	t := time.NewTicker(period)
	defer t.Stop()
	finished := p.finished
	done := false
	// A group's second phase has a rank 0 of its own, printing beside the
	// job's: one line redrawn in place is the job's rank 0's alone (and
	// only the job's rank 0 has a ttyStderr).
	tw, _ := p.e.o.Stderr.(*ttyStderr)
	tty := tw != nil
	for {
		select {
		case <-p.quit:
			if tw != nil {
				tw.clear()
			}
			if !tty {
				// Every rank's last report was sent before the agreement
				// that ended the Run: the totals of the whole Run. Under
				// MPI a message sent before the agreement may still be on
				// its way when it ends, so wait for it a little (500 ms at most).
				for try := 0; r != nil && try < 100; try++ {
					r.Collect(p.tag, latest)
					if allDone(latest[1:]) {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				v := p.sample(time.Now(), true)
				copy(latest[0], v[:])
				fmt.Fprintf(p.e.o.Stderr, "%s\n", p.final(latest))
			}
			return
		case <-finished:
			finished, done = nil, true
			continue
		case <-t.C:
		}
		now := time.Now()
		if r != nil {
			r.Collect(p.tag, latest)
		}
		v := p.sample(now, done)
		copy(latest[0], v[:])
		line := p.line(st, latest, now)
		if tty {
			// A line longer than the terminal wraps, and \r then redraws
			// only its last row.
			if f, ok := tw.w.(*os.File); ok {
				if w := termWidth(f.Fd()); w > 1 && len(line) >= w {
					line = line[:w-1]
				}
			}
			tw.draw(line)
		} else {
			fmt.Fprintf(p.e.o.Stderr, "%s\n", line)
		}
	}
}

// progressState is what rank 0 keeps between two lines: every rank's
// previous report, and the rates of its last window.
type progressState struct {
	prev        [][spmd.ReportWords]int64
	rate, brate []float64
}

// line renders one progress line from every rank's latest report: the
// percentage and ETA (ops over the sum of the ranks' own expected ops, or
// elapsed over its runtime), the aggregate ops/s and MiB/s over all ranks (each rank's
// rate over the window between its last two reports, summed), and the
// slowest rank still running.
func (p *progress) line(st *progressState, latest [][]int64, now time.Time) string {
	s := p.env.spec
	var ops, bytes int64
	var agg, aggB float64
	for r, v := range latest {
		ops += v[repOps]
		bytes += v[repBytes]
		pv := st.prev[r]
		if dt := v[repElapsed] - pv[repElapsed]; dt > 0 {
			st.rate[r] = float64(v[repOps]-pv[repOps]) / (float64(dt) / 1e9)
			st.brate[r] = float64(v[repBytes]-pv[repBytes]) / (float64(dt) / 1e9)
			copy(st.prev[r][:], v)
		} else if v[repDone] != 0 {
			st.rate[r], st.brate[r] = 0, 0
		}
		agg += st.rate[r]
		aggB += st.brate[r]
	}
	el := now.Sub(p.started)
	var b strings.Builder
	b.WriteString(p.label)
	b.WriteString(p.iteration())
	b.WriteString(":")
	wants, want := expected(latest)
	var runtime time.Duration
	if x, ok := s.Phase.(Runtimer); ok {
		runtime = x.Runtime()
	}
	eta := time.Duration(-1)
	switch {
	case want > 0:
		fmt.Fprintf(&b, " %5.1f%% %d/%d ops", 100*min(float64(ops)/float64(want), 1), ops, want)
		// The phase ends with its slowest rank: the longest of the ranks'
		// remaining ops at their own average rate so far.
		for r, v := range latest {
			if v[repDone] != 0 || v[repElapsed] <= 0 || v[repOps] <= 0 {
				continue
			}
			left := max(wants[r]-v[repOps], 0)
			eta = max(eta, time.Duration(float64(left)/float64(v[repOps])*float64(v[repElapsed])))
		}
	case runtime > 0:
		fmt.Fprintf(&b, " %5.1f%% %s/%s, %d ops", 100*min(float64(el)/float64(runtime), 1), el.Truncate(time.Second), runtime, ops)
		eta = max(runtime-el, 0)
	default:
		fmt.Fprintf(&b, " %s, %d ops", el.Round(100*time.Millisecond), ops)
	}
	if bytes > 0 {
		fmt.Fprintf(&b, " %s, %.1f MiB/s", report.FormatBytes(bytes), aggB/(1<<20))
	}
	fmt.Fprintf(&b, ", %.0f ops/s", agg)
	if eta >= 0 {
		fmt.Fprintf(&b, ", ETA %s", eta.Round(time.Second))
	}
	if len(latest) > 1 {
		if r, what := slowest(latest, st, wants); r >= 0 {
			fmt.Fprintf(&b, "; slowest rank %d %s", r, what)
		}
	}
	return b.String()
}

// expected is every rank's expected ops, from its reports, and their sum;
// a rank not heard from yet is assumed to expect what rank 0 does. nil
// (and 0) when no rank expects any: the phase is not count-bounded.
func expected(latest [][]int64) (wants []int64, sum int64) {
	wants = make([]int64, len(latest))
	for r, v := range latest {
		wants[r] = max(v[repWant], 0)
		if r > 0 && v[repElapsed] <= 0 && v[repDone] == 0 {
			wants[r] = max(latest[0][repWant], 0) // no report yet
		}
		sum += wants[r]
	}
	if sum == 0 {
		return nil, 0
	}
	return wants, sum
}

func allDone(latest [][]int64) bool {
	for _, v := range latest {
		if v[repDone] == 0 {
			return false
		}
	}
	return true
}

// final is the line mode's last line of a Run: its totals and average
// rates over the longest rank's Run (the wall the phase's rates use).
func (p *progress) final(latest [][]int64) string {
	var ops, bytes, wall int64
	for _, v := range latest {
		ops += v[repOps]
		bytes += v[repBytes]
		wall = max(wall, v[repElapsed])
	}
	var b strings.Builder
	b.WriteString(p.label)
	b.WriteString(p.iteration())
	fmt.Fprintf(&b, ": done, %d ops", ops)
	if _, want := expected(latest); want > 0 {
		fmt.Fprintf(&b, " (%.1f%% of %d)", 100*float64(ops)/float64(want), want)
	}
	sec := float64(wall) / 1e9
	if bytes > 0 {
		fmt.Fprintf(&b, " %s", report.FormatBytes(bytes))
		if sec > 0 {
			fmt.Fprintf(&b, ", %.1f MiB/s", float64(bytes)/sec/(1<<20))
		}
	}
	if sec > 0 {
		fmt.Fprintf(&b, ", %.0f ops/s", float64(ops)/sec)
	}
	fmt.Fprintf(&b, " in %s", time.Duration(wall).Round(time.Millisecond))
	return b.String()
}

// iteration is " iter i/n" (or " warm-up i/n") when the phase runs more
// than once.
func (p *progress) iteration() string {
	env, s := p.env, p.env.spec
	switch {
	case s.Warmup+s.Iterations <= 1:
		return ""
	case env.Warmup:
		return fmt.Sprintf(" warm-up %d/%d", env.Iteration+1, s.Warmup)
	}
	return fmt.Sprintf(" iter %d/%d", env.Iteration-s.Warmup+1, s.Iterations)
}

// slowest names the rank still running that is furthest behind: the
// least share of its own expected ops (wants) on a count-bounded phase (a
// rank that expects none is at 100%, waiting for the others), else the
// lowest rate (bytes when the phase moves bytes). -1 when every rank is
// done.
func slowest(latest [][]int64, st *progressState, wants []int64) (int, string) {
	best, what := -1, ""
	var worst float64
	for r, v := range latest {
		if v[repDone] != 0 || v[repElapsed] <= 0 {
			continue // done, or not heard from yet
		}
		var x float64
		var w string
		switch {
		case wants != nil:
			x = 1
			if wants[r] > 0 {
				x = float64(v[repOps]) / float64(wants[r])
			}
			w = fmt.Sprintf("%.1f%%", 100*min(x, 1))
		case v[repBytes] > 0:
			x = st.brate[r]
			w = fmt.Sprintf("%.1f MiB/s", x/(1<<20))
		default:
			x = st.rate[r]
			w = fmt.Sprintf("%.0f ops/s", x)
		}
		if best < 0 || x < worst {
			best, worst, what = int(v[repWorld]), x, w
		}
	}
	return best, what
}

// instance is "[i/N]": the phase instance running (one per size of a
// sweep) over all of the plan's.
func (e *engine) instance(s *Spec) string {
	at, total := 0, 0
	for _, x := range e.o.Plan.Phases {
		n := max(len(x.Ranks), len(x.Nodes), 1)
		if x.Index < s.Index {
			at += n
		}
		total += n
	}
	return fmt.Sprintf("[%d/%d]", at+e.sweepAt+1, total)
}

// printStart announces a phase instance as it starts, with what bounds
// its Run: "[3/12] ckpt (fsdp_save) on 4 ranks: 3 iterations"; ops is
// the count the plan fixes per rank (Spec.plannedOps).
func (e *engine) printStart(env *Env, ops int64) {
	if e.o.Progress == ProgressNone {
		return
	}
	s := env.spec
	name := s.Name
	if s.Name != s.Kind {
		name += " (" + s.Kind + ")"
	}
	ranks := "ranks"
	if env.Size == 1 {
		ranks = "rank"
	}
	var bound []string
	if ops > 0 {
		bound = append(bound, fmt.Sprintf("%d ops per rank (%d in all)", ops, ops*int64(env.Size)))
	}
	if x, ok := s.Phase.(Runtimer); ok && x.Runtime() > 0 {
		bound = append(bound, fmt.Sprintf("runtime %s", x.Runtime()))
	}
	it := fmt.Sprintf("%d iterations", s.Iterations)
	if s.Iterations == 1 {
		it = "1 iteration"
	}
	if s.Warmup > 0 {
		it += fmt.Sprintf(" after %d warm-up", s.Warmup)
	}
	bound = append(bound, it)
	fmt.Fprintf(e.o.Stderr, "%s %s on %d %s: %s\n", e.instance(s), name, env.Size, ranks, strings.Join(bound, ", "))
}

// plannedOps is the count the plan fixes for every rank of s (Spec's
// startOps), 0 when it fixes none. Every rank reads it as each instance
// starts, so a rank reads it first before its first Setup, whichever
// sizes of a sweep it sits out.
func (s *Spec) plannedOps() int64 {
	if s.startOps == 0 {
		s.startOps = -1
		if x, ok := s.Phase.(OpCounter); ok && x.ExpectedOps() > 0 {
			s.startOps = x.ExpectedOps()
		}
	}
	return max(s.startOps, 0)
}

// ttyStderr is the job's rank 0's stderr while progress redraws a line in
// place on a terminal. Anything else written to it (a stall report, a
// warning, a phase's start line) first clears the drawn line, so that it
// starts at the left margin instead of after the progress figures; the
// next tick draws the line again below it.
type ttyStderr struct {
	mu    sync.Mutex
	w     io.Writer
	drawn bool
}

func (t *ttyStderr) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clearLocked()
	return t.w.Write(b)
}

// draw replaces the drawn line (if any) with line.
func (t *ttyStderr) draw(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "\r%s\x1b[K", line)
	t.drawn = true
}

// clear erases the drawn line, if there is one.
func (t *ttyStderr) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clearLocked()
}

func (t *ttyStderr) clearLocked() {
	if t.drawn {
		io.WriteString(t.w, "\r\x1b[K")
		t.drawn = false
	}
}
