package phases

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/report"
	"github.com/prism-hpc/prism/spmd"
)

const (
	defaultCoordinationTimeout = 3 * time.Minute
	defaultStallAfter          = 5 * time.Second
)

// RunMarker is the file prism writes into every run directory it creates;
// cleanup removes a directory only when the marker names this run.
const RunMarker = ".prism-run"

// Options configure one execution of a plan on one rank.
type Options struct {
	Plan       *Plan
	Comm       spmd.Comm
	RankSource string // where the rank identity came from, for the manifest
	MPILibrary string
	Workdir    string // overrides the plan's when not empty
	Results    string // overrides the plan's when not empty
	JSON       bool   // print the manifest instead of the text summary
	Version    string
	Stdout     io.Writer
	Stderr     io.Writer
	// Interrupted reports the signal that cancelled ctx, if any, so the run
	// is marked interrupted rather than failed.
	Interrupted func() os.Signal
	Now         func() time.Time
}

// Outcome is what a run produced on rank 0 (other ranks get only Status).
type Outcome struct {
	Status       string
	ManifestPath string
	ReportPath   string
	Manifest     *report.Manifest
	// ExpectFailed is set when every phase ran but an expectation missed.
	ExpectFailed bool
	Signal       os.Signal
}

// ErrPlanRanks is returned when the plan asks for more ranks than the job has.
var ErrPlanRanks = errors.New("plan asks for more ranks than the job has")

// Execute runs the plan on this rank. ctx is cancelled by signals; the
// collectives that gather results use their own context so that partial
// results still reach rank 0 after an interrupt. The returned error is a
// coordination failure (a dead or aborted peer, a timeout), after which the
// caller must bring the job down; phase failures are reported in Outcome.
func Execute(ctx context.Context, o Options) (*Outcome, error) {
	e := &engine{o: o, comm: o.Comm, coord: context.Background(), state: map[string]any{}}
	if cpus, err := spmd.Affinity(); err == nil {
		e.cpus = spmd.CPUList(cpus)
	}
	if e.o.Now == nil {
		e.o.Now = time.Now
	}
	if e.o.Interrupted == nil {
		e.o.Interrupted = func() os.Signal { return nil }
	}
	return e.execute(ctx)
}

type engine struct {
	o      Options
	comm   spmd.Comm
	coord  context.Context
	runID  string
	runDir string
	ownDir bool // this rank created runDir (rank 0, or a node-local workdir)
	state  map[string]any
	subs   map[int]spmd.Comm
	stuck  bool   // an op was abandoned past op_timeout: leave the run directory alone
	tty    bool   // stderr is a terminal: progress is a bar redrawn in place
	cpus   string // the CPUs this rank may run on, as a cpulist
}

func (e *engine) rank0() bool { return e.comm.Rank() == 0 }

func (e *engine) execute(ctx context.Context) (*Outcome, error) {
	p := e.o.Plan
	started := e.o.Now()
	watchUSR1()
	if f, ok := e.o.Stderr.(*os.File); ok {
		_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		e.tty = err == nil
	}
	for _, s := range p.Phases {
		for _, k := range s.Ranks {
			if k > e.comm.Size() {
				return nil, &PlanError{File: p.File, Line: s.Line, Key: "ranks", Msg: fmt.Sprintf("phase %d (%s) asks for %d ranks but the job has %d: %v", s.Index+1, s.Name, k, e.comm.Size(), ErrPlanRanks)}
			}
		}
		if s.Group != "" {
			next := p.Phases[s.Index+1]
			need := s.Ranks[0] + 1
			if len(next.Ranks) == 1 {
				need = s.Ranks[0] + next.Ranks[0]
			}
			if need > e.comm.Size() {
				return nil, &PlanError{File: p.File, Line: s.Line, Key: "group", Msg: fmt.Sprintf("phase %d (%s) and the next phase need %d ranks side by side but the job has %d: %v", s.Index+1, s.Name, need, e.comm.Size(), ErrPlanRanks)}
			}
		}
	}
	if err := e.initClock(); err != nil {
		return nil, err
	}
	workdir := firstNonEmpty(e.o.Workdir, p.Header.Workdir, ".")
	workdir, err := filepath.Abs(workdir)
	if err != nil {
		return nil, err
	}
	if err := e.setupRunDir(started, workdir); err != nil {
		return nil, err
	}
	m := &report.Manifest{
		SchemaVersion: report.SchemaVersion, Tool: "prism", Version: e.o.Version,
		RunID: e.runID, StartedAt: started, RunDir: e.runDir, Kept: p.Header.Keep,
		Comm: report.CommInfo{Kind: e.comm.Kind(), Ranks: e.comm.Size(), RankSource: e.o.RankSource},
		Plan: planRecord(p),
	}
	hosts, err := e.comm.Gather(e.coord, 0, []byte(e.comm.Host()))
	if err != nil {
		return nil, err
	}
	if e.rank0() {
		m.Host = CollectHost(workdir)
		m.Host.MPILibrary = e.o.MPILibrary
		distinct := map[string]bool{}
		for _, h := range hosts {
			distinct[string(h)] = true
		}
		m.Comm.Hosts = len(distinct)
	}

	status := report.StatusPassed
	var coordErr error
	for i := 0; i < len(p.Phases); i++ {
		s := p.Phases[i]
		var partner *Spec
		if s.Group != "" {
			partner = p.Phases[i+1]
			i++
		}
		if status != report.StatusPassed {
			if e.rank0() {
				for _, x := range []*Spec{s, partner} {
					if x != nil {
						m.Phases = append(m.Phases, report.PhaseResult{Index: x.Index, Name: x.Name, Kind: x.Kind, Status: report.StatusSkipped, Expect: []report.Verdict{}})
					}
				}
			}
			continue
		}
		var results []report.PhaseResult
		var failed bool
		if partner != nil {
			results, failed, coordErr = e.runGroup(ctx, s, partner)
		} else {
			results, failed, coordErr = e.runSweep(ctx, s)
		}
		m.Phases = append(m.Phases, results...)
		if failed || coordErr != nil {
			status = report.StatusFailed
		}
		if coordErr != nil {
			break
		}
	}
	sig := e.o.Interrupted()
	if sig != nil {
		status = report.StatusInterrupted
	}
	out := &Outcome{Status: status, Signal: sig}
	if e.rank0() {
		m.Status = status
		if coordErr != nil {
			m.Error = coordErr.Error()
		}
		m.FinishedAt = e.o.Now()
		m.Clock = report.Clock()
		m.Clock.DriftPPM = report.ClockDrift()
		for _, ph := range m.Phases {
			for _, v := range ph.Expect {
				if !v.Passed {
					out.ExpectFailed = true
				}
			}
		}
		if err := e.writeResults(m, out); err != nil {
			fmt.Fprintf(e.o.Stderr, "prism: %v\n", err)
			if coordErr == nil {
				coordErr = err
			}
		}
	}
	if coordErr == nil {
		// Nobody removes the run directory while a rank still works in it.
		if err := e.comm.Barrier(e.coord); err != nil {
			coordErr = err
		}
	}
	for _, sub := range e.subs {
		if sub != nil {
			sub.Close()
		}
	}
	e.cleanup()
	if e.rank0() && out.ManifestPath != "" {
		// With --json, stdout is the manifest alone, so a pipe into jq works.
		w := e.o.Stdout
		if e.o.JSON {
			w = e.o.Stderr
		}
		fmt.Fprintf(w, "manifest: %s\nreport: %s\n", out.ManifestPath, out.ReportPath)
	}
	return out, coordErr
}

// setupRunDir agrees on a run id and creates <workdir>/prism-<run-id>/ with
// its marker, on rank 0 and on any rank whose workdir is node-local.
func (e *engine) setupRunDir(now time.Time, workdir string) error {
	var id []byte
	if e.rank0() {
		rnd := make([]byte, 3)
		_, _ = rand.Read(rnd)
		id = []byte(now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(rnd))
	}
	id, err := e.comm.Bcast(e.coord, 0, id)
	if err != nil {
		return err
	}
	e.runID = string(id)
	e.runDir = filepath.Join(workdir, "prism-"+e.runID)
	var local error
	if e.rank0() {
		local = e.makeRunDir(workdir)
	}
	if err := e.agree(e.comm, local, "create run directory"); err != nil {
		return err
	}
	if !e.rank0() {
		if _, err := os.Stat(filepath.Join(e.runDir, RunMarker)); err != nil {
			local = e.makeRunDir(workdir)
		}
	}
	return e.agree(e.comm, local, "create run directory")
}

func (e *engine) makeRunDir(workdir string) error {
	if err := CheckWorkdir(workdir); err != nil {
		return err
	}
	if err := os.Mkdir(e.runDir, 0o755); err != nil {
		return fmt.Errorf("create run directory: %w%s", err, pio.Remedy(err))
	}
	e.ownDir = true
	if err := os.WriteFile(filepath.Join(e.runDir, RunMarker), []byte(e.runID+"\n"), 0o644); err != nil {
		return fmt.Errorf("mark run directory: %w", err)
	}
	return nil
}

// CheckWorkdir refuses places where a benchmark must never create (and
// later remove) a tree: the root, a home root, anything not a directory.
func CheckWorkdir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("workdir: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("workdir %s is not a directory", dir)
	}
	clean := filepath.Clean(dir)
	home, _ := os.UserHomeDir()
	switch {
	case clean == "/":
		return fmt.Errorf("workdir %s refused: prism does not create run directories in /; point workdir at a scratch directory", dir)
	case clean == "/home" || clean == "/root" || (home != "" && clean == filepath.Clean(home)):
		return fmt.Errorf("workdir %s refused: a home directory root; use a subdirectory such as %s", dir, filepath.Join(clean, "prism-scratch"))
	}
	return nil
}

// cleanup removes the run directory this rank created, only if its marker
// still names this run. os.RemoveAll removes symlinks, never their targets.
func (e *engine) cleanup() {
	if !e.ownDir || e.o.Plan.Header.Keep {
		return
	}
	if e.stuck {
		fmt.Fprintf(e.o.Stderr, "prism: rank %d: not removing %s: an op on it never returned (op_timeout); remove it once the storage answers\n", e.comm.Rank(), e.runDir)
		return
	}
	b, err := os.ReadFile(filepath.Join(e.runDir, RunMarker))
	if err != nil || strings.TrimSpace(string(b)) != e.runID {
		fmt.Fprintf(e.o.Stderr, "prism: rank %d: not removing %s: its marker does not name run %s\n", e.comm.Rank(), e.runDir, e.runID)
		return
	}
	if err := os.RemoveAll(e.runDir); err != nil {
		fmt.Fprintf(e.o.Stderr, "prism: rank %d: cleanup: %v\n", e.comm.Rank(), err)
	}
}

// agree is the error agreement of every step: each rank contributes whether
// it failed; all learn the lowest failing rank. The error returned carries
// that rank; a local error is returned as is.
func (e *engine) agree(c spmd.Comm, local error, what string) error {
	if local == errStopped {
		local = nil
	}
	v := []int64{0}
	if local != nil {
		v[0] = int64(c.Size() - c.Rank())
	}
	if err := c.AllreduceInt64(e.coord, spmd.Max, v); err != nil {
		return err
	}
	if local != nil {
		return local
	}
	if v[0] != 0 {
		return &peerError{rank: c.Size() - int(v[0]), what: what}
	}
	return nil
}

// errOwnClock marks a rank that fell back to the OS clock on its own.
var errOwnClock = errors.New("no usable TSC on this rank")

// initClock chooses the op clock (report.InitClock) on every rank, and the
// same source on all, so that every rank's latencies come from the same
// kind of clock: in auto mode, one rank without a usable TSC puts every
// rank on the OS clock; with clock = "tsc" it fails the run on every rank.
func (e *engine) initClock() error {
	mode := e.o.Plan.Header.Clock
	info, err := report.InitClock(mode)
	if err != nil {
		err = fmt.Errorf("%s: [plan] clock = %q: %w", e.o.Plan.File, mode, err)
	} else if info.Source != "tsc" && mode != "os" {
		err = errOwnClock
	}
	agreed := e.agree(e.comm, err, "use its TSC as the op clock")
	var peer *peerError
	switch {
	case agreed == nil || agreed == errOwnClock:
		return nil
	case mode == "auto" && errors.As(agreed, &peer):
		report.UseOSClock(fmt.Sprintf("TSC not used: rank %d could not use its own", peer.rank))
		return nil
	}
	return agreed
}

// peerError is how a rank learns that another rank failed a step.
type peerError struct {
	rank int
	what string
}

func (p *peerError) Error() string { return fmt.Sprintf("%s failed on rank %d", p.what, p.rank) }

// IsPeerFailure reports whether err only says that another rank failed (that
// rank reports the cause itself).
func IsPeerFailure(err error) bool {
	var pe *peerError
	return errors.As(err, &pe)
}

// runSweep runs s once per rank count of its sweep (or once on every
// rank); after each size, every rank of the world learns whether it
// failed, also the ranks that sat that size out.
func (e *engine) runSweep(ctx context.Context, s *Spec) (results []report.PhaseResult, failed bool, err error) {
	sizes := []int(s.Ranks)
	if len(sizes) == 0 {
		sizes = []int{e.comm.Size()}
	}
	for _, k := range sizes {
		res, err := e.runOnSubset(ctx, s, k, len(s.Ranks) > 1)
		if err != nil {
			if e.rank0() && res == nil {
				res = failedResult(s, k, err)
			}
			if res != nil {
				results = append(results, *res)
			}
			return results, true, err
		}
		if res != nil {
			results = append(results, *res)
		}
		if failed, err = e.worldFailed(res); err != nil || failed {
			return results, true, err
		}
	}
	return results, false, nil
}

// runGroup runs s on the first k ranks and, at the same time, partner on
// the ranks after them, to measure interference (writers ingesting while
// readers load). Each group's rank 0 hands its result to world rank 0.
func (e *engine) runGroup(ctx context.Context, s, partner *Spec) ([]report.PhaseResult, bool, error) {
	k := s.Ranks[0]
	m := e.comm.Size() - k
	if len(partner.Ranks) == 1 {
		m = partner.Ranks[0]
	}
	color := spmd.Undefined
	switch r := e.comm.Rank(); {
	case r < k:
		color = 0
	case r < k+m:
		color = 1
	}
	sub, err := e.comm.Split(e.coord, color, e.comm.Rank())
	if err != nil {
		return nil, true, err
	}
	if sub != nil {
		defer sub.Close()
	}
	var res *report.PhaseResult
	switch color {
	case 0:
		res, err = e.runPhase(ctx, sub, s, false)
	case 1:
		res, err = e.runPhase(ctx, sub, partner, false)
	}
	if err != nil {
		return nil, true, err
	}
	var mine []byte
	if res != nil {
		res.Group = s.Group
		mine, _ = json.Marshal(res)
	}
	all, err := e.comm.Gather(e.coord, 0, mine)
	if err != nil {
		return nil, true, err
	}
	var results []report.PhaseResult
	failed := int64(0)
	if e.rank0() {
		for _, b := range all {
			if len(b) == 0 {
				continue
			}
			var r report.PhaseResult
			if err := json.Unmarshal(b, &r); err != nil {
				return nil, true, fmt.Errorf("group %s: bad result: %w", s.Group, err)
			}
			if r.Status != report.StatusPassed {
				failed = 1
			}
			results = append(results, r)
		}
		results[0].ConcurrentWith, results[len(results)-1].ConcurrentWith = partner.Name, s.Name
	}
	v := []int64{failed}
	if err := e.comm.AllreduceInt64(e.coord, spmd.Max, v); err != nil {
		return results, true, err
	}
	return results, v[0] != 0, nil
}

// worldFailed tells every rank whether rank 0's result failed.
func (e *engine) worldFailed(res *report.PhaseResult) (bool, error) {
	st := []int64{0}
	if e.rank0() && res != nil && res.Status != report.StatusPassed {
		st[0] = 1
	}
	if err := e.comm.AllreduceInt64(e.coord, spmd.Max, st); err != nil {
		return true, err
	}
	return st[0] != 0, nil
}

func failedResult(s *Spec, k int, err error) *report.PhaseResult {
	return &report.PhaseResult{Index: s.Index, Name: s.Name, Kind: s.Kind, Ranks: k, Status: report.StatusFailed, Error: err.Error(), Expect: []report.Verdict{}}
}

// runOnSubset runs one phase on the first k ranks; the others return at
// once (the caller's world reduction waits for the phase to finish).
func (e *engine) runOnSubset(ctx context.Context, s *Spec, k int, sweep bool) (*report.PhaseResult, error) {
	c := e.comm
	if k < e.comm.Size() {
		if e.subs == nil {
			e.subs = map[int]spmd.Comm{}
		}
		sub, ok := e.subs[k]
		if !ok {
			color := spmd.Undefined
			if e.comm.Rank() < k {
				color = 0
			}
			var err error
			if sub, err = e.comm.Split(e.coord, color, e.comm.Rank()); err != nil {
				return nil, err
			}
			e.subs[k] = sub
		}
		if sub == nil {
			return nil, nil
		}
		c = sub
	}
	return e.runPhase(ctx, c, s, sweep)
}

func (e *engine) runPhase(ctx context.Context, c spmd.Comm, s *Spec, sweep bool) (*report.PhaseResult, error) {
	dirName := fmt.Sprintf("%02d-%s", s.Index+1, s.Name)
	if sweep {
		dirName += fmt.Sprintf("-n%d", c.Size())
	}
	env := &Env{
		Comm: c, Rank: c.Rank(), Size: c.Size(), Host: c.Host(), Name: s.Name, Kind: s.Kind,
		Dir: filepath.Join(e.runDir, dirName), Log: e.o.Stderr, State: e.state,
		WorldRank: e.comm.Rank(), phaseIndex: s.Index, spec: s,
	}
	env.RankDir = filepath.Join(env.Dir, fmt.Sprintf("r%d", env.Rank))
	res := &report.PhaseResult{
		Index: s.Index, Name: s.Name, Kind: s.Kind, Ranks: c.Size(), StartedAt: e.o.Now(),
		WarmupIterations: s.Warmup, Expect: []report.Verdict{}, Params: paramMap(s),
	}
	cache, cacheErr := e.resolveCache(s)
	res.Cache = cache
	env.Cache = cache.Applied

	// Directories: rank 0 creates the shared one first so ranks never race
	// on MkdirAll of a common parent over NFS.
	var local error
	if env.Rank == 0 {
		local = firstErr(cacheErr, os.MkdirAll(env.Dir, 0o755))
	}
	failure := e.agree(c, local, "setup")
	if failure == nil {
		failure = e.agree(c, os.MkdirAll(env.RankDir, 0o755), "setup")
	}

	measured := report.NewSet()
	metrics := map[string]float64{}
	var walls []float64
	var busy float64
	total := s.Warmup + s.Iterations
	for it := 0; it < total && failure == nil; it++ {
		env.Iteration, env.Warmup = it, it < s.Warmup
		env.mu.Lock()
		env.set, env.extra = report.NewSet(), nil
		env.mu.Unlock()
		env.metrics = map[string]float64{}

		failure = e.agree(c, e.step(ctx, c, env, "setup", s.Phase.Setup), "setup")
		if failure == nil && env.Cache == "drop_caches" {
			var derr error
			if c.LocalRank() == 0 {
				derr = pio.DropCaches()
			}
			failure = e.agree(c, derr, "drop caches")
		}
		if failure == nil {
			quiesceHeap()
			// Aligned, so that no rank starts its Run a poll period late.
			if failure = spmd.Align(e.coord, c); failure != nil {
				return nil, failure
			}
			if c.Size() > 1 {
				settle()
			}
			t0 := time.Now()
			runErr := e.step(ctx, c, env, "run", s.Phase.Run)
			t1 := time.Now()
			if runErr == errStopped {
				runErr = nil
			}
			v := []int64{0, -t0.UnixNano(), t1.UnixNano()}
			if runErr != nil {
				v[0] = int64(c.Size() - c.Rank())
			}
			if err := c.AllreduceInt64(e.coord, spmd.Max, v); err != nil {
				return nil, err
			}
			failure = runErr
			if failure == nil && v[0] != 0 {
				failure = &peerError{rank: c.Size() - int(v[0]), what: "run"}
			}
			if !env.Warmup {
				walls = append(walls, float64(v[2]+v[1])/1e9)
				busy += t1.Sub(t0).Seconds()
				measured.Merge(env.set)
			}
			if failure == nil {
				failure = e.agree(c, e.step(ctx, c, env, "verify", s.Phase.Verify), "verify")
			}
			// Metrics are taken after Verify, so a phase may compute them
			// there (outside the timed region).
			if !env.Warmup {
				for k, x := range env.metrics {
					metrics[k] = x
				}
			}
		}
		// Teardown always runs, so a failed iteration leaves nothing behind.
		if terr := e.agree(c, e.step(ctx, c, env, "teardown", s.Phase.Teardown), "teardown"); failure == nil {
			failure = terr
		}
		if IsCoordination(failure) {
			return nil, failure
		}
	}

	if env.stalls > 0 {
		metrics["stalls"] = float64(env.stalls)
	}
	if env.stuck {
		e.stuck = true
	}
	// Gather: small per-rank records, then count arrays reduced op by op.
	rec := report.NewRankRecord(e.comm.Rank(), c.Host(), measured, busy)
	rec.Metrics = metrics
	rec.CPUs = e.cpus
	var pe *peerError
	if failure != nil && !errors.As(failure, &pe) {
		rec.Error = failure.Error()
	}
	b, _ := json.Marshal(rec)
	all, err := c.Gather(e.coord, 0, b)
	if err != nil {
		return nil, err
	}
	var recs []report.RankRecord
	var ops []string
	if c.Rank() == 0 {
		recs = make([]report.RankRecord, len(all))
		for i, raw := range all {
			if err := json.Unmarshal(raw, &recs[i]); err != nil {
				return nil, fmt.Errorf("rank %d sent a bad phase record: %w", i, err)
			}
		}
		ops = report.UnionOps(recs)
	}
	ob, _ := json.Marshal(ops)
	if ob, err = c.Bcast(e.coord, 0, ob); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(ob, &ops); err != nil {
		return nil, err
	}
	hists := map[string]*hdr.Histogram{}
	for _, op := range ops {
		counts := report.Counts(measured.Op(op).Hist())
		if err := c.ReduceInt64(e.coord, 0, spmd.Sum, counts); err != nil {
			return nil, err
		}
		if c.Rank() == 0 {
			hists[op] = report.FromCounts(counts)
		}
	}
	if c.Rank() != 0 {
		return nil, nil
	}
	if err := report.Fill(res, recs, hists, walls); err != nil {
		return nil, err
	}
	res.Metrics = mergeMetrics(recs)
	res.Status = report.StatusPassed
	if failure != nil {
		res.Status = report.StatusFailed
		if e.o.Interrupted() != nil {
			res.Status = report.StatusInterrupted
		}
		for _, r := range recs {
			if r.Error != "" {
				rank := r.Rank
				res.FailedRank = &rank
				res.Error = r.Error
				break
			}
		}
		if res.Error == "" {
			res.Error = failure.Error()
		}
	} else if s.Expect != nil {
		res.Expect = evaluate(s.Expect, res)
	}
	return res, nil
}

// step runs one phase method on this rank. A panic becomes an error, so
// the rank still takes part in the agreement instead of leaving its peers
// waiting. Where the communicator can alert (Alerter), a local failure is
// announced at once and a peer's announcement cancels this rank's step, so
// a long loop stops within a fraction of a second of another rank's error;
// such a step returns errStopped, which the agreement does not count as a
// failure of this rank.
func (e *engine) step(ctx context.Context, c spmd.Comm, env *Env, what string, fn func(context.Context, *Env) error) (err error) {
	if env.stuck {
		// An earlier step left an op stuck in the kernel; touching the
		// phase's files again could hang this rank too.
		return env.Errorf("%s: skipped: an earlier op is still stuck", what)
	}
	alerter, canAlert := c.(spmd.Alerter)
	tag := fmt.Sprintf("%d.%d.%d.%s", env.phaseIndex, c.Size(), env.Iteration, what)
	stepCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if canAlert {
		fired, stop := alerter.Watch(tag)
		defer stop()
		go func() {
			select {
			case r := <-fired:
				cancel(&peerError{rank: r, what: what})
			case <-stepCtx.Done():
			}
		}()
	}
	// The step runs in its own goroutine so that an op stuck in the kernel
	// (a hung NFS server, a FUSE daemon that never answers) cannot hang the
	// rank past op_timeout: the monitor abandons it and the rank reports.
	done := make(chan error, 1)
	go func() {
		var err error
		defer func() {
			if r := recover(); r != nil {
				err = env.Errorf("%s: panic: %v\n%s", what, r, debug.Stack())
			}
			done <- err
		}()
		err = fn(stepCtx, env)
	}()
	mon := e.startMonitor(env, what, c.Rank() == 0)
	select {
	case err = <-done:
		mon.stop()
	case err = <-mon.timedOut:
		mon.stop()
		env.stuck = true
	}
	if err == nil {
		return nil
	}
	if stepCtx.Err() != nil && IsPeerFailure(context.Cause(stepCtx)) && ctx.Err() == nil {
		return errStopped
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = env.Errorf("%s: interrupted", what)
	}
	if canAlert && ctx.Err() == nil {
		alerter.Alert(tag)
	}
	return err
}

// errStopped is the result of a step cancelled because another rank failed.
var errStopped = errors.New("stopped: another rank failed")

// IsCoordination tells errors of the communicator (a dead, aborted or
// silent peer), after which no further collective can be trusted, from
// errors of a phase.
func IsCoordination(err error) bool {
	var re *spmd.RankError
	return errors.As(err, &re) || errors.Is(err, spmd.ErrTimeout) || errors.Is(err, spmd.ErrAborted)
}

// resolveCache turns a requested policy into what this run can do.
func (e *engine) resolveCache(s *Spec) (report.CacheInfo, error) {
	req := firstNonEmpty(s.DropCaches, e.o.Plan.Header.DropCaches, "auto")
	ci := report.CacheInfo{Requested: req, Applied: "none"}
	fs, _ := pio.StatFS(e.runDir)
	_, advises := s.Phase.(interface{ Fadvises() bool })
	switch req {
	case "none":
		ci.Reason = "asked for none"
	case "root", "auto":
		switch {
		case pio.CacheHeld(fs.Type):
			ci.Reason = fs.Type + " keeps file data in memory; dropping caches cannot make it cold"
		case pio.CanDropCaches():
			ci.Applied = "drop_caches"
		case req == "root":
			return ci, fmt.Errorf("drop_caches = \"root\" needs root to write /proc/sys/vm/drop_caches; run as root or use \"fadvise\" or \"auto\"")
		case advises:
			ci.Applied, ci.Reason = "fadvise", "not root: page cache dropped per file with posix_fadvise(DONTNEED)"
		default:
			ci.Reason = "not root, and this phase has no file data to advise"
		}
	case "fadvise":
		if advises {
			ci.Applied = "fadvise"
		} else {
			ci.Reason = "this phase has no file data to advise"
		}
	}
	return ci, nil
}

func (e *engine) writeResults(m *report.Manifest, out *Outcome) error {
	results := firstNonEmpty(e.o.Results, e.o.Plan.Header.Results, "results")
	dir := filepath.Join(results, e.o.Plan.Header.Name, m.RunID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	out.Manifest = m
	// Flags go into the manifest and every rendering of it.
	report.Flags(m)
	out.ManifestPath = filepath.Join(dir, "manifest.json")
	// The manifest first: whatever fails after it, the results survive.
	if err := report.WriteManifest(out.ManifestPath, m); err != nil {
		return err
	}
	var sb strings.Builder
	if err := report.WriteSummary(&sb, m); err != nil {
		return err
	}
	// MLPerf-style phases add their figures of merit as [METRIC] lines,
	// printed exactly as MLPerf Storage prints them.
	for i := range m.Phases {
		res := &m.Phases[i]
		if res.Index < 0 || res.Index >= len(e.o.Plan.Phases) {
			continue
		}
		if ml, ok := e.o.Plan.Phases[res.Index].Phase.(MetricLiner); ok {
			for _, line := range ml.MetricLines(res) {
				sb.WriteString(line + "\n")
			}
		}
	}
	if err := report.WriteFileAtomic(filepath.Join(dir, "summary.txt"), []byte(sb.String())); err != nil {
		return err
	}
	var junit bytes.Buffer
	if err := report.WriteJUnit(&junit, m); err != nil {
		return err
	}
	if err := report.WriteFileAtomic(filepath.Join(dir, "junit.xml"), junit.Bytes()); err != nil {
		return err
	}
	var page bytes.Buffer
	if err := report.WriteHTML(&page, []*report.Manifest{m}); err != nil {
		return err
	}
	out.ReportPath = filepath.Join(dir, "report.html")
	if err := report.WriteFileAtomic(out.ReportPath, page.Bytes()); err != nil {
		return err
	}
	if e.o.JSON {
		b, _ := json.MarshalIndent(m, "", "  ")
		_, err := e.o.Stdout.Write(append(b, '\n'))
		return err
	}
	_, err := io.WriteString(e.o.Stdout, sb.String())
	return err
}

func evaluate(x *Expect, r *report.PhaseResult) []report.Verdict {
	var out []report.Verdict
	lat := func(metric string, limit *Duration, got int64) {
		if limit == nil {
			return
		}
		out = append(out, report.Verdict{Metric: metric, Limit: limit.String(), Value: time.Duration(got).String(), Raw: float64(got), Passed: r.Ops > 0 && got <= int64(*limit)})
	}
	lat("p50", x.P50, r.Latency.P50)
	lat("p90", x.P90, r.Latency.P90)
	lat("p99", x.P99, r.Latency.P99)
	lat("max", x.Max, r.Latency.Max)
	lat("mean", x.Mean, int64(math.Round(r.Latency.Mean)))
	if x.MinBandwidth != nil {
		out = append(out, report.Verdict{Metric: "min_bandwidth", Limit: Size(*x.MinBandwidth).String() + "/s", Value: report.FormatBytes(int64(r.BytesPerSec)) + "/s", Raw: r.BytesPerSec, Passed: r.BytesPerSec >= float64(*x.MinBandwidth)})
	}
	if x.MinIOPS != nil {
		out = append(out, report.Verdict{Metric: "min_iops", Limit: fmt.Sprintf("%g", *x.MinIOPS), Value: fmt.Sprintf("%.0f", r.OpsPerSec), Raw: r.OpsPerSec, Passed: r.OpsPerSec >= *x.MinIOPS})
	}
	if x.MaxErrors != nil {
		out = append(out, report.Verdict{Metric: "max_errors", Limit: fmt.Sprint(*x.MaxErrors), Value: fmt.Sprint(r.Errors), Raw: float64(r.Errors), Passed: r.Errors <= *x.MaxErrors})
	}
	if x.MinAU != nil {
		au, ok := r.Metrics["au_percent"]
		out = append(out, report.Verdict{Metric: "min_au", Limit: fmt.Sprintf("%g%%", *x.MinAU), Value: fmt.Sprintf("%.2f%%", au), Raw: au, Passed: ok && au >= *x.MinAU})
	}
	return out
}

func mergeMetrics(recs []report.RankRecord) map[string]float64 {
	out := map[string]float64{}
	for _, r := range recs {
		for k, v := range r.Metrics {
			out[k] += v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// paramMap records a phase's resolved parameters for the manifest.
func paramMap(s *Spec) map[string]string {
	out := map[string]string{"iterations": fmt.Sprint(s.Iterations), "warmup": fmt.Sprint(s.Warmup)}
	for _, p := range Params(s.Phase.Config()) {
		out[p.Key] = p.Default
	}
	return out
}

// planRecord is the plan as the manifest records it.
func planRecord(p *Plan) any {
	type phaseRec struct {
		Name   string `json:"name"`
		Kind   string `json:"kind"`
		Ranks  []int  `json:"ranks,omitempty"`
		Params any    `json:"params"`
	}
	var phases []phaseRec
	for _, s := range p.Phases {
		phases = append(phases, phaseRec{Name: s.Name, Kind: s.Kind, Ranks: s.Ranks, Params: paramMap(s)})
	}
	return map[string]any{
		"file": p.File, "name": p.Header.Name, "workdir": p.Header.Workdir, "results": p.Header.Results,
		"drop_caches": p.Header.DropCaches, "clock": p.Header.Clock, "keep": p.Header.Keep, "phases": phases, "source": string(p.Source),
	}
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// sortedKeys is used where map order would make output unstable.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
