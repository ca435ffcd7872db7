package report

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prism-hpc/prism/internal/rangelist"
)

// SummaryOptions shape the text summary.
type SummaryOptions struct {
	// Wide prints every column (kind, errors, mean, p90, p99.9, cache)
	// and whole names, however wide the lines get.
	Wide bool
	// Width is the widest line of the default form (0: SummaryWidth).
	Width int
}

// SummaryWidth is the default summary's widest line: it reads in a
// terminal of 100 columns, a mail or a ticket without wrapping.
const SummaryWidth = 100

// WriteSummary prints the human summary of a manifest in SummaryWidth
// columns (see WriteSummaryWith).
func WriteSummary(w io.Writer, m *Manifest) error { return WriteSummaryWith(w, m, SummaryOptions{}) }

// WriteSummaryWith prints the human summary of a manifest: a header (run,
// communicator, host, storage), one row per phase (one per rank count of a
// sweep) with an indented row per op type when there are several, then the
// expectation verdicts, the outlier flags, errors and warnings. Names are
// left-aligned and numbers right-aligned, so columns read down. Byte
// columns are blank where a phase (or op) moves no bytes. Unless o.Wide,
// lines fit o.Width: long names are shortened in the middle (the sweep's
// -n16 suffix stays), counts and rates above 99,999 are written 123k or
// 1.23M, long texts wrap, and the max and wall columns go first when even
// that is too wide.
func WriteSummaryWith(w io.Writer, m *Manifest, o SummaryOptions) error {
	width := o.Width
	if width <= 0 {
		width = SummaryWidth
	}
	if o.Wide {
		width = 0
	}
	line := func(parts ...string) { writeFields(w, width, parts) }
	line(fmt.Sprintf("prism %s", m.Version), "run "+m.RunID, "status "+m.Status)
	if !m.StartedAt.IsZero() {
		took := ""
		if m.FinishedAt.After(m.StartedAt) {
			took = "took " + FormatSeconds(m.FinishedAt.Sub(m.StartedAt).Seconds())
		}
		line("started "+m.StartedAt.UTC().Format(time.RFC3339), took)
	}
	line(fmt.Sprintf("comm %s (%d ranks on %d hosts, rank from %s)", m.Comm.Kind, m.Comm.Ranks, m.Comm.Hosts, m.Comm.RankSource),
		"host "+m.Host.Hostname, m.Host.CPUModel)
	if m.Clock.Source != "" {
		line("op clock "+m.Clock.Source, m.Clock.Reason)
	}
	line(fmt.Sprintf("workdir %s (%s, %s)", m.Host.Workdir, m.Host.FSType, m.Host.MountOptions))
	// Every host's filesystem, when there are several hosts or they differ.
	if len(m.Hosts) > 1 {
		for _, h := range m.Hosts {
			line(fmt.Sprintf("  host %s ranks %s: %s %s on %s (fs id %s)", h.Hostname, rangelist.Format(h.Ranks), h.FSType, h.MountSource, h.MountPoint, h.FSID))
		}
	}
	fmt.Fprintln(w)

	count, rate := compactCount, compactRate
	if o.Wide {
		count, rate = func(n int64) string { return fmt.Sprint(n) }, func(r float64) string { return fmt.Sprintf("%.0f", r) }
	}
	t := newTable("lllrrrrrrrrrrrrrrl", "phase", "kind", "status", "ranks", "ops", "errors", "bytes", "wall", "MiB/s", "ops/s", "mean", "p50", "p90", "p99", "p99.9", "max", "cache")
	for _, p := range m.Phases {
		t.add(p.Name, p.Kind, p.Status, fmt.Sprint(p.Ranks), count(p.Ops), fmt.Sprint(p.Errors), byteCell(p.Bytes, o.Wide), FormatSeconds(p.WallSeconds),
			mibCell(p.Bytes, p.BytesPerSec), rate(p.OpsPerSec),
			FormatNs(int64(p.Latency.Mean)), FormatNs(p.Latency.P50), FormatNs(p.Latency.P90), FormatNs(p.Latency.P99), FormatNs(p.Latency.P999), FormatNs(p.Latency.Max),
			p.Cache.Applied)
		if len(p.OpsByType) > 1 {
			for _, op := range sortedOps(p.OpsByType) {
				s := p.OpsByType[op]
				t.add("  "+op, "", "", "", count(s.Ops), fmt.Sprint(s.Errors), byteCell(s.Bytes, o.Wide), "",
					mibCell(s.Bytes, s.BytesPerSec), rate(s.OpsPerSec),
					FormatNs(int64(s.Latency.Mean)), FormatNs(s.Latency.P50), FormatNs(s.Latency.P90), FormatNs(s.Latency.P99), FormatNs(s.Latency.P999), FormatNs(s.Latency.Max), "")
			}
		}
	}
	if !o.Wide {
		t.drop("kind", "errors", "mean", "p90", "p99.9", "cache")
		t.shrink(0, 14)
		t.fit(width, "max", "wall")
	}
	if err := t.write(w); err != nil {
		return err
	}
	if err := writeHosts(w, m, width, count, rate); err != nil {
		return err
	}

	var pass, fail int
	v := newTable("lrlrrl", "phase", "ranks", "metric", "value", "limit", "verdict")
	for _, p := range m.Phases {
		for _, x := range p.Expect {
			verdict := "pass"
			if x.Passed {
				pass++
			} else {
				fail++
				verdict = "FAIL"
			}
			v.add(p.Name, fmt.Sprint(p.Ranks), x.Metric, x.Value, x.Limit, verdict)
		}
	}
	if pass+fail > 0 {
		fmt.Fprintf(w, "\nexpectations: %d passed, %d failed\n", pass, fail)
		v.shrink(0, 14)
		v.shrink(2, 16)
		v.shrink(3, 20)
		v.shrink(4, 20)
		v.fit(width)
		if err := v.write(w); err != nil {
			return err
		}
	}

	if flags := flagsOf(m); len(flags) > 0 {
		fmt.Fprintf(w, "\nflags\n")
		f := newTable("llrl", "kind", "phase", "ranks", "detail")
		for _, x := range flags {
			f.add(x.Kind, x.Phase, fmt.Sprint(x.Ranks), x.Detail)
		}
		f.shrink(1, 14)
		f.wrapLast(width, 30)
		if err := f.write(w); err != nil {
			return err
		}
	}

	for i, l := range ErrorLines(m) {
		if i == 0 {
			fmt.Fprintln(w)
		}
		writeWrapped(w, width, l)
	}
	for _, warn := range m.Host.Warnings {
		writeWrapped(w, width, "warning: "+warn)
	}
	return nil
}

// byteCell is a byte count, blank for none: a metadata phase moves no
// bytes, and "0B" in its row reads as a measurement.
func byteCell(n int64, exact bool) string {
	switch {
	case n == 0:
		return ""
	case exact:
		return fmt.Sprint(n)
	}
	return FormatBytes(n)
}

// mibCell is a bandwidth in MiB/s, blank when nothing moved bytes.
func mibCell(bytes int64, bps float64) string {
	if bytes == 0 {
		return ""
	}
	return compactFloat(bps / (1 << 20))
}

// compactCount writes a count in at most 6 columns: exact up to 99,999,
// then three significant figures and k, M, G, T (123k, 1.23M).
func compactCount(n int64) string {
	if n < 100_000 && n > -100_000 {
		return fmt.Sprint(n)
	}
	return siFigures(float64(n))
}

// compactRate is compactCount for a rate (rounded to whole ops/s).
func compactRate(r float64) string {
	if r < 99_999.5 {
		return fmt.Sprintf("%.0f", r)
	}
	return siFigures(r)
}

// compactFloat keeps one decimal below 1,000 and none above, then SI
// prefixes past 99,999 (a bandwidth of 123,456 MiB/s reads 123k).
func compactFloat(f float64) string {
	switch {
	case f < 999.95:
		return fmt.Sprintf("%.1f", f)
	case f < 99_999.5:
		return fmt.Sprintf("%.0f", f)
	}
	return siFigures(f)
}

func siFigures(f float64) string {
	for _, u := range []string{"k", "M", "G", "T", "P"} {
		f /= 1000
		if f < 999.5 || u == "P" {
			return fmt.Sprintf("%.3g%s", f, u)
		}
	}
	return ""
}

// FormatCount writes a threshold or a count for people: an integer with
// thousands separators (1,000,000), anything else with up to 4
// significant figures (never 1e+06).
func FormatCount(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 9e18 {
		s := strconv.FormatInt(int64(math.Abs(f)), 10)
		var b strings.Builder
		if f < 0 {
			b.WriteByte('-')
		}
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		return b.String()
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// writeFields prints the fields of one header line separated by two
// spaces, going on in an indented line where the next would pass width
// (0: never).
func writeFields(w io.Writer, width int, parts []string) {
	var b strings.Builder
	n := 0
	for _, p := range splitLong(parts, width-2) {
		if p == "" {
			continue
		}
		l := utf8.RuneCountInString(p)
		switch {
		case n == 0:
		case width > 0 && n+2+l > width:
			b.WriteString("\n  ")
			n = 2
		default:
			b.WriteString("  ")
			n += 2
		}
		b.WriteString(p)
		n += l
	}
	b.WriteByte('\n')
	io.WriteString(w, b.String())
}

// splitLong splits a part longer than width after its commas (mount
// options), so a header line still fits.
func splitLong(parts []string, width int) []string {
	if width <= 0 {
		return parts
	}
	var out []string
	for _, p := range parts {
		for utf8.RuneCountInString(p) > width {
			r := []rune(p)
			cut := strings.LastIndex(string(r[:width]), ",")
			if cut <= 0 {
				break
			}
			out = append(out, p[:cut+1])
			p = p[cut+1:]
		}
		out = append(out, p)
	}
	return out
}

// ErrorLines are the run's errors, one line each: every failed phase's
// (naming the rank that failed first) and the run's own. The summary
// wraps them for reading; prism also prints them whole on stderr, where a
// log search or a copied path must find them on one line.
func ErrorLines(m *Manifest) []string {
	var out []string
	for _, p := range m.Phases {
		if p.Error == "" {
			continue
		}
		where := ""
		if p.FailedRank != nil {
			where = fmt.Sprintf(" (rank %d)", *p.FailedRank)
		}
		out = append(out, fmt.Sprintf("%s [%d ranks] %s%s: %s", p.Name, p.Ranks, p.Status, where, p.Error))
	}
	if m.Error != "" {
		out = append(out, fmt.Sprintf("run %s: %s", m.Status, m.Error))
	}
	return out
}

// writeWrapped prints s wrapped at width (0: not at all), continuation
// lines indented by four spaces.
func writeWrapped(w io.Writer, width int, s string) {
	if width <= 0 {
		fmt.Fprintln(w, s)
		return
	}
	for i, l := range WrapWords(s, width, width-4) {
		if i > 0 {
			l = "    " + l
		}
		fmt.Fprintln(w, l)
	}
}

// WrapWords breaks s at spaces into lines of at most first runes (the
// first) and rest runes (the others); a word longer than a line (a path)
// stays whole on a line of its own, so that it can still be copied.
func WrapWords(s string, first, rest int) []string { return wrapWords(s, first, rest, false) }

// wrapWords is WrapWords that, with cut, cuts a word longer than a line
// (a table cell must fit its column).
func wrapWords(s string, first, rest int, cut bool) []string {
	var out []string
	limit := max(first, 1)
	var cur []rune
	for _, word := range strings.Fields(s) {
		r := []rune(word)
		for {
			switch {
			case len(cur) == 0 && (len(r) <= limit || !cut):
				cur = append(cur, r...)
			case len(cur) > 0 && len(cur)+1+len(r) <= limit:
				cur = append(append(cur, ' '), r...)
			case len(cur) > 0:
				out = append(out, string(cur))
				cur, limit = nil, max(rest, 1)
				continue
			default: // a word longer than a whole line, cut
				out = append(out, string(r[:limit]))
				r, limit = r[limit:], max(rest, 1)
				continue
			}
			break
		}
	}
	if len(cur) > 0 || len(out) == 0 {
		out = append(out, string(cur))
	}
	return out
}

// writeHosts prints the per-host rows of the phases that ran on several
// hosts, with the per-node average (the aggregate over the hosts); with
// one host it prints nothing, the phase table says it all.
func writeHosts(w io.Writer, m *Manifest, width int, count func(int64) string, rate func(float64) string) error {
	t := newTable("llrrrrrrrr", "phase", "host", "ranks", "ops", "bytes", "MiB/s", "ops/s", "first", "last", "max")
	rows := 0
	for _, p := range m.Phases {
		if len(p.PerHost) < 2 {
			continue
		}
		rows++
		for _, h := range p.PerHost {
			t.add(p.Name, h.Host, fmt.Sprint(len(h.Ranks)), count(h.Ops), byteCell(h.Bytes, width == 0),
				mibCell(h.Bytes, h.BytesPerSec), rate(h.OpsPerSec),
				FormatSeconds(h.FirstDoneSeconds), FormatSeconds(h.LastDoneSeconds), FormatNs(h.MaxLatencyNs))
		}
		t.add(p.Name, "per node", "", "", "", mibCell(p.Bytes, p.PerNodeBytesPerSec), rate(p.PerNodeOpsPerSec), "", "", "")
	}
	if rows == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nper host\n")
	t.shrink(0, 14)
	t.shrink(1, 12)
	t.fit(width, "max", "first")
	return t.write(w)
}

// flagsOf returns the manifest's flags, computing them for a manifest
// written before flags existed.
func flagsOf(m *Manifest) []Flag {
	if m.Flags != nil {
		return m.Flags
	}
	return FlagsWith(m, FlagOptionsOf(m))
}

func sortedOps[V any](m map[string]V) []string {
	ops := make([]string, 0, len(m))
	for op := range m {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	return ops
}

// table lays out text columns: 'l' columns are left-aligned (names),
// 'r' columns right-aligned (numbers); widths count runes, so "µs" is one
// column wide per rune. Trailing blanks are trimmed. A column may shrink
// (its cells shortened in the middle, down to a minimum) and the last may
// wrap, so that the table fits a width.
type table struct {
	align string
	rows  [][]string
	min   map[int]int // shrinkable columns: the least width
	limit []int       // the width a column is cut to (0: its own)
	wrap  int         // the last column's width when it wraps (0: no)
}

func newTable(align string, header ...string) *table {
	t := &table{align: align, min: map[int]int{}}
	t.add(header...)
	return t
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// drop removes the columns with these headers.
func (t *table) drop(headers ...string) {
	for _, h := range headers {
		i := slices.Index(t.rows[0], h)
		if i < 0 {
			continue
		}
		t.align = t.align[:i] + t.align[i+1:]
		for j, r := range t.rows {
			t.rows[j] = slices.Delete(r, i, i+1)
		}
		mins := map[int]int{}
		for c, n := range t.min {
			switch {
			case c < i:
				mins[c] = n
			case c > i:
				mins[c-1] = n
			}
		}
		t.min = mins
	}
}

// shrink lets column col be shortened down to n runes.
func (t *table) shrink(col, n int) { t.min[col] = n }

// widths are the columns' natural widths.
func (t *table) widths() []int {
	width := make([]int, len(t.align))
	for _, r := range t.rows {
		for i, c := range r {
			if n := utf8.RuneCountInString(c); n > width[i] {
				width[i] = n
			}
		}
	}
	return width
}

func total(width []int) int {
	n := 2 * (len(width) - 1)
	for _, x := range width {
		n += x
	}
	return n
}

// fit shortens the shrinkable columns, the widest first, until the table
// is at most width wide (0: any width), then drops the columns named in
// drop, in order, while it is still too wide.
func (t *table) fit(width int, drop ...string) {
	if width <= 0 {
		return
	}
	for {
		w := t.widths()
		if t.shorten(w, width) || len(drop) == 0 {
			t.limit = w
			return
		}
		t.drop(drop[0])
		drop = drop[1:]
	}
}

// shorten takes runes off the shrinkable columns of w, the widest first,
// until w is at most width wide; it reports whether it got there.
func (t *table) shorten(w []int, width int) bool {
	for over := total(w) - width; over > 0; over-- {
		best := -1
		for c, m := range t.min {
			if w[c] > m && (best < 0 || w[c] > w[best]) {
				best = c
			}
		}
		if best < 0 {
			return false
		}
		w[best]--
	}
	return true
}

// wrapLast makes the last column wrap so the table is at most width wide
// (0: any width), keeping it at least least runes wide: the other columns
// are shortened first, so the last wraps only when they cannot give way.
func (t *table) wrapLast(width, least int) {
	if width <= 0 {
		return
	}
	w := t.widths()
	last := len(w) - 1
	natural := w[last]
	t.shorten(w, width)
	t.wrap = max(min(natural, width-(total(w)-w[last])), least)
	w[last] = t.wrap
	t.limit = w
}

// shortenName cuts s to n runes in the middle, so both the start of a name
// and its end (a sweep's -n16, a file's number) stay: "create_f…les-n16".
func shortenName(s string, n int) string {
	r := []rune(s)
	if len(r) <= n || n < 3 {
		return s
	}
	head := (n - 1 + 1) / 2
	tail := n - 1 - head
	return string(r[:head]) + "…" + string(r[len(r)-tail:])
}

func (t *table) write(w io.Writer) error {
	width := t.widths()
	if t.limit != nil {
		width = t.limit
	}
	var b strings.Builder
	for _, r := range t.rows {
		cells := slices.Clone(r)
		var more []string // the last cell's wrapped lines after the first
		for i := range cells {
			switch {
			case t.wrap > 0 && i == len(cells)-1:
				lines := wrapWords(cells[i], t.wrap, t.wrap, true)
				cells[i], more = lines[0], lines[1:]
			default:
				cells[i] = shortenName(cells[i], width[i])
			}
		}
		writeRow(&b, t.align, width, cells)
		for _, l := range more {
			blank := make([]string, len(cells))
			blank[len(blank)-1] = l
			writeRow(&b, t.align, width, blank)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeRow(b *strings.Builder, align string, width []int, cells []string) {
	var line strings.Builder
	for i, c := range cells {
		if i > 0 {
			line.WriteString("  ")
		}
		pad := strings.Repeat(" ", max(width[i]-utf8.RuneCountInString(c), 0))
		if align[i] == 'r' {
			line.WriteString(pad + c)
		} else {
			line.WriteString(c + pad)
		}
	}
	b.WriteString(strings.TrimRight(line.String(), " "))
	b.WriteByte('\n')
}

// FormatBytes prints a byte count with a binary unit.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		f /= unit
		if f < unit || u == "PiB" {
			return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.2f", f), "0"), ".0") + u
		}
	}
	return fmt.Sprintf("%dB", n)
}

// FormatNs prints a latency with three significant figures and a unit
// (894.975µs is 895µs, 999.9µs is 1ms).
func FormatNs(ns int64) string {
	if ns <= 0 {
		return "-"
	}
	return formatNsFigures(ns, 3)
}

// FormatNsAgainst prints a latency checked against a limit: as FormatNs,
// or with as many more figures as it takes to differ from the limit's text
// when the two differ, so a verdict never reads "1ms, limit 1ms".
func FormatNsAgainst(ns, limit int64) string {
	s := FormatNs(ns)
	for p := 4; ns != limit && ns > 0 && p <= 12 && s == FormatNs(limit); p++ {
		s = formatNsFigures(ns, p)
	}
	return s
}

func formatNsFigures(ns int64, figures int) string {
	if ns < 1000 {
		return fmt.Sprintf("%dns", ns)
	}
	for _, u := range []struct {
		name  string
		scale float64
	}{{"µs", 1e3}, {"ms", 1e6}} {
		s := strconv.FormatFloat(float64(ns)/u.scale, 'g', figures, 64)
		if f, _ := strconv.ParseFloat(s, 64); f < 1000 && !strings.ContainsRune(s, 'e') {
			return s + u.name
		}
	}
	s := strconv.FormatFloat(float64(ns)/1e9, 'g', figures, 64)
	if strings.ContainsRune(s, 'e') {
		s = strconv.FormatFloat(float64(ns)/1e9, 'f', 0, 64)
	}
	return s + "s"
}

// FormatSeconds prints a wall time.
func FormatSeconds(s float64) string {
	if s <= 0 {
		return "-"
	}
	return FormatNs(int64(s * 1e9))
}
