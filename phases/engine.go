package phases

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

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
	Wide       bool   // the summary with every column (report.SummaryOptions)
	Version    string
	Stdout     io.Writer
	Stderr     io.Writer
	// Interrupted reports the signal that cancelled ctx, if any, so the run
	// is marked interrupted rather than failed.
	Interrupted func() os.Signal
	Now         func() time.Time
	// CommandLine is the user's command, for the manifest.
	CommandLine []string
	// Progress is how each phase's rank 0 shows its start and its Run's
	// live progress on Stderr (monitor.go); ProgressEvery, when set,
	// replaces the mode's interval.
	Progress      Progress
	ProgressEvery time.Duration
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
	if e.o.Progress == ProgressTTY && e.o.Stderr != nil && e.comm.Rank() == 0 {
		e.o.Stderr = &ttyStderr{w: e.o.Stderr}
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
	// wd and run are the workdir and the run directory, opened once: every
	// file operation below them goes through directory descriptors, so a
	// directory renamed or replaced by a link on the path is never followed.
	wd, run *pio.Dir
	// resultsDir is <results>/<plan name>/<run id>, made and test-written
	// by rank 0 before the first phase.
	resultsDir string
	// resultsPin is resultsDir, open: result files are written through it.
	resultsPin *pio.Dir
	state      map[string]any
	subs       map[int]spmd.Comm
	// nodeSubs are the communicators of node selections (the ranks of the
	// first k hosts), hostIdx every world rank's host index (learnHosts).
	nodeSubs map[int]spmd.Comm
	hostIdx  []int
	nhosts   int
	stuck    bool   // an op was abandoned past op_timeout: leave the run directory alone
	cpus     string // the CPUs this rank may run on, as a cpulist
	// sweepAt is the position of the running size in its phase's sweep,
	// for the [i/N] of progress (monitor.go).
	sweepAt int
}

func (e *engine) rank0() bool { return e.comm.Rank() == 0 }

func (e *engine) execute(ctx context.Context) (*Outcome, error) {
	p := e.o.Plan
	started := e.o.Now()
	watchUSR1()
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
	// Every rank's host and its memory: for the memory check, before
	// anything is created, and the host count of the manifest.
	hosts, err := e.comm.Gather(e.coord, 0, []byte(fmt.Sprintf("%s\x00%d", e.comm.Host(), hostMemory())))
	if err != nil {
		return nil, err
	}
	if err := e.checkMemory(hosts); err != nil {
		return nil, err
	}
	for i, h := range hosts {
		hosts[i], _, _ = bytes.Cut(h, []byte{0})
	}
	if err := e.learnHosts(p, hosts); err != nil {
		return nil, err
	}
	workdir := firstNonEmpty(e.o.Workdir, p.Header.NodeLocalWorkdir, p.Header.Workdir, ".")
	workdir, err = filepath.Abs(workdir)
	if err != nil {
		return nil, err
	}
	fsHosts, fsWarn, err := e.checkFS(workdir)
	if err != nil {
		return nil, err
	}
	if err := e.setupRunDir(ctx, started, workdir); err != nil {
		return nil, err
	}
	// The results directory is proved writable before anything runs: a run
	// of hours must not end with nowhere to put its results.
	var resErr error
	if e.rank0() {
		resErr = e.prepareResults()
		defer func() {
			if e.resultsPin != nil {
				e.resultsPin.Close()
			}
		}()
	}
	if err := e.agree(e.comm, resErr, "prepare the results directory"); err != nil {
		e.cleanup(ctx)
		return nil, err
	}
	m := &report.Manifest{
		SchemaVersion: report.SchemaVersion, Tool: "prism", Version: e.o.Version,
		RunID: e.runID, StartedAt: started, RunDir: e.runDir, Kept: p.Header.Keep,
		Comm: report.CommInfo{Kind: e.comm.Kind(), Ranks: e.comm.Size(), RankSource: e.o.RankSource},
		Plan: planRecord(p),
	}
	if e.rank0() {
		m.Host = CollectHost(workdir)
		m.Host.MPILibrary = e.o.MPILibrary
		m.Hosts = fsHosts
		if fsWarn != "" {
			m.Host.Warnings = append(m.Host.Warnings, fsWarn)
		}
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
			if ph.ExpectMissed() {
				out.ExpectFailed = true
				// Dashboards read status, not the exit code: a missed
				// expectation fails the run in every artefact.
				if m.Status == report.StatusPassed {
					m.Status = report.StatusFailed
					out.Status = report.StatusFailed
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
	for _, sub := range e.nodeSubs {
		if sub != nil {
			sub.Close()
		}
	}
	for _, sub := range e.subs {
		if sub != nil {
			sub.Close()
		}
	}
	e.closeRun(ctx, coordErr == nil)
	e.cleanup(ctx)
	if e.rank0() && out.ManifestPath != "" {
		// With --json, stdout is the manifest alone, so a pipe into jq works.
		w := e.o.Stdout
		if e.o.JSON {
			w = e.o.Stderr
		}
		// Only files that were written are named.
		fmt.Fprintf(w, "manifest: %s\n", out.ManifestPath)
		if out.ReportPath != "" {
			fmt.Fprintf(w, "report: %s\n", out.ReportPath)
		}
	}
	return out, coordErr
}

// MixedFSError stops a run whose ranks see different filesystems under
// the workdir (a missing mount falls through to the disk below it), before
// anything is created: the results would mix two filesystems.
type MixedFSError struct{ Msg string }

func (e *MixedFSError) Error() string { return e.Msg }

// checkFS gathers every rank's host and the filesystem under its workdir
// (type, mount source and point, statfs f_fsid). Rank 0 returns them per
// host for the manifest; when the ranks disagree every rank returns an
// error (rank 0 the one naming the ranks and what each sees), unless
// [plan] allow_mixed_fs, when rank 0 gets the message as a warning.
func (e *engine) checkFS(workdir string) ([]report.HostFS, string, error) {
	mine, _ := json.Marshal(CollectFS(e.comm.Host(), workdir))
	all, err := e.comm.Gather(e.coord, 0, mine)
	if err != nil {
		return nil, "", err
	}
	var msg []byte
	var groups []report.HostFS
	if e.rank0() {
		facts := make([]report.HostFS, len(all))
		for r, b := range all {
			if err := json.Unmarshal(b, &facts[r]); err != nil {
				facts[r] = report.HostFS{Error: fmt.Sprintf("rank %d sent bad filesystem facts: %v", r, err)}
			}
		}
		groups = groupFS(facts)
		msg = []byte(mixedFS(facts))
	}
	if msg, err = e.comm.Bcast(e.coord, 0, msg); err != nil {
		return nil, "", err
	}
	switch {
	case len(msg) == 0:
		return groups, "", nil
	case e.o.Plan.Header.AllowMixedFS:
		return groups, string(msg) + " (allowed by allow_mixed_fs)", nil
	case e.rank0():
		return nil, "", &MixedFSError{Msg: string(msg)}
	}
	return nil, "", &peerError{rank: 0, what: "filesystem check"}
}

// memoryShare is the share of a host's memory its ranks may plan to use
// when [plan] max_memory is not set: the rest is the kernel's, the page
// cache's and the rest of the node's.
const memoryShare = 0.5

// checkMemory refuses, before anything runs, a plan whose phases need more
// memory per rank than the ranks of a host can have ([plan] max_memory, or
// half the host's memory shared among its ranks), on every host: rank 0
// decides from every rank's host and memory, and every rank returns the
// same PlanError naming the phase and the keys to lower.
func (e *engine) checkMemory(hosts [][]byte) error {
	var msg []byte
	if e.rank0() {
		msg = []byte(e.memoryVerdict(hosts))
	}
	msg, err := e.comm.Bcast(e.coord, 0, msg)
	if err != nil {
		return err
	}
	if len(msg) == 0 {
		return nil
	}
	line, rest, _ := strings.Cut(string(msg), "\x00")
	l, _ := strconv.Atoi(line)
	key, text, _ := strings.Cut(rest, "\x00")
	return &PlanError{File: e.o.Plan.File, Line: l, Key: key, Msg: text}
}

// memoryVerdict is rank 0's side of checkMemory: "" when the plan fits,
// else "line\x00keys\x00message".
func (e *engine) memoryVerdict(hosts [][]byte) string {
	ranksOn := map[string]int{}
	memOf := map[string]int64{}
	for _, h := range hosts {
		name, mem, _ := strings.Cut(string(h), "\x00")
		ranksOn[name]++
		memOf[name], _ = strconv.ParseInt(mem, 10, 64)
	}
	for _, s := range e.o.Plan.Phases {
		if _, _, ok := PhaseMemory(s, 1); !ok {
			continue
		}
		sizes := []int(s.Ranks)
		if len(sizes) == 0 {
			sizes = []int{e.comm.Size()}
		}
		for _, k := range sizes {
			need, keys, _ := PhaseMemory(s, k)
			for host := range ranksOn {
				limit := RankMemoryLimit(e.o.Plan.Header.MaxMemory, memOf[host], ranksOn[host])
				if limit <= 0 || need <= limit {
					continue
				}
				why := fmt.Sprintf("half of %s's %s shared by its %d ranks", host, report.FormatBytes(memOf[host]), ranksOn[host])
				if e.o.Plan.Header.MaxMemory > 0 {
					why = "[plan] max_memory"
				}
				return fmt.Sprintf("%d\x00%s\x00phase %d (%s, %s) needs about %s per rank at %d ranks, more than the %s of %s: lower %s (or raise [plan] max_memory if the node really has it)",
					s.Line, keys, s.Index+1, s.Name, s.Kind, report.FormatBytes(need), k, report.FormatBytes(limit), why, keys)
			}
		}
	}
	return ""
}

// phaseBaseMemory is what the engine holds for any phase on a rank: the
// recorders of a few op types, the measured set, the gather's records.
const phaseBaseMemory = 16 << 20

// setupRunDir agrees on a run id and creates <workdir>/prism-<run-id>/ with
// its marker, on rank 0 and on any rank whose workdir is node-local.
func (e *engine) setupRunDir(ctx context.Context, now time.Time, workdir string) error {
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
		local = e.bounded(ctx, "create run directory", func() error { return e.makeRunDir(workdir) })
	}
	if err := e.agree(e.comm, local, "create run directory"); err != nil {
		return err
	}
	// Then the first rank of every other host, which makes its own where
	// the workdir is node-local, then the rest, which only join: two
	// ranks of one host never race to make the same directory.
	first := e.comm.LocalRank() == 0
	if !e.rank0() && first {
		local = e.bounded(ctx, "open run directory", func() error { return e.joinRunDir(workdir) })
	}
	if err := e.agree(e.comm, local, "create run directory"); err != nil {
		return err
	}
	if !first {
		local = e.bounded(ctx, "open run directory", func() error { return e.joinRunDir(workdir) })
	}
	return e.agree(e.comm, local, "create run directory")
}

func (e *engine) makeRunDir(workdir string) error {
	if e.wd == nil {
		wd, warnings, err := pio.OpenWorkdir(workdir, e.o.Plan.Header.AllowSharedWorkdir)
		if err != nil {
			return err
		}
		if e.rank0() {
			for _, w := range warnings {
				fmt.Fprintf(e.o.Stderr, "prism: %s\n", w)
			}
		}
		e.wd = wd
	}
	run, err := e.wd.MakeSub("prism-"+e.runID, 0o755)
	if err != nil {
		return fmt.Errorf("create run directory %s: %w", e.runDir, err)
	}
	e.run, e.ownDir = run, true
	if err := run.WriteFile(RunMarker, []byte(e.runID+"\n"), 0o644); err != nil {
		return fmt.Errorf("mark run directory: %w", err)
	}
	return nil
}

// joinRunDir opens the run directory rank 0 made, on a rank that shares
// its workdir; on a node-local workdir the first rank of the host makes
// its own, which the host's other ranks (called after it) then open.
func (e *engine) joinRunDir(workdir string) error {
	wd, _, err := pio.OpenWorkdir(workdir, e.o.Plan.Header.AllowSharedWorkdir)
	if err != nil {
		return err
	}
	e.wd = wd
	run, err := wd.OpenSub("prism-" + e.runID)
	if err != nil {
		// A workdir neither rank 0 nor this host's first rank uses (ranks
		// given workdirs of their own, allow_mixed_fs): this rank's own.
		return e.makeRunDir(workdir)
	}
	b, err := run.ReadFile(RunMarker, 256)
	if err != nil || string(b) != e.runID+"\n" {
		run.Close()
		return fmt.Errorf("run directory %s: its marker does not name run %s", e.runDir, e.runID)
	}
	e.run = run
	return nil
}

// CheckWorkdir refuses places where a benchmark must never create (and
// later remove) a tree, judged on the real path (pio.CheckWorkdir): the
// root and system trees, home directories, and (unless allowShared)
// directories others can write without the sticky bit.
func CheckWorkdir(dir string, allowShared bool) ([]string, error) {
	_, warnings, err := pio.CheckWorkdir(dir, allowShared)
	return warnings, err
}

// cleanup removes the run directory this rank created, only if its marker
// still names this run, through its descriptor: what it removes is reached
// without following a link, and a run directory renamed away by someone
// else is emptied where it now is, never a directory put in its place.
// An interrupt that arrives while it works (not one that stopped the run:
// the removal after a Ctrl-C is what the user expects) abandons it after
// signalGrace, leaving the directory named on stderr.
func (e *engine) cleanup(ctx context.Context) {
	if ctx.Err() != nil {
		// Already interrupted: a second signal ends the process at once
		// (cmd_run), so the removal itself needs no other bound.
		ctx = context.Background()
	}
	defer func() {
		if e.run != nil {
			e.run.Close()
		}
		if e.wd != nil {
			e.wd.Close()
		}
	}()
	if !e.ownDir || e.o.Plan.Header.Keep || e.run == nil {
		return
	}
	if e.stuck {
		fmt.Fprintf(e.o.Stderr, "prism: rank %d: not removing %s: an op on it never returned (op_timeout); remove it once the storage answers\n", e.comm.Rank(), e.runDir)
		return
	}
	b, err := e.run.ReadFile(RunMarker, 256)
	if err != nil || strings.TrimSpace(string(b)) != e.runID {
		fmt.Fprintf(e.o.Stderr, "prism: rank %d: not removing %s: its marker does not name run %s\n", e.comm.Rank(), e.runDir, e.runID)
		return
	}
	if err := e.run.Verify(); err != nil {
		fmt.Fprintf(e.o.Stderr, "prism: rank %d: %v\n", e.comm.Rank(), err)
	}
	if err := e.bounded(ctx, "cleanup of "+e.runDir, e.run.Remove); err != nil {
		fmt.Fprintf(e.o.Stderr, "prism: rank %d: cleanup: %v; %s is left for you to remove\n", e.comm.Rank(), err, e.runDir)
		if e.stuck {
			// Still at work in the kernel: closing its descriptors under
			// it gains nothing.
			e.run, e.wd = nil, nil
		}
	}
}

// closeRun hands what the run holds outside its directory (RunCloser
// values in the state: a bucket's run prefix) back: every rank releases
// what it wrote, and once all have (together is true only when the ranks
// are still in step), the markers go. Without that barrier a marker could
// go before another rank's objects, whose release then finds no marker and
// rightly refuses to delete.
func (e *engine) closeRun(ctx context.Context, together bool) {
	if e.o.Plan.Header.Keep {
		return
	}
	if ctx.Err() != nil {
		ctx = context.Background()
	}
	keys := make([]string, 0, len(e.state))
	for k, v := range e.state {
		if _, ok := v.(RunCloser); ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	warn := func(what string, err error) {
		fmt.Fprintf(e.o.Stderr, "prism: rank %d: %s: %v\n", e.comm.Rank(), what, err)
	}
	// A store that stopped answering must not hold the end of the run
	// forever: each step gets closeRunLimit.
	step := func(what string, fn func(context.Context) error) error {
		sctx, cancel := context.WithTimeout(ctx, closeRunLimit)
		defer cancel()
		return e.bounded(sctx, what, func() error { return fn(sctx) })
	}
	for _, k := range keys {
		if err := step("release "+k, e.state[k].(RunCloser).ReleaseRun); err != nil {
			warn("cleanup of "+k, err)
		}
	}
	if !together {
		for _, k := range keys {
			fmt.Fprintf(e.o.Stderr, "prism: rank %d: not removing the marker of %s: the ranks are out of step\n", e.comm.Rank(), k)
		}
		return
	}
	if err := e.comm.Barrier(e.coord); err != nil {
		warn("cleanup", err)
		return
	}
	for _, k := range keys {
		if err := step("close "+k, e.state[k].(RunCloser).CloseRun); err != nil {
			warn("cleanup of "+k, err)
		}
	}
}

// closeRunLimit bounds each step of closeRun.
const closeRunLimit = 2 * time.Minute

// agree is the error agreement of every step: each rank contributes whether
// it failed; all learn the lowest failing rank. The error returned carries
// that rank; a local error is returned as is.
func (e *engine) agree(c spmd.Comm, local error, what string) error {
	if local == ErrStopped {
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
	info, err := processClock(mode)
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
		procClock.Lock()
		report.UseOSClock(fmt.Sprintf("TSC not used: rank %d could not use its own", peer.rank))
		procClock.mode = "" // the next run chooses afresh
		procClock.Unlock()
		return nil
	}
	return agreed
}

// procClock is the op clock chosen in this process. The op clock is
// process-wide state (report.InitClock), and ranks run in one process in
// tests and under prism's in-process launchers: the first rank chooses it,
// the others take that choice instead of recalibrating while a sibling's
// loop may already read it (a data race, and latencies measured across a
// change of clock).
var procClock struct {
	sync.Mutex
	mode string
	info report.ClockInfo
	err  error
}

// processClock is report.InitClock(mode), once per mode in this process.
func processClock(mode string) (report.ClockInfo, error) {
	procClock.Lock()
	defer procClock.Unlock()
	if procClock.mode != mode || mode == "" {
		procClock.info, procClock.err = report.InitClock(mode)
		procClock.mode = mode
	}
	return procClock.info, procClock.err
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

// learnHosts tells every rank, when a phase of p selects nodes, the host
// index of every rank (hosts numbered in the order of their first rank),
// and refuses a node count the job does not have. hosts is rank 0's
// gather of every rank's host name.
func (e *engine) learnHosts(p *Plan, hosts [][]byte) error {
	need := 0
	for _, s := range p.Phases {
		for _, k := range s.Nodes {
			need = max(need, k)
		}
	}
	if need == 0 {
		return nil
	}
	var b []byte
	if e.rank0() {
		at := map[string]int{}
		for _, h := range hosts {
			i, ok := at[string(h)]
			if !ok {
				i = len(at)
				at[string(h)] = i
			}
			b = binary.AppendUvarint(b, uint64(i))
		}
	}
	b, err := e.comm.Bcast(e.coord, 0, b)
	if err != nil {
		return err
	}
	e.hostIdx = make([]int, 0, e.comm.Size())
	for len(b) > 0 && len(e.hostIdx) < e.comm.Size() {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			break
		}
		e.hostIdx = append(e.hostIdx, int(v))
		b = b[n:]
	}
	if len(e.hostIdx) != e.comm.Size() {
		return fmt.Errorf("host map from rank 0 holds %d ranks, the job has %d", len(e.hostIdx), e.comm.Size())
	}
	for _, i := range e.hostIdx {
		e.nhosts = max(e.nhosts, i+1)
	}
	nhosts := e.nhosts
	for _, s := range p.Phases {
		for _, k := range s.Nodes {
			if k > nhosts {
				return &PlanError{File: p.File, Line: s.Line, Key: "nodes", Msg: fmt.Sprintf("phase %d (%s) asks for %d nodes but the job's %d ranks are on %d hosts: %v", s.Index+1, s.Name, k, e.comm.Size(), nhosts, ErrPlanRanks)}
			}
		}
	}
	return nil
}

// runSweep runs s once per rank count of its sweep (or once on every
// rank), or once per node count of a node selection; after each size,
// every rank of the world learns whether it failed, also the ranks that
// sat that size out.
func (e *engine) runSweep(ctx context.Context, s *Spec) (results []report.PhaseResult, failed bool, err error) {
	sizes, nodes := []int(s.Ranks), len(s.Nodes) > 0
	if nodes {
		sizes = s.Nodes
	}
	if len(sizes) == 0 {
		sizes = []int{e.comm.Size()}
	}
	defer func() { e.sweepAt = 0 }()
	for i, k := range sizes {
		e.sweepAt = i
		c, err := e.subset(k, nodes)
		var res *report.PhaseResult
		if err == nil && c != nil {
			res, err = e.runPhase(ctx, c, s, len(sizes) > 1)
		}
		if err != nil && e.rank0() && res == nil {
			n := k
			if c != nil {
				n = c.Size()
			}
			res = failedResult(s, n, err)
		}
		if res != nil {
			if nodes {
				res.Nodes = k
			}
			results = append(results, *res)
		}
		if err != nil {
			return results, true, err
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
			if r.Blocking() {
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

// worldFailed tells every rank whether rank 0's result failed in a way
// that stops the run (a missed expectation does not: the phases after it
// still run, and the run's status is failed at the end).
func (e *engine) worldFailed(res *report.PhaseResult) (bool, error) {
	st := []int64{0}
	if e.rank0() && res != nil && res.Blocking() {
		st[0] = 1
	}
	if err := e.comm.AllreduceInt64(e.coord, spmd.Max, st); err != nil {
		return true, err
	}
	return st[0] != 0, nil
}

func failedResult(s *Spec, k int, err error) *report.PhaseResult {
	res := &report.PhaseResult{Index: s.Index, Name: s.Name, Kind: s.Kind, Ranks: k, Status: report.StatusFailed, Error: err.Error(), Expect: []report.Verdict{}}
	// A dead or silent peer the communicator named is the failed rank.
	var re *spmd.RankError
	if errors.As(err, &re) && re.Rank >= 0 {
		rank := re.Rank
		res.FailedRank = &rank
	}
	return res
}

// subset returns the communicator of the first k ranks or, for nodes,
// of every rank of the first k hosts (hosts in the order of their first
// rank, whatever order the launcher numbered the ranks in; rank 0's host
// is the first, so rank 0 is in every subset and writes its result), and
// nil on a rank outside it. Each is split once and kept for the run.
func (e *engine) subset(k int, nodes bool) (spmd.Comm, error) {
	in, all, cache := e.comm.Rank() < k, k >= e.comm.Size(), &e.subs
	if nodes {
		in, all, cache = e.hostIdx[e.comm.Rank()] < k, k >= e.nhosts, &e.nodeSubs
	}
	if all {
		return e.comm, nil
	}
	if sub, ok := (*cache)[k]; ok {
		return sub, nil
	}
	color := spmd.Undefined
	if in {
		color = 0
	}
	sub, err := e.comm.Split(e.coord, color, e.comm.Rank())
	if err != nil {
		return nil, err
	}
	if *cache == nil {
		*cache = map[int]spmd.Comm{}
	}
	(*cache)[k] = sub
	return sub, nil
}

func (e *engine) runPhase(ctx context.Context, c spmd.Comm, s *Spec, sweep bool) (*report.PhaseResult, error) {
	dirName := fmt.Sprintf("%02d-%s", s.Index+1, s.Name)
	if sweep {
		dirName += fmt.Sprintf("-n%d", c.Size())
	}
	env := &Env{
		Comm: c, Rank: c.Rank(), Size: c.Size(), Host: c.Host(), Name: s.Name, Kind: s.Kind,
		Dir: filepath.Join(e.runDir, dirName), Log: e.o.Stderr, State: e.state,
		WorldRank: e.comm.Rank(), Index: s.Index, spec: s, Run: e.run, Rel: dirName, Workdir: e.wd,
		RunID: e.runID, Storage: e.o.Plan.Header.StorageOptions, CoordinationTimeout: time.Duration(e.o.Plan.Header.CoordinationTimeout),
	}
	if env.CoordinationTimeout <= 0 {
		env.CoordinationTimeout = defaultCoordinationTimeout
	}
	if e.o.Progress != ProgressNone {
		env.ProgressEvery = e.progressEvery()
	}
	env.RankDir = filepath.Join(env.Dir, fmt.Sprintf("r%d", env.Rank))
	res := &report.PhaseResult{
		Index: s.Index, Name: s.Name, Kind: s.Kind, Ranks: c.Size(), StartedAt: e.o.Now(),
		WarmupIterations: s.Warmup, Expect: []report.Verdict{}, Params: paramMap(s),
	}
	if ops := s.plannedOps(); env.Rank == 0 {
		e.printStart(env, ops)
	}
	cache, cacheErr := e.resolveCache(s)
	res.Cache = cache
	env.Cache = CacheMode(cache.Applied)

	// Directories: rank 0 creates the shared one first so ranks never race
	// on a common parent over NFS; then each rank makes its own below it.
	// Both are opened once and every operation of the phase goes through
	// them (Env.Shared, Env.Own).
	var local error
	if env.Rank == 0 {
		local = cacheErr
		if local == nil {
			env.Shared, local = e.run.EnsureSub(dirName, 0o755)
		}
	}
	failure := e.agree(c, local, "setup")
	if failure == nil {
		if env.Rank != 0 {
			env.Shared, local = e.run.EnsureSub(dirName, 0o755)
		}
		if local == nil {
			env.Own, local = env.Shared.MakeSub(fmt.Sprintf("r%d", env.Rank), 0o755)
		}
		failure = e.agree(c, local, "setup")
	}
	defer func() {
		for _, d := range []*pio.Dir{env.Own, env.Shared} {
			if d != nil {
				d.Close()
			}
		}
	}()

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
		env.idle.Store(0)

		failure = e.agree(c, e.step(ctx, c, env, "setup", s.Phase.Setup), "setup")
		if failure == nil && env.Cache == CacheDrop {
			var derr error
			if c.LocalRank() == 0 {
				// sync() waits for every filesystem of the node: a hung one
				// would hang the rank.
				derr = e.bounded(ctx, "drop caches (sync)", pio.DropCaches)
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
			env.set.StartSeries(t0) // the time series count from here, on this rank
			prog := e.startProgress(env, t0)
			beforeRunStep()
			// The wall is the Run's own, read on the step's goroutine right
			// around it: the step's goroutines, its monitor, the progress
			// start and the wake-up of this goroutine when the step ends
			// cost ~200 µs here, 2% of a 10 ms page-cached iteration that
			// IOR times from its open to its close (docs/PERFORMANCE.md).
			var span [2]time.Time
			runErr := e.step(ctx, c, env, "run", func(ctx context.Context, env *Env) error {
				span[0] = time.Now()
				err := s.Phase.Run(ctx, env)
				span[1] = time.Now()
				return err
			})
			t1 := time.Now()
			if !env.stuck && !span[1].IsZero() {
				// The step returned (no abandoned goroutine writes span
				// any more) and Run did not panic.
				t0, t1 = span[0], span[1]
			}
			prog.finish()
			if runErr == ErrStopped {
				runErr = nil
			}
			v := []int64{0, -t0.UnixNano(), t1.UnixNano(), env.idle.Load()}
			if runErr != nil {
				v[0] = int64(c.Size() - c.Rank())
			}
			err := c.AllreduceInt64(e.coord, spmd.Max, v)
			prog.stop()
			if err != nil {
				return nil, err
			}
			if !env.stuck {
				// Outside the timed window: the worker sets the Run left
				// (NewSet). An abandoned step's workers may still write
				// theirs; its iteration has failed anyway.
				env.mergeWatched()
			}
			failure = runErr
			if failure == nil && v[0] != 0 {
				failure = &peerError{rank: c.Size() - int(v[0]), what: "run"}
			}
			if !env.Warmup {
				walls = append(walls, float64(max(v[2]+v[1]-v[3], 0))/1e9)
				busy += (t1.Sub(t0) - time.Duration(env.idle.Load())).Seconds()
				measured.Merge(env.set)
			}
			if failure == nil {
				// A run directory renamed or replaced during the Run fails
				// the phase: its numbers are of some other directory.
				failure = e.agree(c, env.verifyDirs(), "run")
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
	g, hists, err := GatherPhase(e.coord, c, &rec, measured)
	if err != nil {
		return nil, err
	}
	if c.Rank() != 0 {
		return nil, nil
	}
	if err := report.FillGathered(res, g, hists, walls); err != nil {
		return nil, err
	}
	if env.Cache == CacheDrop {
		// The first rank of each host (LocalRank 0) dropped that host's
		// caches: per_host lists each host's ranks in rank order.
		for _, h := range res.PerHost {
			res.Cache.DroppedBy = append(res.Cache.DroppedBy, report.HostRank{Host: h.Host, Rank: h.Ranks[0]})
		}
	}
	res.Metrics = g.Metrics
	res.Storage = env.storage
	if h, ok := s.Phase.(Headliner); ok && failure == nil {
		h.Headline(res)
	}
	res.Status = report.StatusPassed
	if failure != nil {
		res.Status = report.StatusFailed
		if e.o.Interrupted() != nil {
			res.Status = report.StatusInterrupted
		}
		for _, r := range g.Rows.All() {
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
	} else {
		verdicts(s, res)
	}
	return res, nil
}

// step runs one phase method on this rank. A panic becomes an error, so
// the rank still takes part in the agreement instead of leaving its peers
// waiting. Where the communicator can alert (Alerter), a local failure is
// announced at once and a peer's announcement cancels this rank's step, so
// a long loop stops within a fraction of a second of another rank's error;
// such a step returns ErrStopped, which the agreement does not count as a
// failure of this rank.
func (e *engine) step(ctx context.Context, c spmd.Comm, env *Env, what string, fn func(context.Context, *Env) error) (err error) {
	if env.stuck {
		// An earlier step left an op stuck in the kernel; touching the
		// phase's files again could hang this rank too.
		return env.Errorf("%s: skipped: an earlier op is still stuck", what)
	}
	alerter, canAlert := c.(spmd.Alerter)
	tag := fmt.Sprintf("%d.%d.%d.%s", env.Index, c.Size(), env.Iteration, what)
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
	mon := e.startMonitor(env, what)
	// A signal cancels ctx: a step that then does not return within
	// signalGrace (an op stuck in the kernel, a CPU-bound Setup) is
	// abandoned, so that an interrupt is honoured in bounded time.
	interrupted := ctx.Done()
	var grace <-chan time.Time
wait:
	for {
		select {
		case err = <-done:
			mon.stop()
			break wait
		case err = <-mon.timedOut:
			mon.stop()
			env.stuck = true
			break wait
		case <-interrupted:
			interrupted, grace = nil, time.After(signalGrace)
		case <-grace:
			mon.stop()
			env.stuck = true
			err = env.Errorf("%s: interrupted, and the step did not stop within %s (an op stuck in the kernel?): abandoned", what, signalGrace)
			break wait
		}
	}
	if err == nil {
		return nil
	}
	if stepCtx.Err() != nil && IsPeerFailure(context.Cause(stepCtx)) && ctx.Err() == nil {
		return ErrStopped
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = env.Errorf("%s: interrupted", what)
	}
	if canAlert && ctx.Err() == nil {
		alerter.Alert(tag)
	}
	return err
}

// beforeRunStep runs between the engine's start of an iteration's Run
// and the step that calls it; a test's hook, to show what the wall holds.
var beforeRunStep = func() {}

// signalGrace is how long a step may take to stop after an interrupt
// before the engine abandons it and writes what it has.
const signalGrace = 1500 * time.Millisecond

// bounded runs fn (untimed work outside any step: the cache drop's
// sync(), the final cleanup) so that a call stuck in the kernel on a hung
// filesystem cannot hang the rank: it reports the stall after stall_after
// and gives up after op_timeout (when set) or, once ctx is done,
// signalGrace. It returns fn's error, or an error saying it gave up.
func (e *engine) bounded(ctx context.Context, what string, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	stall, timeout := e.stallLimits(nil)
	var stallC, timeoutC, grace <-chan time.Time
	if stall > 0 {
		stallC = time.After(stall)
	}
	if timeout > 0 {
		timeoutC = time.After(timeout)
	}
	interrupted := ctx.Done()
	start := time.Now()
	for {
		select {
		case err := <-done:
			return err
		case <-stallC:
			stallC = nil
			fmt.Fprintf(e.o.Stderr, "prism: stall: rank %d: %s still running after %s (stall_after = %s): the storage is not answering?\n", e.comm.Rank(), what, time.Since(start).Round(time.Millisecond), stall)
		case <-timeoutC:
			e.stuck = true
			return fmt.Errorf("%s did not return within op_timeout = %s: abandoned", what, timeout)
		case <-interrupted:
			interrupted, grace = nil, time.After(signalGrace)
		case <-grace:
			e.stuck = true
			return fmt.Errorf("%s did not stop within %s of the interrupt: abandoned", what, signalGrace)
		}
	}
}

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
	ci := report.CacheInfo{Requested: req, Applied: string(CacheNone)}
	fs, _ := pio.StatFS(e.runDir)
	fa, ok := s.Phase.(Fadviser)
	advises := ok && fa.Fadvises()
	switch req {
	case "none":
		ci.Reason = "asked for none"
	case "root", "auto":
		switch {
		case pio.CacheHeld(fs.Type):
			ci.Reason = fs.Type + " keeps file data in memory; dropping caches cannot make it cold"
		case pio.CanDropCaches():
			ci.Applied = string(CacheDrop)
		case req == "root":
			return ci, fmt.Errorf("drop_caches = \"root\" needs root to write /proc/sys/vm/drop_caches; run as root or use \"fadvise\" or \"auto\"")
		case advises:
			ci.Applied, ci.Reason = string(CacheFadvise), "not root: page cache dropped per file with posix_fadvise(DONTNEED)"
		default:
			ci.Reason = "not root, and this phase has no file data to advise"
		}
	case "fadvise":
		if advises {
			ci.Applied = string(CacheFadvise)
		} else {
			ci.Reason = "this phase has no file data to advise"
		}
	}
	return ci, nil
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
