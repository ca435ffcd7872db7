package report

import (
	"bytes"
	"testing"
)

// TestSummaryGolden pins the text summary of a run with a sweep, a phase
// of two op types, a failed and a skipped phase, expectations and flags.
func TestSummaryGolden(t *testing.T) {
	m := synthManifest(1, 1)
	Flags(m)
	var b bytes.Buffer
	if err := WriteSummary(&b, m); err != nil {
		t.Fatal(err)
	}
	golden(t, "summary.golden", b.Bytes())
}

func TestTableAlignsRunes(t *testing.T) {
	tb := newTable("lr", "name", "latency")
	tb.add("create", "1.5µs")
	tb.add("  stat", "12ms")
	var b bytes.Buffer
	if err := tb.write(&b); err != nil {
		t.Fatal(err)
	}
	want := "name    latency\ncreate    1.5µs\n  stat     12ms\n"
	if b.String() != want {
		t.Fatalf("got\n%q\nwant\n%q", b.String(), want)
	}
}
