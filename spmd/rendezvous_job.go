package spmd

// Which job a rendezvous directory belongs to. A directory shared by two
// jobs (two runs of one plan naming the same `rendezvous`) would merge them:
// each job's ranks would take the other's files for their peers'. So the
// directory holds the token of the job using it, in the file "job", written
// by whichever rank arrives first; a rank with another token is refused.
//
// The token is, in this order: PRISM_JOB_TOKEN, the random nonce prism's
// launcher gives its children; SLURM_JOB_ID.SLURM_STEP_ID under Slurm,
// shared by the tasks of one step and by nothing else; PRISM_RENDEZVOUS_TOKEN,
// set by whoever starts the ranks some other way. A rank with no token joins
// as an anonymous job: it is refused by a directory that has a token, but
// two anonymous jobs cannot be told apart, which is why Open refuses a
// tokenless rank in the plan's (shared) directory and allows one only in a
// directory a launcher handed it (PRISM_RENDEZVOUS).
//
// A directory left behind by an earlier job must not merge either: a job
// that ends cleanly removes its files, the job file last (the last rank to
// Close the world does it), so what a new job may find is an earlier job
// that died. With another token it is refused by the job file. With the
// same token (a requeued Slurm job, a reused explicit token) it is refused
// by the heartbeats: each rank creates hb/<rank> exclusively, so a leftover
// of the earlier job, like a second process claiming the same rank, makes
// it fail. Both refusals say whether the other job's heartbeats still
// advance, i.e. whether it is running or dead, and never delete its files.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Environment variables that give a job its token.
const (
	EnvJobToken        = "PRISM_JOB_TOKEN"        // set by Launch for its children
	EnvRendezvousToken = "PRISM_RENDEZVOUS_TOKEN" // set by hand, by other launchers
)

const jobFile = "job"

// maxTokenLen bounds a token, which ends up in file contents and messages.
const maxTokenLen = 256

// JobToken returns this job's token and where it came from (the variable
// names), or "" and "" when the environment gives none.
func JobToken(getenv func(string) string) (token, source string) {
	if t := getenv(EnvJobToken); t != "" {
		return t, EnvJobToken
	}
	if id := getenv("SLURM_JOB_ID"); id != "" {
		step := getenv("SLURM_STEP_ID")
		if step == "" {
			step = getenv("SLURM_STEPID") // older Slurm
		}
		if step == "" {
			return id, "SLURM_JOB_ID"
		}
		return id + "." + step, "SLURM_JOB_ID.SLURM_STEP_ID"
	}
	if t := getenv(EnvRendezvousToken); t != "" {
		return t, EnvRendezvousToken
	}
	return "", ""
}

// expandJobDir replaces %j in a rendezvous directory with the job token, so
// that one plan gives every job a directory of its own.
func expandJobDir(dir, token string) (string, error) {
	if !strings.Contains(dir, "%j") {
		return dir, nil
	}
	if token == "" {
		return "", fmt.Errorf("spmd: rendezvous directory %q uses %%j, but this rank has no job token "+
			"(%s, SLURM_JOB_ID or %s)", dir, EnvJobToken, EnvRendezvousToken)
	}
	if strings.ContainsAny(token, "/\x00") || token == "." || token == ".." {
		return "", fmt.Errorf("spmd: job token %q cannot stand for %%j in the rendezvous directory %q", token, dir)
	}
	return strings.ReplaceAll(dir, "%j", token), nil
}

func checkToken(token string) error {
	if len(token) > maxTokenLen || strings.ContainsAny(token, "\n\x00") {
		return fmt.Errorf("job token %q: at most %d bytes, no newline or NUL", token, maxTokenLen)
	}
	return nil
}

func showToken(t string) string {
	if t == "" {
		return "(none)"
	}
	return strconv.Quote(t)
}

// jobClaim is what a job file says.
type jobClaim struct {
	token string
	size  int
	who   string // "rank R on HOST, pid P", for messages
	// madeDir says that the job created the directory, so the last rank
	// to close removes it too.
	madeDir bool
}

func (c jobClaim) encode() []byte {
	made := 0
	if c.madeDir {
		made = 1
	}
	return fmt.Appendf(nil, "%s\n%d %d\n%s\n", c.token, c.size, made, c.who)
}

func decodeClaim(b []byte) (jobClaim, error) {
	lines := strings.SplitN(string(b), "\n", 4)
	if len(lines) < 3 {
		return jobClaim{}, fmt.Errorf("malformed job file: %q", b)
	}
	c := jobClaim{token: lines[0], who: lines[2]}
	var made int
	if _, err := fmt.Sscanf(lines[1], "%d %d", &c.size, &made); err != nil {
		return jobClaim{}, fmt.Errorf("malformed job file: %q", b)
	}
	c.madeDir = made == 1
	return c, nil
}

// claimDir opens the job directory (openJobDir) and makes it this job's,
// or finds it is already: the first rank to arrive creates the job file
// (link, so exactly one succeeds), the others read it and compare tokens.
// It returns the claim in force; j.dirs is set when it succeeds. It runs
// before any other goroutine of the job, so it uses j.dirs unlocked.
func (j *job) claimDir(cfg RendezvousConfig) (jobClaim, error) {
	mine := jobClaim{token: cfg.Token, size: cfg.Size,
		who: fmt.Sprintf("rank %d on %s, pid %d", cfg.Rank, cfg.Host, os.Getpid())}
	dirs, err := openJobDir(j.dir)
	if err != nil {
		return jobClaim{}, err
	}
	j.dirs, j.dev, j.ino = dirs, dirs.dev, dirs.ino
	claim, err := j.claimJobFile(cfg, mine)
	if err != nil {
		j.closeDirs()
	}
	return claim, err
}

func (j *job) claimJobFile(cfg RendezvousConfig, mine jobClaim) (jobClaim, error) {
	root := j.dirs.root
	mine.madeDir = j.dirs.made
	tmp, err := writeTemp(root, "", jobFile, mine.encode(), j.tmpTag())
	if err != nil {
		return jobClaim{}, err
	}
	defer unlink(root, tmp)
	// A link that succeeded is this rank's claim, or so it should be:
	// either way the file is read back, so what counts is what it says.
	if err := link(root, tmp, jobFile); err != nil && !errors.Is(err, fs.ErrExist) {
		return jobClaim{}, err
	}
	b, err := j.read(jobFile)
	if err != nil {
		return jobClaim{}, err
	}
	theirs, err := decodeClaim(b)
	if err != nil {
		return jobClaim{}, fmt.Errorf("%s: %w", j.path(jobFile), err)
	}
	if theirs.token == mine.token && theirs.who == mine.who {
		return mine, nil // this rank's own claim: madeDir is known here only
	}
	if theirs.token != cfg.Token {
		src := ""
		if cfg.TokenSource != "" {
			src = " (from " + cfg.TokenSource + ")"
		}
		return jobClaim{}, fmt.Errorf("rendezvous directory %s belongs to another job: its token is %s (%s), "+
			"this rank's is %s%s; %s. Two jobs in one directory would take each other's ranks for their own: "+
			"give each job a directory of its own, e.g. rendezvous = \"%s\" (%%j becomes the job token), "+
			"or PRISM_RENDEZVOUS=<a fresh directory>",
			j.dir, showToken(theirs.token), theirs.who, showToken(cfg.Token), src,
			j.liveness(theirs.size), filepath.Join(filepath.Dir(j.dir), filepath.Base(j.dir)+"-%j"))
	}
	return theirs, nil
}

// claimBeat creates this rank's first heartbeat, exclusively: a heartbeat
// already there is another process's (this rank twice in one job) or an
// earlier job's of the same token, and joining would mix the two.
func (j *job) claimBeat(size int) error {
	root := j.dirs.root
	tmp, err := writeTemp(root, beatDir, strconv.Itoa(j.rank), []byte("1"), j.tmpTag())
	if err != nil {
		return err
	}
	defer unlink(root, tmp)
	err = link(root, tmp, beatRel(j.rank))
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists: another process joined this job as rank %d, or an earlier job with the same token "+
			"left this directory behind (%s); use a fresh directory (or remove this one if no job uses it)",
			j.beatPath(j.rank), j.rank, j.liveness(size))
	}
	return err
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// liveness says whether the heartbeats of a job of size ranks (at most the
// first 64 looked at) in j's directory advance over 2.5 heartbeats.
func (j *job) liveness(size int) string {
	n := min(max(size, 1), 64)
	read := func() []string {
		v := make([]string, n)
		for r := range n {
			b, _ := j.read(beatRel(r))
			v[r] = string(b)
		}
		return v
	}
	window := 5 * j.heartbeat / 2
	before := read()
	time.Sleep(window)
	after := read()
	for r := range n {
		if before[r] != after[r] {
			return fmt.Sprintf("that job is running: the heartbeat of its rank %d advanced within %v", r, window)
		}
	}
	return fmt.Sprintf("no heartbeat of that job advanced within %v: it died without cleaning up, "+
		"or has only just started", window)
}
