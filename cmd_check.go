package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/all"
	"github.com/prism-hpc/prism/report"
)

func cmdCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("check")
	n := fs.Int("n", 0, "number of ranks to size the plan for (default: the plan's largest sweep, or what its grouped phases need side by side)")
	workdir := fs.String("workdir", "", "check this workdir instead of the plan's (as prism run --workdir)")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(pos) > 1 || *n < 0 {
		return usageErrorf("%s", usageLine("check"))
	}
	plan := ""
	if len(pos) == 1 {
		plan = pos[0]
	}
	return runCheck(ctx, plan, *n, *workdir, stdout)
}

// runCheck decodes the plan, prints it resolved for ranks (0: as many as
// the plan needs) and checks this host's environment for it: exit 2 for a
// plan error, 1 when this environment cannot run the plan.
func runCheck(_ context.Context, plan string, ranks int, workdir string, w io.Writer) error {
	width := outputWidth(w)
	src, name, err := loadSource(plan)
	var p *phases.Plan
	if err == nil {
		p, err = phases.DecodePlan(all.Registry(), name, src)
	}
	if err != nil {
		return asUsage(err)
	}
	if ranks == 0 {
		ranks = planRanks(p)
	}
	if err := writeCheck(w, p, ranks, width); err != nil {
		return asUsage(err)
	}
	if problems := writeEnvironment(w, p, workdir, plan == "", ranks, width); len(problems) > 0 {
		return &exitError{code: exitFailed, err: fmt.Errorf("check: this environment cannot run the plan: %s", strings.Join(problems, "; "))}
	}
	return nil
}

// writeCheck prints the resolved plan: one block per phase with its rank
// selection, the files and bytes it puts on the storage, its parameters as
// they will run (presets and inherited inputs resolved, keys that do not
// apply left out, as the manifest records them) and its expectations,
// wrapped at width columns.
func writeCheck(w io.Writer, p *phases.Plan, ranks, width int) error {
	h := p.Header
	title, size := fmt.Sprintf("plan %s (%s):", h.Name, p.File), fmt.Sprintf("%d phase%s, sized for %d rank%s", len(p.Phases), plural(len(p.Phases)), ranks, plural(ranks))
	if len(title)+1+len(size) > width {
		size = "\n  " + size // a long path: the count on its own line
	} else {
		size = " " + size
	}
	fmt.Fprintln(w, title+size)
	fmt.Fprintln(w, wrapWords(fmt.Sprintf("workdir %q  results %q  drop_caches %s  keep %v  coordination_timeout %s",
		orDefault(h.Workdir, "."), h.Results, h.DropCaches, h.Keep, h.CoordinationTimeout), width, ""))
	if h.IsS3() {
		// Phase keys show only their own storage; the plan's is here.
		fmt.Fprintln(w, wrapWords(fmt.Sprintf("storage %s  endpoint %s  (credentials from the AWS chain)", h.Storage, orDefault(h.S3Endpoint, "AWS_ENDPOINT_URL or AWS")), width, "  "))
	}
	var peakFiles, totalBytes int64
	for _, s := range p.Phases {
		fmt.Fprintln(w)
		head := fmt.Sprintf("[%d] %s", s.Index+1, s.Name)
		if s.Kind != s.Name {
			head += " (" + s.Kind + ")"
		}
		switch {
		case len(s.Nodes) > 1:
			head += fmt.Sprintf("  node sweep %v", []int(s.Nodes))
		case len(s.Nodes) == 1:
			head += fmt.Sprintf("  %d nodes (every rank of the first %d hosts)", s.Nodes[0], s.Nodes[0])
		case len(s.Ranks) > 1:
			head += fmt.Sprintf("  rank sweep %v", []int(s.Ranks))
		case len(s.Ranks) == 1:
			head += fmt.Sprintf("  %d rank%s", s.Ranks[0], plural(s.Ranks[0]))
		default:
			head += fmt.Sprintf("  %d rank%s (all)", ranks, plural(ranks))
		}
		head += fmt.Sprintf("  %d iteration%s", s.Iterations, plural(s.Iterations))
		if s.Warmup > 0 {
			head += fmt.Sprintf(" + %d warm-up", s.Warmup)
		}
		if s.Group != "" {
			head += fmt.Sprintf("  group %q with the next phase", s.Group)
		}
		fmt.Fprintln(w, head)
		// A node selection's rank count depends on the hosts of the job:
		// its rows give the per-rank footprint only.
		for _, n := range s.Nodes {
			if f, ok := s.Footprint(ranks); ok {
				fmt.Fprintf(w, "    on %d nodes: %d files, %s per rank\n", n, f.Files, report.FormatBytes(f.Bytes))
			}
		}
		sizes := []int(s.Ranks)
		if len(sizes) == 0 && len(s.Nodes) == 0 {
			sizes = []int{ranks}
		}
		for _, k := range sizes {
			if k > ranks {
				return fmt.Errorf("%s:%d: phase %d (%s) asks for %d ranks; check with -n %d or more", p.File, s.Line, s.Index+1, s.Name, k, k)
			}
			f, ok := s.Footprint(k)
			if !ok {
				fmt.Fprintf(w, "    at %d rank%s: files and bytes not known before it runs\n", k, plural(k))
				continue
			}
			tf, tb := f.Files*int64(k), f.Bytes*int64(k)
			peakFiles = max(peakFiles, tf)
			totalBytes += tb * int64(s.Iterations+s.Warmup)
			fmt.Fprintf(w, "    at %d rank%s: %d files, %s per rank; %d files, %s in all\n", k, plural(k), f.Files, report.FormatBytes(f.Bytes), tf, report.FormatBytes(tb))
		}
		params := paramText(s)
		if s.DropCaches != "" {
			params = append(params, "drop_caches="+s.DropCaches)
		}
		if s.StallAfter != nil {
			params = append(params, "stall_after="+s.StallAfter.String())
		}
		if s.OpTimeout != nil {
			params = append(params, "op_timeout="+s.OpTimeout.String())
		}
		if len(params) > 0 {
			writeIndented(w, "params: "+strings.Join(params, " "), width)
		}
		for _, note := range s.Resolution().Notes {
			writeIndented(w, note, width)
		}
		if ex := expectText(s.Expect); len(ex) > 0 {
			writeIndented(w, "expect: "+strings.Join(ex, ", "), width)
		}
	}
	fmt.Fprintf(w, "\npeak files of one phase: %d; bytes written over all iterations: %s\n", peakFiles, report.FormatBytes(totalBytes))
	return nil
}

// writeIndented prints s indented by 4 spaces, wrapped at width with
// continuation lines indented by 8.
func writeIndented(w io.Writer, s string, width int) {
	for i, l := range report.WrapWords(s, width-4, width-8) {
		indent := "    "
		if i > 0 {
			indent = "        "
		}
		fmt.Fprintln(w, indent+l)
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// paramText is the phase's parameters as the manifest records them
// (phases.ParamValues), key=value in the order of the kind's keys.
func paramText(s *phases.Spec) []string {
	vals := phases.ParamValues(s)
	var out []string
	for _, prm := range phases.Params(s.Phase.Config()) {
		if v, ok := vals[prm.Key]; ok {
			out = append(out, prm.Key+"="+valueText(v))
		}
	}
	return out
}

// valueText writes a manifest param value as a plan would: a size or
// duration in its written form, strings quoted only when empty or
// spaced, arrays in brackets.
func valueText(v any) string {
	switch x := v.(type) {
	case string:
		if x == "" || strings.ContainsAny(x, " \t\"") {
			return fmt.Sprintf("%q", x)
		}
		return x
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = valueText(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case map[string]any:
		if t, ok := x["text"].(string); ok {
			return t
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + valueText(x[k])
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	return fmt.Sprint(v)
}

// expectText is [phase.expect] as limits: "p99 <= 10ms", "min_iops >=
// 20,000", "write.p99 <= 20ms".
func expectText(x *phases.Expect) []string {
	if x == nil {
		return nil
	}
	var out []string
	one := func(prefix string, x *phases.Expect) {
		lat := func(name string, d *phases.Duration) {
			if d != nil {
				out = append(out, prefix+name+" <= "+d.String())
			}
		}
		lat("p50", x.P50)
		lat("p90", x.P90)
		lat("p99", x.P99)
		lat("max", x.Max)
		lat("mean", x.Mean)
		if x.MinBandwidth != nil {
			out = append(out, prefix+"min_bandwidth >= "+phases.Size(*x.MinBandwidth).String()+"/s")
		}
		if x.MinIOPS != nil {
			out = append(out, prefix+"min_iops >= "+report.FormatCount(*x.MinIOPS))
		}
		if x.MaxErrors != nil {
			out = append(out, fmt.Sprintf("%smax_errors <= %d", prefix, *x.MaxErrors))
		}
		if x.MinAU != nil {
			out = append(out, fmt.Sprintf("%smin_au >= %g%%", prefix, *x.MinAU))
		}
	}
	one("", x)
	ops := make([]string, 0, len(x.Ops))
	for op := range x.Ops {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		one(op+".", x.Ops[op])
	}
	return out
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
