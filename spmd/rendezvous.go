package spmd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ErrPeerDead is returned, inside a RankError naming the peer, when a rank a
// collective waits for has stopped bumping its heartbeat: it crashed, hung or
// lost the shared directory, and waiting out the full timeout would only
// delay the verdict.
var ErrPeerDead = errors.New("spmd: peer rank stopped responding")

const (
	defaultTimeout   = 3 * time.Minute
	defaultHeartbeat = time.Second
	defaultDeadAfter = 15 * time.Second
)

// RendezvousConfig places one rank in a job whose ranks coordinate through a
// shared directory. Zero durations take the defaults.
type RendezvousConfig struct {
	// Dir is the job's shared directory, the same path on every rank.
	// Ranks of another job (another Token) are refused, and so is a
	// directory an earlier job left behind (rendezvous_job.go). Each rank
	// opens it once and works only through that descriptor; a link there,
	// a directory others can write or own, and a parent everyone can write
	// without the sticky bit are refused (rendezvous_dir.go).
	Dir string
	// Token identifies the job (JobToken): ranks with equal tokens are one
	// job. Empty joins as an anonymous job, which cannot be told from
	// another anonymous one: only for directories private to the job.
	// TokenSource says where it came from, for messages.
	Token, TokenSource string
	// Rank and Size place this process in the job: 0 <= Rank < Size.
	Rank, Size int
	// Host names this rank's node (os.Hostname if empty); LocalRank counts
	// the ranks with an equal Host.
	Host string
	// Timeout bounds every single wait (default 3m), so a rank that never
	// arrives becomes an error wrapping ErrTimeout that names it.
	Timeout time.Duration
	// Heartbeat is how often this rank proves it is alive (default 1s).
	Heartbeat time.Duration
	// DeadAfter is how long a peer's heartbeat may stand still before the
	// peer is declared dead (default 15s). It must exceed Heartbeat.
	DeadAfter time.Duration
}

// Rendezvous is a Comm whose ranks coordinate through small files in a
// shared directory, for jobs started without MPI: by Launch, or by a batch
// system that provides only a shared file system.
//
// Rank 0 of each communicator is the hub of its collectives: the other ranks
// deposit their contribution and wait for rank 0's verdict, so a collective
// costs O(Size) file operations and rank 0 reduces in rank order, which
// makes floating-point results identical everywhere.
//
// Ranks named in errors are world ranks (RendezvousConfig.Rank), even on
// communicators made by Split, because that is what identifies a process in
// logs and in the abort file. After a collective fails the communicator is
// out of step with its peers, so every later collective fails too.
type Rendezvous struct {
	job       *job
	id        string // communicator id, a path element under <dir>/c
	world     []int  // world rank of each member, indexed by rank here
	rank      int
	localRank int
	seq       uint64 // number of the next collective
	err       error  // first failure, which put this rank out of step
	closed    bool
}

var _ Comm = (*Rendezvous)(nil)

// job is what the communicators of one process in one job share: the
// directory, the process's world identity, the timings and the heartbeat.
type job struct {
	dir string // as configured, for messages and the swap check
	// dirs is what every file operation goes through (rendezvous_dir.go),
	// under dirsMu: a watcher (Watch) may still read while the last
	// communicator closes the descriptors, and must then fail, not use a
	// descriptor number the process has since given to another file. nil
	// once closed.
	dirsMu    sync.RWMutex
	dirs      *jobDirs
	dev, ino  uint64   // the job directory's, which its path must keep leading to
	rank      int      // world rank
	hosts     []string // host of every world rank
	timeout   time.Duration
	heartbeat time.Duration
	deadAfter time.Duration
	claim     jobClaim // the job file in force

	nonce    string // random, in temporary file names (tmpTag)
	tmpSeq   atomic.Uint64
	stopOnce sync.Once
	stop     chan struct{} // closed to stop the heartbeat
	stopped  chan struct{} // closed when the heartbeat goroutine has returned

	// replaced is set, once, by the heartbeat that finds the directory's
	// path leading elsewhere; every collective fails with it from then on.
	replaced atomic.Pointer[failure]
	// open counts the communicators not yet closed: the last Close
	// closes the directory descriptors, which Split's communicators use
	// too.
	openMu sync.Mutex
	open   int

	// beats is what this rank has seen of its peers' heartbeats, shared by
	// every wait and step watcher of the job, so that a peer a watcher saw
	// go still is known dead to the collective after it at once, not
	// after another DeadAfter of watching.
	beatsMu sync.Mutex
	beats   map[int]*beatWatch
}

// NewRendezvous joins the job in cfg.Dir as rank cfg.Rank. It returns once
// every rank has joined: the ranks exchange host names, which is how each
// learns its LocalRank.
func NewRendezvous(ctx context.Context, cfg RendezvousConfig) (*Rendezvous, error) {
	const op = "NewRendezvous"
	switch {
	case cfg.Dir == "":
		return nil, fmt.Errorf("spmd: %s: no rendezvous directory", op)
	case cfg.Size < 1:
		return nil, fmt.Errorf("spmd: %s: size %d, need at least 1", op, cfg.Size)
	case cfg.Rank < 0 || cfg.Rank >= cfg.Size:
		return nil, fmt.Errorf("spmd: %s: rank %d out of range [0,%d)", op, cfg.Rank, cfg.Size)
	case cfg.Timeout < 0 || cfg.Heartbeat < 0 || cfg.DeadAfter < 0:
		return nil, fmt.Errorf("spmd: %s: negative duration in %+v", op, cfg)
	}
	if err := checkToken(cfg.Token); err != nil {
		return nil, fmt.Errorf("spmd: %s: %w", op, err)
	}
	if cfg.Host == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("spmd: %s: %w", op, err)
		}
		cfg.Host = h
	}
	cfg.Timeout = orDefault(cfg.Timeout, defaultTimeout)
	cfg.Heartbeat = orDefault(cfg.Heartbeat, defaultHeartbeat)
	cfg.DeadAfter = orDefault(cfg.DeadAfter, defaultDeadAfter)
	if cfg.DeadAfter <= cfg.Heartbeat {
		return nil, fmt.Errorf("spmd: %s: DeadAfter %v must exceed Heartbeat %v, or live peers would be declared dead",
			op, cfg.DeadAfter, cfg.Heartbeat)
	}

	j := &job{
		dir:       cfg.Dir,
		rank:      cfg.Rank,
		timeout:   cfg.Timeout,
		heartbeat: cfg.Heartbeat,
		deadAfter: cfg.DeadAfter,
		stop:      make(chan struct{}),
		stopped:   make(chan struct{}),
		nonce:     randomHex(4),
	}
	c := &Rendezvous{job: j, id: worldID, rank: cfg.Rank, world: make([]int, cfg.Size)}
	for r := range c.world {
		c.world[r] = r
	}
	// The directory must be this job's before anything else is read or
	// written there.
	claim, err := j.claimDir(cfg)
	if err != nil {
		return nil, &RankError{Rank: cfg.Rank, Op: op, Err: err}
	}
	j.claim = claim
	j.open = 1
	// An abort notice already there means the job is over, or that the
	// directory is an old job's; so does a verdict for collective 0 before
	// rank 0, its only writer, has run. Either would otherwise feed this
	// job another job's results.
	if f := j.aborted(); f != nil {
		j.closeDirs()
		return nil, f.rankError(op)
	}
	// The first beat is written before any wait so that a directory this
	// rank cannot write fails here, not as a dead peer elsewhere; and
	// exclusively, so that a leftover of an earlier job fails too.
	if err := j.claimBeat(cfg.Size); err != nil {
		j.closeDirs()
		return nil, &RankError{Rank: cfg.Rank, Op: op, Err: err}
	}
	if cfg.Rank == 0 {
		if j.stat(c.seqRel(0)+"/"+resultFile) == nil {
			j.remove(beatRel(j.rank))
			j.closeDirs()
			return nil, fmt.Errorf("spmd: %s: %s holds the files of an earlier job; each job needs a fresh directory", op, cfg.Dir)
		}
	}
	go j.beat()

	shared, _, err := c.run(ctx, &step{
		op:      op,
		header:  fmt.Sprintf("%s size=%d", op, cfg.Size),
		root:    -1,
		payload: []byte(cfg.Host),
		combine: func(parts [][]byte) ([]byte, []byte, error) { return pack(parts), nil, nil },
	})
	if err == nil {
		var hosts [][]byte
		if hosts, err = unpack(shared, cfg.Size); err != nil {
			err = &RankError{Rank: cfg.Rank, Op: op, Err: err}
		} else {
			for _, h := range hosts {
				j.hosts = append(j.hosts, string(h))
			}
		}
	}
	if err != nil {
		j.stopHeartbeat()
		j.remove(beatRel(j.rank))
		j.closeDirs()
		return nil, err
	}
	c.localRank = c.computeLocalRank()
	return c, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Rank is this process's rank in the communicator.
func (c *Rendezvous) Rank() int { return c.rank }

// Size is the number of ranks in the communicator.
func (c *Rendezvous) Size() int { return len(c.world) }

// LocalRank is the rank among this communicator's ranks with the same Host,
// in rank order, computed when the communicator was made.
func (c *Rendezvous) LocalRank() int { return c.localRank }

// Host is the host name this rank joined with.
func (c *Rendezvous) Host() string { return c.job.hosts[c.job.rank] }

// Kind is "rendezvous", as the manifest records it.
func (c *Rendezvous) Kind() string { return "rendezvous" }

func (c *Rendezvous) computeLocalRank() int {
	host := c.job.hosts[c.job.rank]
	n := 0
	for _, w := range c.world[:c.rank] {
		if c.job.hosts[w] == host {
			n++
		}
	}
	return n
}

// Barrier returns once every rank has entered it.
func (c *Rendezvous) Barrier(ctx context.Context) error {
	return c.barrier(ctx, "Barrier", 0)
}

// Align is a Barrier that releases the ranks within about alignPoll of
// one another. A plain Barrier polls at up to pollMax (2 ms) once a rank
// has waited a while, so a rank that arrived early, say after a shorter
// Setup, may see the release up to 2 ms after the last arrival started
// its timed Run, and that skew counts in a phase's wall time. After the
// first barrier every rank is within a poll period of the others, so the
// second one, polled at alignPoll, lasts at most ~2 ms and ends for all of
// them at nearly the same moment.
func (c *Rendezvous) Align(ctx context.Context) error {
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	return c.barrier(ctx, "Align", alignPoll)
}

func (c *Rendezvous) barrier(ctx context.Context, op string, poll time.Duration) error {
	_, _, err := c.run(ctx, &step{
		op:      op,
		header:  op,
		root:    -1,
		combine: func([][]byte) ([]byte, []byte, error) { return nil, nil, nil },
		poll:    poll,
	})
	return err
}

// AllreduceInt64 reduces v element-wise across all ranks, in place.
func (c *Rendezvous) AllreduceInt64(ctx context.Context, op Op, v []int64) error {
	return reduce(ctx, c, "AllreduceInt64", op, -1, v, fold[int64])
}

// AllreduceFloat64 reduces v element-wise across all ranks, in place. Rank 0
// folds the contributions in rank order, so every rank gets the same bits.
func (c *Rendezvous) AllreduceFloat64(ctx context.Context, op Op, v []float64) error {
	return reduce(ctx, c, "AllreduceFloat64", op, -1, v, fold[float64])
}

// ReduceInt64 reduces v element-wise onto root; other ranks' v is left as
// it was.
func (c *Rendezvous) ReduceInt64(ctx context.Context, root int, op Op, v []int64) error {
	if err := checkRoot(root, c.Size()); err != nil {
		return err
	}
	return reduce(ctx, c, "ReduceInt64", op, root, v, fold[int64])
}

// reduce is every reduction: the vectors travel as little-endian 64-bit
// words, and the header carries op and length so ranks that disagree on
// them get an error instead of garbage.
func reduce[T int64 | float64](ctx context.Context, c *Rendezvous, name string, op Op, root int, v []T, fold func(Op, []T, []T)) error {
	if op != Sum && op != Min && op != Max {
		return fmt.Errorf("spmd: %s: unknown reduction operator %v", name, op)
	}
	payload, err := binary.Append(nil, binary.LittleEndian, v)
	if err != nil {
		return fmt.Errorf("spmd: %s: %w", name, err)
	}
	shared, forRoot, err := c.run(ctx, &step{
		op:      name,
		header:  fmt.Sprintf("%s root=%d op=%v len=%d", name, root, op, len(v)),
		root:    root,
		payload: payload,
		combine: func(parts [][]byte) ([]byte, []byte, error) {
			acc := slices.Clone(v)
			other := make([]T, len(v))
			for r := 1; r < len(parts); r++ {
				if err := decodeWords(parts[r], other); err != nil {
					return nil, nil, &failure{kind: failOther, rank: c.world[r], detail: err.Error()}
				}
				fold(op, acc, other)
			}
			out, err := binary.Append(nil, binary.LittleEndian, acc)
			if root < 0 {
				return out, nil, err
			}
			return nil, out, err
		},
	})
	if err != nil {
		return err
	}
	res := shared
	if root >= 0 {
		if c.rank != root {
			return nil
		}
		res = forRoot
	}
	if err := decodeWords(res, v); err != nil {
		return &RankError{Rank: c.world[0], Op: name, Err: err}
	}
	return nil
}

func decodeWords[T int64 | float64](b []byte, v []T) error {
	if len(b) != 8*len(v) {
		return fmt.Errorf("got %d bytes for %d values", len(b), len(v))
	}
	_, err := binary.Decode(b, binary.LittleEndian, v)
	return err
}

// Gather returns every rank's b, indexed by rank, on root; nil elsewhere.
func (c *Rendezvous) Gather(ctx context.Context, root int, b []byte) ([][]byte, error) {
	if err := checkRoot(root, c.Size()); err != nil {
		return nil, err
	}
	const op = "Gather"
	_, forRoot, err := c.run(ctx, &step{
		op:      op,
		header:  fmt.Sprintf("%s root=%d", op, root),
		root:    root,
		payload: b,
		combine: func(parts [][]byte) ([]byte, []byte, error) { return nil, pack(parts), nil },
	})
	if err != nil || c.rank != root {
		return nil, err
	}
	all, err := unpack(forRoot, c.Size())
	if err != nil {
		return nil, &RankError{Rank: c.world[0], Op: op, Err: err}
	}
	return all, nil
}

// Bcast returns root's b on every rank. Ranks other than root may pass nil.
func (c *Rendezvous) Bcast(ctx context.Context, root int, b []byte) ([]byte, error) {
	if err := checkRoot(root, c.Size()); err != nil {
		return nil, err
	}
	payload := b
	if c.rank != root {
		payload = nil
	}
	shared, _, err := c.run(ctx, &step{
		op:      "Bcast",
		header:  fmt.Sprintf("Bcast root=%d", root),
		root:    -1,
		payload: payload,
		combine: func(parts [][]byte) ([]byte, []byte, error) { return parts[root], nil, nil },
	})
	if err != nil {
		return nil, err
	}
	if c.rank == root {
		return b, nil
	}
	return shared, nil
}

// Split partitions the ranks by color, ordered by key then old rank. The new
// communicators share this one's directory, heartbeat and abort file; their
// ids derive from this one's and the collective's number, so every member
// names its communicator alike without further exchange.
func (c *Rendezvous) Split(ctx context.Context, color, key int) (Comm, error) {
	const op = "Split"
	seq := c.seq
	var payload [16]byte
	binary.LittleEndian.PutUint64(payload[:8], uint64(int64(color)))
	binary.LittleEndian.PutUint64(payload[8:], uint64(int64(key)))
	shared, _, err := c.run(ctx, &step{
		op:      op,
		header:  op,
		root:    -1,
		payload: payload[:],
		combine: func(parts [][]byte) ([]byte, []byte, error) {
			out := make([]byte, 0, 16*len(parts))
			for r, p := range parts {
				if len(p) != 16 {
					return nil, nil, &failure{kind: failOther, rank: c.world[r], detail: fmt.Sprintf("malformed split request of %d bytes", len(p))}
				}
				if col := int64(binary.LittleEndian.Uint64(p)); col < 0 && col != Undefined {
					return nil, nil, &failure{kind: failOther, rank: c.world[r], detail: fmt.Sprintf("color %d is neither >= 0 nor Undefined", col)}
				}
				out = append(out, p...)
			}
			return out, nil, nil
		},
	})
	if err != nil {
		return nil, err
	}
	if len(shared) != 16*c.Size() {
		return nil, &RankError{Rank: c.world[0], Op: op, Err: fmt.Errorf("malformed split result of %d bytes", len(shared))}
	}
	if color == Undefined {
		return nil, nil // a nil interface, not a typed nil *Rendezvous
	}
	type member struct{ key, old int }
	var members []member
	for r := range c.Size() {
		p := shared[16*r:]
		if int(int64(binary.LittleEndian.Uint64(p))) == color {
			members = append(members, member{key: int(int64(binary.LittleEndian.Uint64(p[8:]))), old: r})
		}
	}
	slices.SortFunc(members, func(a, b member) int {
		if a.key != b.key {
			return compareInt(a.key, b.key)
		}
		return compareInt(a.old, b.old)
	})
	c.job.openMu.Lock()
	c.job.open++
	c.job.openMu.Unlock()
	sub := &Rendezvous{
		job:   c.job,
		id:    c.id + "." + strconv.FormatUint(seq, 10) + "." + strconv.Itoa(color),
		world: make([]int, len(members)),
	}
	for i, m := range members {
		sub.world[i] = c.world[m.old]
		if m.old == c.rank {
			sub.rank = i
		}
	}
	sub.localRank = sub.computeLocalRank()
	return sub, nil
}

func compareInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Abort brings the whole job down with code: it writes the job-wide abort
// file, which makes every rank waiting in a collective return ErrAborted,
// and exits.
func (c *Rendezvous) Abort(code int) { c.AbortWith(code, "") }

// AbortWith is Abort with a reason, which the other ranks' errors quote so
// the job's logs say why it went down, not only who took it down.
func (c *Rendezvous) AbortWith(code int, reason string) {
	// The error is of no use: this process exits either way, and should the
	// file be missing, peers still fall back on heartbeats and timeouts.
	_ = c.writeAbort(code, reason)
	os.Exit(code)
}

func (c *Rendezvous) writeAbort(code int, reason string) error {
	if reason == "" {
		reason = fmt.Sprintf("rank %d called Abort(%d)", c.job.rank, code)
	}
	return c.job.writeAbort(c.job.rank, code, reason)
}

// Close releases the communicator; closing the world communicator (the one
// NewRendezvous returned) also stops this rank's heartbeat, so close the
// communicators made by Split first. Files are removed by whichever member
// closes last, once no member can still need them. Close is idempotent.
func (c *Rendezvous) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	j := c.job
	isWorld := c.id == worldID
	if isWorld {
		j.stopHeartbeat()
		j.remove(beatRel(j.rank))
	}
	last, err := c.release()
	if isWorld && last {
		// Empty by now unless a communicator was never closed; rmdir
		// leaves non-empty directories alone. The job file goes last: the
		// directory is free for another job once it is gone.
		j.rmdir(beatDir)
		j.rmdir(commDir)
		j.remove(jobFile)
		if j.claim.madeDir {
			j.removeJobDir()
		}
	}
	j.openMu.Lock()
	if j.open--; j.open == 0 {
		j.closeDirs()
	}
	j.openMu.Unlock()
	if err != nil {
		return &RankError{Rank: c.job.rank, Op: "Close", Err: err}
	}
	return nil
}

// pack concatenates byte strings so that unpack can tell them apart again,
// empty ones included.
func pack(parts [][]byte) []byte {
	n := 0
	for _, p := range parts {
		n += binary.MaxVarintLen64 + len(p)
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

func unpack(b []byte, n int) ([][]byte, error) {
	parts := make([][]byte, 0, n)
	for len(b) > 0 {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, errors.New("malformed packed data")
		}
		end := k + int(l)
		parts = append(parts, b[k:end:end])
		b = b[end:]
	}
	if len(parts) != n {
		return nil, fmt.Errorf("packed data holds %d parts, want %d", len(parts), n)
	}
	return parts, nil
}
