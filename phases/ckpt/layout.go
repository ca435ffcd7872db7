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
	Version TorchVersion // the torch release whose formats the files follow
	Ranks   int
	Tensors []Tensor
	Files   []File
	Pieces  []Piece
	archive string  // torch: the archive directory name inside the zip
	stOrder [][]int // safetensors: each shard's tensors, in file order
	roots   []any   // torch: the object each file pickles (nil: its tensors as a state_dict)
	shapes  []fileShape
	dcp     *dcpPlan
}

// addTensor places tensor t whole in file: a piece, unless its content
// is a literal Value.
func (l *Layout) addTensor(t, file int, seed uint64) {
	if l.Tensors[t].Value == nil {
		l.addPiece(t, file, 0, l.Tensors[t].Bytes(), 0, seed)
	}
}

func (l *Layout) addPiece(t, file int, lo, hi, row int64, seed uint64) {
	l.Pieces = append(l.Pieces, Piece{Tensor: t, Lo: lo, Hi: hi, File: file, Row: row, Key: Key(seed, l.Tensors[t].Name, lo)})
	l.Files[file].pcs = append(l.Files[file].pcs, len(l.Pieces)-1)
}

// NewTorch is torch.save(state_dict, name) by rank 0: one archive holding
// every tensor whole, as a flat state dict, in the default torch version.
func NewTorch(tensors []Tensor, seed uint64, name string) *Layout {
	return NewTorchState(FlatState(tensors), seed, name, DefaultTorchVersion)
}

// NewTorchState is torch.save(st, name) by rank 0 as torch version v
// writes it (Model.State gives what training scripts save: the model's
// state_dict, with an optimizer {"model": ..., "optimizer": ...}).
func NewTorchState(st *State, seed uint64, name string, v TorchVersion) *Layout {
	l := &Layout{Format: FormatTorch, Version: v, Ranks: 1, Tensors: st.Tensors, archive: strings.TrimSuffix(name, ".pt")}
	l.Files = []File{{Name: name}}
	l.roots = []any{st.root}
	for i, t := range st.Tensors {
		if t.Value == nil {
			l.addPiece(i, 0, 0, t.Bytes(), 0, seed)
		}
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
	l := &Layout{Format: FormatTorch, Version: DefaultTorchVersion, Ranks: ranks}
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
	l := &Layout{Format: FormatSafetensors, Version: DefaultTorchVersion, Ranks: ranks, Tensors: tensors}
	if !sharded {
		l.Ranks = 1
		l.Files = []File{{Name: "model.safetensors"}}
		l.stOrder = [][]int{safetensorsOrder(tensors, nil)}
		for _, t := range l.stOrder[0] {
			l.addTensor(t, 0, seed)
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
		order := safetensorsOrder(tensors, mine)
		l.stOrder = append(l.stOrder, order)
		for _, t := range order {
			l.addTensor(t, r, seed)
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

// Build lays file i out: its segments, its size, the offsets of its
// pieces, and the calls torch makes to write and read it (Calls). keep
// retains the literal bytes (a writer or a verifying reader needs them);
// without it only lengths are kept. A final file's content needs every
// shard's offsets: Build lays those out first (lengths only) when they
// have not been.
func (l *Layout) Build(i int, keep bool) {
	f := &l.Files[i]
	b := &segBuilder{keep: keep}
	if l.shapes == nil {
		l.shapes = make([]fileShape, len(l.Files))
	}
	sh := fileShape{}
	switch {
	case f.Final:
		for j := range l.Files {
			if !l.Files[j].Final && l.Files[j].Segs == nil {
				l.Build(j, false)
			}
		}
		content := l.finalContent(i)
		if l.Format == FormatDCP {
			sh.frames = pickleFrames(content)
		}
		b.literal(content)
		b.flush()
	case l.Format == FormatTorch:
		archive := l.archive
		if archive == "" {
			archive = strings.TrimSuffix(f.Name[strings.LastIndexByte(f.Name, '/')+1:], ".pt")
		}
		root := any(nil)
		if i < len(l.roots) {
			root = l.roots[i]
		}
		tensors := l.Tensors
		if root == nil {
			// A file of its pieces' tensors as a state_dict (MLPerf's).
			var idx []int
			for _, p := range f.pcs {
				idx = append(idx, l.Pieces[p].Tensor)
			}
			root = moduleDict(tensors, idx)
		}
		byTensor := map[int]int{}
		for _, p := range f.pcs {
			byTensor[l.Pieces[p].Tensor] = p
		}
		zl, _ := torchArchive(b, l.Version, archive, tensors, root, func(t int) (int, int64, uint32) {
			p := byTensor[t]
			return p, l.Pieces[p].Len(), l.Pieces[p].CRC
		})
		sh.archives = []zipLayout{zl}
	case l.Format == FormatSafetensors:
		l.safetensorsFile(b, i)
	case l.Format == FormatDCP:
		sh.archives = l.dcpFile(b, i)
	}
	b.flush()
	f.Segs, f.Size = b.segs, b.off
	for _, s := range f.Segs {
		if s.Piece >= 0 {
			l.Pieces[s.Piece].Off = s.Off
		}
	}
	l.shapes[i] = sh
}

// safetensorsFile: 8-byte little-endian header length, the JSON header
// (padded with spaces to a multiple of 8, as the safetensors library
// does), then the tensors back to back.
func (l *Layout) safetensorsFile(b *segBuilder, i int) {
	var h strings.Builder
	h.WriteString(`{"__metadata__":{"format":"pt"}`)
	var off int64
	order := l.stOrder[min(i, len(l.stOrder)-1)]
	for _, ti := range order {
		t := l.Tensors[ti]
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
	pcs := l.Files[i].pcs
	k := 0
	for _, ti := range order {
		if v := l.Tensors[ti].Value; v != nil {
			b.literal(v)
			continue
		}
		p := pcs[k]
		k++
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

// finalContent is the content of a final file: the safetensors index, or
// DCP's .metadata (a pickled Metadata, see dcp.go).
func (l *Layout) finalContent(i int) []byte {
	switch l.Format {
	case FormatSafetensors:
		var total int64
		wm := map[string]string{}
		for fi, order := range l.stOrder {
			for _, t := range order {
				total += l.Tensors[t].Bytes()
				wm[l.Tensors[t].Name] = l.Files[fi].Name
			}
		}
		idx := map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": wm}
		b, _ := json.MarshalIndent(idx, "", "  ")
		return append(b, '\n')
	case FormatDCP:
		return l.dcpMetadata()
	}
	return nil
}
