package report

// Where a phase's ops nest, one op type times a whole unit of work made of
// the others: save_file holds a checkpoint file's open, writes, fsync and
// close; load_file and load_state their reads; untar's extract holds every
// extract_file; md5_check's and s3 dataset reads' file holds its reads. Its
// latency is the figure a user asks for (how long a checkpoint file takes),
// and the phase's op count and pooled latency, which mix the outer op with
// the hundreds of small ops inside it, stand for nothing. outerOps lists
// those op types, outermost first.
var outerOps = []string{"save_file", "load_state", "load_file", "extract", "file"}

// HeadlineOp is the op type that stands for the phase in report.html's
// tables: its only op type, or the outer op where ops nest (outerOps); ""
// for a phase of several independent op types (mkdir, create, unlink: its
// totals stand for it, and latency is per op type), of several outer ops
// (mlperf_checkpoint's save_file and load_file) or of none.
func HeadlineOp(p *PhaseResult) string {
	if len(p.OpsByType) == 1 {
		for op := range p.OpsByType {
			return op
		}
	}
	if outer := OuterOps(p); len(outer) == 1 {
		return outer[0]
	}
	return ""
}

// OuterOps are the phase's op types that hold others (outerOps).
func OuterOps(p *PhaseResult) []string {
	var out []string
	for _, op := range outerOps {
		if _, ok := p.OpsByType[op]; ok && len(p.OpsByType) > 1 {
			out = append(out, op)
		}
	}
	return out
}

// Nested reports whether the phase's op types nest in its headline op.
func Nested(p *PhaseResult) bool {
	op := HeadlineOp(p)
	return op != "" && len(p.OpsByType) > 1
}
