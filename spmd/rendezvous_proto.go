package spmd

// The rendezvous protocol. Files of a job, all under RendezvousConfig.Dir,
// and reached only through the descriptor of it each rank holds, never by
// path (rendezvous_dir.go):
//
//	job                     the job's token, size and first rank (rendezvous_job.go); removed last
//	abort                   job-wide abort notice: "<world rank> <code>\n<reason>"
//	hb/<world rank>         heartbeat counter, created exclusively, then rewritten every Heartbeat
//	c/<id>/<seq>/<rank>     contribution of a rank >= 1 to collective seq: "<header>\n<payload>"
//	c/<id>/<seq>/data       rank 0's answer for a root other than 0 (Gather, ReduceInt64)
//	c/<id>/<seq>/result     rank 0's verdict: "ok\n<payload>" or "fail <kind> <world rank>\n<detail>"
//	c/<id>/closed.<rank>    the rank has closed the communicator
//
// The world communicator's id is "w"; Split appends ".<seq>.<color>".
//
// Every file appears by renaming a temporary written beside it, and readers
// only open exact names, never list a directory: that is all NFS
// close-to-open consistency promises. Rank 0 does not write a contribution
// of its own; it reads the others', combines them and publishes the verdict
// that the others wait for. It removes collective seq-1's directory once
// every rank has arrived at seq, because each rank reads seq-1's verdict
// before contributing to seq; the last member to Close removes the rest.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	pio "github.com/prism-hpc/prism/io"
	"golang.org/x/sys/unix"
)

const (
	worldID    = "w"
	commDir    = "c"
	beatDir    = "hb"
	abortFile  = "abort"
	resultFile = "result"
	dataFile   = "data"
)

// Polling starts fast, because most collectives complete within
// microseconds of the last arrival, and settles at a rate a shared file
// server can bear. The abort file is looked at less often: an abort is
// rare, and a wait that ends quickly need not look at all.
const (
	pollMin    = 20 * time.Microsecond
	pollMax    = 2 * time.Millisecond
	abortEvery = 10 * time.Millisecond
	// alignPoll caps the polling of Align's second barrier, which every
	// rank enters within a poll period of the others.
	alignPoll = 50 * time.Microsecond
)

// waitSleepHook, when a test sets it, sees every sleep of wait: the rank,
// the collective's directory and the delay.
var waitSleepHook func(rank int, dir string, delay time.Duration)

// step is one collective as run sees it.
type step struct {
	op     string // collective name, for errors
	header string // what every rank must agree on: the op and its arguments
	// root is the rank that gets combine's forRoot, or -1. Rank 0 hands it
	// over in a file of its own, which the other ranks need not read.
	root    int
	payload []byte
	// combine runs on rank 0 with every rank's payload, in rank order, and
	// returns what every rank gets and what root gets. An error of type
	// *failure names the rank at fault.
	combine func(parts [][]byte) (shared, forRoot []byte, err error)
	// poll caps the polling period of this step's waits; 0 means pollMax.
	poll time.Duration
}

// failure is why a collective could not complete, in a form rank 0 can pass
// on to the others in its verdict.
type failure struct {
	kind   string // one of the fail* constants
	rank   int    // world rank concerned
	detail string
}

const (
	failTimeout  = "timeout"
	failDead     = "dead"
	failAborted  = "aborted"
	failReplaced = "replaced"
	failOther    = "other"
)

func (f *failure) Error() string { return f.detail }

func (f *failure) rankError(op string) error {
	var err error
	switch f.kind {
	case failTimeout:
		err = fmt.Errorf("%w: %s", ErrTimeout, f.detail)
	case failDead:
		err = fmt.Errorf("%w: %s", ErrPeerDead, f.detail)
	case failAborted:
		err = fmt.Errorf("%w: %s", ErrAborted, f.detail)
	case failReplaced:
		err = fmt.Errorf("%w: %s", ErrDirReplaced, f.detail)
	default:
		err = errors.New(f.detail)
	}
	return &RankError{Rank: f.rank, Op: op, Err: err}
}

func (f *failure) encode() []byte {
	return fmt.Appendf(nil, "fail %s %d\n%s", f.kind, f.rank, f.detail)
}

func decodeFailure(status, body []byte, from int) *failure {
	f := &failure{kind: failOther, rank: from, detail: string(body)}
	if _, err := fmt.Sscanf(string(status), "fail %s %d", &f.kind, &f.rank); err != nil {
		f.kind, f.rank = failOther, from
		f.detail = fmt.Sprintf("malformed verdict %q from rank %d", status, from)
	}
	return f
}

// run executes one collective. A failure leaves this rank out of step with
// its peers (it may or may not have arrived), so the communicator refuses
// every later collective.
func (c *Rendezvous) run(ctx context.Context, s *step) (shared, forRoot []byte, err error) {
	switch {
	case c.closed:
		return nil, nil, fmt.Errorf("spmd: %s: communicator %s is closed", s.op, c.commPath())
	case c.err != nil:
		return nil, nil, fmt.Errorf("spmd: %s: communicator %s is out of step after an earlier failure: %w", s.op, c.commPath(), c.err)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if f := c.job.replaced.Load(); f != nil {
		c.err = f.rankError(s.op)
		return nil, nil, c.err
	}
	seq := c.seq
	c.seq++
	if c.rank == 0 {
		shared, forRoot, err = c.lead(ctx, s, seq)
	} else {
		shared, forRoot, err = c.follow(ctx, s, seq)
	}
	if err != nil {
		c.err = err
	}
	return shared, forRoot, err
}

// lead is rank 0's part: collect every contribution, combine, publish the
// verdict. A failure is published too, so the others learn what went wrong
// instead of each timing out on its own.
func (c *Rendezvous) lead(ctx context.Context, s *step, seq uint64) (shared, forRoot []byte, err error) {
	n := c.Size()
	dir, rel := c.seqDir(seq), c.seqRel(seq)
	parts := make([][]byte, n)
	parts[0] = s.payload
	missing := make([]int, 0, n)
	for r := 1; r < n; r++ {
		missing = append(missing, r)
	}
	err = c.wait(ctx, dir, s.poll, func() (bool, error) {
		left := missing[:0]
		for i, r := range missing {
			b, err := c.job.read(rel + "/" + strconv.Itoa(r))
			switch {
			case errors.Is(err, fs.ErrNotExist):
				left = append(left, r)
			case err != nil:
				missing = append(left, missing[i:]...)
				return false, err
			default:
				parts[r] = b
			}
		}
		missing = left
		return len(missing) == 0, nil
	}, func() []int { return missing })
	allArrived := err == nil
	if allArrived {
		for r := 1; r < n; r++ {
			h, p, ok := bytes.Cut(parts[r], []byte{'\n'})
			if !ok || string(h) != s.header {
				err = &failure{kind: failOther, rank: c.world[r], detail: fmt.Sprintf(
					"collectives out of step: rank %d called %q while rank %d called %q (%s)",
					c.world[r], h, c.world[0], s.header, dir)}
				break
			}
			parts[r] = p
		}
	}
	if err == nil {
		shared, forRoot, err = s.combine(parts)
	}
	if n > 1 {
		if perr := c.publishVerdict(rel, s, shared, forRoot, err); perr != nil && err == nil {
			err = perr
		}
		if allArrived && seq > 0 {
			c.sweep(seq - 1)
		}
	}
	if err != nil {
		return nil, nil, c.localError(s.op, err)
	}
	return shared, forRoot, nil
}

func (c *Rendezvous) publishVerdict(rel string, s *step, shared, forRoot []byte, err error) error {
	if err != nil {
		var f *failure
		if !errors.As(err, &f) {
			f = &failure{kind: failOther, rank: c.world[0], detail: fmt.Sprintf("rank %d gave up: %v", c.world[0], err)}
		}
		return c.publish(rel, resultFile, f.encode())
	}
	if s.root > 0 {
		if err := c.publish(rel, dataFile, forRoot); err != nil {
			return err
		}
	}
	return c.publish(rel, resultFile, append([]byte("ok\n"), shared...))
}

// follow is the part of every rank but 0: contribute, then wait for rank
// 0's verdict.
func (c *Rendezvous) follow(ctx context.Context, s *step, seq uint64) (shared, forRoot []byte, err error) {
	dir, rel := c.seqDir(seq), c.seqRel(seq)
	msg := make([]byte, 0, len(s.header)+1+len(s.payload))
	msg = append(append(append(msg, s.header...), '\n'), s.payload...)
	if err := c.publish(rel, strconv.Itoa(c.rank), msg); err != nil {
		return nil, nil, c.localError(s.op, err)
	}
	resultRel := rel + "/" + resultFile
	var res []byte
	err = c.wait(ctx, dir, s.poll, func() (bool, error) {
		b, err := c.job.read(resultRel)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		res = b
		return err == nil, err
	}, func() []int { return []int{0} })
	var f *failure
	if errors.As(err, &f) && f.kind == failTimeout {
		// Rank 0 is what this rank waits for, but it is usually waiting
		// itself: blame whoever has not contributed.
		err = c.timeoutFailure(dir, c.absent(rel))
	}
	if err != nil {
		return nil, nil, c.localError(s.op, err)
	}
	status, body, _ := bytes.Cut(res, []byte{'\n'})
	if string(status) != "ok" {
		return nil, nil, decodeFailure(status, body, c.world[0]).rankError(s.op)
	}
	if s.root == c.rank {
		if forRoot, err = c.job.read(rel + "/" + dataFile); err != nil {
			return nil, nil, c.localError(s.op, err)
		}
	}
	return body, forRoot, nil
}

// absent returns the world ranks whose contribution to the collective in
// rel is missing, or rank 0 if none is: then rank 0 is the one not there.
func (c *Rendezvous) absent(rel string) []int {
	var ranks []int
	for r := 1; r < c.Size(); r++ {
		if r == c.rank {
			continue
		}
		if err := c.job.stat(rel + "/" + strconv.Itoa(r)); errors.Is(err, fs.ErrNotExist) {
			ranks = append(ranks, c.world[r])
		}
	}
	if len(ranks) == 0 {
		ranks = []int{c.world[0]}
	}
	return ranks
}

// localError turns what a wait or a file operation returned into the error
// a collective returns: ctx's error as it is, everything else naming a rank.
func (c *Rendezvous) localError(op string, err error) error {
	var f *failure
	switch {
	case errors.As(err, &f):
		return f.rankError(op)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return &RankError{Rank: c.job.rank, Op: op, Err: err}
}

// beatWatch is what a waiter knows of one peer's heartbeat: the last
// counter read and when, on the waiter's own monotonic clock, it last
// changed. Other nodes' clocks, file times included, may be skewed and are
// never consulted.
type beatWatch struct {
	counter string
	changed time.Time
}

// wait polls done until it reports true or fails. It gives up when ctx ends
// (returning ctx.Err()), and with a *failure when the job is aborted, when a
// rank in awaited (ranks of this communicator) stops its heartbeat, or after
// the timeout.
func (c *Rendezvous) wait(ctx context.Context, dir string, poll time.Duration, done func() (bool, error), awaited func() []int) error {
	if ok, err := done(); ok || err != nil {
		return err // the common case once the job is in step: no wait at all
	}
	j := c.job
	start := time.Now()
	lastAbort, lastBeat := start, start
	beatEvery := j.beatEvery()
	if poll <= 0 {
		poll = pollMax
	}
	delay := min(pollMin, poll)
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if f := j.replaced.Load(); f != nil {
			return f
		}
		now := time.Now()
		if now.Sub(lastAbort) >= abortEvery {
			lastAbort = now
			if f := j.aborted(); f != nil {
				return f
			}
		}
		if now.Sub(lastBeat) >= beatEvery {
			lastBeat = now
			if f := c.deadPeer(awaited(), now, false); f != nil {
				return f
			}
		}
		if now.Sub(start) >= j.timeout {
			return c.timeoutFailure(dir, c.worldRanks(awaited()))
		}
		if waitSleepHook != nil {
			waitSleepHook(c.rank, dir, delay)
		}
		timer.Reset(delay)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
		delay = min(2*delay, poll)
		if ok, err := done(); ok || err != nil {
			return err
		}
	}
}

// beatEvery is how often a waiter reads its peers' heartbeats.
func (j *job) beatEvery() time.Duration { return min(j.heartbeat, j.deadAfter/4) }

// deadPeer reads the heartbeats of the awaited ranks and reports the first
// whose counter has stood still for DeadAfter, naming its host. A peer
// whose heartbeat was never seen is left to the timeout: it may not have
// started yet, and batch systems can start ranks minutes apart — unless
// joined says every rank has joined the job (a step's watch), where a
// missing heartbeat is a peer that left: its absence is watched as a
// counter that does not change.
func (c *Rendezvous) deadPeer(awaited []int, now time.Time, joined bool) *failure {
	j := c.job
	j.beatsMu.Lock()
	defer j.beatsMu.Unlock()
	if j.beats == nil {
		j.beats = map[int]*beatWatch{}
	}
	for _, r := range awaited {
		w := c.world[r]
		path := j.beatPath(w)
		b, err := j.read(beatRel(w))
		seen := j.beats[w]
		if err == nil && (seen == nil || seen.counter != string(b)) {
			j.beats[w] = &beatWatch{counter: string(b), changed: now}
			continue
		}
		// Unchanged, or unreadable after having been seen: a peer that
		// closed the job does not come back either.
		if seen == nil {
			if joined {
				j.beats[w] = &beatWatch{counter: "\x00gone", changed: now}
			}
			continue
		}
		if still := now.Sub(seen.changed); still >= j.deadAfter {
			return &failure{kind: failDead, rank: w, detail: fmt.Sprintf(
				"on host %s, its heartbeat %s has not changed for %v", j.hosts[w], path, still.Round(time.Millisecond))}
		}
	}
	return nil
}

func (c *Rendezvous) timeoutFailure(dir string, worldRanks []int) *failure {
	rank := -1
	if len(worldRanks) > 0 {
		rank = worldRanks[0]
	}
	names := make([]string, len(worldRanks))
	for i, w := range worldRanks {
		names[i] = strconv.Itoa(w)
	}
	return &failure{kind: failTimeout, rank: rank, detail: fmt.Sprintf(
		"waited %v for rank(s) %s in %s", c.job.timeout, strings.Join(names, ", "), dir)}
}

func (c *Rendezvous) worldRanks(ranks []int) []int {
	w := make([]int, len(ranks))
	for i, r := range ranks {
		w[i] = c.world[r]
	}
	return w
}

// sweep removes collective seq's files. Rank 0 calls it once every rank has
// arrived at seq+1, so no one reads them any more.
func (c *Rendezvous) sweep(seq uint64) {
	j, rel := c.job, c.seqRel(seq)
	for r := 1; r < c.Size(); r++ {
		j.remove(rel + "/" + strconv.Itoa(r))
	}
	j.remove(rel + "/" + dataFile)
	j.remove(rel + "/" + resultFile)
	if j.rmdir(rel) != nil {
		j.removeTree(rel) // temporaries left by a writer that died mid-write
	}
}

// release records that this rank closed the communicator, and reports
// whether it was the last member to do so, in which case it has removed
// the communicator's files. Each member looks at the markers of the members
// after it, in ring order, and stops at the first one still open; the
// member that closes last finds all closed, and the others usually stop
// after a few looks instead of Size.
func (c *Rendezvous) release() (last bool, err error) {
	n := c.Size()
	if n == 1 {
		return true, nil // a one-rank communicator never touches the disk
	}
	rel := c.commRel()
	if err := c.publish(rel, closedName(c.rank), nil); err != nil {
		return false, err
	}
	for i := 1; i < n; i++ {
		if c.job.stat(rel+"/"+closedName((c.rank+i)%n)) != nil {
			return false, nil
		}
	}
	c.job.removeTree(rel)
	return true, nil
}

func closedName(rank int) string { return "closed." + strconv.Itoa(rank) }

// commRel is the communicator's directory below the job directory, the
// form file operations take; commPath is its path, for messages.
func (c *Rendezvous) commRel() string { return commDir + "/" + c.id }

func (c *Rendezvous) commPath() string { return c.job.path(c.commRel()) }

func (c *Rendezvous) seqRel(seq uint64) string {
	return c.commRel() + "/" + strconv.FormatUint(seq, 10)
}

func (c *Rendezvous) seqDir(seq uint64) string { return c.job.path(c.seqRel(seq)) }

func (c *Rendezvous) publish(rel, name string, data []byte) error {
	return c.job.publish(rel, name, data)
}

func beatRel(world int) string { return beatDir + "/" + strconv.Itoa(world) }

func (j *job) beatPath(world int) string { return j.path(beatRel(world)) }

// tmpTag makes temporary file names unique in the directory: among the
// ranks of this job, and among those of another job that tries the same
// directory (whose rank, and on another node even pid, may be the same),
// by a random nonce; the counter keeps this rank's writers apart.
func (j *job) tmpTag() string {
	return fmt.Sprintf("%d.%d.%s.%d", j.rank, os.Getpid(), j.nonce, j.tmpSeq.Add(1))
}

// beat bumps this rank's heartbeat until stopHeartbeat. A failed write is
// not fatal: if the failures persist, peers rightly stop trusting this rank.
func (j *job) beat() {
	defer close(j.stopped)
	t := time.NewTicker(j.heartbeat)
	defer t.Stop()
	for n := uint64(2); ; n++ {
		select {
		case <-j.stop:
			return
		case <-t.C:
		}
		j.watchPath()
		_ = j.writeBeat(n)
	}
}

func (j *job) writeBeat(n uint64) error {
	return j.publish(beatDir, strconv.Itoa(j.rank), strconv.AppendUint(nil, n, 10))
}

// stopHeartbeat stops the heartbeat goroutine and waits for it, so no beat
// is written after it returns. Call it only once beat has been started.
func (j *job) stopHeartbeat() {
	j.stopOnce.Do(func() {
		close(j.stop)
		<-j.stopped
	})
}

// aborted returns the job's abort notice, if there is one.
func (j *job) aborted() *failure {
	path := j.path(abortFile)
	b, err := j.read(abortFile)
	if err != nil {
		return nil
	}
	line, reason, _ := strings.Cut(string(b), "\n")
	var rank, code int
	if _, err := fmt.Sscanf(line, "%d %d", &rank, &code); err != nil {
		return &failure{kind: failAborted, rank: -1, detail: fmt.Sprintf("malformed abort file %s: %q", path, b)}
	}
	return &failure{kind: failAborted, rank: rank, detail: fmt.Sprintf("%s [exit code %d, %s]", reason, code, path)}
}

// writeAbortFile publishes the job's abort notice in the job directory
// root. It is shared with Launch, which writes it on behalf of a child that
// died.
func writeAbortFile(root *pio.Dir, rank, code int, reason, tag string) error {
	tmp, err := writeTemp(root, "", abortFile, fmt.Appendf(nil, "%d %d\n%s", rank, code, reason), tag)
	if err != nil {
		return err
	}
	defer unlink(root, tmp)
	// Link, unlike rename, keeps an existing notice: the first abort is the
	// cause, the later ones are its consequences.
	err = link(root, tmp, abortFile)
	if err == nil || errors.Is(err, fs.ErrExist) {
		return nil
	}
	return rename(root, tmp, abortFile) // no hard links here: the last abort wins
}

// publish makes rel/name appear below root with content data all at once:
// a reader opening the exact name sees nothing or everything, on NFS too,
// since the data is flushed at close and the rename is atomic.
func publish(root *pio.Dir, rel, name string, data []byte, tag string) error {
	tmp, err := writeTemp(root, rel, name, data, tag)
	if err != nil {
		return err
	}
	if err := rename(root, tmp, joinRel(rel, name)); err != nil {
		unlink(root, tmp)
		return err
	}
	return nil
}

// writeTemp writes data to a new temporary file beside rel/name below root
// and returns its name there. Directories are made on first use, by
// whichever rank needs them first, so no rank has to wait for another to
// create them.
func writeTemp(root *pio.Dir, rel, name string, data []byte, tag string) (string, error) {
	tmp := joinRel(rel, "."+name+".tmp."+tag)
	n, err := pio.NewName(tmp)
	if err != nil {
		return "", err
	}
	// Exclusive, and 0644 whatever the umask: a temporary's name is this
	// rank's alone, and no one else may write what the job reads.
	const flags = unix.O_CREAT | unix.O_EXCL | unix.O_WRONLY
	fd, err := root.Open(n, flags, 0o644)
	if err == unix.ENOENT && rel != "" {
		if err = mkdirs(root, rel); err != nil {
			return "", err
		}
		fd, err = root.Open(n, flags, 0o644)
	}
	if err != nil {
		return "", root.Wrap("create", n, err)
	}
	_, err = pio.Write(fd, data)
	if cerr := pio.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		root.Unlink(n)
		return "", root.Wrap("write", n, err)
	}
	return tmp, nil
}
