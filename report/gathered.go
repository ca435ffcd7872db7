package report

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
)

// Gathered is rank 0's view of one phase's rank records: the per-rank rows
// the manifest keeps, packed, and the per-op counters and metrics summed
// over the ranks as each record is decoded, so that rank 0 holds one
// packed row per rank and no per-rank maps (at 10,000 ranks the records
// decoded into maps were ~6 MB and 160,000 allocations per phase, and the
// rows as RankResults ~1 MB).
type Gathered struct {
	Rows    RankRows
	ByType  map[string]OpCount
	Metrics map[string]float64 // summed over the ranks; nil when none
	// Timeline is the phase's time series summed over the ranks, set by
	// whoever reduces the series (phases.GatherPhase); nil when none.
	Timeline *Timeline
	// SeriesWidthNs is the widest interval of any rank's series and
	// SeriesExtentNs the farthest any reaches: the shape of the sum.
	SeriesWidthNs, SeriesExtentNs int64
	byType                        map[string]*OpCount
	metrics                       map[string]*float64
	strs                          map[string]string // interned op and metric names
}

// NewGathered returns an empty Gathered for n ranks.
func NewGathered(n int) *Gathered {
	return &Gathered{Rows: RankRows{off: make([]uint32, 0, n)}, byType: map[string]*OpCount{}, metrics: map[string]*float64{}, strs: map[string]string{}}
}

// Gather folds records, in rank order, into a Gathered: what rank 0 builds
// from the binary records (Add), for callers that hold RankRecords.
func Gather(recs []RankRecord) *Gathered {
	g := NewGathered(len(recs))
	for i := range recs {
		if err := g.Add(recs[i].AppendBinary(nil)); err != nil {
			panic(err) // AppendBinary writes what Add reads
		}
	}
	return g.Done()
}

// Ops is the sorted union of the op names of the records added so far:
// the order in which every rank reduces its count arrays.
func (g *Gathered) Ops() []string {
	ops := make([]string, 0, len(g.byType))
	for op := range g.byType {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	return ops
}

// SeriesLen is the number of intervals of the summed series, at
// SeriesWidthNs each.
func (g *Gathered) SeriesLen() int {
	if g.SeriesWidthNs <= 0 {
		return 0
	}
	return int((g.SeriesExtentNs + g.SeriesWidthNs - 1) / g.SeriesWidthNs)
}

// Done settles the sums into ByType and Metrics, trims the rows, and
// returns g.
func (g *Gathered) Done() *Gathered {
	g.Rows.trim()
	g.ByType = make(map[string]OpCount, len(g.byType))
	for op, c := range g.byType {
		g.ByType[op] = *c
	}
	g.Metrics = nil
	if len(g.metrics) > 0 {
		g.Metrics = make(map[string]float64, len(g.metrics))
		for k, v := range g.metrics {
			g.Metrics[k] = *v
		}
	}
	return g
}

// recordVersion leads every binary rank record, so that a rank running
// another build is told apart from a garbled record.
const recordVersion = 2

// AppendBinary appends r in the compact form Gathered.Add reads: varints,
// length-prefixed strings and IEEE floats, ~50 bytes for a rank of two op
// types where its JSON was ~250.
func (r *RankRecord) AppendBinary(b []byte) []byte {
	b = append(b, recordVersion)
	b = binary.AppendVarint(b, int64(r.Rank))
	b = appendString(b, r.Host)
	for _, v := range [...]int64{r.Ops, r.Bytes, r.Errors, r.MaxNs} {
		b = binary.AppendVarint(b, v)
	}
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(r.Seconds))
	b = appendString(b, r.Error)
	b = appendString(b, r.CPUs)
	b = binary.AppendUvarint(b, uint64(len(r.OpsByType)))
	for op, c := range r.OpsByType {
		b = appendString(b, op)
		b = binary.AppendVarint(b, c.Ops)
		b = binary.AppendVarint(b, c.Bytes)
		b = binary.AppendVarint(b, c.Errors)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Metrics)))
	for k, v := range r.Metrics {
		b = appendString(b, k)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	b = binary.AppendVarint(b, r.SeriesWidthNs)
	return binary.AppendVarint(b, r.SeriesExtentNs)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errRecord = errors.New("truncated or malformed rank record")

// recordReader reads the fields AppendBinary wrote; the first failure
// sticks.
type recordReader struct {
	b   []byte
	err error
}

func (d *recordReader) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *recordReader) count() int {
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > uint64(len(d.b)) { // every entry takes a byte at least
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return int(v)
}

func (d *recordReader) float() float64 {
	if len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return v
}

func (d *recordReader) bytes() []byte {
	n := d.count()
	if d.err != nil || n > len(d.b) {
		d.fail()
		return nil
	}
	s := d.b[:n]
	d.b = d.b[n:]
	return s
}

func (d *recordReader) fail() {
	if d.err == nil {
		d.err = errRecord
	}
	d.b = nil
}

// intern returns b as a string shared by every rank that sent the same
// bytes (op and metric names repeat across ranks).
func (g *Gathered) intern(b []byte) string {
	if s, ok := g.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	g.strs[s] = s
	return s
}

// Add decodes one rank's record and folds it in; records come in rank
// order.
func (g *Gathered) Add(b []byte) error {
	if len(b) == 0 || b[0] != recordVersion {
		return fmt.Errorf("%w: version %v, want %d (every rank must run the same prism)", errRecord, b[:min(len(b), 1)], recordVersion)
	}
	d := recordReader{b: b[1:]}
	row := RankResult{Rank: int(d.varint())}
	host := d.bytes()
	row.Ops, row.Bytes, row.Errors, row.MaxLatencyNs = d.varint(), d.varint(), d.varint(), d.varint()
	row.Seconds = d.float()
	msg, cpus := d.bytes(), d.bytes()
	for n := d.count(); n > 0 && d.err == nil; n-- {
		name := d.bytes()
		c := g.byType[string(name)]
		if c == nil && d.err == nil {
			c = &OpCount{}
			g.byType[g.intern(name)] = c
		}
		ops, bytes, errs := d.varint(), d.varint(), d.varint()
		if c != nil {
			c.Ops, c.Bytes, c.Errors = c.Ops+ops, c.Bytes+bytes, c.Errors+errs
		}
	}
	for n := d.count(); n > 0 && d.err == nil; n-- {
		name := d.bytes()
		v := d.float()
		if d.err != nil {
			break
		}
		p := g.metrics[string(name)]
		if p == nil {
			p = new(float64)
			g.metrics[g.intern(name)] = p
		}
		*p += v
	}
	if w, ext := d.varint(), d.varint(); d.err == nil {
		g.SeriesWidthNs, g.SeriesExtentNs = max(g.SeriesWidthNs, w), max(g.SeriesExtentNs, ext)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	if d.err != nil {
		return d.err
	}
	appendRow(&g.Rows, &row, host, cpus, msg)
	return nil
}
