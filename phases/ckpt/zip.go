package ckpt

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"strconv"
)

// torch.save writes a zip archive (PyTorch's PyTorchStreamWriter): every
// record stored uncompressed, its data aligned to 64 bytes by an extra
// field, in the order data.pkl, byteorder, data/<key>..., version, then the
// central directory. zipSegs lays such an archive out as segments, so the
// writer can stream the tensors' bytes between header writes.

// zipEntry is one record: literal content, or a piece of the layout.
type zipEntry struct {
	name  string
	lit   []byte
	piece int // when lit == nil
	size  int64
	crc   uint32
}

const (
	uint32max    = math.MaxUint32
	uint16max    = math.MaxUint16
	zipAlign     = 64
	zipDOSDate   = 1<<5 | 1 // 1980-01-01
	zipVerBase   = 20
	zipVerZip64  = 45
	zipMadeBy    = 3<<8 | zipVerZip64 // unix
	zipExtraPad  = 0x4246             // "FB", the id torch's writer pads with
	zip64ExtraID = 0x0001
)

// forceZip64 writes zip64 records for every entry (tests use it to cover
// the >4 GiB encoding with small files).
var forceZip64 = false

type segBuilder struct {
	segs []Seg
	off  int64
	lit  []byte // pending literal bytes, coalesced into one segment
	keep bool   // keep literal bytes (else only lengths)
}

func (b *segBuilder) literal(p []byte) {
	b.lit = append(b.lit, p...)
}

func (b *segBuilder) flush() {
	if len(b.lit) == 0 {
		return
	}
	s := Seg{Off: b.off, Len: int64(len(b.lit)), Piece: -1}
	if b.keep {
		s.Lit = b.lit
	}
	b.segs = append(b.segs, s)
	b.off += s.Len
	b.lit = nil
}

func (b *segBuilder) piece(i int, n int64) {
	b.flush()
	b.segs = append(b.segs, Seg{Off: b.off, Len: n, Piece: i})
	b.off += n
}

// pos is the current offset, pending literal bytes included.
func (b *segBuilder) pos() int64 { return b.off + int64(len(b.lit)) }

type le []byte

func (p le) u16(v uint16) le { return binary.LittleEndian.AppendUint16(p, v) }
func (p le) u32(v uint32) le { return binary.LittleEndian.AppendUint32(p, v) }
func (p le) u64(v uint64) le { return binary.LittleEndian.AppendUint64(p, v) }

// zipArchive appends an archive of entries at the builder's position;
// offsets inside the archive are relative to its start, as in a file of
// its own (torch.save into a stream at an offset does the same).
func zipArchive(b *segBuilder, entries []zipEntry) {
	base := b.pos()
	type cdInfo struct {
		e      zipEntry
		off    int64
		zip64  bool
		extraL []byte
	}
	infos := make([]cdInfo, 0, len(entries))
	for _, e := range entries {
		if e.lit != nil {
			e.size, e.crc = int64(len(e.lit)), crc32.ChecksumIEEE(e.lit)
		}
		off := b.pos() - base
		z64 := forceZip64 || e.size >= uint32max
		var extra le
		if z64 {
			extra = extra.u16(zip64ExtraID).u16(16).u64(uint64(e.size)).u64(uint64(e.size))
		}
		// Pad the data to zipAlign with an extra field of its own (4
		// bytes of header at least).
		hdr := int64(30 + len(e.name) + len(extra))
		pad := (zipAlign - (off+hdr+4)%zipAlign) % zipAlign
		extra = extra.u16(zipExtraPad).u16(uint16(pad))
		extra = append(extra, make([]byte, pad)...)
		ver := uint16(zipVerBase)
		s32 := uint32(e.size)
		if z64 {
			ver, s32 = zipVerZip64, uint32max
		}
		var h le
		h = h.u32(0x04034b50).u16(ver).u16(0).u16(0).u16(0).u16(zipDOSDate).u32(e.crc).u32(s32).u32(s32).
			u16(uint16(len(e.name))).u16(uint16(len(extra)))
		h = append(h, e.name...)
		h = append(h, extra...)
		b.literal(h)
		if e.lit != nil {
			b.literal(e.lit)
		} else {
			b.piece(e.piece, e.size)
		}
		infos = append(infos, cdInfo{e: e, off: off, zip64: z64})
	}
	cdStart := b.pos() - base
	var cd le
	for _, in := range infos {
		e := in.e
		var x le
		s32, o32 := uint32(e.size), uint32(in.off)
		if in.zip64 {
			x = x.u64(uint64(e.size)).u64(uint64(e.size))
			s32 = uint32max
		}
		if forceZip64 || in.off >= uint32max {
			x = x.u64(uint64(in.off))
			o32 = uint32max
		}
		var extra le
		ver := uint16(zipVerBase)
		if len(x) > 0 {
			extra = extra.u16(zip64ExtraID).u16(uint16(len(x)))
			extra = append(extra, x...)
			ver = zipVerZip64
		}
		cd = cd.u32(0x02014b50).u16(zipMadeBy).u16(ver).u16(0).u16(0).u16(0).u16(zipDOSDate).u32(e.crc).u32(s32).u32(s32).
			u16(uint16(len(e.name))).u16(uint16(len(extra))).u16(0).u16(0).u16(0).u32(0o100644 << 16).u32(o32)
		cd = append(cd, e.name...)
		cd = append(cd, extra...)
	}
	cdLen := int64(len(cd))
	n := len(infos)
	if forceZip64 || n >= uint16max || cdStart >= uint32max || cdLen >= uint32max {
		eocd64 := cdStart + cdLen
		cd = cd.u32(0x06064b50).u64(44).u16(zipMadeBy).u16(zipVerZip64).u32(0).u32(0).
			u64(uint64(n)).u64(uint64(n)).u64(uint64(cdLen)).u64(uint64(cdStart))
		cd = cd.u32(0x07064b50).u32(0).u64(uint64(eocd64)).u32(1)
		cd = cd.u32(0x06054b50).u16(0).u16(0).u16(uint16max).u16(uint16max).u32(uint32max).u32(uint32max).u16(0)
	} else {
		cd = cd.u32(0x06054b50).u16(0).u16(0).u16(uint16(n)).u16(uint16(n)).u32(uint32(cdLen)).u32(uint32(cdStart)).u16(0)
	}
	b.literal(cd)
	b.flush()
}

// torchArchive lays out what torch.save(obj) writes, obj being a state
// dict (names given) or a single tensor (names nil, one piece).
func torchArchive(b *segBuilder, archive string, tensors []Tensor, names []string, pieces []int, sizes []int64, crcs []uint32) {
	entries := []zipEntry{
		{name: archive + "/data.pkl", lit: torchPickle(tensors, names)},
		{name: archive + "/byteorder", lit: []byte("little")},
	}
	for i := range pieces {
		entries = append(entries, zipEntry{name: archive + "/data/" + itoa(i), piece: pieces[i], size: sizes[i], crc: crcs[i]})
	}
	entries = append(entries, zipEntry{name: archive + "/version", lit: []byte("3\n")})
	zipArchive(b, entries)
}

func itoa(i int) string { return strconv.Itoa(i) }
