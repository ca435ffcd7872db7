package slurm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxExpand bounds what ExpandHostList and ExpandTasksPerNode produce: a
// job environment naming more hosts than this is refused, not expanded, so
// a corrupt variable cannot make prism allocate without limit.
const MaxExpand = 1_000_000

// ErrTooLarge is returned when an expansion would exceed MaxExpand entries
// (or, for host lists, 256 MiB of names).
var ErrTooLarge = errors.New("slurm: expansion exceeds 1000000 entries")

// maxExpandBytes bounds the bytes of the names one host list expands to
// (a million long names would otherwise be gigabytes).
const maxExpandBytes = 256 << 20

// HostListError is a malformed host list or tasks-per-node value.
type HostListError struct {
	Value string // the whole value
	Pos   int    // byte offset of the problem in Value
	Msg   string
}

func (e *HostListError) Error() string {
	return fmt.Sprintf("slurm: %q at offset %d: %s", e.Value, e.Pos, e.Msg)
}

// ExpandHostList expands a Slurm compressed host list such as
// SLURM_JOB_NODELIST into host names, in order:
//
//	gpu[001-004,010]   gpu001 gpu002 gpu003 gpu004 gpu010
//	a[1-2]-ib,b3       a1-ib a2-ib b3
//	n[01-02]x[1-2]     n01x1 n01x2 n02x1 n02x2
//
// Hosts are separated by commas (or white space) outside brackets; a host
// may hold any number of bracketed lists of numbers and lo-hi ranges, and
// the product of them is expanded, the last varying fastest. A range keeps
// the width of its low bound, so 001-004 stays zero-padded (Slurm's rule).
// Empty entries are skipped. More than MaxExpand hosts is ErrTooLarge.
func ExpandHostList(s string) ([]string, error) {
	var hosts []host
	total, bytes := 0, int64(0)
	for start := 0; start < len(s); {
		end, err := hostEnd(s, start)
		if err != nil {
			return nil, err
		}
		if end > start {
			h, err := parseHost(s, start, end)
			if err != nil {
				return nil, err
			}
			n := h.count()
			if n > MaxExpand-total || int64(n)*int64(h.nameLen()) > maxExpandBytes-bytes {
				return nil, fmt.Errorf("%w: %q", ErrTooLarge, truncate(s))
			}
			total += n
			bytes += int64(n) * int64(h.nameLen())
			hosts = append(hosts, h)
		}
		start = end + 1
	}
	out := make([]string, 0, total)
	for _, h := range hosts {
		out = h.expand(out)
	}
	return out, nil
}

// host is one entry of a host list: literal parts between bracket groups.
// parts has one more element than groups.
type host struct {
	parts  []string
	groups [][]rng
}

type rng struct {
	lo, hi uint64
	width  int
}

func (r rng) n() uint64 { return r.hi - r.lo + 1 }

// count is the number of names h expands to, capped just above MaxExpand.
func (h host) count() int {
	n := uint64(1)
	for _, g := range h.groups {
		var m uint64
		for _, r := range g {
			m += r.n()
			if m > MaxExpand {
				return MaxExpand + 1
			}
		}
		n *= m
		if n > MaxExpand {
			return MaxExpand + 1
		}
	}
	return int(n)
}

// nameLen bounds the length of one expanded name.
func (h host) nameLen() int {
	n := 0
	for _, p := range h.parts {
		n += len(p)
	}
	for _, g := range h.groups {
		w := 0
		for _, r := range g {
			w = max(w, r.width, len(strconv.FormatUint(r.hi, 10)))
		}
		n += w
	}
	return n
}

func (h host) expand(out []string) []string {
	var rec func(i int, prefix string)
	rec = func(i int, prefix string) {
		if i == len(h.groups) {
			out = append(out, prefix+h.parts[i])
			return
		}
		p := prefix + h.parts[i]
		for _, r := range h.groups[i] {
			for v := r.lo; ; v++ {
				num := strconv.FormatUint(v, 10)
				if len(num) < r.width {
					num = strings.Repeat("0", r.width-len(num)) + num
				}
				rec(i+1, p+num)
				if v == r.hi {
					break
				}
			}
		}
	}
	rec(0, "")
	return out
}

func isSep(c byte) bool { return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// hostEnd returns the offset of the separator that ends the entry starting
// at start (or len(s)); commas inside brackets do not end it.
func hostEnd(s string, start int) (int, error) {
	depth := 0
	for i := start; i < len(s); i++ {
		switch c := s[i]; {
		case c == '[':
			if depth > 0 {
				return 0, &HostListError{Value: s, Pos: i, Msg: "nested '['"}
			}
			depth++
		case c == ']':
			if depth == 0 {
				return 0, &HostListError{Value: s, Pos: i, Msg: "']' without '['"}
			}
			depth--
		case isSep(c) && depth == 0:
			return i, nil
		}
	}
	if depth > 0 {
		return 0, &HostListError{Value: s, Pos: len(s), Msg: "'[' not closed"}
	}
	return len(s), nil
}

// parseHost parses s[start:end], which holds balanced, unnested brackets.
func parseHost(s string, start, end int) (host, error) {
	var h host
	lit := start
	for i := start; i < end; i++ {
		if s[i] != '[' {
			continue
		}
		h.parts = append(h.parts, s[lit:i])
		close := i + strings.IndexByte(s[i:end], ']')
		g, err := parseRanges(s, i+1, close)
		if err != nil {
			return host{}, err
		}
		h.groups = append(h.groups, g)
		i = close
		lit = close + 1
	}
	h.parts = append(h.parts, s[lit:end])
	return h, nil
}

// parseRanges parses the inside of one bracket group: "1-3,5,007-010".
func parseRanges(s string, start, end int) ([]rng, error) {
	if start == end {
		return nil, &HostListError{Value: s, Pos: start, Msg: "empty brackets"}
	}
	var out []rng
	for _, item := range strings.Split(s[start:end], ",") {
		loS, hiS, isRange := strings.Cut(item, "-")
		lo, err := parseNum(s, start, loS)
		if err != nil {
			return nil, err
		}
		hi := lo
		if isRange {
			if hi, err = parseNum(s, start, hiS); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, &HostListError{Value: s, Pos: start, Msg: fmt.Sprintf("range %s-%s runs backwards", loS, hiS)}
			}
			if hi-lo >= MaxExpand {
				return nil, fmt.Errorf("%w: range %s-%s in %q", ErrTooLarge, loS, hiS, truncate(s))
			}
		}
		out = append(out, rng{lo: lo, hi: hi, width: len(loS)})
		start += len(item) + 1
	}
	return out, nil
}

func parseNum(s string, pos int, n string) (uint64, error) {
	if n == "" {
		return 0, &HostListError{Value: s, Pos: pos, Msg: "empty number in brackets"}
	}
	if len(n) > 18 {
		return 0, &HostListError{Value: s, Pos: pos, Msg: fmt.Sprintf("number %.20s… too long", n)}
	}
	for i := 0; i < len(n); i++ {
		if n[i] < '0' || n[i] > '9' {
			return 0, &HostListError{Value: s, Pos: pos, Msg: fmt.Sprintf("%q is not a number or a lo-hi range", n)}
		}
	}
	return strconv.ParseUint(n, 10, 64)
}

// ExpandTasksPerNode expands SLURM_TASKS_PER_NODE ("2(x3),1" → 2 2 2 1):
// comma-separated counts, each optionally repeated with (xN). The result
// has one entry per node of the job, in the order of SLURM_JOB_NODELIST.
// More than MaxExpand nodes is ErrTooLarge.
func ExpandTasksPerNode(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, &HostListError{Value: s, Msg: "empty"}
	}
	type run struct{ tasks, times int }
	var runs []run
	total := 0
	pos := 0
	for _, item := range strings.Split(s, ",") {
		tasksS, rep, repeated := strings.Cut(strings.TrimSpace(item), "(x")
		tasks, err := smallInt(s, pos, tasksS, 0)
		if err != nil {
			return nil, err
		}
		times := 1
		if repeated {
			if !strings.HasSuffix(rep, ")") {
				return nil, &HostListError{Value: s, Pos: pos, Msg: fmt.Sprintf("%q: write N or N(xM)", item)}
			}
			if times, err = smallInt(s, pos, strings.TrimSuffix(rep, ")"), 1); err != nil {
				return nil, err
			}
		}
		if times > MaxExpand-total {
			return nil, fmt.Errorf("%w: %q", ErrTooLarge, truncate(s))
		}
		total += times
		runs = append(runs, run{tasks, times})
		pos += len(item) + 1
	}
	out := make([]int, 0, total)
	for _, r := range runs {
		for i := 0; i < r.times; i++ {
			out = append(out, r.tasks)
		}
	}
	return out, nil
}

func smallInt(s string, pos int, n string, min int) (int, error) {
	if n == "" || len(n) > 9 {
		return 0, &HostListError{Value: s, Pos: pos, Msg: fmt.Sprintf("%q is not a count", n)}
	}
	for i := 0; i < len(n); i++ {
		if n[i] < '0' || n[i] > '9' {
			return 0, &HostListError{Value: s, Pos: pos, Msg: fmt.Sprintf("%q is not a count (write N or N(xM))", n)}
		}
	}
	v, _ := strconv.Atoi(n)
	if v < min {
		return 0, &HostListError{Value: s, Pos: pos, Msg: fmt.Sprintf("count %d below %d", v, min)}
	}
	return v, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
