package ckpt

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Checkpoint formats.
const (
	FormatTorch       = "torch"       // torch.save: one zip archive
	FormatSafetensors = "safetensors" // HuggingFace safetensors (+ index when sharded)
	FormatDCP         = "dcp"         // torch.distributed.checkpoint FileSystemWriter
)

// Seg is a run of a file: literal bytes (headers, metadata) or a piece.
type Seg struct {
	Off   int64
	Len   int64
	Lit   []byte // literal bytes; nil for a piece, or when only lengths were built
	Piece int    // index into Layout.Pieces; -1 for literal bytes
}

// File is one file of a checkpoint.
type File struct {
	Name string // relative to the checkpoint directory
	Rank int    // the rank that writes it
	// Final files (DCP .metadata, the safetensors index) are written by
	// rank 0 after every rank has written its shards.
	Final bool
	Tmp   string // if set, written under this name, synced, then renamed to Name
	Size  int64
	Segs  []Seg // set by Build
	pcs   []int // the file's pieces, in file order
}

// Piece is a contiguous run of one tensor's bytes, [Lo, Hi), as one file
// holds it at offset Off.
type Piece struct {
	Tensor int
	Lo, Hi int64
	File   int
	Off    int64
	Key    uint64
	CRC    uint32
	// DCP: the item (a torch.save archive of the slice) holding the piece,
	// and the slice's first row.
	ItemOff, ItemLen int64
	Row              int64
}

// Len is the piece's size.
func (p Piece) Len() int64 { return p.Hi - p.Lo }

// Layout is every file and byte of one checkpoint. Constructors assign
// tensors to files and ranks; Checksum fills the CRCs a rank knows; Build
// lays a file out (headers need the CRCs of its pieces: zip records carry
// them).
type Layout struct {
	Format  string
	Ranks   int
	Tensors []Tensor
	Files   []File
	Pieces  []Piece
	archive string // torch: the archive directory name inside the zip
}

func (l *Layout) addPiece(t, file int, lo, hi, row int64, seed uint64) {
	l.Pieces = append(l.Pieces, Piece{Tensor: t, Lo: lo, Hi: hi, File: file, Row: row, Key: Key(seed, l.Tensors[t].Name, lo)})
	l.Files[file].pcs = append(l.Files[file].pcs, len(l.Pieces)-1)
}

// NewTorch is torch.save(state_dict, name) by rank 0: one archive holding
// every tensor whole.
func NewTorch(tensors []Tensor, seed uint64, name string) *Layout {
	l := &Layout{Format: FormatTorch, Ranks: 1, Tensors: tensors, archive: strings.TrimSuffix(name, ".pt")}
	l.Files = []File{{Name: name}}
	for i, t := range tensors {
		l.addPiece(i, 0, 0, t.Bytes(), 0, seed)
	}
	return l
}

// TorchFile is one torch.save'd file of NewTorchFiles.
type TorchFile struct {
	Name    string
	Rank    int
	Tensors []Tensor
}

// NewTorchFiles is a set of torch.save'd state dicts, each written by the
// rank it names (MLPerf's DLIO checkpoints).
func NewTorchFiles(files []TorchFile, seed uint64, ranks int) *Layout {
	l := &Layout{Format: FormatTorch, Ranks: ranks}
	for fi, f := range files {
		l.Files = append(l.Files, File{Name: f.Name, Rank: f.Rank})
		for _, t := range f.Tensors {
			l.Tensors = append(l.Tensors, t)
			ti := len(l.Tensors) - 1
			l.Pieces = append(l.Pieces, Piece{Tensor: ti, Hi: t.Bytes(), File: fi, Key: Key(seed, f.Name+"/"+t.Name, 0)})
			l.Files[fi].pcs = append(l.Files[fi].pcs, len(l.Pieces)-1)
		}
	}
	return l
}

// NewSafetensors is save_file (one "model.safetensors", rank 0) or, when
// sharded, save_pretrained's layout over ranks: model-0000R-of-0000N
// .safetensors (1-based, 5 digits), whole tensors assigned to ranks by
// size, largest first to the least loaded, and model.safetensors.index.json
// written by rank 0 last.
func NewSafetensors(tensors []Tensor, seed uint64, ranks int, sharded bool) *Layout {
	l := &Layout{Format: FormatSafetensors, Ranks: ranks, Tensors: tensors}
	if !sharded {
		l.Ranks = 1
		l.Files = []File{{Name: "model.safetensors"}}
		for _, t := range safetensorsOrder(tensors, nil) {
			l.addPiece(t, 0, 0, tensors[t].Bytes(), 0, seed)
		}
		return l
	}
	sizes := make([]int64, len(tensors))
	for i, t := range tensors {
		sizes[i] = t.Bytes()
	}
	owner := BalanceBySize(sizes, ranks)
	for r := 0; r < ranks; r++ {
		l.Files = append(l.Files, File{Name: fmt.Sprintf("model-%05d-of-%05d.safetensors", r+1, ranks), Rank: r})
		var mine []int
		for t, o := range owner {
			if o == r {
				mine = append(mine, t)
			}
		}
		for _, t := range safetensorsOrder(tensors, mine) {
			l.addPiece(t, r, 0, tensors[t].Bytes(), 0, seed)
		}
	}
	l.Files = append(l.Files, File{Name: "model.safetensors.index.json", Final: true})
	return l
}

// safetensorsOrder is the order the safetensors library writes tensors in:
// larger dtypes first, then by name.
func safetensorsOrder(tensors []Tensor, subset []int) []int {
	if subset == nil {
		subset = make([]int, len(tensors))
		for i := range subset {
			subset[i] = i
		}
	}
	out := append([]int(nil), subset...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := tensors[out[i]], tensors[out[j]]
		if a.DType.rank() != b.DType.rank() {
			return a.DType.rank() > b.DType.rank()
		}
		return a.Name < b.Name
	})
	return out
}

// NewDCP is torch.distributed.checkpoint's FileSystemWriter over ranks with
// FSDP-sharded tensors: rank r holds the r-th chunk of every tensor's rows
// (torch.chunk along dim 0, so trailing ranks may hold less or nothing) and
// writes each as a torch.save'd item, into __<r>_0.distcp
// (single_file_per_rank, the default) or one __<r>_<i>.distcp per item;
// rank 0 then writes .metadata.tmp and renames it to .metadata.
func NewDCP(tensors []Tensor, seed uint64, ranks int, filePerTensor bool) *Layout {
	l := &Layout{Format: FormatDCP, Ranks: ranks, Tensors: tensors}
	for r := 0; r < ranks; r++ {
		file := -1
		n := 0
		for t, tn := range tensors {
			lo, hi := ChunkRows(tn.Rows(), ranks, r)
			if lo == hi {
				continue
			}
			if file < 0 || filePerTensor {
				l.Files = append(l.Files, File{Name: fmt.Sprintf("__%d_%d.distcp", r, n), Rank: r})
				file = len(l.Files) - 1
				n++
			}
			rb := tn.RowBytes()
			l.addPiece(t, file, lo*rb, hi*rb, lo, seed)
		}
		if file < 0 && !filePerTensor {
			// A rank with nothing to hold still creates its file.
			l.Files = append(l.Files, File{Name: fmt.Sprintf("__%d_0.distcp", r), Rank: r})
		}
	}
	l.Files = append(l.Files, File{Name: ".metadata", Tmp: ".metadata.tmp", Final: true})
	return l
}

// ChunkRows is torch.chunk(rows, ranks)[r] as a row range: chunks of
// ceil(rows/ranks), the last ones shorter or empty.
func ChunkRows(rows int64, ranks, r int) (lo, hi int64) {
	c := (rows + int64(ranks) - 1) / int64(ranks)
	lo = min(int64(r)*c, rows)
	return lo, min(lo+c, rows)
}

// BalanceBySize assigns items to ranks greedily, largest first, each to the
// rank holding the fewest bytes so far (the lowest rank on a tie); equal
// sizes keep their order.
func BalanceBySize(sizes []int64, ranks int) []int {
	order := make([]int, len(sizes))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return sizes[order[i]] > sizes[order[j]] })
	load := make([]int64, ranks)
	owner := make([]int, len(sizes))
	for _, i := range order {
		best := 0
		for r := 1; r < ranks; r++ {
			if load[r] < load[best] {
				best = r
			}
		}
		owner[i] = best
		load[best] += sizes[i]
	}
	return owner
}

// FilesOf lists the files rank writes (final files excluded).
func (l *Layout) FilesOf(rank int) []int {
	var out []int
	for i, f := range l.Files {
		if f.Rank == rank && !f.Final {
			out = append(out, i)
		}
	}
	return out
}

// FinalFiles lists the files rank 0 writes after the shards.
func (l *Layout) FinalFiles() []int {
	var out []int
	for i, f := range l.Files {
		if f.Final {
			out = append(out, i)
		}
	}
	return out
}

// PiecesOf lists the pieces of file i in file order.
func (l *Layout) PiecesOf(i int) []int { return l.Files[i].pcs }

// Payload is the tensor bytes of the checkpoint.
func (l *Layout) Payload() int64 {
	var n int64
	for _, p := range l.Pieces {
		n += p.Len()
	}
	return n
}

// Checksum sets the CRC of the given pieces (all when nil) for
// generation gen.
func (l *Layout) Checksum(pl *Pool, gen uint64, pieces []int) {
	if pieces == nil {
		for i := range l.Pieces {
			l.Pieces[i].CRC = pl.Checksum(l.Pieces[i].Key, gen, l.Pieces[i].Len())
		}
		return
	}
	for _, i := range pieces {
		l.Pieces[i].CRC = pl.Checksum(l.Pieces[i].Key, gen, l.Pieces[i].Len())
	}
}

// Build lays file i out: its segments, its size, and the offsets of its
// pieces. keep retains the literal bytes (a writer or a verifying reader
// needs them); without it only lengths are kept. A final file's content
// needs every shard's offsets: Build lays those out first (lengths only)
// when they have not been.
func (l *Layout) Build(i int, keep bool) {
	f := &l.Files[i]
	b := &segBuilder{keep: keep}
	switch {
	case f.Final:
		for j := range l.Files {
			if !l.Files[j].Final && l.Files[j].Segs == nil {
				l.Build(j, false)
			}
		}
		b.literal(l.finalContent(i))
		b.flush()
	case l.Format == FormatTorch:
		pcs := f.pcs
		ts := make([]Tensor, len(pcs))
		names := make([]string, len(pcs))
		sizes := make([]int64, len(pcs))
		crcs := make([]uint32, len(pcs))
		for k, p := range pcs {
			ts[k] = l.Tensors[l.Pieces[p].Tensor]
			names[k] = ts[k].Name
			sizes[k], crcs[k] = l.Pieces[p].Len(), l.Pieces[p].CRC
		}
		archive := l.archive
		if archive == "" {
			archive = strings.TrimSuffix(f.Name[strings.LastIndexByte(f.Name, '/')+1:], ".pt")
		}
		torchArchive(b, archive, ts, names, pcs, sizes, crcs)
	case l.Format == FormatSafetensors:
		l.safetensorsFile(b, i)
	case l.Format == FormatDCP:
		for _, p := range f.pcs {
			pc := &l.Pieces[p]
			t := l.Tensors[pc.Tensor]
			slice := Tensor{Name: t.Name, Shape: append([]int64{pc.Len() / max(t.RowBytes(), 1)}, t.Shape[1:]...), DType: t.DType}
			if len(t.Shape) == 0 {
				slice.Shape = nil
			}
			start := b.pos()
			torchArchive(b, "archive", []Tensor{slice}, nil, []int{p}, []int64{pc.Len()}, []uint32{pc.CRC})
			pc.ItemOff, pc.ItemLen = start, b.pos()-start
		}
	}
	b.flush()
	f.Segs, f.Size = b.segs, b.off
	for _, s := range f.Segs {
		if s.Piece >= 0 {
			l.Pieces[s.Piece].Off = s.Off
		}
	}
}

// safetensorsFile: 8-byte little-endian header length, the JSON header
// (padded with spaces to a multiple of 8, as the safetensors library
// does), then the tensors back to back.
func (l *Layout) safetensorsFile(b *segBuilder, i int) {
	var h strings.Builder
	h.WriteString(`{"__metadata__":{"format":"pt"}`)
	var off int64
	for _, p := range l.Files[i].pcs {
		t := l.Tensors[l.Pieces[p].Tensor]
		name, _ := json.Marshal(t.Name)
		h.WriteByte(',')
		h.Write(name)
		fmt.Fprintf(&h, `:{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}`, t.DType, jsonInts(t.Shape), off, off+t.Bytes())
		off += t.Bytes()
	}
	h.WriteByte('}')
	hdr := h.String()
	hdr += strings.Repeat(" ", (8-len(hdr)%8)%8)
	var n le
	n = n.u64(uint64(len(hdr)))
	b.literal(n)
	b.literal([]byte(hdr))
	for _, p := range l.Files[i].pcs {
		b.piece(p, l.Pieces[p].Len())
	}
}

func jsonInts(v []int64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatInt(x, 10)
	}
	return "[" + strings.Join(s, ",") + "]"
}

// finalContent is the text of a final file: the safetensors index, or
// DCP's metadata. PyTorch pickles a Metadata object into .metadata;
// prism writes the same information (every tensor's dtype, size and
// chunks, every item's file, offset and length) as JSON, which it can
// read back without Python.
func (l *Layout) finalContent(i int) []byte {
	switch l.Format {
	case FormatSafetensors:
		var total int64
		wm := map[string]string{}
		for _, p := range l.Pieces {
			total += p.Len()
			wm[l.Tensors[p.Tensor].Name] = l.Files[p.File].Name
		}
		idx := map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": wm}
		b, _ := json.MarshalIndent(idx, "", "  ")
		return append(b, '\n')
	case FormatDCP:
		type chunk struct {
			Offsets []int64 `json:"offsets"`
			Sizes   []int64 `json:"sizes"`
		}
		type tensorMeta struct {
			DType  DType   `json:"dtype"`
			Size   []int64 `json:"size"`
			Chunks []chunk `json:"chunks"`
		}
		type storage struct {
			FQN          string  `json:"fqn"`
			Offset       []int64 `json:"chunk_offset"`
			RelativePath string  `json:"relative_path"`
			ByteOffset   int64   `json:"offset"`
			Length       int64   `json:"length"`
		}
		meta := map[string]*tensorMeta{}
		var sd []storage
		for _, p := range l.Pieces {
			t := l.Tensors[p.Tensor]
			tm := meta[t.Name]
			if tm == nil {
				tm = &tensorMeta{DType: t.DType, Size: t.Shape}
				meta[t.Name] = tm
			}
			off := make([]int64, max(len(t.Shape), 1))
			off[0] = p.Row
			sizes := append([]int64{p.Len() / max(t.RowBytes(), 1)}, t.Shape[min(1, len(t.Shape)):]...)
			tm.Chunks = append(tm.Chunks, chunk{Offsets: off[:len(t.Shape)], Sizes: sizes[:len(t.Shape)]})
			sd = append(sd, storage{FQN: t.Name, Offset: off[:len(t.Shape)], RelativePath: l.Files[p.File].Name, ByteOffset: p.ItemOff, Length: p.ItemLen})
		}
		doc := map[string]any{
			"format":              "prism-dcp-metadata/1",
			"note":                "PyTorch pickles torch.distributed.checkpoint.metadata.Metadata into .metadata; prism writes the same information as JSON. Each storage item is a torch.save archive of one tensor chunk at [offset, offset+length) of relative_path.",
			"state_dict_metadata": meta,
			"storage_data":        sd,
		}
		b, _ := json.MarshalIndent(doc, "", " ")
		return append(b, '\n')
	}
	return nil
}
