package ckpt

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math"
	"strconv"
)

// torch.save writes a zip archive with PyTorchStreamWriter, which is
// miniz with torch's conventions; zipArchive writes the same bytes, as
// observed in archives torch 1.13 writes (and their >4 GiB variant):
//
//   - every record stored, its data aligned to 64 bytes by an extra field
//     "FB" padded with 'Z' bytes;
//   - local headers with version 0, flags 0x0808 (UTF-8 names, data
//     descriptor), zero time, CRC and sizes; the CRC and sizes follow the
//     data in a data descriptor (16 bytes, or 24 with 8-byte sizes when
//     the record needs zip64);
//   - a record needs zip64 when its size or its local header's offset is
//     >= 4 GiB - 1: the local header then carries a zip64 extra with
//     (size, 0) and/or that offset, the central entry one with (size,
//     size) and/or the offset, and 0xFFFFFFFF in the fields it replaces;
//   - the central directory (made-by and version 0, no timestamps, no
//     attributes), then always a zip64 end record and locator, then the
//     end record with 0xFFFF/0xFFFFFFFF where a count or offset does not
//     fit.
//
// zipArchive lays such an archive out as segments, so the writer can
// stream the tensors' bytes between header writes.

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
	zipFlags     = 0x0808 // UTF-8 names, data descriptor
	zipExtraPad  = 0x4246 // "FB", the id torch's writer pads with
	zip64ExtraID = 0x0001
	zipMadeBy64  = 0x031e // miniz's zip64 end record: unix, 3.0
	zipNeed64    = 45
)

// forceZip64 lowers the zip64 threshold so tests cover the >4 GiB
// encoding with small files (0: the real one).
var forceZip64 int64

func zip64Limit() int64 {
	if forceZip64 > 0 {
		return forceZip64
	}
	return uint32max
}

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
// its own (torch.save into a stream at an offset does the same). It
// returns the archive's layout: where each record's header, data and
// descriptor are, for the write and read shapes.
func zipArchive(b *segBuilder, entries []zipEntry) zipLayout {
	base := b.pos()
	lim := zip64Limit()
	type cdInfo struct {
		e     zipEntry
		off   int64
		big   bool // size needs zip64
		farOf bool // offset needs zip64
	}
	var zl zipLayout
	infos := make([]cdInfo, 0, len(entries))
	for _, e := range entries {
		if e.lit != nil {
			e.size, e.crc = int64(len(e.lit)), crc32.ChecksumIEEE(e.lit)
		}
		off := b.pos() - base
		big, far := e.size >= lim, off >= lim
		var extra le
		if big || far {
			n := 0
			if big {
				n += 16
			}
			if far {
				n += 8
			}
			extra = extra.u16(zip64ExtraID).u16(uint16(n))
			if big {
				extra = extra.u64(uint64(e.size)).u64(0)
			}
			if far {
				extra = extra.u64(uint64(off))
			}
		}
		// Pad the data to zipAlign with an extra field of its own (4
		// bytes of header at least).
		hdr := int64(30 + len(e.name) + len(extra))
		pad := (zipAlign - (off+hdr+4)%zipAlign) % zipAlign
		extra = extra.u16(zipExtraPad).u16(uint16(pad))
		extra = append(extra, bytes.Repeat([]byte{'Z'}, int(pad))...)
		var h le
		h = h.u32(0x04034b50).u16(0).u16(zipFlags).u16(0).u16(0).u16(0).u32(0).u32(0).u32(0).
			u16(uint16(len(e.name))).u16(uint16(len(extra)))
		h = append(h, e.name...)
		h = append(h, extra...)
		rec := zipRecord{Header: b.pos(), HeaderLen: int64(len(h)), Size: e.size}
		b.literal(h)
		rec.Data = b.pos()
		if e.lit != nil {
			b.literal(e.lit)
		} else {
			b.piece(e.piece, e.size)
		}
		var dd le
		dd = dd.u32(0x08074b50).u32(e.crc)
		if big || far {
			dd = dd.u64(uint64(e.size)).u64(uint64(e.size))
		} else {
			dd = dd.u32(uint32(e.size)).u32(uint32(e.size))
		}
		rec.DescLen = int64(len(dd))
		b.literal(dd)
		zl.records = append(zl.records, rec)
		infos = append(infos, cdInfo{e: e, off: off, big: big, farOf: far})
	}
	cdStart := b.pos() - base
	var cd le
	for _, in := range infos {
		e := in.e
		var x le
		s32, o32 := uint32(e.size), uint32(in.off)
		if in.big {
			x = x.u64(uint64(e.size)).u64(uint64(e.size))
			s32 = uint32max
		}
		if in.farOf {
			x = x.u64(uint64(in.off))
			o32 = uint32max
		}
		var extra le
		if len(x) > 0 {
			extra = extra.u16(zip64ExtraID).u16(uint16(len(x)))
			extra = append(extra, x...)
		}
		cd = cd.u32(0x02014b50).u16(0).u16(0).u16(zipFlags).u16(0).u16(0).u16(0).u32(e.crc).u32(s32).u32(s32).
			u16(uint16(len(e.name))).u16(uint16(len(extra))).u16(0).u16(0).u16(0).u32(0).u32(o32)
		cd = append(cd, e.name...)
		cd = append(cd, extra...)
	}
	cdLen := int64(len(cd))
	n := int64(len(infos))
	zl.dir = b.pos()
	zl.dirLen = cdLen
	b.literal(cd)
	eocd64 := cdStart + cdLen
	var end le
	end = end.u32(0x06064b50).u64(44).u16(zipMadeBy64).u16(zipNeed64).u32(0).u32(0).
		u64(uint64(n)).u64(uint64(n)).u64(uint64(cdLen)).u64(uint64(cdStart))
	end = end.u32(0x07064b50).u32(0).u64(uint64(eocd64)).u32(1)
	// A count or offset that does not fit reads as all ones; the zip64
	// end record holds it.
	clamp := func(v, limit, ones int64) int64 {
		if v >= limit {
			return ones
		}
		return v
	}
	ne := uint16(clamp(n, uint16max, uint16max))
	end = end.u32(0x06054b50).u16(0).u16(0).u16(ne).u16(ne).
		u32(uint32(clamp(cdLen, lim, uint32max))).u32(uint32(clamp(cdStart, lim, uint32max))).u16(0)
	zl.end = b.pos()
	zl.endLen = int64(len(end))
	b.literal(end)
	b.flush()
	return zl
}

// zipRecord is where one record of an archive lies (file offsets).
type zipRecord struct {
	Header, HeaderLen int64
	Data, Size        int64
	DescLen           int64 // the data descriptor after the data
}

// zipLayout is where an archive's parts lie.
type zipLayout struct {
	records     []zipRecord
	byKey       []int // the record of data/<k>, by k
	trailing    int   // records after "version"
	dir, dirLen int64 // central directory
	end, endLen int64 // zip64 end record, locator and end record
}

func itoa(i int) string { return strconv.Itoa(i) }
