package blockio

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/io/uring"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/report"
)

// The engines (ioengine). auto, the default, is io_uring where it does
// not lose to psync (see pageCacheChoice and probePunts), else psync; the
// manifest's notes.ioengine is always the engine that ran.
const (
	engineAuto  = "auto"
	engineURing = "io_uring"
	enginePsync = "psync"
)

// errShort is a request the kernel completed with fewer bytes than asked:
// the files are laid out at their full size, so it is an error, as
// PreadFull/PwriteFull's io.ErrUnexpectedEOF is for psync.
var errShort = errors.New("short transfer")

// uringState is a worker's ring: with io_uring a job has one worker, and
// its slots are the job's iodepth requests.
type uringState struct {
	ring  *uring.Ring
	slots []bioSlot
	free  []int32 // indices of idle slots, a stack
	batch []int32 // slots prepared since the last io_uring_enter
	// maxInflight is the most requests this worker had in flight at once.
	maxInflight int
	enters      int64 // io_uring_enter calls of the last Run
	fixedPool   int64 // bytes per registered pool buffer (fixedbufs), 0 = not registered
}

// bioSlot is one request: its buffer (reads), when it was submitted (op
// clock ticks) and what it does.
type bioSlot struct {
	buf        []byte
	start      int64
	file, off  int64
	n          int64
	read, sync bool
}

// chooseEngine settles the engine of this rank for this Setup, as far as
// the kernel decides it: io_uring (asked for, or auto) needs a ring from
// the kernel; the one made here is job 0's. When the kernel refuses
// (io_uring_disabled, a seccomp filter, an old kernel), the rank runs
// psync and says why, once, on its log and in the manifest. probePunts
// settles the rest once job 0's first file is open.
func (p *blockIO) chooseEngine(env *phases.Env) *uring.Ring {
	p.engine, p.fellBack, p.punted = p.cfg.IOEngine, "", ""
	if p.engine == engineAuto {
		p.engine = engineURing
		if why := p.pageCacheChoice(); why != "" {
			p.engine, p.fellBack = enginePsync, why
			if env.Rank == 0 {
				fmt.Fprintf(env.Log, "prism: %s %q: rank %d: %s; running ioengine = \"psync\" (the manifest's notes record it; ioengine = \"io_uring\" keeps the ring)\n", env.Kind, env.Name, env.WorldRank, why)
			}
			return nil
		}
	}
	if p.engine != engineURing {
		return nil
	}
	r, err := uring.New(p.ringEntries())
	if err == nil {
		return r
	}
	p.engine, p.fellBack = enginePsync, uring.Unavailable(err)
	if env.Rank == 0 {
		fmt.Fprintf(env.Log, "prism: %s %q: rank %d: io_uring unavailable: %s; running ioengine = \"psync\" (the manifest's notes record it)\n", env.Kind, env.Name, env.WorldRank, p.fellBack)
	}
	return nil
}

// pageCacheChoice is why auto runs psync without asking the kernel for a
// ring, or "": buffered I/O at iodepth 1, and buffered reads at any
// depth. These are page-cache copies, which the kernel does inline either
// way, so what differs is each engine's own cost per request, and the
// ring's is the larger: psync did 1.48x the 4 KiB random requests a
// second of io_uring at QD1 (reads and writes, ext4 and XFS) and 2x the
// reads at QD16 (docs/PERFORMANCE.md, 8 paired rounds on Linux 6.18).
// Buffered writes at QD16 tied, and a page-cache miss is a disk read
// that psync's iodepth threads overlap as the ring does, so those keep
// io_uring. It is settled from the plan alone, after Setup's O_DIRECT
// check (p.direct), so a direct_fallback to buffered I/O counts as
// buffered.
func (p *blockIO) pageCacheChoice() string {
	c := &p.cfg
	if p.direct || c.IODepth > 1 && !c.reads() {
		return ""
	}
	what := "reads"
	switch {
	case c.mixed():
		what = "reads and writes"
	case c.writes():
		what = "writes"
	}
	return fmt.Sprintf("buffered %s at iodepth %d are page-cache copies, where psync costs less per request than a ring (1.5x the requests a second at iodepth 1, 2x the reads at iodepth 16, on Linux 6.18)", what, c.IODepth)
}

// probePunts asks the kernel, with uring.Punts on the job's first file
// (opened with the job's own flags, so buffered or O_DIRECT as the run
// will be), whether it would hand every request of a kind this job
// issues to an io-wq worker thread. Then each request pays a thread
// wake-up and a context switch that psync does not: measured on Linux
// 6.18 (docs/PERFORMANCE.md, medians of 12 paired rounds), psync did 37×
// the 4 KiB random reads a second on tmpfs at QD1 and 2.6× at QD16, and
// 1.3–52× the buffered writes on tmpfs and ext4. The answer comes from the
// kernel's own punt test, not from a timing, so the same plan on the same
// filesystem always gets the same engine. With ioengine = "auto" (the
// default) the rank then runs psync and notes.ioengine_fallback says why;
// with ioengine = "io_uring" the plan asked for the ring, so it keeps it
// and notes.io_uring_punted says its requests punt.
func (p *blockIO) probePunts(env *phases.Env, job *bioJob) {
	c := &p.cfg
	var kinds []string
	var errnos []string
	for _, write := range []bool{false, true} {
		if write && !c.writes() || !write && !c.reads() {
			continue
		}
		pr, err := uring.Punts(job.fds[0], write)
		kind := "reads"
		if write {
			kind = "writes"
		}
		switch {
		case err != nil || !pr.Punts && pr.Errno != 0:
			// An answer the probe does not know: keep io_uring, as
			// before there was a probe, and say so.
			why := fmt.Sprint(err)
			if err == nil {
				why = "completed with " + pr.Errno.Error()
			}
			if env.Rank == 0 {
				fmt.Fprintf(env.Log, "prism: %s %q: rank %d: io_uring punt probe of %s on %s: %s; keeping io_uring\n", env.Kind, env.Name, env.WorldRank, kind, job.paths[0], why)
			}
		case pr.Punts:
			kinds = append(kinds, kind)
			// The kernel's names: unix calls 95 ENOTSUP, an alias.
			name := map[unix.Errno]string{unix.EAGAIN: "EAGAIN", unix.EOPNOTSUPP: "EOPNOTSUPP"}[unix.Errno(pr.Errno)]
			if !slices.Contains(errnos, name) {
				errnos = append(errnos, name)
			}
		}
	}
	if len(kinds) == 0 {
		return
	}
	mode := "buffered"
	if p.direct {
		mode = "O_DIRECT"
	}
	fstype := "unknown"
	if fs, err := p.dirOf(env).StatFS(); err == nil && fs.Type != "" {
		fstype = fs.Type
	}
	why := fmt.Sprintf("%s %s of %s files punt every request to io-wq worker threads (zero-length RWF_NOWAIT io_uring probe: %s)", mode, strings.Join(kinds, " and "), fstype, strings.Join(errnos, ", "))
	if c.IOEngine == engineURing {
		p.punted = why
		if env.Rank == 0 {
			fmt.Fprintf(env.Log, "prism: %s %q: rank %d: %s; running ioengine = \"io_uring\" as the plan asks (notes.io_uring_punted records it; \"auto\" would run psync)\n", env.Kind, env.Name, env.WorldRank, why)
		}
		return
	}
	p.engine, p.fellBack = enginePsync, why
	if env.Rank == 0 {
		fmt.Fprintf(env.Log, "prism: %s %q: rank %d: %s; running ioengine = \"psync\" (the manifest's notes record it; ioengine = \"io_uring\" keeps the ring)\n", env.Kind, env.Name, env.WorldRank, why)
	}
}

// ringEntries leaves room for every slot plus the fsyncs that may be
// queued behind them.
func (p *blockIO) ringEntries() uint32 { return uint32(2 * p.cfg.IODepth) }

// prepareRing gives wk its ring (r, or a new one), iodepth slots and, with
// fixedbufs and registerfiles, registers the buffers and the job's files.
func (p *blockIO) prepareRing(env *phases.Env, job *bioJob, wk *bioWorker, r *uring.Ring) error {
	c := &p.cfg
	if r == nil {
		var err error
		if r, err = uring.New(p.ringEntries()); err != nil {
			return env.Errorf("job %d: %w", job.idx, err)
		}
	}
	wk.ring = r
	wk.slots = make([]bioSlot, c.IODepth+1) // the last one is the fsync's
	wk.free = make([]int32, 0, c.IODepth)
	wk.batch = make([]int32, 0, len(wk.slots))
	var bufs [][]byte
	for i := c.IODepth - 1; i >= 0; i-- {
		wk.free = append(wk.free, int32(i))
	}
	if c.reads() {
		for i := 0; i < c.IODepth; i++ {
			wk.slots[i].buf = pio.AlignedBuffer(int(c.BS), p.align.Bytes)
			pio.Prefault(wk.slots[i].buf) // not by the first timed read
			bufs = append(bufs, wk.slots[i].buf)
		}
	}
	if c.FixedBufs {
		if c.writes() {
			// The pool is made after the jobs: it is registered in Run's
			// first call (registerPool), in chunks of at most 1 GiB, the
			// kernel's limit per buffer.
			wk.fixedPool = -1
		}
		if len(bufs) > 0 && !c.writes() {
			if err := r.RegisterBuffers(bufs); err != nil {
				return env.Errorf("fixedbufs: job %d: register %d buffers: %w", job.idx, len(bufs), err)
			}
		}
	}
	if c.RegisterFiles {
		if err := r.RegisterFiles(job.fds); err != nil {
			return env.Errorf("registerfiles: job %d: register %d files: %w", job.idx, len(job.fds), err)
		}
	}
	return nil
}

// registerPool registers the read buffers and the write pool together
// (one IORING_REGISTER_BUFFERS per ring: the kernel refuses a second),
// after makePool; reads use indices 0 .. iodepth-1, writes the pool's
// chunks after them.
func (p *blockIO) registerPool(env *phases.Env) error {
	c := &p.cfg
	if !c.FixedBufs || !c.writes() || p.engine != engineURing {
		return nil
	}
	chunk := int64(1<<30) / int64(c.BS) * int64(c.BS)
	for _, job := range p.jobs {
		wk := job.workers[0]
		if wk.fixedPool != -1 {
			continue
		}
		var bufs [][]byte
		if c.reads() {
			for i := 0; i < c.IODepth; i++ {
				bufs = append(bufs, wk.slots[i].buf)
			}
		}
		for off := int64(0); off < int64(len(p.pool)); off += chunk {
			bufs = append(bufs, p.pool[off:min(off+chunk, int64(len(p.pool)))])
		}
		if err := wk.ring.RegisterBuffers(bufs); err != nil {
			return env.Errorf("fixedbufs: job %d: register %d buffers (%d bytes of write pool): %w", job.idx, len(bufs), len(p.pool), err)
		}
		wk.fixedPool = chunk
	}
	return nil
}

func (w *bioWorker) closeRing() {
	if w.ring != nil {
		w.ring.Close()
		w.ring = nil
	}
}

// uringLoop is the io_uring engine's hot path: one goroutine per job
// keeps iodepth requests in flight. Each pass prepares an SQE for every
// idle slot, then one io_uring_enter submits them all and waits for at
// least one completion; every completion found is recorded and its slot
// reused. A request's latency runs from the clock read just before the
// enter that submitted it to the one just after the enter that returned
// it: two op-clock reads per batch, none per request. Nothing allocates.
func (w *bioWorker) uringLoop(p *blockIO, t0 int64) {
	j := w.job
	r := w.ring
	bs := j.bs
	pool := p.pool
	fixed := p.cfg.FixedBufs
	regFiles := p.cfg.RegisterFiles
	depth := len(w.slots) - 1
	syncSlot := int32(depth)
	defer w.finish(p)
	if r.SingleIssuer() {
		// The ring accepts submissions from one thread: this goroutine's.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	if err := r.Enable(); err != nil {
		w.fail(p, err, false, j.paths[0], -1)
		w.errOp = "io_uring_register(ENABLE_RINGS)"
		return
	}
	w.maxInflight = 0
	enters0 := r.Enters()
	defer func() { w.enters = r.Enters() - enters0 }()
	w.free = w.free[:0]
	for i := depth - 1; i >= 0; i-- {
		w.free = append(w.free, int32(i))
	}
	inflight := 0
	done := false
	syncDue := int64(-1) // file of an fsync owed, -1 none
	syncBusy := false
	now := report.Ticks()
	w.y.Due(report.TickNs(now - t0))
	for {
		// Fill every idle slot.
		for !done {
			if p.stop.Load() {
				done = true
				break
			}
			if syncDue >= 0 && !syncBusy {
				s := r.Get()
				fd := j.fds[syncDue]
				if regFiles {
					fd = int(syncDue)
				}
				s.PrepFsync(fd, j.syncMode == pio.SyncFdatasync)
				if regFiles {
					s.Flags |= uring.SqeFixedFile
				}
				// Drain: it starts once every earlier write completed, as
				// psync's fsync follows the writes it counts.
				s.Flags |= uring.SqeIODrain
				s.UserData = uint64(syncSlot)
				sl := &w.slots[syncSlot]
				sl.sync, sl.file, sl.read, sl.n = true, syncDue, false, 0
				w.batch = append(w.batch, syncSlot)
				syncBusy, syncDue = true, -1
				inflight++
			}
			if len(w.free) == 0 || syncDue >= 0 {
				break
			}
			i := j.next.Add(1) - 1
			if !j.timeBased && i >= j.total {
				done = true
				break
			}
			file, q, off, read := j.op(i)
			if h := blockIOOpHook; h != nil {
				h(bioOp{Job: j.idx, File: file, Off: off, Read: read})
			}
			si := w.free[len(w.free)-1]
			w.free = w.free[:len(w.free)-1]
			sl := &w.slots[si]
			sl.sync, sl.file, sl.off, sl.read, sl.n = false, file, off, read, bs
			s := r.Get()
			fd := j.fds[file]
			if regFiles {
				fd = int(file)
				s.Flags |= uring.SqeFixedFile
			}
			switch {
			case read && fixed:
				s.PrepRW(uring.OpReadFixed, fd, sl.buf, off)
				s.BufIndex = uint16(si)
			case read:
				s.PrepRW(uring.OpRead, fd, sl.buf, off)
			default:
				var b int64
				if j.scramble {
					// The slot is idle, so its block is in no request.
					b = (j.slot0 + int64(si)) * bs
					j.stamp(pool[b:b+bs], file, off, i/j.positions)
				} else {
					b = (j.poolStart + file*j.ppf + q) % p.poolBlocks * bs
				}
				if fixed {
					s.PrepRW(uring.OpWriteFixed, fd, pool[b:b+bs], off)
					s.BufIndex = uint16(b/w.fixedPool) + uint16(w.readBufs(p))
				} else {
					s.PrepRW(uring.OpWrite, fd, pool[b:b+bs], off)
				}
				if j.syncN > 0 && j.writesDone.Add(1)%j.syncN == 0 {
					syncDue = file
				}
			}
			s.UserData = uint64(si)
			w.batch = append(w.batch, si)
			inflight++
		}
		if inflight == 0 {
			return
		}
		w.maxInflight = max(w.maxInflight, inflight)
		start := report.Ticks()
		for _, si := range w.batch {
			w.slots[si].start = start
		}
		w.batch = w.batch[:0]
		rec := w.rd
		if rec == nil {
			rec = w.wr
		}
		// In flight for the stall watchdog: the wait that starts now.
		rec.BeginAt(&j.paths[0], start)
		_, err := r.Enter(1)
		now = report.Ticks()
		since := report.TickNs(now - t0)
		if err != nil {
			// The ring itself failed: nothing more completes here.
			w.fail(p, err, false, j.paths[0], -1)
			w.errOp = "io_uring_enter"
			return
		}
		for c := r.Peek(); c != nil; c = r.Peek() {
			si, res := int32(c.UserData), int64(c.Res)
			r.Advance()
			inflight--
			sl := &w.slots[si]
			var err error
			switch {
			case res < 0:
				err = unix.Errno(-res)
			case res != sl.n:
				err = errShort
			}
			if sl.sync {
				syncBusy = false
				if since >= j.ramp {
					w.sy.ObserveNs(report.TickNs(now-sl.start), 0, err)
				}
				if err != nil && w.err == nil {
					w.fail(p, err, false, j.paths[sl.file], -1)
					done = true
				}
				continue
			}
			w.free = append(w.free, si)
			rec := w.rd
			if !sl.read {
				rec = w.wr
			}
			w.issued++
			if since >= j.ramp {
				rec.ObserveNs(report.TickNs(now-sl.start), max(res, 0), err)
			} else {
				w.ramped++
			}
			if err != nil {
				if w.err == nil {
					w.fail(p, err, sl.read, j.paths[sl.file], sl.off)
				}
				done = true
				continue
			}
			w.byts += res
		}
		if since >= j.deadline && !done {
			p.deadlineHit.Store(true)
			done = true
		}
		if w.y.Due(since) {
			phases.Yield()
		}
	}
}

// readBufs is how many registered buffers come before the pool's.
func (w *bioWorker) readBufs(p *blockIO) int {
	if p.cfg.reads() {
		return len(w.slots) - 1
	}
	return 0
}

// Headline records, on rank 0, the engine the phase ran, why io_uring was
// not used when it was asked for or was the default, and, when the plan
// insisted on io_uring, that its requests punt: the manifest's notes.
func (p *blockIO) Headline(res *report.PhaseResult) {
	if p.engine == "" {
		return
	}
	if res.Notes == nil {
		res.Notes = map[string]string{}
	}
	res.Notes["ioengine"] = p.engine
	if p.cfg.writes() {
		res.Notes["write_data"] = p.cfg.writeData()
	}
	if p.fellBack != "" {
		res.Notes["ioengine_fallback"] = p.fellBack
	}
	if p.punted != "" {
		res.Notes["io_uring_punted"] = p.punted
	}
}
