package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// rowsSample has what the packing must keep: error and cpus omitted and
// present, ranks that are not the row's index (a phase on a subset of the
// ranks), negative and extreme numbers, and strings JSON escapes.
func rowsSample() []RankResult {
	return []RankResult{
		{Rank: 0, Host: "cn1", Bytes: 4096, Ops: 1, Seconds: 0.25, MaxLatencyNs: 31000},
		{Rank: 1, Host: "cn1", Bytes: -1, Ops: 7, Seconds: 1.0 / 3, Errors: 2, MaxLatencyNs: 1 << 40, Error: "rank 1: write <dir>/f & g: EIO", CPUs: "4-7"},
		{Rank: 7, Host: "", CPUs: "0,2,4"},
		{Rank: -3, Host: "cn2 \"ü\"\n", Bytes: math.MaxInt64, Ops: math.MinInt64, Seconds: math.SmallestNonzeroFloat64, Errors: -1, MaxLatencyNs: math.MinInt64, Error: "x"},
		{Rank: math.MaxInt64, Host: "cn1", Seconds: 1e300, Error: "rank 1: write <dir>/f & g: EIO"},
		{Rank: math.MinInt64, Host: "cn2 \"ü\"\n", Seconds: -0.0},
	}
}

// A RankRows is, in JSON, byte for byte the []RankResult it replaced, alone
// and inside an indented manifest; it reads back the rows it was given,
// and an old manifest's per_rank reads as those rows.
func TestRankRowsJSONAsBefore(t *testing.T) {
	var many []RankResult // past the 256 rows MarshalJSON encodes at a time
	for i := range 600 {
		r := rowsSample()[i%6]
		r.Ops = int64(i)
		many = append(many, r)
	}
	for _, rows := range [][]RankResult{nil, {}, rowsSample()[:1], rowsSample(), many[:256], many[:257], many} {
		want, err := json.Marshal(rows)
		if err != nil {
			t.Fatal(err)
		}
		rr := RowsOf(rows...)
		got, err := json.Marshal(rr)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("rows %v\n got %s\nwant %s", rows, got, want)
		}
		type oldPhase struct {
			Name    string       `json:"name"`
			PerRank []RankResult `json:"per_rank"`
			Ranks   int          `json:"ranks"`
		}
		type newPhase struct {
			Name    string   `json:"name"`
			PerRank RankRows `json:"per_rank"`
			Ranks   int      `json:"ranks"`
		}
		wantM, _ := json.MarshalIndent(oldPhase{"p", rows, len(rows)}, "", "  ")
		gotM, err := json.MarshalIndent(newPhase{"p", rr, len(rows)}, "", "  ")
		if err != nil || !bytes.Equal(gotM, wantM) {
			t.Errorf("indented: %v\n got %s\nwant %s", err, gotM, wantM)
		}
		var back newPhase
		if err := json.Unmarshal(wantM, &back); err != nil {
			t.Fatal(err)
		}
		if back.PerRank.Len() != len(rows) {
			t.Fatalf("read %d rows of %d", back.PerRank.Len(), len(rows))
		}
		for i, r := range back.PerRank.All() {
			if a := back.PerRank.At(i); r != rows[i] || a != rows[i] {
				t.Errorf("row %d: All %+v, At %+v, want %+v", i, r, a, rows[i])
			}
		}
		again, _ := json.Marshal(back.PerRank)
		if !bytes.Equal(again, want) {
			t.Errorf("re-encoded\n got %s\nwant %s", again, want)
		}
	}
}

// A per_rank that is absent, null, of the wrong type or with a row of the
// wrong type reads as a []RankResult did: no rows, or an error.
func TestRankRowsReadsOldShapes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		rows int
		null bool
		fail bool
	}{
		{`{}`, 0, true, false},
		{`{"per_rank":null}`, 0, true, false},
		{`{"per_rank":[]}`, 0, false, false},
		{`{"per_rank":[{"rank":2,"host":"h","unknown":1},null,{}]}`, 3, false, false},
		{`{"per_rank":{"rank":1}}`, 0, true, true},
		{`{"per_rank":[{"rank":1},{"rank":"two"}]}`, 2, false, true},
	} {
		var p PhaseResult
		err := json.Unmarshal([]byte(tc.in), &p)
		if (err != nil) != tc.fail || p.PerRank.Len() != tc.rows {
			t.Errorf("%s: %d rows, error %v", tc.in, p.PerRank.Len(), err)
		}
		if b, _ := json.Marshal(p.PerRank); (string(b) == "null") != tc.null {
			t.Errorf("%s: re-encoded as %s", tc.in, b)
		}
	}
}

// FuzzRankRowsJSON: whatever per_rank a file holds, RankRows reads it
// exactly when []RankResult does, and writes it back as []RankResult does.
func FuzzRankRowsJSON(f *testing.F) {
	sample, _ := json.Marshal(rowsSample())
	f.Add(sample)
	f.Add([]byte(`[{"rank":1.5}]`))
	f.Add([]byte(`[{"host":"\u003c\ud800"},{"seconds":-0}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var old []RankResult
		var rr RankRows
		errOld, errNew := json.Unmarshal(b, &old), json.Unmarshal(b, &rr)
		if (errOld == nil) != (errNew == nil) {
			t.Fatalf("[]RankResult: %v; RankRows: %v", errOld, errNew)
		}
		if errOld != nil {
			return
		}
		want, _ := json.Marshal(old)
		got, err := json.Marshal(rr)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%v\n got %s\nwant %s", err, got, want)
		}
	})
}

// The rows Gathered.Add packs are the records it decoded, field by field.
func TestGatheredRowsAreTheRecords(t *testing.T) {
	var recs []RankRecord
	for r := range 300 {
		rec := RankRecord{Rank: r + 5, Host: fmt.Sprintf("cn%02d", r/8), Ops: int64(r * 1000), Bytes: int64(r) << 30, Errors: int64(r % 3),
			MaxNs: int64(r) * 12345, Seconds: 1 + float64(r)/7, CPUs: fmt.Sprintf("%d-%d", r%8*2, r%8*2+1)}
		if r%50 == 49 {
			rec.Error, rec.CPUs = fmt.Sprintf("rank %d: EIO", r+5), ""
		}
		recs = append(recs, rec)
	}
	g := Gather(recs)
	if g.Rows.Len() != len(recs) {
		t.Fatalf("%d rows of %d", g.Rows.Len(), len(recs))
	}
	for i, row := range g.Rows.All() {
		rec := recs[i]
		want := RankResult{Rank: rec.Rank, Host: rec.Host, Bytes: rec.Bytes, Ops: rec.Ops, Seconds: rec.Seconds, Errors: rec.Errors,
			MaxLatencyNs: rec.MaxNs, Error: rec.Error, CPUs: rec.CPUs}
		if row != want || g.Rows.At(i) != want {
			t.Fatalf("row %d: All %+v, At %+v, want %+v", i, row, g.Rows.At(i), want)
		}
	}
	// Rows appended after Done (which drops the index of the strings)
	// still find the strings already there.
	n := len(g.Rows.strs)
	g.Rows.Append(RankResult{Rank: 305, Host: "cn00", CPUs: "0-1"})
	if len(g.Rows.strs) != n || g.Rows.At(300).Host != "cn00" || g.Rows.At(300).CPUs != "0-1" {
		t.Errorf("appended %+v; %d strings, was %d", g.Rows.At(300), len(g.Rows.strs), n)
	}
}

// A packed row of a 10,000-rank phase (64 ranks a host, each with its
// CPU list, a few hundred ops) takes at most 32 bytes, where a RankResult
// took 96: what keeps rank 0's gather under 1 MB.
func TestRankRowsPackedSize(t *testing.T) {
	g := Gather(rows10k())
	per := float64(g.Rows.Size()) / float64(g.Rows.Len())
	if per > 32 {
		t.Errorf("%.1f bytes a row (%d for %d rows), want at most 32", per, g.Rows.Size(), g.Rows.Len())
	}
	t.Logf("%.1f bytes a row", per)
}

// rows10k is a 10,000-rank phase's rows, 64 ranks a host.
func rows10k() []RankRecord {
	var recs []RankRecord
	for r := range 10000 {
		recs = append(recs, RankRecord{Rank: r, Host: fmt.Sprintf("cn%05d.hpc.example.org", r/64), Ops: 1000, Bytes: 1000 * 4096,
			MaxNs: 3_000_000 + int64(r), Seconds: 0.61 + float64(r%1000)/1e4, CPUs: fmt.Sprintf("%d-%d", r%64*2, r%64*2+1),
			OpsByType: map[string]OpCount{"write": {Ops: 1000, Bytes: 1000 * 4096}}})
	}
	return recs
}

// What the JSON of a 10,000-rank phase's per_rank costs to write
// (MarshalIndent, as WriteManifest does) and to read, packed and as the
// []RankResult it replaced.
func BenchmarkPerRankJSON10k(b *testing.B) {
	g := Gather(rows10k())
	var slice []RankResult
	for _, r := range g.Rows.All() {
		slice = append(slice, r)
	}
	type oldPhase struct {
		PerRank []RankResult `json:"per_rank"`
	}
	type newPhase struct {
		PerRank RankRows `json:"per_rank"`
	}
	enc, _ := json.MarshalIndent(oldPhase{slice}, "", "  ")
	for _, tc := range []struct {
		name string
		v    any
	}{{"packed", newPhase{g.Rows}}, {"slice", oldPhase{slice}}} {
		b.Run("write/"+tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := json.MarshalIndent(tc.v, "", "  "); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(enc)), "json-bytes")
		})
	}
	// As WriteManifest writes per_rank: streamed at its depth, no
	// json.Marshaler, nothing re-scanned.
	b.Run("write/streamed", func(b *testing.B) {
		b.ReportAllocs()
		w := bufio.NewWriterSize(io.Discard, 64<<10)
		for b.Loop() {
			if err := g.Rows.writeJSON(w, "  ", "  "); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read/packed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var p newPhase
			if err := json.Unmarshal(enc, &p); err != nil || p.PerRank.Len() != 10000 {
				b.Fatal(err)
			}
		}
	})
	b.Run("read/slice", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var p oldPhase
			if err := json.Unmarshal(enc, &p); err != nil || len(p.PerRank) != 10000 {
				b.Fatal(err)
			}
		}
	})
}

// A whole manifest of one 10,000-rank phase (its rows, per-host sums and
// histograms) written by WriteManifest, as rank 0 writes it after the phase.
func BenchmarkWriteManifest10k(b *testing.B) {
	m := manifest10k(b)
	path := filepath.Join(b.TempDir(), "manifest.json")
	b.ReportAllocs()
	for b.Loop() {
		if err := WriteManifest(path, m); err != nil {
			b.Fatal(err)
		}
	}
	if st, err := os.Stat(path); err == nil {
		b.ReportMetric(float64(st.Size()), "file-bytes")
	}
}

// The same manifest with the []RankResult rows before RankRows, written as
// WriteManifest wrote it then (json.MarshalIndent, WriteFileAtomic): the
// figure the packed rows' manifest must not be slower than. The shadowing
// per_rank field moves to the end of each phase: the same bytes to
// encode, in another order.
func BenchmarkWriteManifest10kSlice(b *testing.B) {
	m := manifest10k(b)
	type slicePhase struct {
		PhaseResult
		PerRank []RankResult `json:"per_rank"`
	}
	sm := struct {
		*Manifest
		Phases []slicePhase `json:"phases"`
	}{Manifest: m}
	for _, p := range m.Phases {
		sp := slicePhase{PhaseResult: p}
		for _, r := range p.PerRank.All() {
			sp.PerRank = append(sp.PerRank, r)
		}
		sm.Phases = append(sm.Phases, sp)
	}
	path := filepath.Join(b.TempDir(), "manifest.json")
	b.ReportAllocs()
	for b.Loop() {
		enc, err := json.MarshalIndent(&sm, "", "  ")
		if err != nil {
			b.Fatal(err)
		}
		if err := WriteFileAtomic(path, append(enc, '\n')); err != nil {
			b.Fatal(err)
		}
	}
	if st, err := os.Stat(path); err == nil {
		b.ReportMetric(float64(st.Size()), "file-bytes")
	}
}

// manifest10k is a manifest of one 10,000-rank phase.
func manifest10k(b *testing.B) *Manifest {
	h := NewHistogram()
	for i := range 5000 {
		_ = h.RecordValue(int64(20000 + i*37))
	}
	pr := PhaseResult{Name: "write", Kind: "create_files", Status: StatusPassed, Ranks: 10000}
	if err := Fill(&pr, rows10k(), map[string]*hdr.Histogram{"write": h}, []float64{1.2}); err != nil {
		b.Fatal(err)
	}
	return &Manifest{SchemaVersion: SchemaVersion, Tool: "prism", Status: StatusPassed, Phases: []PhaseResult{pr}}
}
