package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	pio "github.com/prism-hpc/prism/io"
	ps3 "github.com/prism-hpc/prism/io/s3"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/ckpt"
	"github.com/prism-hpc/prism/report"
)

// readMode is how a load issues its reads.
type readMode uint8

const (
	// modeCalls makes the calls the framework makes (ckpt.Layout.ReadCalls
	// and EntryReadCalls): read(2) at the file position and lseek, with
	// the buffer fills of Python's readers.
	modeCalls readMode = iota
	// modeChunks preads the ranges read_size at a time (headers and
	// metadata in one pread each).
	modeChunks
	// modeDirect preads aligned read_size chunks with O_DIRECT.
	modeDirect
	// modeMmap maps each file and touches every page of what it loads,
	// as safetensors' safe_open and torch.load(mmap=True) do.
	modeMmap
)

// ropKind is one kind of planned read-side call.
type ropKind uint8

const (
	ropRead  ropKind = iota // read(2) of n bytes at the file position (off)
	ropPread                // pread(2) of [off, off+n)
	ropSeek                 // lseek to off
	ropMap                  // fstat, mmap of the whole file, close of the descriptor
	ropTouch                // one load from every page of [off, off+n) of the mapping
	ropNone                 // nothing: a file only opened and closed
)

// readOp is one planned call. Its bytes [off, off+want) feed the
// fragments [f0, f1).
type readOp struct {
	slot    int
	kind    ropKind
	off, n  int64
	want    int64 // the bytes it must return: fewer mean the file is short
	pos     int64 // arena position
	payload int64 // tensor bytes it loads first (none it loaded before)
	openIt  bool  // the slot's first op: open the file before it
	lastIt  bool  // the slot's last op: close it (unless mapped) after it
	f0, f1  int32
}

// reader executes a rank's reads of a checkpoint and verifies them.
//
// What it reads is planned in Setup in two parts: the byte ranges the
// load needs (needs: every byte of a file, a DCP item, the rows of a
// tensor a new shard takes), checked byte for byte (literal segments) or
// by CRC-32 against the save's (tensors); and the calls that read them,
// in the mode's shape. Each call's bytes are matched against the needs
// once, the first time a call returns them (fragments), so buffer fills
// that read bytes again, out of order or past a need, check each byte
// once; the plan fails in Setup if the calls leave a needed byte unread.
type reader struct {
	l        *ckpt.Layout
	rec      *checkpointRecord
	dir      string   // for messages
	pin      *pio.Dir // the same directory: every call is relative to it
	mode     readMode
	readSize int64
	blk      int64 // st_blksize: Python's buffer size
	align    int64
	files    []int // layout file of each slot
	slotOf   map[int]int
	paths    []pio.Path
	kpos     []int64 // planning: each slot's file position after the ops so far
	fds      []int
	maps     [][]byte
	opened   []time.Time
	ops      []readOp
	needs    []need
	frags    []frag
	partial  bool // some need is part of a piece: its CRC needs the pool
	arena    []byte
	buf      []byte
	inline   bool
	headerB  int64
	splits   int64 // reads split to fit the read buffer
	seeks    bool
	sink     byte // page touches land here, so the compiler keeps them
	cur      int  // the op in progress, for a fault's message
	recs     *ioRecs
	obj      *objPlace          // over S3: the objects' place (pin is nil)
	objs     []*ps3.RangeReader // over S3: by slot, while the object is open
}

// need is a range of one segment a load must check: segment-relative
// [lo, hi) of segment seg of the slot's file.
type need struct {
	slot   int
	seg    int
	lo, hi int64
	frags  []int32 // in segment order
	want   uint32  // the CRC-32 of a piece's [lo, hi)
	// lax: a literal range checked where the calls read it. torch.load
	// never reads the zip's data descriptors, nor local headers' tails
	// it skips; every tensor byte is read and checked.
	lax bool
}

// frag is the part of one call's bytes that first delivers part of a
// need: the call's bytes [rel, rel+n) are the need's segment bytes from at.
type frag struct {
	rel, n int64
	need   int32
	at     int64
	crc    uint32
}

// loadOpts are the keys that shape a load's reads.
type loadOpts struct {
	readSize int64
	direct   bool
	mmap     bool
	budget   int64
}

func (o loadOpts) mode() readMode {
	switch {
	case o.mmap:
		return modeMmap
	case o.direct:
		return modeDirect
	case o.readSize > 0:
		return modeChunks
	}
	return modeCalls
}

// directReadSize is read_size when direct = true leaves it unset.
const directReadSize = 4 << 20

func newPlainReader(l *ckpt.Layout, dir string, pin *pio.Dir, mode readMode, readSize int64) *reader {
	return &reader{l: l, dir: dir, pin: pin, mode: mode, readSize: readSize, align: 1, blk: blockSize(pin)}
}

// newReader plans this rank's reads (see readPlan) and their buffers.
func newReader(env *phases.Env, rec *checkpointRecord, kind string, active bool, o loadOpts, obj *objPlace) (*reader, error) {
	wasMmap := false
	if obj != nil {
		if o.direct {
			return nil, env.Errorf("setup: direct = true reads files with O_DIRECT; over S3 (%s) there is no page cache to bypass", obj.where)
		}
		// An object cannot be mapped: a mapped load reads what it would
		// touch, each header and each tensor in one ranged read.
		wasMmap, o.mmap = o.mmap, false
	}
	if o.direct && o.readSize == 0 {
		o.readSize = directReadSize
	}
	var pin *pio.Dir
	if obj == nil {
		var err error
		if pin, err = pinDir(env, rec.dir, false); err != nil {
			return nil, err
		}
	}
	r := newPlainReader(rec.layout, rec.dir, pin, o.mode(), o.readSize)
	r.rec = rec
	r.obj = obj
	if wasMmap && o.readSize == 0 {
		r.mode = modeChunks // one read per segment (readSize 0)
	}
	if !active {
		return r, r.plan(o.budget)
	}
	if o.direct {
		if _, err := pin.CheckDirect(); err != nil {
			return nil, env.Errorf("setup: %w", err)
		}
		a, err := pio.AlignmentOf(pin.ProcPath())
		if err != nil {
			return nil, env.Errorf("setup: %w", err)
		}
		r.align = int64(a.Bytes)
		if r.readSize%r.align != 0 {
			return nil, env.Errorf("setup: read_size %d is not a multiple of the O_DIRECT alignment %d (%s)", r.readSize, r.align, a.Source)
		}
	}
	r.readPlan(env, kind)
	if r.partial {
		// Rows of a piece: its CRC over them comes from the save's pool.
		pl := pool(env, rec.seed, rec.poolP, ckpt.StampEvery)
		for i := range r.needs {
			r.needs[i].want = r.needCRC(pl, &r.needs[i])
		}
	}
	if err := r.plan(o.budget); err != nil {
		return nil, env.Errorf("setup: %w", err)
	}
	return r, nil
}

// readPlan is what a load reads, as the framework reads it:
//
//   - ddp: the whole file (torch.load: the zip's end records and
//     directory, then each record; with read_size, the directory then
//     the file in order);
//   - fsdp of DCP: .metadata, then the entries DCPLoadPlan gives this
//     rank for the job's world size, which is the checkpoint's own
//     shard (and rank 0's scalars and bytes items) at the size it was
//     saved at, and every saved chunk overlapping the rank's new rows at
//     another (resharding, as load_state_dict does);
//   - fsdp of safetensors: the index, then the rank's own shard file at
//     the size it was saved at; at another, the rows of every tensor
//     torch.chunk gives this rank (scalars whole), and each file's header;
//   - rl: the whole state, as a load at world size 1 (DCP) or
//     every shard file in turn (safetensors).
func (r *reader) readPlan(env *phases.Env, kind string) {
	l := r.l
	for _, f := range l.FinalFiles() {
		r.whole(f)
	}
	switch {
	case kind == "ddp":
		r.whole(0)
	case l.Format == ckpt.FormatDCP:
		ranks, rank := env.Size, env.Rank
		if kind == "rl" {
			ranks, rank = 1, 0
		}
		ents := l.DCPEntries()
		for _, e := range l.DCPLoadPlan(ranks, rank) {
			ent := ents[e]
			s := r.use(ent.File)
			r.need(s, ent.Off, ent.Off+ent.Len)
			if r.mode == modeCalls {
				r.calls(s, l.EntryReadCalls(e))
			} else {
				r.ranged(s, ent.Off, ent.Off+ent.Len)
			}
		}
	case kind == "rl" || r.rec.ranks == env.Size:
		files := l.FilesOf(env.Rank)
		if kind == "rl" {
			files = nil
			for f := range l.Files {
				if !l.Files[f].Final {
					files = append(files, f)
				}
			}
		}
		for _, f := range files {
			r.whole(f)
		}
	default:
		r.reshardSafetensors(env.Size, env.Rank)
	}
}

// reshardSafetensors plans the rows of every tensor that rank of ranks
// takes (torch.chunk of dim 0; a scalar, and a literal, whole), file by
// file, each file's header first.
func (r *reader) reshardSafetensors(ranks, rank int) {
	l := r.l
	for f := range l.Files {
		lf := &l.Files[f]
		if lf.Final {
			continue
		}
		if !built(l, f) {
			l.Build(f, true)
		}
		var ranges [][2]int64
		for _, sg := range lf.Segs {
			if sg.Piece < 0 {
				ranges = append(ranges, [2]int64{sg.Off, sg.Off + sg.Len})
				continue
			}
			pc := l.Pieces[sg.Piece]
			t := l.Tensors[pc.Tensor]
			if len(t.Shape) == 0 {
				ranges = append(ranges, [2]int64{sg.Off, sg.Off + sg.Len})
				continue
			}
			lo, hi := ckpt.ChunkRows(t.Rows(), ranks, rank)
			if lo < hi {
				ranges = append(ranges, [2]int64{sg.Off + lo*t.RowBytes(), sg.Off + hi*t.RowBytes()})
			}
		}
		// The header is needed to find the tensors; literal tensors
		// (Adam's steps) are replicated.
		s := -1
		for _, rg := range ranges {
			if s < 0 {
				s = r.use(f)
			}
			r.need(s, rg[0], rg[1])
			r.ranged(s, rg[0], rg[1])
		}
	}
}

// use returns the slot of layout file f, adding it (with its literal
// bytes laid out, for checking) on first use.
func (r *reader) use(f int) int {
	if s, ok := r.slotOf[f]; ok {
		return s
	}
	if r.slotOf == nil {
		r.slotOf = map[int]int{}
	}
	r.slotOf[f] = len(r.files)
	if !built(r.l, f) {
		r.l.Build(f, true)
	}
	r.files = append(r.files, f)
	r.paths = append(r.paths, fileIn(r.dir, r.l.Files[f].Name))
	r.kpos = append(r.kpos, 0)
	if r.mode == modeMmap {
		r.ops = append(r.ops, readOp{slot: len(r.files) - 1, kind: ropMap})
	}
	return len(r.files) - 1
}

// whole plans reading file f from start to end, in the mode's shape.
func (r *reader) whole(f int) {
	s := r.use(f)
	lf := &r.l.Files[f]
	r.need(s, 0, lf.Size)
	switch {
	case r.mode == modeCalls:
		r.calls(s, r.l.ReadCalls(f, ckpt.CallOptions{BlockSize: r.blk}))
	case r.mode == modeChunks && r.l.Format == ckpt.FormatTorch && !lf.Final && len(lf.Segs) > 1:
		// The zip's directory first, as a loader finds the records.
		last := lf.Segs[len(lf.Segs)-1]
		r.ranged(s, last.Off, last.Off+last.Len)
		r.ranged(s, 0, last.Off)
	default:
		r.ranged(s, 0, lf.Size)
	}
}

// need adds [lo, hi) of the slot's file to what the load checks.
func (r *reader) need(slot int, lo, hi int64) {
	segs := r.l.Files[r.files[slot]].Segs
	for i := segAt(segs, lo); i >= 0 && i < len(segs) && segs[i].Off < hi; i++ {
		s := segs[i]
		a, b := max(lo, s.Off)-s.Off, min(hi, s.Off+s.Len)-s.Off
		if a >= b {
			continue
		}
		nd := need{slot: slot, seg: i, lo: a, hi: b, lax: r.mode == modeCalls && s.Piece < 0}
		if s.Piece >= 0 {
			nd.want = r.l.Pieces[s.Piece].CRC
			if a != 0 || b != s.Len {
				r.partial = true
			}
		}
		r.needs = append(r.needs, nd)
	}
}

// needCRC is the CRC-32 of a piece need's bytes: the piece's, or, for
// part of it, from the CRCs of two prefixes (CRC is affine:
// crc(A||B) = crc(A)·x^8|B| + crc(B)).
func (r *reader) needCRC(pl *ckpt.Pool, nd *need) uint32 {
	s := r.l.Files[r.files[nd.slot]].Segs[nd.seg]
	if s.Piece < 0 || nd.lo == 0 && nd.hi == s.Len {
		return nd.want
	}
	pc := r.l.Pieces[s.Piece]
	head := pl.Checksum(pc.Key, r.rec.gen, nd.lo)
	whole := pl.Checksum(pc.Key, r.rec.gen, nd.hi)
	return whole ^ ckpt.Combine(head, 0, nd.hi-nd.lo)
}

// calls adds the framework's calls on the slot's file. A read is made at
// the file position, so a read the position does not reach is preceded
// by an lseek (the framework's calls never need one).
func (r *reader) calls(slot int, cs []ckpt.Call) {
	size := r.l.Files[r.files[slot]].Size
	for _, c := range cs {
		switch c.Op {
		case ckpt.CallSeek:
			r.ops = append(r.ops, readOp{slot: slot, kind: ropSeek, off: c.Off})
			r.kpos[slot] = c.Off
			r.seeks = true
		case ckpt.CallRead:
			if c.Off != r.kpos[slot] {
				r.ops = append(r.ops, readOp{slot: slot, kind: ropSeek, off: c.Off})
				r.seeks = true
			}
			want := max(0, min(c.Len, size-c.Off))
			r.ops = append(r.ops, readOp{slot: slot, kind: ropRead, off: c.Off, n: c.Len, want: want})
			r.kpos[slot] = c.Off + want
		}
	}
}

// ranged adds reads of [lo, hi) of the slot's file in the mode's shape:
// touches of each segment's part (mmap), aligned read_size chunks around
// it (direct), or per segment one pread of literal bytes and read_size
// preads of tensor data.
func (r *reader) ranged(slot int, lo, hi int64) {
	if hi <= lo {
		return
	}
	segs := r.l.Files[r.files[slot]].Segs
	size := r.l.Files[r.files[slot]].Size
	if r.mode == modeDirect {
		a := lo / r.align * r.align
		b := (hi + r.align - 1) / r.align * r.align
		for off := a; off < b; off += r.readSize {
			n := min(r.readSize, b-off)
			r.ops = append(r.ops, readOp{slot: slot, kind: ropPread, off: off, n: n, want: max(0, min(n, size-off))})
		}
		return
	}
	for i := segAt(segs, lo); i >= 0 && i < len(segs) && segs[i].Off < hi; i++ {
		s := segs[i]
		x, y := max(lo, s.Off), min(hi, s.Off+s.Len)
		if x >= y {
			continue
		}
		if r.mode == modeMmap {
			r.ops = append(r.ops, readOp{slot: slot, kind: ropTouch, off: x, n: y - x, want: y - x})
			continue
		}
		step := r.readSize
		if s.Piece < 0 || step <= 0 {
			step = y - x
		}
		for off := x; off < y; off += step {
			n := min(step, y-off)
			r.ops = append(r.ops, readOp{slot: slot, kind: ropPread, off: off, n: n, want: n})
		}
	}
}

// totalBytes is what every read of the plan returns together.
func (r *reader) totalBytes() (total int64) {
	for _, op := range r.ops {
		if op.kind == ropRead || op.kind == ropPread {
			total += op.n
		}
	}
	return total
}

// plan sets up the buffers: one arena holding every read when it fits
// budget (checksummed in Verify), else one buffer reused by every read
// (checksummed inline), reads larger than budget split. A mapped load
// needs neither: it is checked from the mapping in Verify.
func (r *reader) plan(budget int64) error {
	total := r.totalBytes()
	var limit int64
	if total > budget && r.mode != modeMmap {
		r.inline = true
		limit = budget
	}
	maxN, err := r.finalize(limit)
	if err != nil {
		return err
	}
	align := int(max(r.align, pio.DirectAlign))
	switch {
	case r.mode == modeMmap:
	case r.inline:
		r.buf = pio.AlignedBuffer(int(maxN), align)
	default:
		r.arena = pio.AlignedBuffer(int(total), align)
	}
	return nil
}

// planWith is plan with a buffer the caller owns: the arena (inline
// false, len(buf) >= totalBytes) or the one read buffer (reads split to
// fit it).
func (r *reader) planWith(inline bool, buf []byte) error {
	limit := int64(0)
	if inline {
		limit = int64(len(buf))
	}
	if _, err := r.finalize(limit); err != nil {
		return err
	}
	r.inline = inline
	if inline {
		r.buf = buf
	} else {
		r.arena = buf
	}
	return nil
}

// finalize splits reads larger than limit (0: none), places each read in
// the arena, marks each file's first and last op, matches every read's
// bytes against the needs, and returns the largest read.
func (r *reader) finalize(limit int64) (maxN int64, err error) {
	if limit > 0 {
		limit = max(limit/r.align*r.align, r.align)
		var out []readOp
		for _, op := range r.ops {
			if (op.kind != ropRead && op.kind != ropPread) || op.n <= limit {
				out = append(out, op)
				continue
			}
			for rel := int64(0); rel < op.n; rel += limit {
				p := op
				p.off, p.n = op.off+rel, min(limit, op.n-rel)
				p.want = max(0, min(p.n, op.want-rel))
				out = append(out, p)
				if rel > 0 {
					r.splits++
				}
			}
		}
		r.ops = out
	}
	first, last := map[int]int{}, map[int]int{}
	var pos int64
	for i := range r.ops {
		op := &r.ops[i]
		if _, ok := first[op.slot]; !ok {
			first[op.slot] = i
		}
		last[op.slot] = i
		if op.kind == ropRead || op.kind == ropPread {
			op.pos = pos
			pos += op.n
			maxN = max(maxN, op.n)
		}
	}
	for s := range r.files {
		if _, ok := first[s]; !ok {
			r.ops = append(r.ops, readOp{slot: s, kind: ropNone})
			first[s], last[s] = len(r.ops)-1, len(r.ops)-1
		}
	}
	for s := range r.files {
		r.ops[first[s]].openIt = true
		r.ops[last[s]].lastIt = true
	}
	r.fds = make([]int, len(r.files))
	for i := range r.fds {
		r.fds[i] = -1
	}
	r.maps = make([][]byte, len(r.files))
	r.opened = make([]time.Time, len(r.files))
	return maxN, r.match()
}

// match computes each op's fragments: the needed bytes it is the first
// to return. It fails when a needed byte is left unread.
func (r *reader) match() error {
	bySlot := make([][]int32, len(r.files))
	for i, nd := range r.needs {
		bySlot[nd.slot] = append(bySlot[nd.slot], int32(i))
	}
	start := func(i int32) int64 {
		nd := r.needs[i]
		return r.l.Files[r.files[nd.slot]].Segs[nd.seg].Off + nd.lo
	}
	for _, ns := range bySlot {
		sort.Slice(ns, func(a, b int) bool { return start(ns[a]) < start(ns[b]) })
	}
	covered := make([][][2]int64, len(r.files))
	r.frags = r.frags[:0]
	for i := range r.needs {
		r.needs[i].frags = nil
	}
	for i := range r.ops {
		op := &r.ops[i]
		op.f0 = int32(len(r.frags))
		if op.kind == ropRead || op.kind == ropPread || op.kind == ropTouch {
			var fresh [][2]int64
			covered[op.slot], fresh = cover(covered[op.slot], op.off, op.off+op.want)
			segs := r.l.Files[r.files[op.slot]].Segs
			ns := bySlot[op.slot]
			for _, iv := range fresh {
				k := sort.Search(len(ns), func(j int) bool {
					nd := r.needs[ns[j]]
					return segs[nd.seg].Off+nd.hi > iv[0]
				})
				for ; k < len(ns); k++ {
					ni := ns[k]
					nd := &r.needs[ni]
					base := segs[nd.seg].Off
					x, y := max(iv[0], base+nd.lo), min(iv[1], base+nd.hi)
					if base+nd.lo >= iv[1] {
						break
					}
					if x >= y {
						continue
					}
					r.frags = append(r.frags, frag{rel: x - op.off, n: y - x, need: ni, at: x - base})
					nd.frags = append(nd.frags, int32(len(r.frags)-1))
					if segs[nd.seg].Piece >= 0 {
						op.payload += y - x
					}
				}
			}
		}
		op.f1 = int32(len(r.frags))
	}
	for i := range r.needs {
		nd := &r.needs[i]
		sort.Slice(nd.frags, func(a, b int) bool { return r.frags[nd.frags[a]].at < r.frags[nd.frags[b]].at })
		if nd.lax {
			continue
		}
		at := nd.lo
		for _, fi := range nd.frags {
			if r.frags[fi].at != at {
				break
			}
			at += r.frags[fi].n
		}
		if at != nd.hi {
			s := r.l.Files[r.files[nd.slot]].Segs[nd.seg]
			return fmt.Errorf("checkpoint: internal: the planned reads of %s leave byte %d unread", r.l.Files[r.files[nd.slot]].Name, s.Off+at)
		}
	}
	return nil
}

// cover adds [lo, hi) to the sorted disjoint intervals cov and returns
// them with the parts of [lo, hi) that were not in them.
func cover(cov [][2]int64, lo, hi int64) ([][2]int64, [][2]int64) {
	if hi <= lo {
		return cov, nil
	}
	var fresh [][2]int64
	at := lo
	k := sort.Search(len(cov), func(i int) bool { return cov[i][1] >= lo })
	j := k
	for ; j < len(cov) && cov[j][0] <= hi; j++ {
		if cov[j][0] > at {
			fresh = append(fresh, [2]int64{at, cov[j][0]})
		}
		at = max(at, cov[j][1])
	}
	if at < hi {
		fresh = append(fresh, [2]int64{at, hi})
	}
	merged := [2]int64{lo, hi}
	if k < j {
		merged = [2]int64{min(lo, cov[k][0]), max(hi, cov[j-1][1])}
	}
	out := append(cov[:k:k], merged)
	return append(out, cov[j:]...), fresh
}

// built reports whether file f is laid out with its literal bytes.
func built(l *ckpt.Layout, f int) bool {
	segs := l.Files[f].Segs
	if segs == nil {
		return false
	}
	for _, s := range segs {
		if s.Piece < 0 && s.Lit == nil {
			return false
		}
	}
	return true
}

// evict drops the cached pages of every file this rank will read
// (drop_caches = "fadvise"), untimed.
func (r *reader) evict(env *phases.Env) error {
	if r.obj != nil {
		return nil // no client-side cache to drop: every read is a request
	}
	for i, p := range r.paths {
		fd, err := pio.Open(r.pin.Fd(), p, unix.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return env.Errorf("setup: %w", pio.NewOpError("open", p, err))
		}
		err = pio.Evict(fd)
		pio.Close(fd)
		if err != nil {
			return env.Errorf("setup: fadvise DONTNEED %s (file %d): %w", p, i, err)
		}
	}
	return nil
}

// wholeOp is the op timing a whole file of a load of kind (load_file) or
// a whole consolidation (rl: load_state).
func wholeOp(kind string) string {
	if kind == "rl" {
		return "load_state"
	}
	return "load_file"
}

// makeRecs makes the recorders a load of kind times, those it has not
// made yet (ioRecs: only the ops the load does, none when it reads
// nothing): the rank's when r has no recorders of its own. run calls it
// before its loop; a phase may call it earlier, in Setup, so that Run
// does not create them (a recorder's creation clears its ~270 KiB
// histogram, ~115 µs).
func (r *reader) makeRecs(env *phases.Env, kind string) {
	if r.recs == nil {
		rs := newIORecs(env.Recorder)
		r.recs = &rs
	}
	switch {
	case len(r.ops) == 0:
	case r.obj != nil:
		r.recs.forObjectRead(wholeOp(kind))
	default:
		r.recs.forRead(wholeOp(kind), r.seeks, r.mode == modeMmap)
	}
}

func (r *reader) run(ctx context.Context, env *phases.Env, kind string) (err error) {
	r.makeRecs(env, kind)
	if len(r.ops) == 0 {
		return nil
	}
	whole := wholeOp(kind)
	if r.obj != nil {
		return r.runObjects(ctx, env, kind, whole)
	}
	if r.pin != nil {
		r.recs.under(r.pin.Path())
	}
	recOpen, recRead, recHdr, recSeek := r.recs.open, r.recs.read, r.recs.readHeader, r.recs.seek
	recMap, recClose, recFile, recState := r.recs.mmap, r.recs.close, r.recs.loadFile, r.recs.loadState
	r.headerB = 0
	if r.mode == modeMmap {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer r.recoverFault(env, &err)
	}
	flags := unix.O_RDONLY
	pace := phases.NewPacer()
	for i := range r.ops {
		op := &r.ops[i]
		r.cur = i
		if err := pace.Tick(ctx, i); err != nil {
			return err
		}
		path := &r.paths[op.slot]
		target := path.Name()
		if op.openIt {
			start := recOpen.BeginOn(target)
			var fd int
			if r.mode == modeDirect {
				fd, err = pio.OpenDirectAt(r.pin.Fd(), *path, flags|unix.O_NOFOLLOW, 0)
			} else {
				fd, err = pio.Open(r.pin.Fd(), *path, flags|unix.O_NOFOLLOW, 0)
			}
			recOpen.Observe(start, 0, err)
			if err != nil {
				return env.Errorf("%w", pio.NewOpError("open", path, err))
			}
			r.fds[op.slot], r.opened[op.slot] = fd, start
		}
		fd := r.fds[op.slot]
		switch op.kind {
		case ropSeek:
			start := recSeek.BeginOn(target)
			_, err = unix.Seek(fd, op.off, unix.SEEK_SET)
			recSeek.Observe(start, 0, err)
			if err != nil {
				return env.Errorf("%w", pio.NewOpErrorAt("lseek", path, op.off, err))
			}
		case ropMap:
			if err := r.mapFile(env, op.slot, target, recMap, recClose); err != nil {
				return err
			}
		case ropTouch:
			rec := recHdr
			if op.payload > 0 {
				rec = recRead
			}
			m := r.maps[op.slot]
			start := rec.BeginOn(target)
			s := r.sink
			end := op.off + op.n
			for p := op.off; p < end; p = (p/pageSize + 1) * pageSize {
				s += m[p]
			}
			r.sink = s
			rec.Observe(start, int(op.payload), nil)
			r.headerB += op.want - op.payload
		case ropRead, ropPread:
			var b []byte
			if r.inline {
				b = r.buf[:op.n]
			} else {
				b = r.arena[op.pos : op.pos+op.n]
			}
			rec := recHdr
			if op.payload > 0 {
				rec = recRead
			}
			var n int
			start := rec.BeginOn(target)
			if op.kind == ropRead {
				n, err = readFull(fd, b, op.want)
			} else {
				n, err = pio.PreadFull(fd, b, op.off)
			}
			if err == pio.ErrShortIO && int64(n) >= op.want {
				err = nil // a buffer fill, or an O_DIRECT read, past the end of the file
			}
			rec.Observe(start, int(op.payload), err)
			if err != nil {
				return env.Errorf("%w", pio.NewOpErrorAt("read", path, op.off, err))
			}
			r.headerB += op.want - op.payload
			if r.inline {
				if err := r.feed(op, b); err != nil {
					return env.Errorf("%w", err)
				}
			}
		}
		if op.lastIt {
			var cerr error
			if r.fds[op.slot] >= 0 {
				start := recClose.BeginOn(target)
				cerr = pio.Close(r.fds[op.slot])
				recClose.Observe(start, 0, cerr)
				r.fds[op.slot] = -1
			}
			if kind != "rl" {
				recFile.Observe(r.opened[op.slot], 0, cerr)
			}
			if cerr != nil {
				return env.Errorf("%w", pio.NewOpError("close", path, cerr))
			}
		}
	}
	if kind == "rl" {
		recState.Observe(pace.Started(), 0, nil)
	}
	return nil
}

// expectedOps is how many timed ops run records on this rank (the
// progress line's ExpectedOps), counted from the plan as run walks it: an
// open before a file's first op, one op per read, pread, lseek and page
// touch, mmap and the close of the descriptor for a map, a close after a
// file's last op unless its map closed it, and load_file per file (kind
// rl: one load_state at the end instead). A rank that reads nothing (an
// rl_load's ranks past readers) records none. Over S3 it is 0, unknown:
// the ranged GETs a read triggers depend on the readahead window as the
// reads arrive.
func (r *reader) expectedOps(kind string) int64 {
	if r.obj != nil || len(r.ops) == 0 {
		return 0
	}
	var n int64
	mapped := make([]bool, len(r.files))
	for i := range r.ops {
		op := &r.ops[i]
		if op.openIt {
			n++
			mapped[op.slot] = false
		}
		switch op.kind {
		case ropSeek, ropTouch, ropRead, ropPread:
			n++
		case ropMap:
			n += 2 // mmap, close
			mapped[op.slot] = true
		}
		if op.lastIt {
			if !mapped[op.slot] {
				n++ // close
			}
			if kind != "rl" {
				n++ // load_file
			}
		}
	}
	if kind == "rl" {
		n++ // load_state
	}
	return n
}

const pageSize = 4096

// mapFile maps the slot's whole file read-only and closes its descriptor,
// as safe_open does: fstat (a file shorter than written is an error, not
// a fault on the first page past its end), mmap, close.
func (r *reader) mapFile(env *phases.Env, slot int, target *string, recMap, recClose *report.Recorder) error {
	path := &r.paths[slot]
	size := r.l.Files[r.files[slot]].Size
	fd := r.fds[slot]
	start := recMap.BeginOn(target)
	var st unix.Stat_t
	err := unix.Fstat(fd, &st)
	var m []byte
	if err == nil && st.Size < size {
		err = pio.ErrShortIO
	}
	if err == nil && size > 0 {
		m, err = unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	}
	recMap.Observe(start, 0, err)
	if err != nil {
		if err == pio.ErrShortIO {
			return env.Errorf("%s is %d bytes, written %d: the storage lost the end of the file", path, st.Size, size)
		}
		return env.Errorf("%w", pio.NewOpError("mmap", path, err))
	}
	r.maps[slot] = m
	start = recClose.BeginOn(target)
	err = pio.Close(fd)
	recClose.Observe(start, 0, err)
	r.fds[slot] = -1
	if err != nil {
		return env.Errorf("%w", pio.NewOpError("close", path, err))
	}
	return nil
}

// recoverFault turns a fault on a mapped page (the file shrank under the
// mapping, or the storage failed to page it in) into the phase's error.
func (r *reader) recoverFault(env *phases.Env, err *error) {
	x := recover()
	if x == nil {
		return
	}
	if _, ok := x.(interface{ Addr() uintptr }); !ok {
		panic(x)
	}
	op := r.ops[r.cur]
	*err = env.Errorf("%w", pio.NewOpErrorAt("mmap read", r.paths[op.slot], op.off, errFault))
}

var errFault = errors.New("checkpoint: fault reading a mapped page (the file shrank, or the storage could not read the page)")

// readFull reads into b at the file position, as one read(2) unless the
// kernel returns fewer than the want bytes the file holds there (a buffer
// fill near the end of the file asks for more than there is, and takes
// what comes, as Python's does).
func readFull(fd int, b []byte, want int64) (int, error) {
	done := 0
	for int64(done) < want {
		n, err := unix.Read(fd, b[done:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			return done, pio.ErrShortIO
		}
		done += n
	}
	return done, nil
}

// closeAll closes what a failed Run left open and unmaps the files.
func (r *reader) closeAll() {
	for i, fd := range r.fds {
		if fd >= 0 {
			pio.Close(fd)
			r.fds[i] = -1
		}
	}
	r.unmap()
	if r.rec != nil && r.pin != nil {
		// A load's own handle of the directory (mlperf's readers share
		// their writer's).
		r.pin.Close()
		r.pin = nil
	}
}

// runObjects is run over S3: every object is opened with a HEAD (its size
// checked against the save's, as a loader learns it), then each planned
// read (the framework's read calls, or read_size chunks) is served by a
// RangeReader: from its part_size window, or by ranged GETs (get, per
// request) when the bytes are not in it. lseeks are position changes
// only, and close has nothing to release. The read and read_header ops
// time each call, GETs it triggered included; load_file (load_state) the
// whole object (state).
func (r *reader) runObjects(ctx context.Context, env *phases.Env, kind, whole string) error {
	o := r.obj
	r.recs.under("s3://" + o.st.URI.Bucket + "/" + o.prefix)
	recHead, recGet, recRead, recHdr := r.recs.head, r.recs.getOp, r.recs.read, r.recs.readHeader
	recFile, recState := r.recs.loadFile, r.recs.loadState
	if r.objs == nil {
		r.objs = make([]*ps3.RangeReader, len(r.files))
	}
	bufs := o.buffers()
	c := o.st.Client
	pace := phases.NewPacer()
	for i := range r.ops {
		op := &r.ops[i]
		r.cur = i
		if err := pace.Tick(ctx, i); err != nil {
			return err
		}
		lf := &r.l.Files[r.files[op.slot]]
		target := r.paths[op.slot].Name()
		key := o.key(lf.Name)
		if op.openIt {
			start := recHead.BeginOn(target)
			info, err := c.Head(ctx, key)
			recHead.Observe(start, 0, err)
			if err != nil {
				return env.Errorf("%w", err)
			}
			if info.Size != lf.Size {
				return env.Errorf("%s is %d bytes, written %d: the storage lost part of the object", o.url(lf.Name), info.Size, lf.Size)
			}
			r.objs[op.slot] = c.NewRangeReader(key, info.Size, bufs[0], len(bufs), recGet)
			r.opened[op.slot] = start
		}
		if op.kind == ropRead || op.kind == ropPread {
			var b []byte
			if r.inline {
				b = r.buf[:op.n]
			} else {
				b = r.arena[op.pos : op.pos+op.n]
			}
			rec := recHdr
			if op.payload > 0 {
				rec = recRead
			}
			start := rec.BeginOn(target)
			n, err := r.objs[op.slot].ReadAt(ctx, b, op.off)
			if err == nil && int64(n) < op.want {
				err = fmt.Errorf("%s: read %d bytes at offset %d, want %d: the object is short", o.url(lf.Name), n, op.off, op.want)
			}
			rec.Observe(start, int(op.payload), err)
			if err != nil {
				return env.Errorf("%w", err)
			}
			r.headerB += op.want - op.payload
			if r.inline {
				if err := r.feed(op, b); err != nil {
					return env.Errorf("%w", err)
				}
			}
		}
		if op.lastIt {
			r.objs[op.slot] = nil
			if kind != "rl" {
				recFile.Observe(r.opened[op.slot], 0, nil)
			}
		}
	}
	if kind == "rl" {
		recState.Observe(pace.Started(), 0, nil)
	}
	return nil
}
