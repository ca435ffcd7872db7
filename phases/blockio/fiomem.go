package blockio

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"

	"github.com/prism-hpc/prism/report"
)

// fio's defaults for what sizes its I/O buffers.
const (
	fioDefaultBS      = 4096
	fioDefaultIODepth = 1
)

// fioJobMemory is one job section's options as they size fio's buffers.
type fioJobMemory struct {
	bs, iodepth, numjobs int64
}

// bytes is what the job's processes hold in I/O buffers: each of its
// numjobs clones keeps iodepth units of the largest block size.
func (j fioJobMemory) bytes() int64 { return sat(sat(j.numjobs, j.iodepth), j.bs) }

// set applies one option line to j; others are ignored.
func (j *fioJobMemory) set(opt string) {
	name, val, _ := strings.Cut(strings.TrimSpace(opt), "=")
	name, val = strings.TrimSpace(name), strings.TrimSpace(val)
	switch name {
	case "bs", "blocksize", "bsrange", "blocksize_range", "bssplit":
		// "4k", "4k,1m" (read, write, trim), "4k-1m", "4k/50:1m/50": the
		// largest size named is the buffer fio allocates per unit.
		if n := fioLargestSize(val); n > 0 {
			j.bs = n
		}
	case "iodepth":
		if n, err := strconv.ParseInt(val, 10, 64); err == nil && n > 0 {
			j.iodepth = n
		}
	case "numjobs":
		if n, err := strconv.ParseInt(val, 10, 64); err == nil && n > 0 {
			j.numjobs = n
		}
	}
}

// fioLargestSize is the largest fio size in val (sizes separated by ',',
// '-', ':' or '/'; percentages of a bssplit are not sizes), 0 when none
// parses.
func fioLargestSize(val string) int64 {
	var best int64
	for _, f := range strings.FieldsFunc(val, func(r rune) bool { return r == ',' || r == '-' || r == ':' }) {
		size, _, _ := strings.Cut(f, "/") // bssplit's "4k/50"
		if n, ok := fioSize(size); ok && n > best {
			best = n
		}
	}
	return best
}

// fioSize parses a fio size as fio does with kb_base=1024 (its default):
// a number with an optional k, m, g, t or p (and i, b, ib: all powers of
// 1024).
func fioSize(s string) (int64, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "b"), "i")
	mult := int64(1)
	if k := len(s); k > 0 {
		if i := strings.IndexByte("kmgtp", s[k-1]); i >= 0 {
			mult = int64(1) << (10 * (i + 1))
			s = s[:k-1]
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return sat(n, mult), true
}

// sat multiplies without overflowing: an absurd request stays absurd.
func sat(a, b int64) int64 {
	if a != 0 && b > (1<<62)/a {
		return 1 << 62
	}
	return a * b
}

// fioMemory is the I/O buffers fio allocates for inline options (one job)
// or a job file (every job section, with [global]'s options under its
// own): what one rank's fio holds, which prism's memory rule weighs like
// its own phases' (fio caps a job's clones, not their buffers).
func fioMemory(options []string, job []byte) int64 {
	def := fioJobMemory{bs: fioDefaultBS, iodepth: fioDefaultIODepth, numjobs: 1}
	if job == nil {
		j := def
		for _, o := range options {
			j.set(o)
		}
		return j.bytes()
	}
	var total int64
	global, cur := def, fioJobMemory{}
	in := "" // the section the lines are in
	flush := func() {
		if in != "" && in != "global" {
			total = min(total+cur.bytes(), 1<<62)
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(job))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			flush()
			in = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "["), "]"))
			cur = global
		case in == "global":
			global.set(line)
		default:
			cur.set(line)
		}
	}
	flush()
	return total
}

// Memory is fio's I/O buffers (numjobs x iodepth x the largest block size
// of every job) plus the histograms prism fills from fio's results, one
// per op type.
func (p *fioPhase) Memory(ranks int) (int64, string) {
	return fioMemory(p.cfg.Options, p.cfg.job) + int64(len(fioOps))*report.RecorderBytes, "fio's numjobs, iodepth or bs"
}
