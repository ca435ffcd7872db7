package phases

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/report"
	"golang.org/x/sys/unix"
)

// Results: what rank 0 writes once the plan ran (manifest.json, summary.txt
// with MLPerf [METRIC] lines, junit.xml, phases.csv, ops.csv, hosts.csv, report.html) and what goes into a
// phase's result besides the measurements (expectation verdicts, merged
// metrics, resolved parameters, the plan record).

// prepareResults makes the run's results directory and proves it
// writable with a probe file, before the first phase runs. The results
// tree may be shared (a group's results directory), so only the user's
// own path is followed: <plan name> is opened without following a link
// and <run id> is made fresh below it and kept open (resultsPin). Every
// result file is written through that descriptor, so a <plan name> or
// <run id> swapped for a link during the run cannot send root's files
// elsewhere; messages still name the path.
func (e *engine) prepareResults() error {
	results := firstNonEmpty(e.o.Results, e.o.Plan.Header.Results, "results")
	e.resultsDir = filepath.Join(results, e.o.Plan.Header.Name, e.runID)
	if err := os.MkdirAll(results, 0o755); err != nil {
		return fmt.Errorf("results directory: %w", pio.NewOpError("mkdir", results, err))
	}
	root, err := pio.OpenDir(results)
	if err != nil {
		return fmt.Errorf("results directory: %w", err)
	}
	defer root.Close()
	plan := filepath.Join(results, e.o.Plan.Header.Name)
	pn, err := pio.NewName(e.o.Plan.Header.Name)
	if err != nil {
		return fmt.Errorf("results directory %s: %w", plan, err)
	}
	if err := root.Mkdir(pn, 0o755); err != nil && err != unix.EEXIST {
		return fmt.Errorf("results directory: %w", pio.NewOpError("mkdir", plan, err))
	}
	// Not OpenSub: <plan name> may be a colleague's from an earlier run;
	// what matters is that it is no link, and that <run id> is ours.
	fd, err := unix.Openat(root.Fd(), e.o.Plan.Header.Name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if st, lerr := os.Lstat(plan); lerr == nil && st.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(plan)
			return fmt.Errorf("results directory: %s is a symbolic link (to %s): prism does not follow links below the results directory, which others may write; remove it or choose another results directory", plan, target)
		}
		return fmt.Errorf("results directory: %w", pio.NewOpError("open", plan, err))
	}
	pd, err := pio.OpenDir("/proc/self/fd/" + strconv.Itoa(fd))
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("results directory: %w", pio.NewOpError("open", plan, err))
	}
	defer pd.Close()
	e.resultsPin, err = pd.MakeSub(e.runID, 0o755)
	if err != nil {
		return fmt.Errorf("results directory: %w", err)
	}
	probe := e.resultFile(".prism-write-test")
	if err := report.WriteFileAtomic(probe, []byte(e.runID+"\n")); err != nil {
		return fmt.Errorf("results directory %s is not writable: %w", e.resultsDir, err)
	}
	if err := os.Remove(probe); err != nil {
		return fmt.Errorf("results directory: %w", pio.NewOpError("remove", filepath.Join(e.resultsDir, ".prism-write-test"), err))
	}
	return nil
}

// resultFile is where the result file name is written: through the open
// results directory, not its path.
func (e *engine) resultFile(name string) string {
	return filepath.Join(e.resultsPin.ProcPath(), name)
}

// writeResults writes every result file of the run under
// <results>/<plan name>/<run id>/ and prints the summary (or the manifest
// with --json) on stdout.
func (e *engine) writeResults(m *report.Manifest, out *Outcome) error {
	dir := e.resultsDir
	out.Manifest = m
	m.CommandLine = e.o.CommandLine
	// Flags go into the manifest and every rendering of it.
	m.StragglerTolerance = e.o.Plan.Header.StragglerTolerance
	report.Flags(m)
	// MLPerf-style phases' figures of merit, as [METRIC] lines printed
	// exactly as MLPerf Storage prints them: kept in the manifest (and so
	// in report.html) and printed after the summary.
	for i := range m.Phases {
		res := &m.Phases[i]
		if res.Index < 0 || res.Index >= len(e.o.Plan.Phases) {
			continue
		}
		if ml, ok := e.o.Plan.Phases[res.Index].Phase.(MetricLiner); ok {
			res.MetricLines = ml.MetricLines(res)
		}
	}
	// The manifest first: whatever fails after it, the results survive.
	// If it cannot be written (the results filesystem filled up during the
	// run), the summary and the manifest's JSON go to stdout instead, so a
	// run of hours is not lost; no "manifest:" line names a file that does
	// not exist.
	if err := report.WriteManifest(e.resultFile("manifest.json"), m); err != nil {
		var sb strings.Builder
		report.WriteSummaryWith(&sb, m, report.SummaryOptions{Wide: e.o.Wide})
		var b bytes.Buffer
		if report.EncodeManifest(&b, m) != nil {
			b.Reset() // no half manifest: err says why it could not be encoded
		}
		fmt.Fprintf(e.o.Stdout, "%s\nprism: the manifest could not be written (%v); here it is:\n%s", sb.String(), err, b.Bytes())
		return err
	}
	out.ManifestPath = filepath.Join(dir, "manifest.json")
	var sb strings.Builder
	if err := report.WriteSummaryWith(&sb, m, report.SummaryOptions{Wide: e.o.Wide}); err != nil {
		return err
	}
	for _, p := range m.Phases {
		for _, line := range p.MetricLines {
			sb.WriteString(line + "\n")
		}
	}
	if err := report.WriteFileAtomic(e.resultFile("summary.txt"), []byte(sb.String())); err != nil {
		return err
	}
	// Other tools' own outputs (fio's JSON) go beside the manifest.
	for _, s := range e.o.Plan.Phases {
		a, ok := s.Phase.(Artefacter)
		if !ok {
			continue
		}
		files := a.Artefacts()
		names := make([]string, 0, len(files))
		for name := range files {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if !isSafeName(name) {
				return fmt.Errorf("phase %s: result file name %q is not one path component", s.Name, name)
			}
			if err := report.WriteFileAtomic(e.resultFile(name), files[name]); err != nil {
				return err
			}
		}
	}
	var junit bytes.Buffer
	if err := report.WriteJUnit(&junit, m); err != nil {
		return err
	}
	if err := report.WriteFileAtomic(e.resultFile("junit.xml"), junit.Bytes()); err != nil {
		return err
	}
	// The phase and per-op tables as CSV, for spreadsheets and chart tools.
	for _, f := range []struct {
		name  string
		write func(io.Writer, *report.Manifest) error
	}{{"phases.csv", report.WritePhasesCSV}, {"ops.csv", report.WriteOpsCSV}, {"hosts.csv", report.WriteHostsCSV}} {
		var b bytes.Buffer
		if err := f.write(&b, m); err != nil {
			return err
		}
		if err := report.WriteFileAtomic(e.resultFile(f.name), b.Bytes()); err != nil {
			return err
		}
	}
	var page bytes.Buffer
	if err := report.WriteHTML(&page, []*report.Manifest{m}); err != nil {
		return err
	}
	if err := report.WriteFileAtomic(e.resultFile("report.html"), page.Bytes()); err != nil {
		return err
	}
	out.ReportPath = filepath.Join(dir, "report.html")
	for _, l := range report.ErrorLines(m) {
		fmt.Fprintf(e.o.Stderr, "prism: %s\n", l)
	}
	if e.o.JSON {
		return report.EncodeManifest(e.o.Stdout, m)
	}
	_, err := io.WriteString(e.o.Stdout, sb.String())
	return err
}

// evaluate checks the plan's [phase.expect] thresholds, and those of its
// [phase.expect.<op>] sub-tables against that op type's figures alone.
func evaluate(x *Expect, r *report.PhaseResult) []report.Verdict {
	out := check(x, "", r.Ops, r.Latency, r.BytesPerSec, r.OpsPerSec, r.Errors)
	if x.MinAU != nil {
		au, ok := r.Metrics["au_percent"]
		out = append(out, report.Verdict{Metric: "min_au", Limit: fmt.Sprintf("%g%%", *x.MinAU), Value: fmt.Sprintf("%.2f%%", au), Raw: au, Passed: ok && au >= *x.MinAU})
	}
	ops := make([]string, 0, len(x.Ops))
	for op := range x.Ops {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		st, ok := r.OpsByType[op]
		if !ok {
			// An op type the phase did not issue: a threshold on nothing
			// fails, so a misspelt op cannot pass silently.
			have := make([]string, 0, len(r.OpsByType))
			for k := range r.OpsByType {
				have = append(have, k)
			}
			sort.Strings(have)
			out = append(out, report.Verdict{Metric: op, Op: op, Limit: "ops of type " + op, Value: "none (ops: " + strings.Join(have, ", ") + ")"})
			continue
		}
		out = append(out, check(x.Ops[op], op, st.Ops, st.Latency, st.BytesPerSec, st.OpsPerSec, st.Errors)...)
	}
	return out
}

// check turns one set of thresholds into verdicts on one set of figures
// (the phase's, or one op type's when op is not empty).
func check(x *Expect, op string, ops int64, l report.Latency, bps, iops float64, errs int64) []report.Verdict {
	var out []report.Verdict
	name := func(metric string) string {
		if op == "" {
			return metric
		}
		return op + "." + metric
	}
	lat := func(metric string, limit *Duration, got int64) {
		if limit == nil {
			return
		}
		out = append(out, report.Verdict{Metric: name(metric), Op: op, Limit: limit.String(), Value: report.FormatNsAgainst(got, int64(*limit)), Raw: float64(got), Passed: ops > 0 && got <= int64(*limit)})
	}
	lat("p50", x.P50, l.P50)
	lat("p90", x.P90, l.P90)
	lat("p99", x.P99, l.P99)
	lat("max", x.Max, l.Max)
	lat("mean", x.Mean, int64(math.Round(l.Mean)))
	if x.MinBandwidth != nil {
		out = append(out, report.Verdict{Metric: name("min_bandwidth"), Op: op, Limit: Size(*x.MinBandwidth).String() + "/s", Value: report.FormatBytes(int64(bps)) + "/s", Raw: bps, Passed: bps >= float64(*x.MinBandwidth)})
	}
	if x.MinIOPS != nil {
		// Whole ops/s with separators (1,000,000, not 1e+06); a decimal
		// more where rounding would make a miss read as the limit.
		limit, value := report.FormatCount(*x.MinIOPS), report.FormatCount(math.Round(iops))
		if value == limit && iops != *x.MinIOPS {
			value = strconv.FormatFloat(iops, 'f', 1, 64)
		}
		out = append(out, report.Verdict{Metric: name("min_iops"), Op: op, Limit: limit, Value: value, Raw: iops, Passed: iops >= *x.MinIOPS})
	}
	if x.MaxErrors != nil {
		out = append(out, report.Verdict{Metric: name("max_errors"), Op: op, Limit: fmt.Sprint(*x.MaxErrors), Value: fmt.Sprint(errs), Raw: float64(errs), Passed: errs <= *x.MaxErrors})
	}
	return out
}

// verdicts are the plan's expectations and the phase's own pass criteria
// (Verdicter), the plan's taking precedence on the same metric; when one
// missed, the phase fails with every missed one as its error.
func verdicts(s *Spec, res *report.PhaseResult) {
	var out []report.Verdict
	if s.Expect != nil {
		out = evaluate(s.Expect, res)
	}
	if v, ok := s.Phase.(Verdicter); ok {
	own:
		for _, x := range v.Verdicts(res) {
			for _, y := range out {
				if y.Metric == x.Metric {
					continue own
				}
			}
			out = append(out, x)
		}
	}
	if out != nil {
		res.Expect = out
	}
	var missed []string
	for _, v := range res.Expect {
		if !v.Passed {
			missed = append(missed, v.Reason())
		}
	}
	if len(missed) > 0 {
		res.Status = report.StatusFailed
		res.Error = "expectation missed: " + strings.Join(missed, "; ")
	}
}

// paramMap records a phase's resolved parameters for the manifest, with
// their TOML types (see ParamValues).
func paramMap(s *Spec) map[string]any { return ParamValues(s) }

// planRecord is the plan as the manifest records it.
func planRecord(p *Plan) any {
	type phaseRec struct {
		Name   string `json:"name"`
		Kind   string `json:"kind"`
		Ranks  []int  `json:"ranks,omitempty"`
		Params any    `json:"params"`
	}
	var phases []phaseRec
	for _, s := range p.Phases {
		phases = append(phases, phaseRec{Name: s.Name, Kind: s.Kind, Ranks: s.Ranks, Params: paramMap(s)})
	}
	rec := map[string]any{
		"file": p.File, "name": p.Header.Name, "workdir": p.Header.Workdir, "node_local_workdir": p.Header.NodeLocalWorkdir, "results": p.Header.Results,
		"drop_caches": p.Header.DropCaches, "clock": p.Header.Clock, "keep": p.Header.Keep, "kb_base": p.Header.KBBase, "phases": phases, "source": string(p.Source),
	}
	// path is the plan file's absolute path, when it is a file (not the
	// embedded default), so a run can be found from its manifest.
	if abs, err := filepath.Abs(p.File); err == nil && p.File != "" {
		if fi, err := os.Stat(abs); err == nil && !fi.IsDir() {
			rec["path"] = abs
		}
	}
	return rec
}
