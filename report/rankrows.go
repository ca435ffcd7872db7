package report

import (
	"bytes"
	"encoding/binary"
	"iter"
	"math"
	"slices"
)

// RankRows is a phase's per-rank rows (the manifest's per_rank), packed:
// at 10,000 ranks a []RankResult was 96 bytes a row, ~1 MB on rank 0 per
// phase, where a packed row is ~25. Row i holds its rank as the difference
// from i (0 for a phase on every rank), its host, CPU list and error as
// indices into one table of the distinct strings, its counts as varints
// and its seconds as the 8 bytes of the float, so that it reads back
// exactly. In JSON it is the array of RankResult objects it always was.
//
// Like a slice, a RankRows is appended to by one owner: copies share
// storage.
type RankRows struct {
	b    []byte   // the packed rows, one after another
	off  []uint32 // where row i starts in b; nil for no rows at all (JSON null)
	strs []string // the distinct hosts, CPU lists and errors; strs[0] is ""
	ids  map[string]uint64
}

// RowsOf packs rows, for callers (tests, tools) that hold RankResults;
// none is the JSON null, as a nil []RankResult was.
func RowsOf(rows ...RankResult) RankRows {
	var rr RankRows
	if rows != nil {
		rr.off = make([]uint32, 0, len(rows))
	}
	for _, r := range rows {
		rr.Append(r)
	}
	rr.trim()
	return rr
}

// Len is the number of rows.
func (rr *RankRows) Len() int { return len(rr.off) }

// Append adds r as the last row.
func (rr *RankRows) Append(r RankResult) { appendRow(rr, &r, r.Host, r.CPUs, r.Error) }

// appendRow packs the numbers of r and the strings host, cpus and msg,
// which are strings or the bytes of a rank record: Gathered.Add packs a
// record without making strings of its bytes.
func appendRow[S string | []byte](rr *RankRows, r *RankResult, host, cpus, msg S) {
	if rr.off == nil {
		rr.off = []uint32{}
	}
	rr.off = append(rr.off, uint32(len(rr.b)))
	b := binary.AppendVarint(rr.b, int64(r.Rank)-int64(len(rr.off)-1))
	b = binary.AppendUvarint(b, strID(rr, host))
	b = binary.AppendUvarint(b, strID(rr, cpus))
	b = binary.AppendUvarint(b, strID(rr, msg))
	for _, v := range [...]int64{r.Bytes, r.Ops, r.Errors, r.MaxLatencyNs} {
		b = binary.AppendVarint(b, v)
	}
	rr.b = binary.LittleEndian.AppendUint64(b, math.Float64bits(r.Seconds))
	if len(rr.off) == 1 && cap(rr.off) > 1 {
		// The rows of a phase are alike: the first sizes the room for all
		// (NewGathered and RowsOf know how many), where append's growth
		// by 1.25 made ~4 times the rows' size in garbage.
		rr.b = slices.Grow(rr.b, (cap(rr.off)-1)*(len(rr.b)+len(rr.b)/16+1))
	}
}

// strID is s's index in the table of rr, added if new.
func strID[S string | []byte](rr *RankRows, s S) uint64 {
	if len(s) == 0 {
		return 0
	}
	if rr.ids == nil { // none yet, or dropped by trim
		rr.ids = make(map[string]uint64, len(rr.strs))
		for i, t := range rr.strs {
			rr.ids[t] = uint64(i)
		}
	}
	if id, ok := rr.ids[string(s)]; ok {
		return id
	}
	if len(rr.strs) == 0 {
		rr.strs = []string{""}
	}
	t := string(s)
	rr.strs = append(rr.strs, t)
	rr.ids[t] = uint64(len(rr.strs) - 1)
	return uint64(len(rr.strs) - 1)
}

// trim gives the rows back the room append left at the end and drops the
// index of the strings (rebuilt by the next Append): what stays live with
// a phase's result is the packed rows themselves.
func (rr *RankRows) trim() {
	if cap(rr.b)-len(rr.b) > len(rr.b)/8 {
		rr.b = bytes.Clone(rr.b)
	}
	if cap(rr.off)-len(rr.off) > len(rr.off)/8 {
		rr.off = append(make([]uint32, 0, len(rr.off)), rr.off...)
	}
	rr.ids = nil
}

// At is row i; it panics if i is out of range, as indexing a slice does.
func (rr *RankRows) At(i int) RankResult {
	r, _ := rr.decode(i, rr.b[rr.off[i]:])
	return r
}

// decode reads row i from the start of b and returns the rest of b.
func (rr *RankRows) decode(i int, b []byte) (RankResult, []byte) {
	r, s, b := rr.decodeIDs(i, b)
	r.Host, r.CPUs, r.Error = rr.str(s[0]), rr.str(s[1]), rr.str(s[2])
	return r, b
}

// decodeIDs reads row i's numbers from the start of b, and its host, CPU
// list and error as their indices into rr.strs (0 is ""): the JSON
// encoder writes each string's encoding once, not each row's strings.
func (rr *RankRows) decodeIDs(i int, b []byte) (RankResult, [3]uint64, []byte) {
	// Every field was written by appendRow: the reads cannot fail.
	varint := func() int64 {
		v, n := binary.Varint(b)
		b = b[n:]
		return v
	}
	var s [3]uint64
	r := RankResult{Rank: int(int64(i) + varint())}
	for k := range s {
		v, n := binary.Uvarint(b)
		s[k], b = v, b[n:]
	}
	r.Bytes, r.Ops, r.Errors, r.MaxLatencyNs = varint(), varint(), varint(), varint()
	r.Seconds = math.Float64frombits(binary.LittleEndian.Uint64(b))
	return r, s, b[8:]
}

// str is the string of index id.
func (rr *RankRows) str(id uint64) string {
	if id == 0 { // rr.strs is nil while every string is ""
		return ""
	}
	return rr.strs[id]
}

// All yields every row with its index, in order.
func (rr *RankRows) All() iter.Seq2[int, RankResult] {
	return func(yield func(int, RankResult) bool) {
		b := rr.b
		for i := range rr.off {
			var r RankResult
			r, b = rr.decode(i, b)
			if !yield(i, r) {
				return
			}
		}
	}
}

// Size is the bytes rr holds (the packed rows, their offsets and the
// strings), for the tests that bound it.
func (rr *RankRows) Size() int {
	n := cap(rr.b) + 4*cap(rr.off) + 16*cap(rr.strs)
	for _, s := range rr.strs {
		n += len(s)
	}
	return n
}
