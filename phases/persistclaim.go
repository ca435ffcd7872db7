package phases

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
)

// Two jobs creating one persistent directory at once. The workdir is a
// shared filesystem (NFS, Lustre, GPFS) seen from many hosts, where flock
// and fcntl locks cannot be trusted across hosts, so the claim is made of
// what every such filesystem does atomically: an exclusive create, a
// rename, and a file's times.
//
//   - Claim: rank 0 of the creating job creates PersistPartial with
//     O_CREAT|O_EXCL, holding a persistClaim (run id, host, pid, rank, a
//     random token, its lease). Exactly one job's create succeeds; the
//     directory itself (mkdir) is only a container, so a job that finds it
//     empty, made a moment ago by another, races for the same marker.
//   - Lease: while it holds the claim the creator touches the marker
//     (futimens, pio.Touch) every persistRenew, after checking on its
//     descriptor that the marker is still its own inode. It releases the
//     claim when its phase fails (renames the marker to claimReleased), and
//     completes it by writing the marker of a complete directory.
//   - Waiting: a job that finds a claim it does not hold waits, looking
//     again every persistRenew, until the directory is complete (it then
//     reuses it) or the claim is released (it claims it), for at most
//     persist_wait (default: the plan's coordination_timeout; 0 refuses at
//     once). Its error names the directory, the creating run, host, pid
//     and rank and how long ago the lease was renewed.
//   - Stale lease: a claim counts as abandoned (its creator died) only when
//     its marker's mtime is older than the lease by this host's clock AND
//     this host has seen the marker unchanged (inode, mtime, ctime, size)
//     for persistConfirm renewals by its own monotonic clock. Clock skew
//     between hosts can so only delay a takeover, never take a live
//     claim. The takers of a stale claim hold an election (takeOver): an
//     O_EXCL create of a file named after that claim, holding the
//     winner's claim, which the winner renames over the stale marker
//     after checking it is still the one judged. The marker is never
//     absent meanwhile, and of two takers only one create succeeds.
//   - A creator that finds its claim gone at a renewal (taken over after a
//     stall longer than the lease) warns at once and fails at Complete,
//     before writing any marker.
//
// Every look opens the marker anew: NFS revalidates a file's attributes
// on open (close-to-open), so the mtime seen is the server's, not a
// cached one.

const (
	claimTaken     = PersistPartial + ".taken-"    // + a stale claim's token: the election of its taker
	claimReleased  = PersistPartial + ".released-" // a claim its creator gave up (its phase failed)
	persistConfirm = 5                             // renewals a waiter sees a lease unchanged before taking it over
)

// The lease: renewed every persistRenew, abandoned when unrenewed for
// persistLease. A claim records both, and a waiter judges it by what it
// records; variables so the package's tests can shorten them.
var (
	persistRenew = time.Second
	persistLease = 30 * time.Second
)

// persistClaim is the content of PersistPartial: the marker's fields
// (statusOf and prism datasets list read it as a PersistInfo) and who
// holds the claim.
type persistClaim struct {
	PersistInfo
	PID    int     `json:"pid"`
	Rank   int     `json:"rank"` // world rank
	Token  string  `json:"token"`
	LeaseS float64 `json:"lease_s"`
	RenewS float64 `json:"renew_s"`
}

func (c *persistClaim) lease() (lease, renew time.Duration) {
	lease, renew = persistLease, persistRenew
	if c.LeaseS > 0 && c.RenewS > 0 {
		lease, renew = time.Duration(c.LeaseS*float64(time.Second)), time.Duration(c.RenewS*float64(time.Second))
	}
	return lease, renew
}

// who names the holder of a claim in messages.
func (c *persistClaim) who() string {
	run, host := c.RunID, c.Host
	if run == "" {
		run = "?"
	}
	if host == "" {
		host = "?"
	}
	return fmt.Sprintf("run %s on host %s, pid %d, rank %d", run, host, c.PID, c.Rank)
}

// claimOnDisk is one look at a directory's PersistPartial.
type claimOnDisk struct {
	persistClaim
	st    unix.Stat_t
	valid bool // its content parsed as a claim
}

// key is what changes when the claim is renewed or replaced.
func (c *claimOnDisk) key() [6]int64 {
	return [6]int64{int64(c.st.Ino), c.st.Mtim.Sec, c.st.Mtim.Nsec, c.st.Ctim.Sec, c.st.Ctim.Nsec, c.st.Size}
}

func (c *claimOnDisk) mtime() time.Time { return time.Unix(c.st.Mtim.Sec, c.st.Mtim.Nsec) }

// readClaim reads d's PersistPartial through a descriptor of its own: nil
// when there is none. A marker whose content does not parse yet (its
// creator is between the exclusive create and the write) is read again
// for up to 200ms (well inside a coordination_timeout, which the other
// ranks wait in meanwhile) before it is taken as it is.
func readClaim(d *pio.Dir) (*claimOnDisk, error) { return readClaimAt(d, PersistPartial) }

func readClaimAt(d *pio.Dir, name string) (*claimOnDisk, error) {
	n := pio.MustName(name)
	for try := 0; ; try++ {
		fd, err := d.Open(n, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		if err != nil {
			return nil, d.Wrap("open", n, err)
		}
		c := &claimOnDisk{}
		b, err := readSmall(fd, &c.st)
		pio.Close(fd)
		if err != nil {
			return nil, d.Wrap("read", n, err)
		}
		if json.Unmarshal(b, &c.persistClaim) == nil && c.Prism == "persistent" {
			c.valid = true
			return c, nil
		}
		if try == 10 {
			return c, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readSmall reads the regular file fd (at most 1 MiB), filling st.
func readSmall(fd int, st *unix.Stat_t) ([]byte, error) {
	if err := unix.Fstat(fd, st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > 1<<20 {
		return nil, fmt.Errorf("not a regular file of at most 1 MiB")
	}
	b := make([]byte, st.Size)
	if len(b) == 0 {
		return b, nil
	}
	k, err := pio.PreadFull(fd, b, 0)
	if errors.Is(err, pio.ErrShortIO) {
		err = nil // truncated since the fstat: parsed as it is
	}
	return b[:k], err
}

// claim is rank 0's hold on a persistent directory while its job writes
// it.
type claim struct {
	root  *pio.Dir
	token string
	log   io.Writer
	what  string // "create_dataset \"name\"", for the warning

	stop chan struct{}
	done chan struct{}
	once sync.Once
	mu   sync.Mutex
	lost error // the claim is no longer this run's
}

func newToken() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// takeClaim creates d's PersistPartial exclusively with this run's claim
// and starts renewing it; nil, nil when another job's create came first.
func takeClaim(env *Env, d *pio.Dir, info PersistInfo) (*claim, error) {
	cl, err := writeClaim(env, d, PersistPartial, info)
	if cl != nil {
		cl.start()
	}
	return cl, err
}

// writeClaim creates the claim file name in d exclusively (O_CREAT|O_EXCL)
// and fsyncs it and d; nil, nil when the name exists.
func writeClaim(env *Env, d *pio.Dir, name string, info PersistInfo) (*claim, error) {
	cl := &claim{root: d, token: newToken(), log: env.Log, what: fmt.Sprintf("%s %q", env.Kind, env.Name)}
	b, _ := json.Marshal(persistClaim{PersistInfo: info, PID: os.Getpid(), Rank: env.WorldRank, Token: cl.token,
		LeaseS: persistLease.Seconds(), RenewS: persistRenew.Seconds()})
	n := pio.MustName(name)
	fd, err := d.Open(n, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
	if errors.Is(err, unix.EEXIST) {
		return nil, nil
	}
	if err != nil {
		return nil, d.Wrap("create", n, err)
	}
	_, err = pio.PwriteFull(fd, b, 0)
	if err == nil {
		err = pio.Fsync(fd)
	}
	if cerr := pio.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.Sync()
	}
	if err != nil {
		// Half made: not left as a claim someone must wait out.
		_ = d.Unlink(n)
		return nil, d.Wrap("write", n, err)
	}
	return cl, nil
}

// start begins renewing a claim that is now PersistPartial, after tidying
// what released claims left (ours to tidy now that we hold it).
func (cl *claim) start() {
	if entries, err := os.ReadDir(cl.root.ProcPath()); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), claimReleased) {
				_ = cl.root.Unlink(pio.MustName(e.Name()))
			}
		}
	}
	cl.stop, cl.done = make(chan struct{}), make(chan struct{})
	go cl.renew()
}

func (cl *claim) renew() {
	defer close(cl.done)
	t := time.NewTicker(persistRenew)
	defer t.Stop()
	warned := false
	for {
		select {
		case <-cl.stop:
			return
		case <-t.C:
		}
		err := cl.touch()
		var lost *lostError
		if errors.As(err, &lost) {
			cl.mu.Lock()
			cl.lost = err
			cl.mu.Unlock()
			fmt.Fprintf(cl.log, "prism: %s: %v; this run's files there are not its own any more, and it fails\n", cl.what, err)
			return
		}
		if err != nil && !warned {
			// A filesystem hiccup: keep trying; the waiters see the
			// lease age meanwhile.
			fmt.Fprintf(cl.log, "prism: %s: renewing the claim on %s: %v\n", cl.what, cl.root.Path(), err)
			warned = true
		}
	}
}

// lostError says the claim was taken over or removed.
type lostError struct{ msg string }

func (e *lostError) Error() string { return e.msg }

// touch renews the lease, on the marker's own descriptor once it is
// checked to hold this claim's token: inode numbers alone do not tell,
// since a taker's new marker may get the inode the old one freed.
func (cl *claim) touch() error { return cl.own(true) }

// check is nil while the claim is this run's.
func (cl *claim) check() error {
	cl.mu.Lock()
	lost := cl.lost
	cl.mu.Unlock()
	if lost != nil {
		return lost
	}
	return cl.own(false)
}

func (cl *claim) own(renew bool) error {
	n := pio.MustName(PersistPartial)
	fd, err := cl.root.Open(n, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) {
		return &lostError{fmt.Sprintf("the claim on %s is gone (%s removed)", cl.root.Path(), PersistPartial)}
	}
	if err != nil {
		return cl.root.Wrap("open", n, err)
	}
	defer pio.Close(fd)
	var c claimOnDisk
	b, err := readSmall(fd, &c.st)
	if err != nil {
		return cl.root.Wrap("read", n, err)
	}
	if json.Unmarshal(b, &c.persistClaim) != nil || c.Token != cl.token {
		what := "another claim"
		if c.Token != "" {
			what = c.who()
		}
		return &lostError{fmt.Sprintf("the claim on %s was taken over by %s, which found this run's lease unrenewed for over %s", cl.root.Path(), what, persistLease)}
	}
	if renew {
		return pio.Touch(fd)
	}
	return nil
}

func (cl *claim) stopRenewing() {
	cl.once.Do(func() {
		close(cl.stop)
		<-cl.done
	})
}

// release gives the claim up (its phase failed): the marker goes aside to
// claimReleased, so the next job claims the directory at once instead of
// waiting out the lease. The directory stays unfinished.
func (cl *claim) release() {
	cl.stopRenewing()
	if cl.check() != nil {
		return
	}
	if cl.root.Rename(pio.MustName(PersistPartial), cl.root, pio.MustName(claimReleased+cl.token)) == nil {
		_ = cl.root.Sync()
	}
}

// takeOver replaces the stale claim judged with this run's, or returns
// nil when another job got there first. PersistPartial is never absent
// meanwhile, so no job can take the directory for foreign or claim it
// with O_EXCL: the takers hold an election by creating, O_EXCL, a file
// named after the stale claim (claimTaken + its identity) that holds the
// winner's claim, and only the one whose create succeeded renames it over
// PersistPartial, after checking that PersistPartial is still the claim
// judged stale. A job that judged an older claim elects under another
// name and then finds PersistPartial is not it. An election file left by
// a taker that died between its create and its rename (a microsecond's
// window) is removed once older than the lease; removing a live one by
// mistake only makes its rename fail (ENOENT), never displaces a claim.
func takeOver(env *Env, d *pio.Dir, judged *claimOnDisk, info PersistInfo) (*claim, error) {
	id := judged.Token
	if !judged.valid || id == "" {
		id = fmt.Sprintf("%x-%x.%x", judged.st.Ino, judged.st.Mtim.Sec, judged.st.Mtim.Nsec)
	}
	elect := claimTaken + id
	cl, err := writeClaim(env, d, elect, info)
	if err != nil || cl == nil {
		if e, _ := readClaimAt(d, elect); cl == nil && e != nil {
			lease, _ := e.lease()
			if time.Since(e.mtime()) > lease {
				_ = d.Unlink(pio.MustName(elect))
			}
		}
		return nil, err
	}
	if now, err := readClaim(d); err != nil || now == nil || now.st.Ino != judged.st.Ino || now.st.Mtim != judged.st.Mtim || now.Token != judged.Token {
		_ = d.Unlink(pio.MustName(elect)) // changed since the look: renewed, completed, or taken
		return nil, err
	}
	if err := d.Rename(pio.MustName(elect), d, pio.MustName(PersistPartial)); err != nil {
		return nil, nil // the election file was removed as dead: look again
	}
	cl.start()
	return cl, nil
}

// creator is rank 0's side of CreatePersistent: one look at the directory
// per round, until it is complete, claimed by this job, or refused.
type creator struct {
	env        *Env
	kind, name string
	dir, hash  string
	raw        json.RawMessage
	wait       time.Duration
	start      time.Time
	parent     *pio.Dir
	root       *pio.Dir // the directory after the last look
	cl         *claim   // this job's claim, once it holds it
	rounds     int
	seen       [6]int64 // the other job's claim as last seen
	seenAt     time.Time
	said       string // the key of the last waiting message printed
}

type lookState = byte

const (
	lookWait  lookState = iota // another job holds it: look again
	lookReuse                  // complete: msg is its Info and List
	lookWrite                  // this job holds the claim: write it
)

func (c *creator) info() PersistInfo {
	return PersistInfo{Prism: "persistent", Kind: c.kind, Name: c.name, Hash: c.hash, Params: c.raw,
		RunID: c.env.RunID, Phase: c.env.Name, Host: c.env.Host, Created: time.Now().UTC().Format(time.RFC3339)}
}

// poll is the time between two looks: persistRenew, or less under a short
// coordination_timeout, since the other ranks wait for each look inside
// a collective.
func (c *creator) poll() time.Duration {
	if ct := c.env.CoordinationTimeout / 4; ct > 0 && ct < persistRenew {
		return ct
	}
	return persistRenew
}

// look is one round: after the first it waits poll().
func (c *creator) look(ctx context.Context) (lookState, []byte, error) {
	env := c.env
	if c.rounds++; c.rounds > 1 {
		t := time.NewTimer(c.poll())
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, nil, ctx.Err()
		case <-t.C:
		}
	}
	var err error
	if c.parent == nil {
		if c.parent, err = persistParent(env); err != nil {
			return 0, nil, env.Errorf("setup: %w", err)
		}
	}
	if c.root != nil {
		// Opened anew each round: the directory may have been removed
		// (prism datasets rm) and made again meanwhile.
		c.root.Close()
		c.root = nil
	}
	if c.root, err = c.parent.MakeSub(c.dir, 0o755); err == nil {
		return c.claimIt(false)
	}
	if !errors.Is(err, unix.EEXIST) {
		return 0, nil, env.Errorf("setup: %w", err)
	}
	if c.root, err = c.parent.OpenSub(c.dir); err != nil {
		return 0, nil, env.Errorf("setup: %w", err)
	}
	other, err := readClaim(c.root)
	if err != nil {
		return 0, nil, env.Errorf("setup: %w", err)
	}
	if other != nil {
		return c.judge(other)
	}
	info, list, cerr := readComplete(c.root, c.dir)
	if marked, _ := readMarker(c.root, c.dir); cerr != nil && marked != nil {
		// Complete once, damaged since (its list changed): not
		// prism's to overwrite silently.
		return 0, nil, env.Errorf("setup: %w (prism datasets rm it to write it again)", cerr)
	}
	if cerr == nil {
		msg, _ := json.Marshal(struct {
			Info *PersistInfo
			List []byte
		}{info, list})
		return lookReuse, msg, nil
	}
	// Neither marker: empty (another job's mkdir a moment ago, or ours
	// of an earlier round), or what a released or taken claim left;
	// anything else is not prism's.
	entries, err := os.ReadDir(c.root.ProcPath())
	if err != nil {
		return 0, nil, env.Errorf("setup: list %s: %w", c.root.Path(), err)
	}
	ours := len(entries) == 0
	for _, e := range entries {
		switch {
		case e.Name() == PersistPartial || e.Name() == PersistMarker:
			// Made since the reads above (a taker's claim, a completion):
			// look again.
			return lookWait, nil, nil
		case strings.HasPrefix(e.Name(), PersistPartial+"."):
			ours = true
		}
	}
	if !ours {
		return 0, nil, env.Errorf("setup: %s exists and carries none of prism's markers: prism does not write into it (remove it yourself, or choose another persist name)", c.root.Path())
	}
	return c.claimIt(len(entries) > 0)
}

// claimIt tries the exclusive create; lost to another job, it looks again.
func (c *creator) claimIt(unfinished bool) (lookState, []byte, error) {
	cl, err := takeClaim(c.env, c.root, c.info())
	if err != nil {
		return 0, nil, c.env.Errorf("setup: %w", err)
	}
	if cl == nil {
		return lookWait, nil, nil
	}
	return c.claimed(cl, unfinished)
}

func (c *creator) claimed(cl *claim, unfinished bool) (lookState, []byte, error) {
	if m, _ := readMarker(c.root, c.dir); m != nil && unfinished {
		// The creator judged dead completed it after all, between our
		// look and our claim: give the claim back and reuse it.
		cl.release()
		return lookWait, nil, nil
	}
	c.cl = cl
	if unfinished {
		fmt.Fprintf(c.env.Log, "prism: %s %q: %s is an unfinished creation: writing it again\n", c.env.Kind, c.env.Name, c.root.Path())
	}
	return lookWrite, nil, nil
}

// judge decides on another job's claim: wait for it, take it over (its
// creator is gone), or refuse (waited persist_wait).
func (c *creator) judge(other *claimOnDisk) (lookState, []byte, error) {
	env := c.env
	now := time.Now()
	if k := other.key(); k != c.seen || c.seenAt.IsZero() {
		c.seen, c.seenAt = k, now
	}
	lease, renew := other.lease()
	age := now.Sub(other.mtime())
	if age > lease {
		if now.Sub(c.seenAt) >= persistConfirm*renew {
			cl, err := takeOver(env, c.root, other, c.info())
			if err != nil {
				return 0, nil, env.Errorf("setup: %w", err)
			}
			if cl == nil {
				return lookWait, nil, nil
			}
			return c.claimed(cl, true)
		}
		// Old by this host's clock yet renewed as it is watched: a live
		// creator on a host whose clock is behind. Waited out like any.
		if waited := now.Sub(c.start); waited >= c.wait && waited >= 2*persistConfirm*renew {
			return 0, nil, env.Errorf("setup: %s is being created by %s: its lease is renewed, though its time is %s behind this host's clock (clocks differ between hosts?); gave up after waiting %s (persist_wait = %s): let that run finish or raise persist_wait",
				c.root.Path(), other.who(), age.Round(time.Second), waited.Round(time.Millisecond), c.wait)
		}
		c.say("stale "+other.Token, fmt.Sprintf("%s: the claim of %s was last renewed %s ago (its lease: %s): making sure it is abandoned", c.root.Path(), other.who(), age.Round(time.Second), lease))
		return lookWait, nil, nil
	}
	waited := now.Sub(c.start)
	if waited >= c.wait {
		gave := "persist_wait = 0s: not waiting"
		if c.wait > 0 {
			gave = fmt.Sprintf("gave up after waiting %s, persist_wait = %s", waited.Round(time.Millisecond), c.wait)
		}
		return 0, nil, env.Errorf("setup: %s is being created by %s (its lease renewed %s ago; %s): let that run finish or raise persist_wait; if that run is gone, a run after its lease (%s) has run out writes it again",
			c.root.Path(), other.who(), age.Round(time.Millisecond), gave, lease)
	}
	c.say("wait "+other.Token, fmt.Sprintf("%s is being created by %s (its lease renewed %s ago): waiting for it, at most persist_wait = %s", c.root.Path(), other.who(), age.Round(time.Millisecond), c.wait))
	return lookWait, nil, nil
}

// say prints a waiting message once per holder and state (key).
func (c *creator) say(key, msg string) {
	if key == c.said {
		return
	}
	c.said = key
	fmt.Fprintf(c.env.Log, "prism: %s %q: %s\n", c.env.Kind, c.env.Name, msg)
}
