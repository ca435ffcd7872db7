package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/all"
	"github.com/prism-hpc/prism/phases/ckpt"
	"github.com/prism-hpc/prism/phases/dataload"
	"github.com/prism-hpc/prism/report"
)

// prism mlperf runs MLPerf Storage's procedure over a plan, each step a
// prism run of its own (this binary, `prism run`): training is datasize
// → datagen (the plan's create_dataset phases, which keep their dataset
// with persist, so a dataset already there is reused) → runs of the other
// phases (5 by default, the page cache dropped before each where this
// process may) → a summary (mean AU, throughput, their spread; passed iff
// every run's AU met the threshold). Checkpointing is one run of the
// mlperf_checkpoint phase (its writes, a flush, its reads), or, when the
// phase keeps its checkpoints (persist), a write run, a cache drop and a
// read run of them. [plan] mlperf = "closed" refuses what the rules fix
// (mlperfRules); "open" (the default) records every such change in the
// procedure's metadata. Everything goes to the rules' results tree:
// <results>/<benchmark>/<model>/<command>/<datetime>/.

type mlperfOptions struct {
	bench   string // training | checkpointing
	plan    string
	runs    int
	results string
	workdir string
	n       int
	launch  string // a launcher prefix for every step ("mpirun -np 4")
	whatIf  bool
	memory  int64 // client host memory for datasize; 0 = this host's
	now     time.Time
}

func cmdMLPerf(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "report" {
		return cmdMLPerfReport(args[1:], stdout, stderr)
	}
	fs := newFlags("mlperf")
	o := mlperfOptions{now: time.Now()}
	fs.IntVar(&o.runs, "runs", 0, "runs of the benchmark (default: training 5, as the rules require; checkpointing 1)")
	fs.StringVar(&o.results, "results", "", "results directory (default: [plan] results)")
	fs.StringVar(&o.workdir, "workdir", "", "workdir of every step (overrides [plan] workdir)")
	fs.IntVar(&o.n, "n", 0, "start N local ranks for every step")
	fs.StringVar(&o.launch, "launch", "", "launcher prefix of every step, e.g. \"mpirun -np 8\" (split on spaces)")
	fs.BoolVar(&o.whatIf, "what-if", false, "print the steps and sizes, run nothing")
	mem := fs.String("memory", "", "client host memory for datasize (the rules' --client-host-memory-in-gb), e.g. 252GiB; default this host's MemTotal")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if *mem != "" {
		v, err := phases.ParseSize(*mem)
		if err != nil || v <= 0 {
			return usageErrorf("mlperf: --memory %q: want a size such as 252GiB", *mem)
		}
		o.memory = int64(v)
	}
	if len(pos) != 2 || (pos[0] != "training" && pos[0] != "checkpointing") {
		return usageErrorf("mlperf: want training|checkpointing plan.toml, or report DIR")
	}
	o.bench, o.plan = pos[0], pos[1]
	return runMLPerf(ctx, o, stdout, stderr)
}

// mlpPlan is the plan as generic TOML, for the derived plans of the steps.
type mlpPlan struct {
	header map[string]any
	phases []map[string]any
	parsed *phases.Plan
}

func loadMLPPlan(path string) (*mlpPlan, error) {
	b, err := pio.ReadInput(path, pio.MaxInput, pio.InputTimeout)
	if err != nil {
		return nil, usageErrorf("mlperf: %v", err)
	}
	parsed, err := phases.DecodePlan(all.Registry(), path, b)
	if err != nil {
		return nil, err
	}
	var raw map[string]any
	if _, err := toml.Decode(string(b), &raw); err != nil {
		return nil, usageErrorf("mlperf: %s: %v", path, err)
	}
	p := &mlpPlan{parsed: parsed}
	p.header, _ = raw["plan"].(map[string]any)
	if p.header == nil {
		p.header = map[string]any{}
	}
	ps, _ := raw["phase"].([]map[string]any)
	p.phases = ps
	return p, nil
}

// of returns the phases of kind k.
func (p *mlpPlan) of(kinds ...string) []map[string]any {
	var out []map[string]any
	for _, ph := range p.phases {
		k, _ := ph["kind"].(string)
		for _, want := range kinds {
			if k == want {
				out = append(out, ph)
			}
		}
	}
	return out
}

// encode is a derived plan: the header (named name, without mlperf,
// which a step does not need) and phases ps.
func (p *mlpPlan) encode(name string, ps []map[string]any) ([]byte, error) {
	h := map[string]any{}
	for k, v := range p.header {
		if k != "mlperf" {
			h[k] = v
		}
	}
	h["name"] = name
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(map[string]any{"plan": h, "phase": ps}); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// write writes a derived plan to path.
func (p *mlpPlan) write(path, name string, ps []map[string]any) error {
	b, err := p.encode(name, ps)
	if err != nil {
		return err
	}
	return report.WriteFileAtomic(path, b)
}

func str(m map[string]any, k, def string) string {
	if v, ok := m[k].(string); ok {
		return v
	}
	return def
}

// deviation is one parameter a plan sets to something the closed rules
// do not allow.
type deviation struct {
	Phase   string `json:"phase"`
	Key     string `json:"key"`
	Value   any    `json:"value"`
	Allowed string `json:"allowed"`
	Rule    string `json:"rule"`
}

func (d deviation) String() string {
	return fmt.Sprintf("%s: %s = %v: %s (allowed: %s)", d.Phase, d.Key, d.Value, d.Rule, d.Allowed)
}

// mlperfRules lists the plan's departures from MLPerf Storage's closed
// division: the workload's fixed parameters (record size, samples per
// file, batch, compute time, AU threshold, whole epochs), a dataset at
// least datasize's minimum, the rules' run count, and the checkpointing
// problem's full-size checkpoints (10 writes, 10 reads, fsync, the
// model's process count, torch.save's own calls).
func mlperfRules(o mlperfOptions, p *mlpPlan, ranks int, mem int64) (devs []deviation, notes []string) {
	add := func(ph map[string]any, key string, v any, allowed, rule string) {
		devs = append(devs, deviation{Phase: str(ph, "name", str(ph, "kind", "")), Key: key, Value: v, Allowed: allowed, Rule: rule})
	}
	// The page cache must not serve the reads: the procedure drops it
	// before each run (as root), and within a run the phase's own policy
	// (drop_caches or fadvise) keeps it cold; "none" turns that off.
	measured := "train"
	if o.bench == "checkpointing" {
		measured = "mlperf_checkpoint"
	}
	for _, ph := range p.of(measured) {
		if pol := cmpOr(str(ph, "drop_caches", ""), p.parsed.Header.DropCaches); pol == "none" {
			add(ph, "drop_caches", pol, "auto, root or fadvise", "closed: caches flushed before the reads (rules: echo 3 > /proc/sys/vm/drop_caches)")
		}
	}
	if o.bench == "training" {
		if o.runs != 5 {
			add(map[string]any{"name": "procedure"}, "runs", o.runs, "5", "MLPerf Storage training results are 5 runs")
		}
		for _, ph := range p.of("train") {
			pre, err := dataload.LookupTrainPreset(str(ph, "workload", "unet3d"), str(ph, "accelerator", "h100"))
			if err != nil {
				continue // the plan check reported it
			}
			fixed := func(key, rule string, want float64, unit string) {
				v, ok := ph[key]
				if !ok {
					return
				}
				got, ok := number(v)
				if !ok || math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
					add(ph, key, v, strconv.FormatFloat(want, 'f', -1, 64)+unit+" (unset)", rule)
				}
			}
			fixed("record_size", "closed: the workload's record size is fixed", float64(pre.RecordSize), " bytes")
			fixed("samples_per_file", "closed: the workload's samples per file are fixed", float64(pre.SamplesPerFile), "")
			fixed("batch_size", "closed: the workload's batch size is fixed", float64(pre.BatchSize), "")
			fixed("compute_time", "closed: the accelerator's compute time per batch is fixed", pre.ComputeTime, " s")
			fixed("au_threshold", "closed: the workload's AU threshold is fixed", pre.AUThreshold, "%")
			fixed("steps", "closed: every epoch reads the whole dataset", 0, "")
			accel := ranks
			if v, ok := number(ph["accelerators_per_rank"]); ok {
				accel = ranks * int(v)
			}
			need := dataload.MLPerfDatasize(pre, accel, 1, mem)
			files := int64(0)
			if v, ok := number(ph["num_files"]); ok {
				files = int64(v)
			}
			if ds := str(ph, "dataset", "generate"); ds != "generate" {
				for _, cd := range p.of("create_dataset") {
					if str(cd, "persist", "") == ds || ds == "latest" {
						files = planDatasetFiles(cd)
						wantSize := float64(int64(pre.SamplesPerFile) * pre.RecordSize)
						if sz, ok := cd["sizes"].([]any); !ok || len(sz) != 1 || !sameSize(sz[0], wantSize) {
							add(cd, "sizes", cd["sizes"], fmt.Sprintf("[%q] (samples_per_file x record_size)", report.FormatBytes(int64(wantSize))), "closed: the dataset's files are the workload's")
						}
					}
				}
			}
			notes = append(notes, fmt.Sprintf("datasize: %s on %s with %d accelerators (1 host of %s): at least %d files, %s", pre.Workload, pre.Accelerator, accel, report.FormatBytes(mem), need.Files, report.FormatBytes(need.Bytes)))
			if files != 0 && files < need.Files {
				add(ph, "dataset files", files, fmt.Sprintf(">= %d (prism datasize)", need.Files), "closed: the dataset is at least datasize's minimum (500 steps, 5x the memory)")
			}
		}
		return devs, notes
	}
	for _, ph := range p.of("mlperf_checkpoint") {
		model := str(ph, "model", "llama3-8b")
		m, ok := ckpt.MLPerfModels[model]
		if !ok {
			continue
		}
		fixed := func(key string, want any, rule string) {
			v, ok := ph[key]
			if ok && fmt.Sprint(v) != fmt.Sprint(want) {
				if a, aok := number(v); !aok || func() bool { b, bok := number(want); return !bok || a != b }() {
					add(ph, key, v, fmt.Sprint(want), rule)
				}
			}
		}
		fixed("scale", 1, "closed: full-size checkpoints")
		if str(ph, "checkpoint", "") == "" {
			fixed("num_checkpoints_write", 10, "closed: 10 checkpoint writes")
		}
		if str(ph, "persist", "") == "" || ph["num_checkpoints_read"] != int64(0) {
			fixed("num_checkpoints_read", 10, "closed: 10 checkpoint reads")
		}
		fixed("fsync", true, "closed: every checkpoint file is fsynced")
		fixed("write_size", 0, "closed: torch.save's own write calls")
		fixed("read_size", 0, "closed: torch.load's own read calls")
		if v, ok := number(ph["processes"]); ok && int(v) != 0 && int(v) != m.Processes() {
			add(ph, "processes", ph["processes"], fmt.Sprintf("%d (or 0)", m.Processes()), "closed: the model's process count")
		}
		b, _ := m.CheckpointBytes(m.Processes(), 1)
		notes = append(notes, fmt.Sprintf("checkpoint: %s, %d processes, %s per checkpoint at full scale", model, m.Processes(), report.FormatBytes(b)))
	}
	return devs, notes
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case bool:
		return 0, false
	case string:
		if s, err := phases.ParseSize(x); err == nil {
			return float64(s), true
		}
		if d, err := time.ParseDuration(x); err == nil {
			return d.Seconds(), true
		}
	}
	return 0, false
}

func sameSize(v any, want float64) bool {
	got, ok := number(v)
	return ok && got == want
}

// datasetFiles is how many files a create_dataset table makes.
func planDatasetFiles(cd map[string]any) int64 {
	sizes, _ := cd["sizes"].([]any)
	if len(sizes) == 0 {
		return 0
	}
	if t, ok := number(cd["total"]); ok && t > 0 {
		var sum float64
		for _, s := range sizes {
			v, _ := number(s)
			sum += v
		}
		if sum <= 0 {
			return 0
		}
		return int64(math.Ceil(t / sum * float64(len(sizes))))
	}
	copies := 4.0
	if c, ok := number(cd["copies"]); ok {
		copies = c
	}
	return int64(copies) * int64(len(sizes))
}

// mlpStep is one prism run of the procedure.
type mlpStep struct {
	Name     string `json:"name"`
	Plan     string `json:"plan"`
	Dir      string `json:"dir"`
	Manifest string `json:"manifest,omitempty"`
	Exit     int    `json:"exit"`
	// CacheDrop says whether the page cache was dropped before the step
	// ("dropped", or why not).
	CacheDrop string `json:"cache_drop,omitempty"`
}

// mlpRun is one measured run in the summary.
type mlpRun struct {
	Run       int                `json:"run"`
	Manifest  string             `json:"manifest"`
	Passed    bool               `json:"passed"`
	CacheDrop string             `json:"cache_drop"`
	Metrics   map[string]float64 `json:"metrics"`
}

// mlpSummary is summary.json of a procedure.
type mlpSummary struct {
	Benchmark  string             `json:"benchmark"`
	Model      string             `json:"model"`
	Command    string             `json:"command"`
	Mode       string             `json:"mode"`
	Datetime   string             `json:"datetime"`
	Passed     bool               `json:"passed"`
	Runs       []mlpRun           `json:"runs"`
	Stats      map[string]mlpStat `json:"stats"`
	Steps      []mlpStep          `json:"steps"`
	Deviations []deviation        `json:"deviations,omitempty"`
	Notes      []string           `json:"notes,omitempty"`
	Plan       string             `json:"plan"`
}

// mlpStat is a figure's mean, population standard deviation and range
// over the runs.
type mlpStat struct {
	Mean  float64 `json:"mean"`
	Stdev float64 `json:"stdev"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	N     int     `json:"n"`
}

func statOf(v []float64) mlpStat {
	s := mlpStat{Mean: report.Mean(v), Stdev: report.Stdev(v), N: len(v)}
	if len(v) > 0 {
		s.Min, s.Max = v[0], v[0]
		for _, x := range v {
			s.Min, s.Max = math.Min(s.Min, x), math.Max(s.Max, x)
		}
	}
	return s
}

var trainFigures = []string{"simulated_accelerators", "au_percent", "samples_per_sec", "io_mib_per_sec", "au_threshold_percent"}
var ckptFigures = []string{"simulated_accelerators", "save_duration_mean_seconds", "save_throughput_mean_gib_per_sec", "load_duration_mean_seconds", "load_throughput_mean_gib_per_sec"}

func runMLPerf(ctx context.Context, o mlperfOptions, stdout, stderr io.Writer) error {
	p, err := loadMLPPlan(o.plan)
	if err != nil {
		return err
	}
	mode := cmpOr(p.parsed.Header.MLPerf, "open")
	if o.runs == 0 {
		o.runs = 1
		if o.bench == "training" {
			o.runs = 5
		}
	}
	if o.runs < 1 || o.runs > 100 {
		return usageErrorf("mlperf: --runs %d out of range (1 .. 100)", o.runs)
	}
	kind := "train"
	if o.bench == "checkpointing" {
		kind = "mlperf_checkpoint"
	}
	mains := p.of(kind)
	if len(mains) != 1 {
		return &phases.PlanError{File: o.plan, Key: "phase", Msg: fmt.Sprintf("prism mlperf %s wants exactly one %s phase, the plan has %d", o.bench, kind, len(mains))}
	}
	ph := mains[0]
	if kind == "train" && str(ph, "dataset", "") == "latest" {
		return &phases.PlanError{File: o.plan, Key: "dataset", Msg: "prism mlperf runs datagen and the runs apart: the train phase reads a kept dataset by name (dataset = the create_dataset's persist), not \"latest\""}
	}
	model := str(ph, "workload", "unet3d")
	if o.bench == "checkpointing" {
		model = str(ph, "model", "llama3-8b")
	}
	ranks := max(o.n, 1)
	if o.launch != "" {
		if f := strings.Fields(o.launch); len(f) > 0 {
			for i, a := range f {
				if (a == "-np" || a == "-n") && i+1 < len(f) {
					ranks, _ = strconv.Atoi(f[i+1])
				}
			}
		}
	}
	mem := o.memory
	if mem == 0 {
		if mem, err = dataload.HostMemory(); err != nil && p.parsed.Header.MLPerf == "closed" {
			return usageErrorf("mlperf: closed needs the host memory for datasize: %v; give --memory", err)
		}
	}
	devs, notes := mlperfRules(o, p, max(ranks, 1), mem)
	if mode == "closed" && len(devs) > 0 {
		msg := make([]string, len(devs))
		for i, d := range devs {
			msg[i] = d.String()
		}
		return &phases.PlanError{File: o.plan, Key: "plan.mlperf", Msg: "mlperf = \"closed\" refuses:\n  " + strings.Join(msg, "\n  ")}
	}
	results := cmpOr(o.results, p.parsed.Header.Results, "results")
	stamp := o.now.UTC().Format("20060102_150405")
	steps, command := mlperfSteps(o, p, ph)
	dir := filepath.Join(results, o.bench, model, command, stamp)
	if o.whatIf {
		fmt.Fprintf(stdout, "prism mlperf %s %s (%s), %s:\n", o.bench, model, mode, o.plan)
		for _, n := range notes {
			fmt.Fprintf(stdout, "  %s\n", n)
		}
		for _, s := range steps {
			fmt.Fprintf(stdout, "  step %-10s %s\n", s.name, s.what)
		}
		for _, d := range devs {
			fmt.Fprintf(stdout, "  open change: %s\n", d)
		}
		fmt.Fprintf(stdout, "  results: %s\n", dir)
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if planCopy, err := pio.ReadInput(o.plan, pio.MaxInput, pio.InputTimeout); err == nil {
		report.WriteFileAtomic(filepath.Join(dir, "plan.toml"), planCopy)
	}
	sum := &mlpSummary{Benchmark: o.bench, Model: model, Command: command, Mode: mode, Datetime: stamp, Deviations: devs, Notes: notes, Plan: o.plan, Passed: true}
	for _, n := range notes {
		fmt.Fprintf(stderr, "prism mlperf: %s\n", n)
	}
	run := 0
	for _, s := range steps {
		for i := 0; i < s.repeat; i++ {
			name := s.name
			if s.repeat > 1 {
				name = fmt.Sprintf("%s-%d", s.name, i+1)
			}
			st := mlpStep{Name: name, Plan: filepath.Join(dir, name+".toml"), Dir: filepath.Join(dir, name)}
			if err := p.write(st.Plan, str(p.header, "name", "mlperf")+"-"+name, s.phases); err != nil {
				return err
			}
			if s.drop {
				st.CacheDrop = dropCaches()
			}
			fmt.Fprintf(stderr, "prism mlperf: step %s (cache: %s)\n", name, cmpOr(st.CacheDrop, "left as is"))
			st.Exit, st.Manifest = execStep(ctx, o, st, stderr)
			sum.Steps = append(sum.Steps, st)
			if st.Manifest == "" {
				sum.Passed = false
				writeSummary(dir, sum)
				return &exitError{code: exitFailed, err: fmt.Errorf("mlperf: step %s: exit %d, no manifest (its output is above)", name, st.Exit)}
			}
			if !s.measured {
				if st.Exit != 0 {
					sum.Passed = false
					writeSummary(dir, sum)
					return &exitError{code: exitFailed, err: fmt.Errorf("mlperf: step %s failed (exit %d): %s", name, st.Exit, st.Manifest)}
				}
				continue
			}
			run++
			m, err := report.ReadManifest(st.Manifest)
			if err != nil {
				return err
			}
			r := mlpRun{Run: run, Manifest: st.Manifest, Passed: st.Exit == 0, CacheDrop: st.CacheDrop, Metrics: map[string]float64{}}
			for _, pr := range m.Phases {
				if pr.Kind != kind {
					continue
				}
				r.Passed = r.Passed && pr.Status == "passed"
				for k, v := range pr.Metrics {
					if _, ok := r.Metrics[k]; !ok || v != 0 {
						r.Metrics[k] = v
					}
				}
			}
			sum.Passed = sum.Passed && r.Passed
			sum.Runs = append(sum.Runs, r)
			b, _ := json.MarshalIndent(r, "", "  ")
			report.WriteFileAtomic(filepath.Join(st.Dir, "summary.json"), append(b, '\n'))
		}
	}
	figs := trainFigures
	if o.bench == "checkpointing" {
		figs = ckptFigures
	}
	sum.Stats = map[string]mlpStat{}
	for _, f := range figs {
		var v []float64
		for _, r := range sum.Runs {
			if x, ok := r.Metrics[f]; ok {
				v = append(v, x)
			}
		}
		if len(v) > 0 {
			sum.Stats[f] = statOf(v)
		}
	}
	if err := writeSummary(dir, sum); err != nil {
		return err
	}
	printSummary(stdout, sum, dir)
	if !sum.Passed {
		return &exitError{code: exitFailed, err: fmt.Errorf("mlperf: %s did not pass (summary: %s)", o.bench, filepath.Join(dir, "summary.json"))}
	}
	return nil
}

func cmpOr(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// mlpPlanStep is one step of the procedure before it runs.
type mlpPlanStep struct {
	name     string
	what     string
	phases   []map[string]any
	repeat   int
	drop     bool // drop the page cache before it
	measured bool
}

// mlperfSteps is the procedure for the plan: its command name in the
// results tree and the steps.
func mlperfSteps(o mlperfOptions, p *mlpPlan, measured map[string]any) ([]mlpPlanStep, string) {
	describe := func(ps []map[string]any) string {
		var k []string
		for _, ph := range ps {
			k = append(k, str(ph, "name", str(ph, "kind", "")))
		}
		return strings.Join(k, ", ")
	}
	if o.bench == "training" {
		var gen, rest []map[string]any
		for _, ph := range p.phases {
			if str(ph, "kind", "") == "create_dataset" {
				gen = append(gen, ph)
			} else {
				rest = append(rest, ph)
			}
		}
		var steps []mlpPlanStep
		if len(gen) > 0 {
			var what []string
			for _, g := range gen {
				what = append(what, fmt.Sprintf("%s: %d files, persist = %q (reused when complete)", str(g, "name", "create_dataset"), planDatasetFiles(g), str(g, "persist", "")))
			}
			steps = append(steps, mlpPlanStep{name: "datagen", what: strings.Join(what, "; "), phases: gen, repeat: 1})
		}
		steps = append(steps, mlpPlanStep{name: "run", what: fmt.Sprintf("%d x (%s), page cache dropped before each", o.runs, describe(rest)), phases: rest, repeat: o.runs, drop: true, measured: true})
		return steps, "run"
	}
	name := str(measured, "persist", "")
	if name == "" {
		return []mlpPlanStep{{name: "run", what: fmt.Sprintf("%d x (%s: writes, flush, reads)", o.runs, describe(p.phases)), phases: p.phases, repeat: o.runs, drop: true, measured: true}}, "run"
	}
	// Split: the write run keeps its checkpoints, the read run reads them
	// after a cache drop, as the rules describe for a system where the
	// run cannot flush the caches itself.
	w, r := map[string]any{}, map[string]any{}
	for k, v := range measured {
		w[k], r[k] = v, v
	}
	w["num_checkpoints_read"] = int64(0)
	delete(r, "persist")
	r["num_checkpoints_write"], r["checkpoint"] = int64(0), name
	if _, ok := r["num_checkpoints_read"]; !ok {
		r["num_checkpoints_read"] = int64(10)
	}
	if n, ok := r["num_checkpoints_read"].(int64); ok && n == 0 {
		r["num_checkpoints_read"] = int64(10)
	}
	return []mlpPlanStep{
		{name: "write", what: fmt.Sprintf("%d x %s writes, kept as %q", o.runs, str(measured, "name", "mlperf_checkpoint"), name), phases: []map[string]any{w}, repeat: o.runs, drop: true, measured: true},
		{name: "read", what: fmt.Sprintf("%d x reads of %q after a cache drop", o.runs, name), phases: []map[string]any{r}, repeat: o.runs, drop: true, measured: true},
	}, "run"
}

// dropCaches drops the page cache (root), saying whether it did.
func dropCaches() string {
	if !pio.CanDropCaches() {
		return "not dropped: needs root (drop it by hand between runs, as the rules require)"
	}
	if err := pio.DropCaches(); err != nil {
		return "not dropped: " + err.Error()
	}
	return "dropped"
}

var manifestRE = regexp.MustCompile(`(?m)^manifest: (.+)$`)

// execStep runs one step as `prism run` of this binary, its output passed
// through to stderr; it returns the exit code and the manifest's path.
func execStep(ctx context.Context, o mlperfOptions, st mlpStep, stderr io.Writer) (int, string) {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "prism mlperf: %v\n", err)
		return exitFailed, ""
	}
	args := []string{"run", "--results", st.Dir}
	if o.workdir != "" {
		args = append(args, "--workdir", o.workdir)
	}
	if o.n > 0 {
		args = append(args, "-n", strconv.Itoa(o.n))
	}
	args = append(args, st.Plan)
	name := self
	if f := strings.Fields(o.launch); len(f) > 0 {
		name, args = f[0], append(append(f[1:], self), args...)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(&out, stderr)
	cmd.Stderr = stderr
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		fmt.Fprintf(stderr, "prism mlperf: %v\n", err)
		return exitFailed, ""
	}
	mm := manifestRE.FindAllStringSubmatch(out.String(), -1)
	if len(mm) == 0 {
		return code, ""
	}
	return code, mm[len(mm)-1][1]
}

func writeSummary(dir string, s *mlpSummary) error {
	b, _ := json.MarshalIndent(s, "", "  ")
	if err := report.WriteFileAtomic(filepath.Join(dir, "summary.json"), append(b, '\n')); err != nil {
		return err
	}
	meta := map[string]any{"benchmark": s.Benchmark, "model": s.Model, "command": s.Command, "mode": s.Mode, "datetime": s.Datetime,
		"prism_version": fullVersion(), "plan": s.Plan, "deviations": s.Deviations, "steps": s.Steps}
	b, _ = json.MarshalIndent(meta, "", "  ")
	return report.WriteFileAtomic(filepath.Join(dir, "metadata.json"), append(b, '\n'))
}

func printSummary(w io.Writer, s *mlpSummary, dir string) {
	fmt.Fprintf(w, "prism mlperf %s %s (%s): %d runs, %s\n", s.Benchmark, s.Model, s.Mode, len(s.Runs), map[bool]string{true: "passed", false: "FAILED"}[s.Passed])
	keys := make([]string, 0, len(s.Stats))
	for k := range s.Stats {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		st := s.Stats[k]
		fmt.Fprintf(w, "  %-34s mean %.4f  stdev %.4f  min %.4f  max %.4f  (n %d)\n", k, st.Mean, st.Stdev, st.Min, st.Max, st.N)
	}
	for _, r := range s.Runs {
		fmt.Fprintf(w, "  run %d: %s, cache %s\n", r.Run, map[bool]string{true: "passed", false: "FAILED"}[r.Passed], r.CacheDrop)
	}
	for _, d := range s.Deviations {
		fmt.Fprintf(w, "  open change: %s\n", d)
	}
	fmt.Fprintf(w, "results: %s\n", dir)
}

// cmdMLPerfReport writes results.json and results.csv over every
// procedure's summary.json below DIR, and a system-description template
// beside them when there is none.
func cmdMLPerfReport(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("mlperf report")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("mlperf report: give one results DIR")
	}
	root := pos[0]
	var sums []mlpSummary
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || d.Name() != "summary.json" {
			return nil
		}
		b, err := report.ReadResultFile(path)
		if err != nil {
			return err
		}
		var s mlpSummary
		if json.Unmarshal(b, &s) != nil || s.Benchmark == "" {
			return nil // a run's own summary.json
		}
		sums = append(sums, s)
		return nil
	})
	if err != nil {
		return fmt.Errorf("mlperf report: %w", err)
	}
	if len(sums) == 0 {
		return fmt.Errorf("mlperf report: no procedure summary.json below %s", root)
	}
	sort.Slice(sums, func(i, j int) bool {
		a, b := sums[i], sums[j]
		return a.Benchmark+a.Model+a.Datetime < b.Benchmark+b.Model+b.Datetime
	})
	b, _ := json.MarshalIndent(sums, "", "  ")
	if err := report.WriteFileAtomic(filepath.Join(root, "results.json"), append(b, '\n')); err != nil {
		return err
	}
	var buf bytes.Buffer
	cw := csv.NewWriter(&buf)
	cw.Write([]string{"benchmark", "model", "mode", "datetime", "passed", "runs", "figure", "mean", "stdev", "min", "max"})
	for _, s := range sums {
		keys := make([]string, 0, len(s.Stats))
		for k := range s.Stats {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			st := s.Stats[k]
			cw.Write([]string{s.Benchmark, s.Model, s.Mode, s.Datetime, strconv.FormatBool(s.Passed), strconv.Itoa(len(s.Runs)), k,
				fmtF(st.Mean), fmtF(st.Stdev), fmtF(st.Min), fmtF(st.Max)})
		}
	}
	cw.Flush()
	if err := report.WriteFileAtomic(filepath.Join(root, "results.csv"), buf.Bytes()); err != nil {
		return err
	}
	sd := filepath.Join(root, "system-description.yaml")
	// Lstat: a link there, even one to nothing, is something to keep,
	// not a name to create the template through.
	if _, err := os.Lstat(sd); os.IsNotExist(err) {
		if err := report.WriteFileAtomic(sd, []byte(systemTemplate)); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "%d procedures: %s, %s (system description: %s)\n", len(sums), filepath.Join(root, "results.json"), filepath.Join(root, "results.csv"), sd)
	return nil
}

func fmtF(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }

// systemTemplate is the system description a submission carries, for the
// submitter to fill in (prism knows the client host; the storage is
// theirs to describe).
const systemTemplate = `# MLPerf Storage system description: fill in every field.
system_name: ""
submitter: ""
division: closed            # closed | open
status: available           # available | preview | rdi
storage_system:
  vendor: ""
  product: ""
  software_version: ""
  protocol: ""              # NFS, Lustre, GPFS, S3, ...
  nodes: 0
  drives_per_node: 0
  drive_type: ""
  usable_capacity_tib: 0
  network: ""               # e.g. 4x 400GbE per node
client_nodes:
  count: 0
  cpu: ""
  memory_gib: 0
  os: ""
  kernel: ""
  network: ""
notes: ""
`
