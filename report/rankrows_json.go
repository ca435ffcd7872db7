package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
)

// The JSON of RankRows is, byte for byte, what encoding/json makes of the
// []RankResult it replaced; the manifest is a contract (prism report,
// compare, report.html and users' scripts read it). It is written and read
// here by hand because a json.Marshaler's output is validated and copied
// by encoding/json and then, in a manifest, scanned again by Indent: at
// 10,000 ranks that made the packed rows 1.4 times slower to write than
// the slice. WriteManifest streams the rows into the file at their depth
// instead (writeJSON with the manifest's indent), so nothing re-reads them.

// MarshalJSON writes the rows as encoding/json writes the []RankResult
// they replaced (null for none at all).
func (rr RankRows) MarshalJSON() ([]byte, error) {
	if rr.off == nil {
		return []byte("null"), nil
	}
	var buf bytes.Buffer
	buf.Grow(len(rr.off)*140 + 4)
	w := bufio.NewWriterSize(&buf, 16<<10)
	err := rr.writeJSON(w, "", "")
	w.Flush() // a bytes.Buffer does not fail
	return buf.Bytes(), err
}

// writeJSON writes the rows to w as encoding/json writes the []RankResult
// they replace: compact when ind is "", else as json.MarshalIndent(rows,
// pre, ind) does. Its error is a value JSON cannot hold (a NaN or infinite
// seconds, as encoding/json refuses it); w's own errors stay in w (a
// bufio.Writer keeps the first), for the caller's Flush to report.
func (rr *RankRows) writeJSON(w *bufio.Writer, pre, ind string) error {
	switch {
	case rr.off == nil:
		w.WriteString("null")
		return nil
	case len(rr.off) == 0:
		w.WriteString("[]") // Indent leaves an empty array on its line
		return nil
	}
	// The layout: before each row, before each field, and the closing
	// bracket's line; the keys with their separators, in RankResult's
	// field order.
	var row, field, end, colon = "", "", "", ":"
	if ind != "" {
		row = "\n" + pre + ind
		field = row + ind
		end = "\n" + pre
		colon = ": "
	}
	key := func(first bool, name string) string {
		k := field + `"` + name + `"` + colon
		if !first {
			k = "," + k
		}
		return k
	}
	kRank, kHost, kBytes, kOps := key(true, "rank"), key(false, "host"), key(false, "bytes"), key(false, "ops")
	kSeconds, kErrors, kMaxNs := key(false, "seconds"), key(false, "errors"), key(false, "max_latency_ns")
	kError, kCPUs := key(false, "error"), key(false, "cpus")
	rowOpen, rowClose := row+"{", row+"}"

	// Each distinct string encoded once, by encoding/json itself (its
	// escapes: HTML-safe, \u2028, invalid UTF-8 as \ufffd), as one array
	// that the row scanner splits: span[2k:2k+2] is where string k is.
	quoted, span := []byte(`""`), []int{0, 2} // strs is nil while every string is ""
	if len(rr.strs) > 0 {
		quoted, _ = json.Marshal(rr.strs) // strings always encode
		span = make([]int, 0, 2*len(rr.strs))
		p := rowScanner{b: quoted, i: 1} // past the '['
		for range rr.strs {
			start := p.i
			p.str()
			span = append(span, start, p.i)
			p.next(',')
		}
	}
	str := func(id uint64) []byte { return quoted[span[2*id]:span[2*id+1]] }

	buf := make([]byte, 0, 32<<10)
	buf = append(buf, '[')
	b := rr.b
	for i := range rr.off {
		r, s, rest := rr.decodeIDs(i, b)
		b = rest
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, rowOpen...)
		buf = strconv.AppendInt(append(buf, kRank...), int64(r.Rank), 10)
		buf = append(append(buf, kHost...), str(s[0])...)
		buf = strconv.AppendInt(append(buf, kBytes...), r.Bytes, 10)
		buf = strconv.AppendInt(append(buf, kOps...), r.Ops, 10)
		var err error
		if buf, err = appendFloat(append(buf, kSeconds...), r.Seconds); err != nil {
			return err
		}
		buf = strconv.AppendInt(append(buf, kErrors...), r.Errors, 10)
		buf = strconv.AppendInt(append(buf, kMaxNs...), r.MaxLatencyNs, 10)
		if s[2] != 0 { // omitempty
			buf = append(append(buf, kError...), str(s[2])...)
		}
		if s[1] != 0 {
			buf = append(append(buf, kCPUs...), str(s[1])...)
		}
		buf = append(buf, rowClose...)
		if len(buf) > cap(buf)-1024 {
			w.Write(buf)
			buf = buf[:0]
		}
	}
	buf = append(append(buf, end...), ']')
	w.Write(buf)
	return nil
}

// appendFloat appends f as encoding/json writes a float64 (its
// floatEncoder: ES6 number formatting, 'e' below 1e-6 and from 1e21 on,
// e-07 shortened to e-7), and refuses NaN and ±Inf with the error
// encoding/json gives.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, &json.UnsupportedValueError{Value: reflect.ValueOf(f), Str: strconv.FormatFloat(f, 'g', -1, 64)}
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}

// UnmarshalJSON reads the array of RankResult objects (or null) and packs
// it. The rows as prism writes them (only RankResult's keys, numbers and
// strings) are parsed here in one pass; anything else (another key or its
// case, a null, a value of the wrong type, an overflow) is left to
// encoding/json, decoding a []RankResult as before: a row of the wrong
// type is then an error, after the rows that could be read are packed, as
// encoding/json leaves a []RankResult.
func (rr *RankRows) UnmarshalJSON(b []byte) error {
	if rows, ok := parseRows(b); ok {
		*rr = rows
		return nil
	}
	var rows []RankResult
	err := json.Unmarshal(b, &rows)
	*rr = RowsOf(rows...)
	return err
}

// rowScanner reads per_rank's JSON for parseRows; each method reports
// false on anything it does not read exactly as encoding/json would.
type rowScanner struct {
	b []byte
	i int
}

func (p *rowScanner) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next skips space and reads c, if c is next.
func (p *rowScanner) next(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a string; plain is false if it holds an escape or a byte
// past ASCII, which encoding/json then decodes.
func (p *rowScanner) str() (s []byte, plain, ok bool) {
	if !p.next('"') {
		return nil, false, false
	}
	start, plain := p.i, true
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			return p.b[start : p.i-1], plain, true
		case c == '\\':
			plain = false
			p.i += 2
		case c < 0x20: // not JSON
			return nil, false, false
		default:
			plain = plain && c < 0x80
			p.i++
		}
	}
	return nil, false, false
}

// text reads a string value, decoding one with escapes or past ASCII by
// encoding/json (its \u surrogates, its U+FFFD for invalid UTF-8).
func (p *rowScanner) text() ([]byte, bool) {
	start := p.i
	s, plain, ok := p.str()
	if !ok || plain {
		return s, ok
	}
	var t string
	if json.Unmarshal(p.b[start:p.i], &t) != nil {
		return nil, false
	}
	return []byte(t), true
}

// digits reads [0-9]+ with JSON's rule on leading zeros, and returns its
// value; ok is false on overflow past uint64.
func (p *rowScanner) digits() (uint64, bool) {
	start := p.i
	var u uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		if u > (math.MaxUint64-9)/10 {
			return 0, false
		}
		u = u*10 + uint64(p.b[p.i]-'0')
		p.i++
	}
	n := p.i - start
	return u, n > 0 && (n == 1 || p.b[start] != '0')
}

// int reads an integer number that fits an int64. A fraction or an
// exponent (an error for an int field) is left unread, and so refused by
// what parseRows expects next (a ',' or a '}').
func (p *rowScanner) int() (int64, bool) {
	p.space()
	neg := p.i < len(p.b) && p.b[p.i] == '-'
	if neg {
		p.i++
	}
	u, ok := p.digits()
	if !ok {
		return 0, false
	}
	if neg {
		return -int64(u), u <= 1<<63
	}
	return int64(u), u <= math.MaxInt64
}

// float reads a JSON number into a float64, as strconv.ParseFloat does
// for encoding/json; out of range is not read.
func (p *rowScanner) float() (float64, bool) {
	p.space()
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	if _, ok := p.digitsAny(true); !ok {
		return 0, false
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if _, ok := p.digitsAny(false); !ok {
			return 0, false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if _, ok := p.digitsAny(false); !ok {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(string(p.b[start:p.i]), 64)
	return f, err == nil
}

// digitsAny skips [0-9]+ of any length (a float's parts), with JSON's rule
// on leading zeros for an integer part.
func (p *rowScanner) digitsAny(intPart bool) (int, bool) {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	n := p.i - start
	return n, n > 0 && (!intPart || n == 1 || p.b[start] != '0')
}

// parseRows packs per_rank's JSON as prism writes it; ok is false for
// anything else, which UnmarshalJSON leaves to encoding/json.
func parseRows(b []byte) (rr RankRows, ok bool) {
	p := &rowScanner{b: b}
	p.space()
	if bytes.HasPrefix(b[p.i:], []byte("null")) {
		p.i += 4
		p.space()
		return RankRows{}, p.i == len(b)
	}
	if !p.next('[') {
		return rr, false
	}
	// A row is an object: the count of '{' (fast) sizes the room, as
	// RowsOf does; trim gives back what strings holding '{' added.
	rr.off = make([]uint32, 0, bytes.Count(b, []byte{'{'}))
	if !p.next(']') {
		for {
			var r RankResult
			var host, cpus, msg []byte
			if !p.next('{') {
				return rr, false
			}
			if !p.next('}') {
				for {
					k, plain, ok := p.str()
					if !ok || !plain || !p.next(':') {
						return rr, false
					}
					var v int64
					switch string(k) {
					case "rank":
						v, ok = p.int()
						r.Rank, ok = int(v), ok && int64(int(v)) == v
					case "host":
						host, ok = p.text()
					case "bytes":
						r.Bytes, ok = p.int()
					case "ops":
						r.Ops, ok = p.int()
					case "seconds":
						r.Seconds, ok = p.float()
					case "errors":
						r.Errors, ok = p.int()
					case "max_latency_ns":
						r.MaxLatencyNs, ok = p.int()
					case "error":
						msg, ok = p.text()
					case "cpus":
						cpus, ok = p.text()
					default: // another key, or a case encoding/json folds
						ok = false
					}
					if !ok {
						return rr, false
					}
					if p.next(',') {
						continue
					}
					if !p.next('}') {
						return rr, false
					}
					break
				}
			}
			appendRow(&rr, &r, host, cpus, msg)
			if p.next(',') {
				continue
			}
			if !p.next(']') {
				return rr, false
			}
			break
		}
	}
	p.space()
	if p.i != len(b) {
		return rr, false
	}
	rr.trim()
	return rr, true
}
