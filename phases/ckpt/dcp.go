package ckpt

import (
	"crypto/sha256"
	"fmt"
	"strings"
)

// torch.distributed.checkpoint's FileSystemWriter, as DefaultSavePlanner
// plans it for FSDP's sharded state dicts.
//
// Every rank saves the flattened state (State.Items): a tensor with at
// least one dimension is sharded as FSDP shards it, rank r holding the
// r-th torch.chunk of its rows (trailing ranks may hold nothing); a
// scalar tensor (Adam's step) and every non-tensor value are written by
// rank 0 only (1.13's planner writes plain tensors and bytes on the
// coordinator; 2.x's deduplicates replicated tensors across ranks, which
// may put a step on another rank: the metadata says where, so loaders do
// not care). Each item is written as torch.save writes it into the
// stream: a tensor chunk as an archive of that one tensor, a non-tensor
// value as torch.save(value); in a file, bytes items first, then
// tensors, each group in plan order. Files are __<rank>_<n>.distcp: one
// per rank (single_file_per_rank), or one per item. Rank 0 then pickles
// the Metadata into .metadata.tmp, fsyncs it and renames it .metadata.

// DCPOptions chooses among FileSystemWriter's layouts.
type DCPOptions struct {
	// FilePerTensor writes one file per item
	// (FileSystemWriter(single_file_per_rank=False), 1.13's default);
	// otherwise one file per rank (2.x's default).
	FilePerTensor bool
	Version       TorchVersion
	// CheckpointID is the directory the writer was given, which 2.x
	// records in Metadata.storage_meta (empty: None).
	CheckpointID string
}

type dcpEntry struct {
	item     int
	rank     int
	file     int
	row      int64 // first row of the chunk (0 for scalars and bytes)
	rows     int64
	piece    int // -1: literal content (a bytes item, a literal tensor)
	off, len int64
}

type dcpPlan struct {
	opts    DCPOptions
	items   []DCPItem
	entries []dcpEntry // rank by rank, each in plan order
	byFile  [][]int    // entries of each file, in file order
	saveID  string
}

// NewDCP is NewDCPState of a flat state dict in the default torch
// version.
func NewDCP(tensors []Tensor, seed uint64, ranks int, filePerTensor bool) *Layout {
	return NewDCPState(FlatState(tensors), seed, ranks, DCPOptions{FilePerTensor: filePerTensor, Version: DefaultTorchVersion})
}

// NewDCPState is dcp.save(st) from ranks ranks with FSDP-sharded tensors.
func NewDCPState(st *State, seed uint64, ranks int, opts DCPOptions) *Layout {
	if opts.Version == "" {
		opts.Version = DefaultTorchVersion
	}
	l := &Layout{Format: FormatDCP, Version: opts.Version, Ranks: ranks, Tensors: st.Tensors}
	d := &dcpPlan{opts: opts, items: st.Items()}
	l.dcp = d
	for r := 0; r < ranks; r++ {
		var mine []dcpEntry
		for k, it := range d.items {
			e := dcpEntry{item: k, rank: r, piece: -1}
			if it.Tensor < 0 || len(st.Tensors[it.Tensor].Shape) == 0 {
				if r != 0 {
					continue
				}
				e.rows = 1
			} else {
				lo, hi := ChunkRows(st.Tensors[it.Tensor].Rows(), ranks, r)
				if lo == hi {
					continue
				}
				e.row, e.rows = lo, hi-lo
			}
			mine = append(mine, e)
		}
		if opts.FilePerTensor {
			for n := range mine {
				mine[n].file = l.dcpAddFile(fmt.Sprintf("__%d_%d.distcp", r, n), r)
				d.byFile[mine[n].file] = []int{len(d.entries) + n}
			}
		} else {
			f := l.dcpAddFile(fmt.Sprintf("__%d_0.distcp", r), r)
			// Bytes items first, then tensors.
			for _, bytesFirst := range []bool{true, false} {
				for n := range mine {
					if (d.items[mine[n].item].Tensor < 0) == bytesFirst {
						mine[n].file = f
						d.byFile[f] = append(d.byFile[f], len(d.entries)+n)
					}
				}
			}
		}
		d.entries = append(d.entries, mine...)
	}
	// Pieces in file order, so a file's pieces are its segments' order.
	for f, es := range d.byFile {
		for _, ei := range es {
			e := &d.entries[ei]
			it := d.items[e.item]
			if it.Tensor < 0 || st.Tensors[it.Tensor].Value != nil {
				continue
			}
			rb := st.Tensors[it.Tensor].RowBytes()
			if len(st.Tensors[it.Tensor].Shape) == 0 {
				rb = st.Tensors[it.Tensor].Bytes()
			}
			l.addPiece(it.Tensor, f, e.row*rb, (e.row+e.rows)*rb, e.row, seed)
			e.piece = len(l.Pieces) - 1
		}
	}
	h := sha256.Sum256([]byte(fmt.Sprint(seed, ranks, len(d.items))))
	d.saveID = uuid4(h[:16])
	l.Files = append(l.Files, File{Name: ".metadata", Tmp: ".metadata.tmp", Final: true})
	d.byFile = append(d.byFile, nil)
	return l
}

func (l *Layout) dcpAddFile(name string, rank int) int {
	l.Files = append(l.Files, File{Name: name, Rank: rank})
	l.dcp.byFile = append(l.dcp.byFile, nil)
	return len(l.Files) - 1
}

// uuid4 formats 16 bytes as a version-4 UUID (FileSystemWriter's save_id
// is uuid.uuid4()).
func uuid4(b []byte) string {
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// chunkTensor is the tensor a DCP entry saves: its rows of the item's
// tensor.
func (l *Layout) chunkTensor(e dcpEntry) Tensor {
	t := l.Tensors[l.dcp.items[e.item].Tensor]
	if len(t.Shape) > 0 {
		t.Shape = append([]int64{e.rows}, t.Shape[1:]...)
	}
	return t
}

// dcpFile lays out a shard file: each entry a torch.save archive.
func (l *Layout) dcpFile(b *segBuilder, f int) []zipLayout {
	d := l.dcp
	var out []zipLayout
	for _, ei := range d.byFile[f] {
		e := &d.entries[ei]
		it := d.items[e.item]
		start := b.pos()
		var zl zipLayout
		if it.Tensor < 0 {
			zl, _ = torchArchive(b, l.Version, "archive", nil, it.value, nil)
		} else {
			t := l.chunkTensor(*e)
			zl, _ = torchArchive(b, l.Version, "archive", []Tensor{t}, tensorRef(0), func(int) (int, int64, uint32) {
				return e.piece, l.Pieces[e.piece].Len(), l.Pieces[e.piece].CRC
			})
		}
		e.off, e.len = start, b.pos()-start
		if e.piece >= 0 {
			l.Pieces[e.piece].ItemOff, l.Pieces[e.piece].ItemLen = e.off, e.len
		}
		out = append(out, zl)
	}
	return out
}

// DCP class paths by version.
type dcpModules struct {
	meta, props, fs string
	enum            string
}

func dcpModulesOf(v TorchVersion) dcpModules {
	if v == Torch113 {
		return dcpModules{
			meta:  "torch.distributed._shard.checkpoint.metadata",
			props: "torch.distributed._shard.sharded_tensor.metadata",
			fs:    "torch.distributed._shard.checkpoint.filesystem",
			enum:  "MEM_FORMAT_ENCODING",
		}
	}
	return dcpModules{
		meta:  "torch.distributed.checkpoint.metadata",
		props: "torch.distributed.checkpoint.metadata",
		fs:    "torch.distributed.checkpoint.filesystem",
		enum:  "_MEM_FORMAT_ENCODING",
	}
}

// dcpMetadata is pickle.dump(metadata) as FileSystemWriter.finish writes
// it (protocol 4, Python 3.11's pickler), with the object identity of a
// single-process save: field names interned, one str per FQN shared by
// the metadata key and its MetadataIndex objects, one per file name, a
// fresh torch.Size per offsets/sizes. A multi-process save gathers plans
// and results through pickle, which copies some of those strings: its
// file then spells them out again where prism's refers back (BINGET);
// both unpickle to equal objects.
//
// Metadata(state_dict_metadata = {fqn: TensorStorageMetadata(properties =
// TensorProperties(dtype, layout, requires_grad, memory_format,
// pin_memory), size, chunks = [ChunkStorageMetadata(offsets, sizes)])
// or BytesStorageMetadata()}, planner_data, storage_data =
// {MetadataIndex(fqn, offset, index): _StorageInfo(relative_path, offset,
// length)}) and in 2.x storage_meta and version.
func (l *Layout) dcpMetadata() []byte {
	d := l.dcp
	v := l.Version
	mods := dcpModulesOf(v)
	in := interned{}
	modMeta, modProps := str(mods.meta), str(mods.props)
	if mods.meta == mods.props {
		modProps = modMeta
	}
	class := func(mod *pyStr, name string) *pyGlobal { return &pyGlobal{mod: mod, name: name} }
	gMetadata := class(modMeta, "Metadata")
	gTSM := class(modMeta, "TensorStorageMetadata")
	gChunk := class(modMeta, "ChunkStorageMetadata")
	gBytes := class(modMeta, "BytesStorageMetadata")
	gIndex := class(modMeta, "MetadataIndex")
	gProps := class(modProps, "TensorProperties")
	gEnum := class(modProps, mods.enum)
	gInfo := class(str(mods.fs), "_StorageInfo")
	gSize := &pyGlobal{mod: "torch", name: "Size"}
	// dtypes are found by whichmodule: the module name is sys.modules'
	// key, one str for all of them.
	modTorchKey := str("torch")
	dtypes := map[DType]*pyGlobal{}
	dtype := func(dt DType) *pyGlobal {
		if g := dtypes[dt]; g != nil {
			return g
		}
		g := &pyGlobal{mod: modTorchKey, name: map[DType]string{F32: "float32", F16: "float16", BF16: "bfloat16"}[dt]}
		dtypes[dt] = g
		return g
	}
	layout := &pyReduce{fn: &pyGlobal{mod: "torch.serialization", name: "_get_layout"}, args: pyTuple{"torch.strided"}}
	contiguous := &pyReduce{fn: &pyGlobal{mod: "builtins", name: "getattr"}, args: pyTuple{gEnum, "TORCH_CONTIGUOUS_FORMAT"}}
	size := func(dims []int64) any {
		t := make(pyTuple, len(dims))
		for i, x := range dims {
			t[i] = x
		}
		return &pyReduce{fn: gSize, args: pyTuple{t}}
	}
	obj := func(cls *pyGlobal, fields ...any) *pyNewObj {
		st := &pyDict{}
		for i := 0; i < len(fields); i += 2 {
			st.keys = append(st.keys, in.get(fields[i].(string)))
			st.vals = append(st.vals, fields[i+1])
		}
		if len(st.keys) == 0 {
			return &pyNewObj{cls: cls}
		}
		return &pyNewObj{cls: cls, state: st}
	}
	fqns := make([]*pyStr, len(d.items))
	for k, it := range d.items {
		fqns[k] = str(it.FQN)
	}
	// state_dict_metadata: keys in the order the global plan meets
	// them, chunks in rank order.
	sdm := &pyDict{}
	chunks := map[int]*pyList{}
	for _, e := range d.entries {
		it := d.items[e.item]
		if it.Tensor < 0 {
			sdm.keys = append(sdm.keys, fqns[e.item])
			sdm.vals = append(sdm.vals, obj(gBytes))
			continue
		}
		t := l.Tensors[it.Tensor]
		ct := l.chunkTensor(e)
		off := make([]int64, len(t.Shape))
		if len(off) > 0 {
			off[0] = e.row
		}
		ch := obj(gChunk, "offsets", size(off), "sizes", size(ct.Shape))
		if lst := chunks[e.item]; lst != nil {
			lst.items = append(lst.items, ch)
			continue
		}
		lst := &pyList{items: []any{ch}}
		chunks[e.item] = lst
		props := &pyNewObj{cls: gProps, state: pyTuple{dtype(t.DType), layout, false, contiguous, false}}
		sdm.keys = append(sdm.keys, fqns[e.item])
		sdm.vals = append(sdm.vals, obj(gTSM, "properties", props, "size", size(t.Shape), "chunks", lst))
	}
	// storage_data: rank by rank, each rank's results in write order
	// (file by file, bytes before tensors in a file).
	sd := &pyDict{}
	chunkIdx := map[int]int{}
	index := make([]int, len(d.entries))
	for ei, e := range d.entries {
		index[ei] = chunkIdx[e.item]
		chunkIdx[e.item]++
	}
	paths := make([]*pyStr, len(l.Files))
	for r := 0; r < l.Ranks; r++ {
		for _, f := range l.FilesOf(r) {
			for _, ei := range d.byFile[f] {
				e := d.entries[ei]
				it := d.items[e.item]
				var key *pyNewObj
				if it.Tensor < 0 {
					key = obj(gIndex, "fqn", fqns[e.item], "index", nil)
				} else {
					off := make([]int64, len(l.Tensors[it.Tensor].Shape))
					if len(off) > 0 {
						off[0] = e.row
					}
					key = obj(gIndex, "fqn", fqns[e.item], "index", index[ei], "offset", size(off))
				}
				if paths[f] == nil {
					paths[f] = str(l.Files[f].Name)
				}
				sd.keys = append(sd.keys, key)
				sd.vals = append(sd.vals, obj(gInfo, "relative_path", paths[f], "offset", e.off, "length", e.len))
			}
		}
	}
	fields := []any{"state_dict_metadata", sdm, "planner_data", nil, "storage_data", sd}
	if v == Torch2 {
		// DefaultSavePlanner's flatten mapping: each key to its path.
		pd := &pyDict{}
		for k, it := range d.items {
			pd.keys = append(pd.keys, fqns[k])
			pd.vals = append(pd.vals, it.path)
		}
		fields[3] = pd
		var cid any
		if l.dcp.opts.CheckpointID != "" {
			cid = posixPath(l.dcp.opts.CheckpointID)
		}
		meta := obj(&pyGlobal{mod: modMeta, name: "StorageMeta"}, "checkpoint_id", cid, "save_id", d.saveID, "load_id", nil, "modules", &pyList{})
		fields = append(fields, "storage_meta", meta, "version", "1.0.0")
	}
	return pickleDump(obj(gMetadata, fields...), 4)
}

// posixPath pickles pathlib.PosixPath(p) as Python 3.11 does:
// PosixPath(*parts).
func posixPath(p string) any {
	var parts pyTuple
	if strings.HasPrefix(p, "/") {
		parts = append(parts, "/")
	}
	for _, s := range strings.Split(strings.Trim(p, "/"), "/") {
		if s != "" {
			parts = append(parts, s)
		}
	}
	return &pyReduce{fn: &pyGlobal{mod: "pathlib", name: "PosixPath"}, args: parts}
}

// DCPEntry is one item of a DCP checkpoint as one rank saved it: a chunk
// of rows of a sharded tensor, or (rank 0's) a scalar tensor or a bytes
// value, stored as one torch.save'd item in File at [Off, Off+Len).
type DCPEntry struct {
	Item   int    // index into the state's Items
	FQN    string // the item's key
	Tensor int    // index into Layout.Tensors; -1 for a bytes value
	// Sharded: a tensor of at least one dimension, chunked by rows over
	// the ranks; otherwise one entry, rank 0's, that every loader reads.
	Sharded bool
	Rank    int
	File    int
	Row     int64 // the chunk's rows of the tensor: [Row, Row+Rows)
	Rows    int64
	Piece   int // the piece holding the chunk's data; -1: literal content
	Off     int64
	Len     int64
}

// DCPEntries lists a DCP layout's entries, rank by rank, each rank's in
// plan order, with their places in the files (which it lays out, lengths
// only, where Build has not). Nil for other formats.
func (l *Layout) DCPEntries() []DCPEntry {
	if l.dcp == nil {
		return nil
	}
	for f := range l.Files {
		if !l.Files[f].Final {
			l.ensureBuilt(f)
		}
	}
	out := make([]DCPEntry, len(l.dcp.entries))
	for i, e := range l.dcp.entries {
		it := l.dcp.items[e.item]
		out[i] = DCPEntry{Item: e.item, FQN: it.FQN, Tensor: it.Tensor, Rank: e.rank, File: e.file,
			Row: e.row, Rows: e.rows, Piece: e.piece, Off: e.off, Len: e.len}
		if it.Tensor >= 0 && len(l.Tensors[it.Tensor].Shape) > 0 {
			out[i].Sharded = true
		}
	}
	return out
}

// DCPLoadPlan lists the entries (indices into DCPEntries) that rank of a
// job of ranks ranks reads when DCP's load_state_dict fills FSDP's
// sharding of that world size: every saved chunk that overlaps its
// torch.chunk of each sharded tensor's rows, and every scalar and bytes
// value whole. The order is FileSystemReader's: files in the order the
// load plan (the state dict's items, each item's saved chunks in rank
// order) first names them, each file's entries in plan order. DCP reads
// a whole saved item even when the new chunk needs part of its rows
// (torch.load of the item, then narrow), so these entries are all it
// reads. With ranks = 1 it is the consolidating load of the whole state
// (what dcp_to_torch_save does).
func (l *Layout) DCPLoadPlan(ranks, rank int) []int {
	if l.dcp == nil {
		return nil
	}
	ents := l.DCPEntries()
	byItem := make([][]int, len(l.dcp.items))
	for i, e := range ents {
		byItem[e.Item] = append(byItem[e.Item], i)
	}
	var plan []int
	for k, es := range byItem {
		it := l.dcp.items[k]
		if it.Tensor < 0 || len(l.Tensors[it.Tensor].Shape) == 0 {
			plan = append(plan, es...)
			continue
		}
		lo, hi := ChunkRows(l.Tensors[it.Tensor].Rows(), ranks, rank)
		if lo == hi {
			continue
		}
		for _, i := range es {
			if e := ents[i]; e.Row < hi && e.Row+e.Rows > lo {
				plan = append(plan, i)
			}
		}
	}
	var files []int
	perFile := map[int][]int{}
	for _, i := range plan {
		f := ents[i].File
		if _, ok := perFile[f]; !ok {
			files = append(files, f)
		}
		perFile[f] = append(perFile[f], i)
	}
	out := make([]int, 0, len(plan))
	for _, f := range files {
		out = append(out, perFile[f]...)
	}
	return out
}
