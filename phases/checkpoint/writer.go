package checkpoint

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
	ps3 "github.com/prism-hpc/prism/io/s3"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/ckpt"
	"github.com/prism-hpc/prism/report"
)

// writer writes one checkpoint: the files of this rank, then, on rank 0,
// the final files once every rank is done.
//
// By default it makes the system calls the framework makes
// (ckpt.Layout.WriteCalls): torch.save's writev of the bytes libstdc++
// had buffered with each tensor of 1 KiB or more, DCP's BufferedWriter
// writes and tell() lseeks, fsync where FileSystemWriter fsyncs. Calls
// are planned in Setup (plan): which bytes each takes from the segments
// (literal headers, pool chunks of tensors), copied into a small staging
// buffer where the framework had several small writes buffered, so the
// timed loop only stamps pool chunks, copies a few KiB and issues the call.
// With write_size set, tensor data goes out in pwrite(2)s of write_size
// and every literal segment in a pwrite of its own instead.
type writer struct {
	spec    writeSpec
	model   *ckpt.Model
	layout  *ckpt.Layout
	dir     string   // for messages and the layout (DCP records it)
	pin     *pio.Dir // the same directory: every call is relative to it
	gen     uint64
	seed    uint64
	poolP   int64 // the pool's period: part of what a load needs to rebuild CRCs
	pool    *ckpt.Pool
	files   []int // this rank's files, then (rank 0) the final ones
	nFinal  int
	paths   []pio.Path // by layout file; set for the files this rank writes
	tmp     []pio.Path
	made    []string
	calls   [][]wcall // by layout file: the calls that write it
	gathers []gather  // the staged parts of every call
	stage   []byte
	iov     [2][]byte
	headerB int64
	splits  int64     // framework calls split because a tensor exceeds the pool's window
	seeks   bool      // the calls include lseeks
	recs    *ioRecs   // nil: the rank's recorders
	obj     *objPlace // over S3: the objects' place (pin is nil)
}

// callPwrite is the positional write of the write_size plan (torch and
// DCP never make it).
const callPwrite ckpt.CallOp = "pwrite"

// wcall is one planned call. A write takes [off, off+n): its first
// staged bytes gathered into the staging buffer, the rest (the direct
// part) straight from one segment, a literal or a pool chunk of a piece.
// A writev is the same with the two parts as its two buffers.
type wcall struct {
	op       ckpt.CallOp
	off, n   int64
	staged   int64
	g0, g1   int32 // gathers filling the staged part
	seg      int32 // segment of the direct part; -1: none
	segRel   int64 // where the direct part starts in the segment
	payload  int64 // tensor bytes among the call's
	literals int64 // header/metadata bytes among the call's
}

// gather copies n bytes of segment seg from segRel into the staging
// buffer at dst.
type gather struct {
	seg       int32
	segRel, n int64
	dst       int64
	piece     bool
	lit       []byte // the segment's literal bytes
	key       uint64 // the piece's pool key
}

func newLayout(m *ckpt.Model, spec writeSpec, ranks int, seed uint64, dir string) *ckpt.Layout {
	v := spec.version
	if v == "" {
		v = ckpt.DefaultTorchVersion
	}
	switch {
	case spec.kind == "ddp" && spec.format == ckpt.FormatTorch:
		return ckpt.NewTorchState(m.State(v, false), seed, "checkpoint.pt", v)
	case spec.kind == "ddp":
		return ckpt.NewSafetensors(m.Tensors, seed, 1, false)
	case spec.format == ckpt.FormatSafetensors:
		return ckpt.NewSafetensors(m.Tensors, seed, ranks, true)
	}
	// The checkpoint id is the directory on every rank and in every
	// rebuild: torch 2.x records it in .metadata.
	return ckpt.NewDCPState(m.State(v, true), seed, ranks, ckpt.DCPOptions{FilePerTensor: spec.perTensor, Version: v, CheckpointID: dir})
}

// prepare lays the checkpoint out, computes the CRCs of this rank's
// pieces, builds its files' headers, paths and calls. Untimed.
func (w *writer) prepare(env *phases.Env, seed uint64, budget int64) error {
	ranks := env.Size
	if w.spec.kind == "ddp" {
		ranks = 1
	}
	w.seed = seed
	w.layout = newLayout(w.model, w.spec, ranks, seed, w.dir)
	w.files = nil
	if w.spec.kind == "fsdp" || env.Rank == 0 {
		w.files = w.layout.FilesOf(env.Rank)
	}
	var mine []int
	var largest int64
	for _, f := range w.files {
		for _, p := range w.layout.PiecesOf(f) {
			mine = append(mine, p)
			largest = max(largest, w.layout.Pieces[p].Len())
		}
	}
	w.poolP = poolSize(w.model, budget)
	if len(mine) > 0 {
		w.pool = pool(env, seed, w.poolP, w.window(largest))
		w.layout.Checksum(w.pool, w.gen, mine)
	}
	for _, f := range w.files {
		w.layout.Build(f, true)
	}
	w.nFinal = 0
	if env.Rank == 0 {
		for _, f := range w.layout.FinalFiles() {
			w.layout.Build(f, true)
			w.files = append(w.files, f)
			w.nFinal++
		}
	}
	if (env.Rank == 0 || w.spec.kind == "fsdp") && w.obj == nil {
		if w.pin == nil {
			var err error
			if w.pin, err = pinDir(env, w.dir, true); err != nil {
				return err
			}
		}
	}
	w.setPaths()
	return w.plan()
}

// window is the largest chunk the writer cuts from the pool: write_size,
// or for the framework's calls the largest tensor piece, capped at the
// pool's period poolP (the same on every rank, so every rank's pool has
// the same bytes); a larger tensor's call is split.
func (w *writer) window(largest int64) int64 {
	if w.spec.writeSize > 0 {
		return w.spec.writeSize
	}
	return min(max(largest, ckpt.StampEvery), max(w.poolP, ckpt.StampEvery))
}

// setPaths prepares the paths of the files this rank writes.
func (w *writer) setPaths() {
	w.paths = make([]pio.Path, len(w.layout.Files))
	w.tmp = make([]pio.Path, len(w.layout.Files))
	for _, f := range w.files {
		lf := w.layout.Files[f]
		w.paths[f] = fileIn(w.dir, lf.Name)
		if lf.Tmp != "" {
			w.tmp[f] = fileIn(w.dir, lf.Tmp)
		}
	}
	w.made = make([]string, 0, len(w.files))
}

// blockSize is st_blksize of the checkpoint directory's filesystem, the
// size of Python's file buffers there (4096 when it cannot be told).
func blockSize(d *pio.Dir) int64 {
	var st unix.Stat_t
	if d == nil || unix.Fstat(d.Fd(), &st) != nil || st.Blksize <= 0 {
		return 4096
	}
	return int64(st.Blksize)
}

// plan turns every file's calls into wcalls. With write_size, each
// literal segment is one pwrite and each piece write_size pwrites;
// otherwise the framework's calls, a direct part larger than the pool's
// window split into window-sized writes (counted in splits).
func (w *writer) plan() error {
	w.calls = make([][]wcall, len(w.layout.Files))
	w.gathers = w.gathers[:0]
	w.splits = 0
	var win int64
	if w.pool != nil {
		_, win = w.pool.Size()
	}
	o := ckpt.CallOptions{BlockSize: blockSize(w.pin)}
	var stage int64
	for _, f := range w.files {
		lf := &w.layout.Files[f]
		var out []wcall
		if w.spec.writeSize > 0 {
			for i, s := range lf.Segs {
				if s.Piece < 0 {
					out = append(out, wcall{op: callPwrite, off: s.Off, n: s.Len, seg: int32(i), literals: s.Len})
					continue
				}
				for rel := int64(0); rel < s.Len; rel += win {
					n := min(win, s.Len-rel)
					out = append(out, wcall{op: callPwrite, off: s.Off + rel, n: n, seg: int32(i), segRel: rel, payload: n})
				}
			}
			if w.spec.fsync {
				out = append(out, wcall{op: ckpt.CallFsync})
			}
			w.calls[f] = out
			continue
		}
		synced := false
		for _, c := range w.layout.WriteCalls(f, o) {
			switch c.Op {
			case ckpt.CallSeek:
				out = append(out, wcall{op: c.Op, off: c.Off, seg: -1})
				w.seeks = true
			case ckpt.CallFsync:
				if w.spec.fsync {
					out = append(out, wcall{op: c.Op, seg: -1})
				}
				synced = true
			case ckpt.CallWrite, ckpt.CallWritev:
				var head int64
				if c.Op == ckpt.CallWritev {
					head = c.Iov[0]
				}
				parts, err := w.planWrite(lf, c.Op, c.Off, c.Len, head, win)
				if err != nil {
					return err
				}
				for _, p := range parts {
					stage = max(stage, p.staged)
				}
				out = append(out, parts...)
			}
		}
		// torch.save and the safetensors library do not fsync; a plan
		// that asks for it gets one after the last write.
		if w.spec.fsync && !synced {
			out = append(out, wcall{op: ckpt.CallFsync, seg: -1})
		}
		w.calls[f] = out
	}
	if int64(cap(w.stage)) < stage {
		w.stage = make([]byte, stage)
	}
	w.stage = w.stage[:cap(w.stage)]
	return nil
}

// planWrite plans one write or writev of [off, off+n) whose first head
// bytes are buffered (writev) — or, for a write spanning several
// segments, all of them — and the rest one segment's bytes.
func (w *writer) planWrite(lf *ckpt.File, op ckpt.CallOp, off, n, head, win int64) ([]wcall, error) {
	segs := lf.Segs
	first := segAt(segs, off)
	last := segAt(segs, off+n-1)
	if first < 0 || last < 0 {
		return nil, errors.New("checkpoint: internal: a write call outside the file's segments")
	}
	if op == ckpt.CallWrite && first != last {
		head = n // several segments: staged whole
	}
	c := wcall{op: op, off: off, n: n, staged: head, seg: -1}
	c.g0 = int32(len(w.gathers))
	for i := first; i < len(segs) && segs[i].Off < off+head; i++ {
		s := segs[i]
		lo, hi := max(off, s.Off), min(off+head, s.Off+s.Len)
		g := gather{seg: int32(i), segRel: lo - s.Off, n: hi - lo, dst: lo - off, piece: s.Piece >= 0, lit: s.Lit}
		if g.piece {
			g.key = w.layout.Pieces[s.Piece].Key
			c.payload += g.n
		} else {
			c.literals += g.n
		}
		// A gather is cut from the pool at most a window at a time.
		for g.n > win && g.piece {
			h := g
			h.n = win
			w.gathers = append(w.gathers, h)
			g.segRel += win
			g.dst += win
			g.n -= win
		}
		w.gathers = append(w.gathers, g)
	}
	c.g1 = int32(len(w.gathers))
	if head == n {
		return []wcall{c}, nil
	}
	d := segAt(segs, off+head)
	s := segs[d]
	if off+n > s.Off+s.Len {
		return nil, errors.New("checkpoint: internal: a write call's data spans two segments")
	}
	c.seg, c.segRel = int32(d), off+head-s.Off
	direct := n - head
	if s.Piece < 0 {
		c.literals += direct
		return []wcall{c}, nil
	}
	c.payload += direct
	if direct <= win {
		return []wcall{c}, nil
	}
	// The tensor is larger than the pool's window: the call's first part
	// carries a window of it, plain writes the rest.
	out := []wcall{c}
	out[0].n = head + win
	out[0].payload -= direct - win
	for rel := win; rel < direct; rel += win {
		k := min(win, direct-rel)
		out = append(out, wcall{op: ckpt.CallWrite, off: off + head + rel, n: k, seg: int32(d), segRel: c.segRel + rel, payload: k})
		w.splits++
	}
	return out, nil
}

// segAt is the segment holding byte off, or -1.
func segAt(segs []ckpt.Seg, off int64) int {
	lo, hi := 0, len(segs)
	for lo < hi {
		m := (lo + hi) / 2
		if segs[m].Off+segs[m].Len <= off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(segs) && segs[lo].Off <= off {
		return lo
	}
	return -1
}

// write is the timed part: this rank's files, an agreement that every
// rank finished (so no rank waits forever on one that failed), then rank
// 0's final files.
func (w *writer) write(ctx context.Context, env *phases.Env) error {
	shards := w.files[:len(w.files)-w.nFinal]
	var local error
	for _, f := range shards {
		if local = w.writeFile(ctx, env, f); local != nil {
			break
		}
	}
	if err := env.Agree(ctx, local); err != nil {
		return err
	}
	for _, f := range w.files[len(w.files)-w.nFinal:] {
		if err := w.writeFile(ctx, env, f); err != nil {
			return err
		}
	}
	return nil
}

// makeRecs makes the recorders a save of file f times, those it has not
// made yet (ioRecs: only the ops the save does): the rank's when w has no
// recorders of its own. writeFile calls it before its loop; a phase may
// call it earlier, in Setup, so that Run does not create them (a
// recorder's creation clears its ~270 KiB histogram, ~115 µs).
func (w *writer) makeRecs(env *phases.Env, f int) {
	if w.recs == nil {
		rs := newIORecs(env.Recorder)
		w.recs = &rs
	}
	if w.obj != nil {
		w.recs.forObjectWrite()
		return
	}
	w.recs.forWrite(w.spec.fsync, w.layout.Files[f].Tmp != "", w.seeks)
}

func (w *writer) writeFile(ctx context.Context, env *phases.Env, f int) error {
	if w.obj != nil {
		return w.writeObject(ctx, env, f)
	}
	lf := &w.layout.Files[f]
	path, final := &w.paths[f], &w.paths[f]
	if lf.Tmp != "" {
		path = &w.tmp[f]
	}
	target := path.Name()
	w.makeRecs(env, f)
	calls := w.calls[f]
	if w.pin != nil {
		w.recs.under(w.pin.Path())
	}
	recOpen, recWrite, recHdr, recSeek := w.recs.open, w.recs.write, w.recs.header, w.recs.seek
	recSync, recClose, recFile := w.recs.fsync, w.recs.close, w.recs.saveFile
	fileStart := recOpen.BeginOn(target)
	fd, err := pio.Open(w.pin.Fd(), *path, unix.O_CREAT|unix.O_WRONLY|unix.O_TRUNC|unix.O_NOFOLLOW, 0o644)
	recOpen.Observe(fileStart, 0, err)
	if err != nil {
		return env.Errorf("%w", pio.NewOpError("create", path, err))
	}
	w.made = append(w.made, path.Via())
	var y phases.Yielder
	y.Due(0)
	for i := range calls {
		c := &calls[i]
		if i&15 == 15 {
			if ctx.Err() != nil {
				pio.Close(fd)
				return ctx.Err()
			}
			if y.Due(int64(time.Since(fileStart))) {
				phases.Yield()
			}
		}
		switch c.op {
		case ckpt.CallSeek:
			start := recSeek.BeginOn(target)
			_, err = unix.Seek(fd, c.off, unix.SEEK_SET)
			recSeek.Observe(start, 0, err)
			if err != nil {
				pio.Close(fd)
				return env.Errorf("%w", pio.NewOpErrorAt("lseek", path, c.off, err))
			}
		case ckpt.CallFsync:
			start := recSync.BeginOn(target)
			err = pio.Fsync(fd)
			recSync.Observe(start, 0, err)
			if err != nil {
				pio.Close(fd)
				return env.Errorf("%w", pio.NewOpError("fsync", path, err))
			}
		default:
			if err = w.issue(fd, lf, c, target, recWrite, recHdr); err != nil {
				pio.Close(fd)
				return env.Errorf("%w", pio.NewOpErrorAt("write", path, c.off, err))
			}
		}
	}
	start := recClose.BeginOn(target)
	err = pio.Close(fd)
	recClose.Observe(start, 0, err)
	if err == nil && path != final {
		start = w.recs.rename.BeginOn(target)
		err = pio.RenameAt(w.pin.Fd(), *path, w.pin.Fd(), *final)
		w.recs.rename.Observe(start, 0, err)
		if err == nil {
			w.made[len(w.made)-1] = final.Via()
		}
	}
	recFile.Observe(fileStart, 0, err) // the whole file: not an op the watchdog tracks
	if err != nil {
		return env.Errorf("%w", pio.NewOpError("close/rename", path, err))
	}
	return nil
}

// expectedOps is how many timed ops write records on this rank (the
// progress line's ExpectedOps): per file its open, every planned call
// (write, writev, pwrite, lseek, fsync), its close, the rename of DCP's
// .tmp and save_file, the whole file; writeFile records exactly these. A
// rank without files (a ddp_save's ranks but 0) records none. Over S3 it
// is 0, unknown: an upload's requests (one PUT, or create, parts and
// complete) are decided by the upload as the parts fill.
func (w *writer) expectedOps() int64 {
	if w.obj != nil {
		return 0
	}
	var n int64
	for _, f := range w.files {
		n += 3 + int64(len(w.calls[f])) // open, the calls, close, save_file
		if w.layout.Files[f].Tmp != "" {
			n++ // rename
		}
	}
	return n
}

// issue makes one write, writev or pwrite: the staged part gathered into
// the staging buffer, the direct part cut from its segment, then the
// call, timed alone.
func (w *writer) issue(fd int, lf *ckpt.File, c *wcall, target *string, recWrite, recHdr *report.Recorder) error {
	staged := w.stage[:c.staged]
	for _, g := range w.gathers[c.g0:c.g1] {
		dst := staged[g.dst : g.dst+g.n]
		if !g.piece {
			copy(dst, g.lit[g.segRel:g.segRel+g.n])
			continue
		}
		copy(dst, w.pool.Chunk(g.key, w.gen, g.segRel, g.n))
		w.pool.Release()
	}
	var direct []byte
	piece := false
	if c.seg >= 0 {
		s := &lf.Segs[c.seg]
		dn := c.n - c.staged
		if s.Piece < 0 {
			direct = s.Lit[c.segRel : c.segRel+dn]
		} else {
			direct = w.pool.Chunk(w.layout.Pieces[s.Piece].Key, w.gen, c.segRel, dn)
			piece = true
		}
	}
	rec := recHdr
	if c.payload > 0 {
		rec = recWrite
	}
	var err error
	start := rec.BeginOn(target)
	switch {
	case c.op == callPwrite:
		_, err = pio.PwriteFull(fd, direct, c.off)
	case c.op == ckpt.CallWritev:
		w.iov[0], w.iov[1] = staged, direct
		err = writevFull(fd, &w.iov)
	case c.seg >= 0:
		_, err = pio.Write(fd, direct)
	default:
		_, err = pio.Write(fd, staged)
	}
	rec.Observe(start, int(c.payload), err)
	if piece {
		w.pool.Release()
	}
	w.iov[0], w.iov[1] = nil, nil
	w.headerB += c.literals
	return err
}

// writevFull is writev(2) of both buffers, retrying EINTR and finishing a
// short transfer with further calls.
func writevFull(fd int, iov *[2][]byte) error {
	for len(iov[0])+len(iov[1]) > 0 {
		n, err := unix.Writev(fd, iov[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return pio.ErrShortIO
		}
		k := min(n, len(iov[0]))
		iov[0], iov[1] = iov[0][k:], iov[1][n-k:]
	}
	return nil
}

// finish runs after the timed write on every rank: it checks this rank's
// files have their sizes, gathers every piece's CRC so every rank holds
// all of them (a load on any rank count can verify any file), and records
// the checkpoint in Env.State.
func (w *writer) finish(ctx context.Context, env *phases.Env) (*checkpointRecord, error) {
	for _, f := range w.files {
		if w.obj != nil {
			lf := w.layout.Files[f]
			info, err := w.obj.st.Client.Head(ctx, w.obj.key(lf.Name))
			if err != nil {
				return nil, env.Errorf("verify: %w", err)
			}
			if info.Size != lf.Size {
				return nil, env.Errorf("verify: %s is %d bytes after the save, want %d", w.obj.url(lf.Name), info.Size, lf.Size)
			}
			continue
		}
		lf := w.layout.Files[f]
		var st unix.Stat_t
		if err := unix.Fstatat(w.pin.Fd(), lf.Name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, env.Errorf("verify: %w", pio.NewOpError("stat", filepath.Join(w.dir, lf.Name), err))
		}
		if st.Size != lf.Size {
			return nil, env.Errorf("verify: %s is %d bytes after the save, want %d", filepath.Join(w.dir, lf.Name), st.Size, lf.Size)
		}
	}
	var mine []byte
	for _, f := range w.files {
		for _, p := range w.layout.PiecesOf(f) {
			mine = binary.LittleEndian.AppendUint32(mine, uint32(p))
			mine = binary.LittleEndian.AppendUint32(mine, w.layout.Pieces[p].CRC)
		}
	}
	all, err := env.Comm.Gather(ctx, 0, mine)
	if err != nil {
		return nil, err
	}
	var crcs []byte
	if env.Rank == 0 {
		crcs = make([]byte, 4*len(w.layout.Pieces))
		for _, b := range all {
			for ; len(b) >= 8; b = b[8:] {
				p := binary.LittleEndian.Uint32(b)
				if int(p) < len(w.layout.Pieces) {
					copy(crcs[4*p:], b[4:8])
				}
			}
		}
	}
	if crcs, err = env.Comm.Bcast(ctx, 0, crcs); err != nil {
		return nil, err
	}
	if len(crcs) != 4*len(w.layout.Pieces) {
		return nil, env.Errorf("verify: got %d checksum bytes from rank 0, want %d", len(crcs), 4*len(w.layout.Pieces))
	}
	for i := range w.layout.Pieces {
		w.layout.Pieces[i].CRC = binary.LittleEndian.Uint32(crcs[4*i:])
	}
	// Headers of files this rank did not build are rebuilt by loads with
	// the CRCs now known; drop the rest of the bytes.
	for i := range w.layout.Files {
		w.layout.Files[i].Segs = nil
	}
	rec := &checkpointRecord{kind: w.spec.kind, spec: w.spec, dir: w.dir, ranks: w.layout.Ranks, gen: w.gen,
		seed: w.seed, poolP: w.poolP, model: w.model, layout: w.layout, own: w.made, pin: w.pin, obj: w.obj}
	if w.obj != nil {
		rec.where = w.obj.where
	}
	if w.spec.kind == "ddp" {
		rec.ranks = env.Size
	}
	store(env).add(rec)
	return rec, nil
}

// removeMade deletes the files this writer created (a failed run, or a new
// iteration about to write them again).
func (w *writer) removeMade() error {
	if w.obj != nil {
		err := w.obj.remove(w.made)
		w.made = w.made[:0]
		return err
	}
	var first error
	for _, p := range w.made {
		if err := unix.Unlinkat(w.pin.Fd(), p, 0); err != nil && err != unix.ENOENT && first == nil {
			first = pio.NewOpError("unlink", filepath.Join(w.dir, p), err)
		}
	}
	w.made = w.made[:0]
	return first
}

// writeObject is writeFile over S3: the file's bytes in order (headers as
// built, tensors cut from the pool a window at a time) streamed into one
// multipart upload (Upload), so parts go out as they fill while later
// tensors are cut; no seek, fsync or rename (an object appears whole at
// CompleteMultipartUpload, so DCP's .tmp rename has nothing to do).
// Timed: put, create, part and complete per request, save_file the whole
// object. Any failure aborts the upload.
func (w *writer) writeObject(ctx context.Context, env *phases.Env, f int) error {
	lf := &w.layout.Files[f]
	o := w.obj
	w.makeRecs(env, f)
	w.recs.under("s3://" + o.st.URI.Bucket + "/" + o.prefix)
	key := o.key(lf.Name)
	// Recorded before the first request: a part or PUT that failed on the
	// client side may still have landed.
	if err := o.st.Run.Track(key); err != nil {
		return env.Errorf("%w", err)
	}
	w.made = append(w.made, lf.Name)
	recs := w.recs
	// The requests are the ops the watchdog and op_timeout watch (each
	// marked in flight by its recorder's Begin); save_file is the whole
	// object, which may rightly take longer than any op_timeout.
	fileStart := time.Now()
	up, err := o.st.Client.NewUpload(ctx, key, o.buffers(), ps3.UploadObservers{
		Put: recs.put, Create: recs.create, Part: recs.part, Complete: recs.complete})
	if err != nil {
		return env.Errorf("%w", err)
	}
	var win int64 = ckpt.StampEvery
	if w.pool != nil {
		_, win = w.pool.Size()
	}
	var y phases.Yielder
	y.Due(0)
	for i := range lf.Segs {
		s := &lf.Segs[i]
		if ctx.Err() != nil {
			return env.Errorf("%w", up.Abort(ctx.Err()))
		}
		if y.Due(int64(time.Since(fileStart))) {
			phases.Yield()
		}
		if s.Piece < 0 {
			if _, err := up.Write(s.Lit); err != nil {
				return env.Errorf("%w", up.Abort(err))
			}
			w.headerB += s.Len
			continue
		}
		pkey := w.layout.Pieces[s.Piece].Key
		for rel := int64(0); rel < s.Len; rel += win {
			n := min(win, s.Len-rel)
			_, err := up.Write(w.pool.Chunk(pkey, w.gen, rel, n))
			w.pool.Release()
			if err != nil {
				return env.Errorf("%w", up.Abort(err))
			}
		}
	}
	if up.Size() != lf.Size {
		return env.Errorf("%w", up.Abort(fmt.Errorf("checkpoint: internal: %s: the segments hold %d bytes, the file %d", lf.Name, up.Size(), lf.Size)))
	}
	err = up.Close()
	recs.saveFile.Observe(fileStart, 0, err)
	if err != nil {
		return env.Errorf("%w", err)
	}
	return nil
}
