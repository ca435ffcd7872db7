package ckpt

import (
	"encoding/binary"
	"sort"
)

// The system calls torch makes to write and read a checkpoint's files, so
// the timed phases can issue the same ones. They follow from how the
// bytes reach the kernel, observed with strace on torch 1.13:
//
//   - torch.save(obj, path) writes through a C++ std::ofstream (libstdc++
//     filebuf, BUFSIZ = 8 KiB): miniz hands it each record's local
//     header, data and data descriptor, then the central directory and
//     the three end records. Writes under 1 KiB collect in the buffer; a
//     larger one goes out at once as one writev of the buffered bytes and
//     the data (write when nothing is buffered); a full buffer is flushed
//     as one 8 KiB write; the rest at close. So a tensor of 1 KiB or more
//     is one writev whose first buffer is the previous descriptor and its
//     own header; small tensors share writes. No fsync.
//   - DCP writes each item into a Python file (BufferedWriter, its buffer
//     st_blksize, 4 KiB on ext4 and XFS): a write that fits stays
//     buffered; one that does not flushes the buffer (write) and, when it
//     is at least a buffer long, goes out as its own write; torch.save
//     into a stream flushes at its end. Then fsync, then close. Python
//     asks the position (lseek SEEK_CUR) when it opens the file and
//     before and after each item.
//   - DCP's .metadata: pickle.dump writes 64 KiB frames as it goes and
//     the rest at the end, through the same BufferedWriter; then fsync.
//     1.13 fsyncs before the file object is flushed, so a tail under one
//     buffer reaches the kernel after the fsync, at close (2.x flushes
//     first).
//   - torch.load(path) reads through a Python BufferedReader (st_blksize
//     buffer): it checks the zip magic, finds the size (lseek SEEK_END),
//     reads the last 4 KiB, the end records, the central directory, the
//     version and data.pkl records, then each tensor record in the order
//     the pickle names them: an lseek to its local header, a buffer fill
//     (header and the first bytes of data), one read of the rest.
//   - DCP's FileSystemReader reads each item through an 8 KiB
//     BufferedReader over the file (SlicedBufferedReader): the same
//     sequence as torch.load within the item's range for a tensor, one
//     read of the item for a bytes value.
//
// A read that the buffer cannot satisfy takes what it holds, then reads
// the rest directly when that is more than a buffer, else refills the
// buffer; a seek inside the buffer makes no call. The model reproduces
// the observed calls to within the lseeks Python adds to answer tell().

// CallOp is a system call.
type CallOp string

// The calls Calls reports.
const (
	CallWrite  CallOp = "write"
	CallWritev CallOp = "writev"
	CallRead   CallOp = "read"
	CallSeek   CallOp = "lseek"
	CallFsync  CallOp = "fsync"
)

// Call is one system call on a file.
type Call struct {
	Op  CallOp
	Off int64 // the file offset it reads or writes at, or lseek's target
	Len int64 // bytes (requested, for a read: fewer come back at the end of the file)
	// Iov are writev's buffer lengths, summing to Len: the bytes torch
	// had buffered, then the data it hands over.
	Iov []int64
}

// CallOptions describe the filesystem the calls are made on.
type CallOptions struct {
	// BlockSize is st_blksize, the size of Python's file buffers
	// (default 4096).
	BlockSize int64
}

func (o CallOptions) block() int64 {
	if o.BlockSize > 0 {
		return o.BlockSize
	}
	return 4096
}

// fileShape is what Build records for Calls: the archives of a file, in
// file order (one for torch.save, one per item for DCP).
type fileShape struct {
	archives []zipLayout
	frames   []int64 // a pickle's protocol-4 frames (DCP .metadata): bytes each, headers included
}

const (
	filebufSize  = 8192 // libstdc++ BUFSIZ
	filebufLimit = 1024 // writes from this size bypass the buffer
	dcpReadBuf   = 8192 // io.DEFAULT_BUFFER_SIZE of SlicedBufferedReader
	zipTailRead  = 4096 // miniz's last-block read when locating the end record
)

// WriteCalls lists the calls torch makes to write file i, in order (it
// lays the file out, lengths only, if Build has not). safetensors files, which prism writes as the
// safetensors library does (header then tensors, one write each), and
// files of other formats get one write per segment.
func (l *Layout) WriteCalls(i int, o CallOptions) []Call {
	l.ensureBuilt(i)
	f := l.Files[i]
	switch {
	case f.Final && l.Format == FormatDCP:
		return l.metadataWrites(i, o)
	case l.Format == FormatTorch:
		w := &filebuf{}
		for _, a := range l.shapes[i].archives {
			zipWrites(a, w.write)
		}
		w.flush()
		return w.calls
	case l.Format == FormatDCP:
		w := &pyWriter{size: o.block()}
		w.tell() // open
		for k, e := range l.dcp.byFile[i] {
			ent := l.dcp.entries[e]
			w.tell()
			if l.dcp.items[ent.item].Tensor < 0 {
				w.write(ent.len)
			} else {
				zipWrites(l.shapes[i].archives[k], w.write)
				w.flush()
			}
			w.tell()
		}
		// os.fsync runs inside the with block: bytes items still in the
		// buffer reach the kernel at close, after it.
		w.calls = append(w.calls, Call{Op: CallFsync, Off: w.pos - w.pending})
		w.flush()
		return w.calls
	}
	var out []Call
	for _, s := range f.Segs {
		out = append(out, Call{Op: CallWrite, Off: s.Off, Len: s.Len})
	}
	return out
}

// ensureBuilt lays file i out (lengths only) if Build has not.
func (l *Layout) ensureBuilt(i int) {
	if l.shapes == nil || l.Files[i].Segs == nil {
		l.Build(i, false)
	}
}

// zipWrites is the sequence of writes miniz makes for an archive.
func zipWrites(a zipLayout, write func(n int64)) {
	for _, r := range a.records {
		write(r.HeaderLen)
		if r.Size > 0 {
			write(r.Size)
		}
		write(r.DescLen)
	}
	write(a.dirLen)
	write(56) // zip64 end record
	write(20) // zip64 locator
	write(22) // end record
}

func (l *Layout) metadataWrites(i int, o CallOptions) []Call {
	w := &pyWriter{size: o.block()}
	w.tell()
	// The C pickler writes each frame as it commits it, the protocol
	// header with the first.
	for k, n := range l.shapes[i].frames {
		if k == 0 {
			n += 2
		}
		w.write(n)
	}
	if l.Version == Torch113 {
		w.calls = append(w.calls, Call{Op: CallFsync, Off: w.pos - w.pending})
		w.flush()
	} else {
		w.flush()
		w.calls = append(w.calls, Call{Op: CallFsync, Off: w.pos})
	}
	return w.calls
}

// pickleFrames splits a protocol-4 pickle after its 2-byte header into
// its frames (each with its 9-byte FRAME header when it has one).
func pickleFrames(p []byte) []int64 {
	var out []int64
	for i := 2; i < len(p); {
		if p[i] != 0x95 || i+frameHeader > len(p) {
			out = append(out, int64(len(p)-i))
			break
		}
		n := int(binary.LittleEndian.Uint64(p[i+1:]))
		out = append(out, int64(frameHeader+n))
		i += frameHeader + n
	}
	return out
}

// filebuf is libstdc++'s basic_filebuf put area.
type filebuf struct {
	pos, pending int64
	calls        []Call
}

func (w *filebuf) write(n int64) {
	if n >= filebufLimit {
		if w.pending == 0 {
			w.calls = append(w.calls, Call{Op: CallWrite, Off: w.pos, Len: n})
		} else {
			w.calls = append(w.calls, Call{Op: CallWritev, Off: w.pos - w.pending, Len: w.pending + n, Iov: []int64{w.pending, n}})
		}
		w.pos += n
		w.pending = 0
		return
	}
	for n > 0 {
		room := filebufSize - 1 - w.pending
		k := min(room, n)
		w.pending += k
		w.pos += k
		n -= k
		if n > 0 {
			// overflow(): the full put area plus one character.
			w.calls = append(w.calls, Call{Op: CallWrite, Off: w.pos - w.pending, Len: w.pending + 1})
			w.pos++
			n--
			w.pending = 0
		}
	}
}

func (w *filebuf) flush() {
	if w.pending > 0 {
		w.calls = append(w.calls, Call{Op: CallWrite, Off: w.pos - w.pending, Len: w.pending})
		w.pending = 0
	}
}

// pyWriter is CPython's BufferedWriter.
type pyWriter struct {
	size, pos, pending int64
	calls              []Call
}

func (w *pyWriter) tell() { w.calls = append(w.calls, Call{Op: CallSeek, Off: w.pos - w.pending}) }

func (w *pyWriter) write(n int64) {
	if n <= w.size-w.pending {
		w.pending += n
		w.pos += n
		return
	}
	w.flush()
	if n >= w.size {
		w.calls = append(w.calls, Call{Op: CallWrite, Off: w.pos, Len: n})
		w.pos += n
		return
	}
	w.pending = n
	w.pos += n
}

func (w *pyWriter) flush() {
	if w.pending > 0 {
		w.calls = append(w.calls, Call{Op: CallWrite, Off: w.pos - w.pending, Len: w.pending})
		w.pending = 0
	}
}

// ReadCalls lists the calls torch makes to load file i: torch.load of a
// torch.save file; for a DCP shard file, FileSystemReader's reads of all
// its items, in the load plan's order (the state dict's), as a load of
// the whole checkpoint makes them (a load into another sharding reads
// only the items its shards overlap, each the same way); pickle.load of
// .metadata. safetensors and other files are read whole, one read per
// segment.
func (l *Layout) ReadCalls(i int, o CallOptions) []Call {
	l.ensureBuilt(i)
	f := l.Files[i]
	switch {
	case f.Final && l.Format == FormatDCP:
		// pickle.load: the header, then each frame's header and body.
		r := &pyReader{size: o.block(), end: f.Size}
		r.seek(0)
		r.readBuffered(2)
		for _, n := range l.shapes[i].frames {
			r.readBuffered(frameHeader)
			r.readBuffered(n - frameHeader)
		}
		return r.calls
	case f.Final:
		return []Call{{Op: CallRead, Len: f.Size}}
	case l.Format == FormatTorch:
		r := &pyReader{size: o.block(), end: f.Size}
		r.seek(0)
		torchLoadReads(r, 0, f.Size, l.shapes[i].archives[0], false)
		return r.calls
	case l.Format == FormatDCP:
		// The load plan's order (the state dict's), a new 8 KiB
		// reader over the file for each item.
		es := append([]int(nil), l.dcp.byFile[i]...)
		arch := map[int]zipLayout{}
		for k, e := range l.dcp.byFile[i] {
			arch[e] = l.shapes[i].archives[k]
		}
		sort.Slice(es, func(a, b int) bool { return l.dcp.entries[es[a]].item < l.dcp.entries[es[b]].item })
		var out []Call
		for _, e := range es {
			out = append(out, l.entryReads(e, arch[e])...)
		}
		return out
	}
	var out []Call
	for _, s := range f.Segs {
		out = append(out, Call{Op: CallRead, Off: s.Off, Len: s.Len})
	}
	return out
}

// EntryReadCalls lists the calls FileSystemReader makes to read DCP entry
// e (an index into DCPEntries) from its file: a new 8 KiB reader over the
// file, seeked to the item; torch.load of the item's archive for a
// tensor, one read of the item for a bytes value. ReadCalls of a shard
// file is the concatenation of its entries' calls in load-plan order.
func (l *Layout) EntryReadCalls(e int) []Call {
	f := l.dcp.entries[e].file
	l.ensureBuilt(f)
	for k, x := range l.dcp.byFile[f] {
		if x == e {
			return l.entryReads(e, l.shapes[f].archives[k])
		}
	}
	return nil
}

func (l *Layout) entryReads(e int, a zipLayout) []Call {
	ent := l.dcp.entries[e]
	r := &pyReader{size: dcpReadBuf, end: l.Files[ent.file].Size}
	r.seek(ent.off)
	if l.dcp.items[ent.item].Tensor < 0 {
		r.readBuffered(ent.len)
	} else {
		torchLoadReads(r, ent.off, ent.len, a, true)
	}
	return r.calls
}

// torchLoadReads is torch.load of the archive at [base, base+size) (the
// archive layout's offsets are the file's):
// _is_zipfile reads the magic and seeks back; the reader adapter learns
// the size (lseek SEEK_END, which empties the buffer) and seeks to the
// start; PyTorchStreamReader reads the magic again; miniz reads the last
// 4 KiB, the end record, the zip64 locator and end record and the central
// directory; torch reads the version record, data.pkl, then each tensor
// record as the pickle names it (local header, then data).
func torchLoadReads(r *pyReader, base, size int64, a zipLayout, sliced bool) {
	r.read(4)
	r.seek(base)
	if sliced {
		// SlicedBufferedReader turns SEEK_END into a SEEK_SET, which
		// can stay in the buffer.
		r.seek(base + size)
	} else {
		r.sysSeek(base + size)
		r.pos, r.bufLo, r.bufHi = base+size, base+size, base+size
	}
	r.seek(base)
	r.read(4)
	tail := min(size, zipTailRead)
	r.seek(base + size - tail)
	r.read(tail)
	r.seek(a.end + 56 + 20) // end record
	r.read(22)
	r.seek(a.end + 56) // zip64 locator
	r.read(20)
	r.seek(a.end) // zip64 end record
	r.read(56)
	r.seek(a.dir)
	r.read(a.dirLen)
	record := func(rec zipRecord) {
		r.seek(rec.Header)
		r.read(30)
		r.seek(rec.Data)
		if rec.Size > 0 {
			r.read(rec.Size)
		}
	}
	n := len(a.records)
	record(a.records[n-1-a.trailing]) // version
	record(a.records[0])              // data.pkl
	for _, k := range a.byKey {
		record(a.records[k])
	}
}

// pyReader is CPython's BufferedReader as readinto uses it.
type pyReader struct {
	size  int64
	end   int64 // end of file
	pos   int64
	bufLo int64 // file range in the buffer: [bufLo, bufHi)
	bufHi int64
	calls []Call
}

func (r *pyReader) sysSeek(off int64) { r.calls = append(r.calls, Call{Op: CallSeek, Off: off}) }

// seek stays in the buffer only while it holds bytes ahead of the
// position (CPython's fast path needs READAHEAD > 0).
func (r *pyReader) seek(off int64) {
	if r.pos < r.bufHi && off >= r.bufLo && off <= r.bufHi {
		r.pos = off
		return
	}
	r.sysSeek(off)
	r.pos, r.bufLo, r.bufHi = off, off, off
}

// readBuffered is BufferedReader.read(n): what the buffer holds, then a
// direct read of the whole buffers left, then a refill for the rest.
func (r *pyReader) readBuffered(n int64) {
	have := max(0, min(r.bufHi-r.pos, n))
	r.pos += have
	n -= have
	if n <= 0 {
		return
	}
	if d := n / r.size * r.size; d > 0 {
		r.calls = append(r.calls, Call{Op: CallRead, Off: r.pos, Len: d})
		r.pos += d
		n -= d
		r.bufLo, r.bufHi = r.pos, r.pos
	}
	if n > 0 {
		r.calls = append(r.calls, Call{Op: CallRead, Off: r.pos, Len: r.size})
		r.bufLo, r.bufHi = r.pos, min(r.pos+r.size, r.end)
		r.pos += n
	}
}

// read is BufferedReader.readinto(n), as torch's reader adapter calls it:
// what the buffer holds, then the rest directly when it is more than a
// buffer, else a refill.
func (r *pyReader) read(n int64) {
	have := max(0, min(r.bufHi-r.pos, n))
	r.pos += have
	n -= have
	if n <= 0 {
		return
	}
	if n > r.size {
		r.calls = append(r.calls, Call{Op: CallRead, Off: r.pos, Len: n})
		r.pos += n
		r.bufLo, r.bufHi = r.pos, r.pos
		return
	}
	r.calls = append(r.calls, Call{Op: CallRead, Off: r.pos, Len: r.size})
	r.bufLo, r.bufHi = r.pos, min(r.pos+r.size, r.end)
	r.pos += n
}
