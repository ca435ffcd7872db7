package report

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
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

// longManifest is synthManifest with long phase names (a sweep's -n16
// suffix at the end), a phase of many op types, an interrupted phase and
// rates in the millions: what the default summary must fit in 100 columns.
func longManifest() *Manifest {
	m := synthManifest(3, 1)
	for i := range m.Phases {
		p := &m.Phases[i]
		p.Name = fmt.Sprintf("%s-on-the-shared-scratch-filesystem-of-the-cluster-n%d", p.Name, p.Ranks)
	}
	p := &m.Phases[1]
	p.Status = StatusInterrupted
	p.Ops, p.OpsPerSec, p.Errors = 123_456_789, 7_730_000.4, 12
	for _, op := range []string{"open", "read", "write", "fsync", "close", "stat", "unlink", "rename", "mkdir", "rmdir", "readdir_plus_stat_of_every_entry"} {
		p.OpsByType[op] = OpStats{Ops: 9_876_543, OpsPerSec: 1_234_567, Latency: Latency{Mean: 1500, P50: 1200, P90: 3000, P99: 894_975, P999: 999_900, Max: 12_345_678_901}}
	}
	p.OpsByType["read"] = OpStats{Ops: 9_876_543, Bytes: 1 << 40, BytesPerSec: 123_456 * (1 << 20), OpsPerSec: 1_234_567, Latency: Latency{P50: 1200, P99: 894_975, Max: 5e9}}
	m.Host.CPUModel = "AMD EPYC 9654 96-Core Processor with a rather long model string from /proc/cpuinfo"
	m.Host.Warnings = []string{strings.Repeat("a warning that goes on and on ", 8)}
	Flags(m)
	return m
}

// TestSummaryFits100Columns: every line of the default summary of
// longManifest is at most 100 runes; names are shortened in the middle
// (their -n<ranks> suffix stays, so the rows of a sweep still differ);
// counts and rates in the millions read 123M, not 123456789; --wide
// prints whole names, exact counts and the extra columns.
func TestSummaryFits100Columns(t *testing.T) {
	m := longManifest()
	var b bytes.Buffer
	if err := WriteSummary(&b, m); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for i, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(l); n > SummaryWidth {
			t.Errorf("line %d is %d columns (> %d): %q", i+1, n, SummaryWidth, l)
		}
	}
	for _, want := range []string{"…", "-n2\n", "-n4 ", "-n8 ", "123M", "7.73M", "1.23M", "interrupted"} {
		if want == "-n2\n" {
			want = "-n2 "
		}
		if !strings.Contains(out, want) {
			t.Errorf("default summary lacks %q:\n%s", want, out)
		}
	}
	head := strings.Fields(strings.Split(out, "\n\n")[1])
	for _, col := range []string{"kind", "mean", "p90", "p99.9", "cache", "errors"} {
		if slices.Contains(head[:12], col) {
			t.Errorf("default phase table has the wide column %q: %v", col, head[:12])
		}
	}
	if strings.Contains(out, "123456789") || strings.Contains(out, m.Phases[0].Name) {
		t.Errorf("default summary has an exact count or a whole long name:\n%s", out)
	}

	b.Reset()
	if err := WriteSummaryWith(&b, m, SummaryOptions{Wide: true}); err != nil {
		t.Fatal(err)
	}
	wide := b.String()
	for _, want := range []string{m.Phases[0].Name, "123456789", "readdir_plus_stat_of_every_entry", " kind ", " mean ", " p90 ", " p99.9 ", " cache", " errors "} {
		if !strings.Contains(wide, want) {
			t.Errorf("wide summary lacks %q", want)
		}
	}
	widest := 0
	for _, l := range strings.Split(wide, "\n") {
		widest = max(widest, utf8.RuneCountInString(l))
	}
	if widest <= SummaryWidth {
		t.Errorf("wide summary's widest line is %d columns: it should not be cut to %d", widest, SummaryWidth)
	}
}

// TestSummaryBlankBytes: a phase (and an op) that moved no bytes has its
// bytes and MiB/s cells blank, not 0B and 0.0; one that did shows them.
func TestSummaryBlankBytes(t *testing.T) {
	m := synthManifest(1, 1)
	var b bytes.Buffer
	if err := WriteSummary(&b, m); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	var header string
	for i, l := range lines {
		if strings.HasPrefix(l, "phase ") && strings.Contains(l, "MiB/s") {
			header = l
			lines = lines[i+1:]
			break
		}
	}
	lines = lines[:slices.Index(lines, "")] // the phase table only
	bytesEnd := strings.Index(header, "bytes") + len("bytes")
	mibEnd := strings.Index(header, "MiB/s") + len("MiB/s")
	cell := func(l string, end, w int) string {
		if len(l) < end {
			return strings.TrimSpace(l[min(len(l), end-w):])
		}
		return strings.TrimSpace(l[end-w : end])
	}
	seen := map[string]bool{}
	for _, l := range lines {
		name := strings.Fields(l + " x")[0]
		switch name {
		case "list_files", "readdir", "stat", "move_files":
			seen[name] = true
			if c, r := cell(l, bytesEnd, 8), cell(l, mibEnd, 5); c != "" || r != "" {
				t.Errorf("%s moved no bytes but shows bytes %q, MiB/s %q:\n%s", name, c, r, l)
			}
		case "create_files":
			seen[name] = true
			if c, r := cell(l, bytesEnd, 8), cell(l, mibEnd, 5); c == "" || r == "" {
				t.Errorf("create_files moved bytes but shows bytes %q, MiB/s %q:\n%s", c, r, l)
			}
		}
	}
	if len(seen) != 5 || strings.Contains(b.String(), " 0B ") || strings.Contains(b.String(), " 0.0 ") {
		t.Errorf("rows seen %v; summary:\n%s", seen, b.String())
	}
}

// TestFormatRounding: latencies to three figures across unit boundaries
// (never 1e+03µs), more figures only where a verdict would otherwise read
// as its limit, and counts with separators instead of 1e+06.
func TestFormatRounding(t *testing.T) {
	for _, c := range []struct {
		got  string
		want string
	}{
		{FormatNs(894_975), "895µs"},
		{FormatNs(999_900), "1ms"},
		{FormatNs(999), "999ns"},
		{FormatNs(1_028_607), "1.03ms"},
		{FormatNs(999_999_999), "1s"},
		{FormatNs(1234e9), "1234s"},
		{FormatNsAgainst(894_975, 2e6), "895µs"},
		{FormatNsAgainst(1_000_400, 1e6), "1.0004ms"},
		{FormatNsAgainst(999_999, 1e6), "999.999µs"},
		{FormatNsAgainst(1e6, 1e6), "1ms"},
		{FormatCount(1e6), "1,000,000"},
		{FormatCount(20000), "20,000"},
		{FormatCount(1e18), "1,000,000,000,000,000,000"},
		{FormatCount(999), "999"},
		{FormatCount(1500.5), "1500.5"},
		{compactCount(123_456_789), "123M"},
		{compactCount(99_999), "99999"},
		{compactRate(1_234_567), "1.23M"},
		{compactFloat(123_456), "123k"},
		{compactFloat(297.62), "297.6"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestSummaryHostRanks: with several hosts, each host's line names its
// ranks as ranges (rangelist, the cpulist format).
func TestSummaryHostRanks(t *testing.T) {
	m := synthManifest(1, 1)
	m.Hosts = []HostFS{
		{Hostname: "a", Ranks: []int{0, 1, 2, 3, 8}, FSType: "lustre", MountSource: "mds:/fs", MountPoint: "/scratch", FSID: "1"},
		{Hostname: "b", Ranks: []int{4, 5, 6, 7}, FSType: "lustre", MountSource: "mds:/fs", MountPoint: "/scratch", FSID: "1"},
		{Hostname: "c", Ranks: []int{9}, FSType: "lustre", MountSource: "mds:/fs", MountPoint: "/scratch", FSID: "1"},
	}
	var b bytes.Buffer
	if err := WriteSummary(&b, m); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"  host a ranks 0-3,8: lustre", "  host b ranks 4-7: lustre", "  host c ranks 9: lustre"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}
