package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// randText is a string of the runes JSON and encoding/json treat apart:
// quotes, backslashes, every control character, HTML's <>&, U+2028/9,
// invalid UTF-8 (a lone byte, an encoded surrogate), non-ASCII and
// emoji, and the bytes of an indented key.
func randText(rng *rand.Rand) string {
	if rng.IntN(4) == 0 {
		return ""
	}
	pieces := []string{"cn", "a", "0-3", `"`, `\`, "/", "<", ">", "&", "\u2028", "\u2029", "\x7f", "é", "ü", "😀",
		"\xff", "\xed\xa0\x80", "\ufffd", " ", "\n  \"per_rank\": null", "{", "}", ",", ":", "e-07"}
	var sb strings.Builder
	for range 1 + rng.IntN(6) {
		if rng.IntN(3) == 0 {
			sb.WriteByte(byte(rng.IntN(0x20)))
		} else {
			sb.WriteString(pieces[rng.IntN(len(pieces))])
		}
	}
	return sb.String()
}

// randFloat is a seconds value near encoding/json's format boundaries
// (1e-6 and 1e21, e-07's shortening, -0, subnormals) or any float64 bits;
// NaN and ±Inf only when bad.
func randFloat(rng *rand.Rand, bad bool) float64 {
	edges := []float64{0, math.Copysign(0, -1), 1e-6, math.Nextafter(1e-6, 0), 1e21, math.Nextafter(1e21, 0), -1e21, 1e-7, 1.5e-10,
		5e-324, math.MaxFloat64, -math.MaxFloat64, 1.0 / 3, 0.61, 123456789.125, 1e20, 1e100}
	if bad && rng.IntN(50) == 0 {
		return []float64{math.NaN(), math.Inf(1), math.Inf(-1)}[rng.IntN(3)]
	}
	switch rng.IntN(3) {
	case 0:
		return edges[rng.IntN(len(edges))]
	case 1:
		return rng.Float64() * math.Pow(10, float64(rng.IntN(40)-20))
	}
	for {
		if f := math.Float64frombits(rng.Uint64()); !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f
		}
	}
}

func randInt(rng *rand.Rand) int64 {
	switch rng.IntN(4) {
	case 0:
		return []int64{0, -1, 1, math.MaxInt64, math.MinInt64}[rng.IntN(5)]
	case 1:
		return int64(rng.Uint64())
	}
	return rng.Int64N(1 << 20)
}

// randRows is n rows with few distinct strings (as a phase's hosts and
// CPU lists are), ranks at and off their index.
func randRows(rng *rand.Rand, n int, bad bool) []RankResult {
	strs := make([]string, 1+rng.IntN(8))
	for i := range strs {
		strs[i] = randText(rng)
	}
	pick := func() string { return strs[rng.IntN(len(strs))] }
	rows := make([]RankResult, n)
	for i := range rows {
		rows[i] = RankResult{Rank: i, Host: pick(), Bytes: randInt(rng), Ops: randInt(rng), Seconds: randFloat(rng, bad),
			Errors: randInt(rng), MaxLatencyNs: randInt(rng), Error: pick(), CPUs: pick()}
		if rng.IntN(5) == 0 {
			rows[i].Rank = int(randInt(rng))
		}
	}
	return rows
}

// writeRows is rr's JSON from writeJSON, compact or indented.
func writeRows(rr *RankRows, pre, ind string) ([]byte, error) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	err := rr.writeJSON(w, pre, ind)
	w.Flush()
	return buf.Bytes(), err
}

// The rows' encoder writes, for any rows, what encoding/json writes of
// the []RankResult, compact and indented at any depth, and fails where it
// fails (NaN, ±Inf); prism's own output of them reads back by the fast
// parser (not encoding/json's fallback) as the same rows.
func TestRankRowsEncoderIsEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	layouts := [][2]string{{"", ""}, {"", "  "}, {"      ", "  "}, {"\t", "\t"}}
	sizes := []int{-1, 0, 1, 2, 3, 7, 256, 257, 600, 10000} // -1: nil rows
	for round := range 400 {
		n := sizes[round%len(sizes)]
		if n == 10000 && round >= len(sizes) {
			n = rng.IntN(50)
		}
		var rows []RankResult
		if n >= 0 {
			rows = randRows(rng, n, true)
		}
		rr := RowsOf(rows...)
		for _, l := range layouts {
			var want []byte
			var werr error
			if l[1] == "" {
				want, werr = json.Marshal(rows)
			} else {
				want, werr = json.MarshalIndent(rows, l[0], l[1])
			}
			got, err := writeRows(&rr, l[0], l[1])
			if (err != nil) != (werr != nil) || err != nil && err.Error() != werr.Error() {
				t.Fatalf("round %d %q: error %v, encoding/json %v", round, l, err, werr)
			}
			if err != nil {
				continue
			}
			if !bytes.Equal(got, want) {
				i := 0
				for i < len(got) && i < len(want) && got[i] == want[i] {
					i++
				}
				t.Fatalf("round %d %q: differs at byte %d\n got …%.80q\nwant …%.80q", round, l, i, got[i:], want[i:])
			}
			back, ok := parseRows(want)
			if !ok {
				t.Fatalf("round %d %q: the fast parser refused prism's own rows", round, l)
			}
			if back.Len() != len(rows) || (rows == nil) != (back.off == nil) {
				t.Fatalf("round %d: read %d rows of %d", round, back.Len(), len(rows))
			}
			for i, r := range back.All() {
				w := rows[i]
				w.Host, w.CPUs, w.Error = asDecoded(t, w.Host), asDecoded(t, w.CPUs), asDecoded(t, w.Error)
				if r != w {
					t.Fatalf("round %d row %d: read %+v, want %+v", round, i, r, w)
				}
			}
		}
	}
}

// asDecoded is s as it reads back from JSON (invalid UTF-8 as U+FFFD).
func asDecoded(t *testing.T, s string) string {
	b, _ := json.Marshal(s)
	var out string
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// The fast parser and encoding/json's fallback read every per_rank alike:
// a shape the fast parser does not take (another key, a key's case, a
// null, a fraction for an int, an overflow) still reads as a
// []RankResult does.
func TestRankRowsParserDefers(t *testing.T) {
	for _, in := range []string{
		`[{"RANK":3}]`, `[{"rank":1,"Rank":2}]`, `[{"rank":1,"extra":[1,{"a":2}]}]`, `[null]`, `[{"host":null}]`,
		`[{"rank":1.0}]`, `[{"rank":1e2}]`, `[{"ops":9223372036854775808}]`, `[{"ops":-9223372036854775809}]`,
		`[{"seconds":1e999}]`, `[{"host":5}]`, `[{"r\u0061nk":4}]`, `[{"host":"\u00e9\ud83d\ude00\ud800"}]`, "[{\"host\":\"\xff\xed\xa0\x80é\"}]", `[{"host":"1.0","ops":1e2}]`,
		` [ { "rank" : -0 , "seconds" : -0.0E+0 } ] `, `[{"ops":-9223372036854775808,"bytes":9223372036854775807}]`,
		`[{"host":"a"},{"host":"a"},{"host":"b\"c"}]`, `[{"rank":2,"rank":5}]`, `[]`, `null`, `[{}]`,
	} {
		var rows []RankResult
		errOld := json.Unmarshal([]byte(in), &rows)
		var rr RankRows
		errNew := json.Unmarshal([]byte(in), &rr)
		if (errOld == nil) != (errNew == nil) {
			t.Errorf("%s: []RankResult %v, RankRows %v", in, errOld, errNew)
			continue
		}
		if rr.Len() != len(rows) || (rows == nil) != (rr.off == nil) {
			t.Errorf("%s: %d rows, want %d", in, rr.Len(), len(rows))
			continue
		}
		for i, r := range rr.All() {
			if r != rows[i] {
				t.Errorf("%s: row %d %+v, want %+v", in, i, r, rows[i])
			}
		}
	}
}

// WriteManifest's file is json.MarshalIndent(m, "", "  ") and a newline,
// byte for byte, whatever the phases (none, empty, rows nil, empty or
// many) and whatever the plan and params hold, even keys named phases or
// per_rank and strings that look like their lines; a NaN fails it as
// encoding/json does and leaves no file.
func TestWriteManifestIsMarshalIndent(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	dir := t.TempDir()
	path := filepath.Join(dir, "manifest.json")
	for round := range 60 {
		m := &Manifest{SchemaVersion: SchemaVersion, Tool: "prism", Status: StatusPassed, RunID: randText(rng),
			Plan:  map[string]any{"phases": nil, "per_rank": []any{map[string]any{"per_rank": nil, "phases": "\n  \"phases\": null"}}},
			Flags: []Flag{{Kind: randText(rng)}}, CommandLine: []string{randText(rng)}}
		switch round % 4 {
		case 0: // no phases: null
		case 1:
			m.Phases = []PhaseResult{}
		default:
			for i := range 1 + rng.IntN(3) {
				p := PhaseResult{Index: i, Name: randText(rng), Status: StatusPassed, Error: randText(rng), Ranks: 4,
					Params:  map[string]any{"per_rank": "\n      \"per_rank\": null", "phases": nil},
					Metrics: map[string]float64{"per_rank": randFloat(rng, false)}, Notes: map[string]string{randText(rng): randText(rng)}}
				switch rng.IntN(4) {
				case 0: // nil rows
				case 1:
					p.PerRank = RowsOf([]RankResult{}...)
				default:
					p.PerRank = RowsOf(randRows(rng, rng.IntN(300), false)...)
				}
				m.Phases = append(m.Phases, p)
			}
		}
		want, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteManifest(path, m); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if want = append(want, '\n'); !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			t.Fatalf("round %d: differs at byte %d\n got …%.120q\nwant …%.120q", round, i, got[i:], want[i:])
		}
		back, err := ParseManifest(path, got)
		if err != nil || len(back.Phases) != len(m.Phases) {
			t.Fatalf("round %d: read back: %v", round, err)
		}
		for i := range back.Phases {
			if g, w := back.Phases[i].PerRank.Len(), m.Phases[i].PerRank.Len(); g != w {
				t.Fatalf("round %d phase %d: read back %d rows of %d", round, i, g, w)
			}
		}
	}
	// A NaN seconds: the error encoding/json gives, and no file.
	m := &Manifest{SchemaVersion: SchemaVersion, Phases: []PhaseResult{{PerRank: RowsOf(RankResult{Seconds: math.NaN()})}}}
	nan := filepath.Join(dir, "nan.json")
	err := WriteManifest(nan, m)
	if err == nil || !strings.Contains(err.Error(), "report: encode manifest: json: unsupported value: NaN") {
		t.Errorf("NaN seconds: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("after the NaN: %d files in the directory, want the one manifest", len(ents))
	}
}

// Called directly on bytes encoding/json would not pass it (not JSON),
// UnmarshalJSON fails as json.Unmarshal does, the fast parser taking none.
func TestRankRowsParserRefusesNonJSON(t *testing.T) {
	for _, in := range []string{`[{"rank":01}]`, `[{"rank":-}]`, `[{"seconds":1.}]`, `[{"seconds":.5}]`, `[{"seconds":1e}]`,
		`[{"seconds":00.5}]`, `[{"rank":1}`, `[{"rank":1},]`, `[{"rank":1,}]`, "[{\"host\":\"a\x01\"}]", `[{"host":"a}]`, `[{"rank" 1}]`, `[] x`, `nul`} {
		if _, ok := parseRows([]byte(in)); ok {
			t.Errorf("%s: the fast parser took it", in)
		}
		var rr RankRows
		if err := rr.UnmarshalJSON([]byte(in)); err == nil {
			t.Errorf("%s: no error", in)
		}
	}
}
