package main

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The tiny procedure plans: closed in shape (the workload's phases, a
// persistent dataset, the five runs) but not in scale — 4KiB records,
// 48 files, 1ms compute, AU threshold 0, checkpoints at 2e-5 of llama3-8b
// with 3 writes and reads — so they run in open mode, and the deviations
// are what metadata.json must record.
const mlpTrainPlan = `
[plan]
name = "mlp-train"
mlperf = "MODE"
drop_caches = "none"

[[phase]]
kind = "create_dataset"
sizes = ["4KiB"]
copies = 48
persist = "unet_tiny"

[[phase]]
kind = "train"
dataset = "unet_tiny"
workload = "unet3d"
accelerator = "h100"
record_size = "4KiB"
batch_size = 4
read_threads = 2
compute_time = "1ms"
au_threshold = AU
`

const mlpCkptPlan = `
[plan]
name = "mlp-ckpt"
drop_caches = "none"

[[phase]]
kind = "mlperf_checkpoint"
scale = 0.00002
num_checkpoints_write = 3
num_checkpoints_read = 3
time_between_checkpoints = "0s"
persist = "llama_tiny"
`

func readSummary(t *testing.T, glob string) (*mlpSummary, string) {
	t.Helper()
	m, _ := filepath.Glob(glob)
	if len(m) != 1 {
		t.Fatalf("%s: %v", glob, m)
	}
	b, err := os.ReadFile(filepath.Join(m[0], "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := &mlpSummary{}
	if err := json.Unmarshal(b, s); err != nil {
		t.Fatal(err)
	}
	return s, m[0]
}

// TestMLPerfTrainingProcedure: datagen once, five runs reading the kept
// dataset, a summary over them in the rules' tree, the open changes
// recorded; a second procedure reuses the dataset; an AU no run can meet
// fails the procedure.
func TestMLPerfTrainingProcedure(t *testing.T) {
	dir := t.TempDir()
	work, res := filepath.Join(dir, "work"), filepath.Join(dir, "res")
	os.Mkdir(work, 0o755)
	plan := writePlan(t, dir, strings.NewReplacer("MODE", "open", "AU", "0").Replace(mlpTrainPlan))
	r := prism(t, dir, "mlperf", "--workdir", work, "--results", res, "training", plan)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	s, tree := readSummary(t, filepath.Join(res, "training", "unet3d", "run", "*"))
	if len(s.Runs) != 5 || !s.Passed || s.Mode != "open" || s.Stats["au_percent"].N != 5 {
		t.Fatalf("summary: %d runs, passed %v, mode %s, AU %+v", len(s.Runs), s.Passed, s.Mode, s.Stats["au_percent"])
	}
	st := s.Stats["au_percent"]
	if !(st.Min <= st.Mean && st.Mean <= st.Max && st.Max <= 100 && st.Min > 0) {
		t.Errorf("AU stats out of order: %+v", st)
	}
	for i, run := range s.Runs {
		if run.CacheDrop == "" {
			t.Errorf("run %d: no record of the cache drop", i+1)
		}
		if _, err := os.Stat(filepath.Join(tree, "run-"+string(rune('1'+i)), "summary.json")); err != nil {
			t.Errorf("run %d: %v", i+1, err)
		}
	}
	var rules []string
	for _, d := range s.Deviations {
		rules = append(rules, d.Key)
	}
	for _, want := range []string{"record_size", "batch_size", "compute_time", "au_threshold", "sizes", "dataset files", "drop_caches"} {
		if !strings.Contains(strings.Join(rules, ","), want) {
			t.Errorf("open change %s not recorded: %v", want, rules)
		}
	}
	if _, err := os.Stat(filepath.Join(tree, "metadata.json")); err != nil {
		t.Error(err)
	}
	// The runs read the dataset datagen kept; none of them wrote it.
	for _, step := range s.Steps {
		if strings.HasPrefix(step.Name, "run-") {
			b, _ := os.ReadFile(step.Plan)
			if strings.Contains(string(b), "create_dataset") {
				t.Errorf("%s creates a dataset", step.Name)
			}
		}
	}
	pd, _ := filepath.Glob(filepath.Join(work, "prism-datasets", "unet_tiny-*", "f0000000.bin"))
	if len(pd) != 1 {
		t.Fatalf("kept dataset: %v", pd)
	}
	before, _ := os.Stat(pd[0])
	// Again, with an AU no emulation reaches: the dataset is reused and
	// the procedure fails.
	plan = writePlan(t, dir, strings.NewReplacer("MODE", "open", "AU", "100").Replace(mlpTrainPlan))
	r = prism(t, dir, "mlperf", "--runs", "1", "--workdir", work, "--results", filepath.Join(dir, "res2"), "training", plan)
	if r.code != 1 || !strings.Contains(r.stdout, "FAILED") || !strings.Contains(r.stderr, "reusing the persistent dataset") {
		t.Errorf("AU 100: exit %d, want 1 with a reused dataset\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if after, _ := os.Stat(pd[0]); !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the second procedure wrote the dataset again")
	}
	s2, _ := readSummary(t, filepath.Join(dir, "res2", "training", "unet3d", "run", "*"))
	if s2.Passed || len(s2.Runs) != 1 || s2.Runs[0].Passed {
		t.Errorf("AU 100: summary passed %v, runs %+v", s2.Passed, s2.Runs)
	}
}

// TestMLPerfClosedRefuses: closed names each rule broken and the allowed
// value, exits 2 and creates nothing; --what-if prints the steps and
// sizes and runs nothing.
func TestMLPerfClosedRefuses(t *testing.T) {
	dir := t.TempDir()
	work, res := filepath.Join(dir, "work"), filepath.Join(dir, "res")
	os.Mkdir(work, 0o755)
	plan := writePlan(t, dir, strings.NewReplacer("MODE", "closed", "AU", "0").Replace(mlpTrainPlan))
	r := prism(t, dir, "mlperf", "--workdir", work, "--results", res, "training", plan)
	if r.code != 2 || !strings.Contains(r.stderr, "train: batch_size = 4: closed: the workload's batch size is fixed (allowed: 7 (unset))") {
		t.Errorf("closed: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(res); !os.IsNotExist(err) {
		t.Errorf("closed refusal created %s", res)
	}
	r = prism(t, dir, "mlperf", "--what-if", "--workdir", work, "--results", res, "--runs", "5", "training",
		writePlan(t, dir, strings.NewReplacer("MODE", "open", "AU", "0").Replace(mlpTrainPlan)))
	if r.code != 0 || !strings.Contains(r.stdout, "datasize: unet3d on h100") || !strings.Contains(r.stdout, "48 files") || !strings.Contains(r.stdout, "5 x (train)") {
		t.Errorf("what-if: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if e, _ := os.ReadDir(work); len(e) != 0 {
		t.Errorf("what-if wrote into the workdir: %v", e)
	}
	if _, err := os.Stat(res); !os.IsNotExist(err) {
		t.Errorf("what-if created %s", res)
	}
}

// TestMLPerfCheckpointingProcedure: a split procedure (write run, cache
// drop, read run of the kept checkpoints) and mlperf report over the
// results tree.
func TestMLPerfCheckpointingProcedure(t *testing.T) {
	dir := t.TempDir()
	work, res := filepath.Join(dir, "work"), filepath.Join(dir, "res")
	os.Mkdir(work, 0o755)
	plan := writePlan(t, dir, mlpCkptPlan)
	r := prism(t, dir, "mlperf", "-n", "2", "--workdir", work, "--results", res, "checkpointing", plan)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	s, tree := readSummary(t, filepath.Join(res, "checkpointing", "llama3-8b", "run", "*"))
	if !s.Passed || len(s.Runs) != 2 || s.Stats["save_duration_mean_seconds"].N != 1 || s.Stats["load_duration_mean_seconds"].N != 1 {
		t.Fatalf("summary: %+v", s)
	}
	if s.Runs[0].Metrics["save_checkpoints"] != 3 || s.Runs[1].Metrics["load_checkpoints"] != 3 || s.Runs[1].Metrics["save_checkpoints"] != 0 {
		t.Errorf("write run %v saves, read run %v loads, %v saves", s.Runs[0].Metrics["save_checkpoints"], s.Runs[1].Metrics["load_checkpoints"], s.Runs[1].Metrics["save_checkpoints"])
	}
	b, _ := os.ReadFile(filepath.Join(tree, "read.toml"))
	if !strings.Contains(string(b), `checkpoint = "llama_tiny"`) || !strings.Contains(string(b), "num_checkpoints_write = 0") {
		t.Errorf("read step plan:\n%s", b)
	}
	// The report over both benchmarks' tree.
	plan2 := writePlan(t, dir, strings.NewReplacer("MODE", "open", "AU", "0").Replace(mlpTrainPlan))
	if r := prism(t, dir, "mlperf", "--runs", "2", "--workdir", work, "--results", res, "training", plan2); r.code != 0 {
		t.Fatalf("training: exit %d\n%s", r.code, r.stderr)
	}
	r = prism(t, dir, "mlperf", "report", res)
	if r.code != 0 || !strings.Contains(r.stdout, "2 procedures") {
		t.Fatalf("report: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	f, err := os.Open(filepath.Join(res, "results.csv"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, row := range rows[1:] {
		got[row[0]+"/"+row[6]] = true
	}
	for _, want := range []string{"training/au_percent", "training/samples_per_sec", "checkpointing/save_throughput_mean_gib_per_sec", "checkpointing/load_duration_mean_seconds"} {
		if !got[want] {
			t.Errorf("results.csv has no %s: %v", want, rows)
		}
	}
	var all []mlpSummary
	b, _ = os.ReadFile(filepath.Join(res, "results.json"))
	if err := json.Unmarshal(b, &all); err != nil || len(all) != 2 {
		t.Errorf("results.json: %v, %d procedures", err, len(all))
	}
	if b, err := os.ReadFile(filepath.Join(res, "system-description.yaml")); err != nil || !strings.Contains(string(b), "storage_system:") {
		t.Errorf("system description template: %v", err)
	}
}

// TestMLPerfClosedExample: the closed RetinaNet example passes the closed
// checks with the rules' figures (4 B200s, one 252 GiB host: datasize's
// 4,189,149 files) and is refused on a host of twice the memory, whose
// minimum it does not reach.
func TestMLPerfClosedExample(t *testing.T) {
	ex := filepath.Join("examples", "mlperf-procedure-retinanet.toml")
	r := prism(t, ".", "mlperf", "--what-if", "--memory", "252GiB", "--launch", "mpirun -np 4", "training", ex)
	if r.code != 0 || !strings.Contains(r.stdout, "at least 4189149 files, 1.23TiB") || strings.Contains(r.stdout, "open change") {
		t.Errorf("closed example at 252GiB: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = prism(t, ".", "mlperf", "--what-if", "--memory", "504GiB", "--launch", "mpirun -np 4", "training", ex)
	if r.code != 2 || !strings.Contains(r.stderr, "dataset files = 4189149") || !strings.Contains(r.stderr, ">= 8378297") {
		t.Errorf("closed example at 504GiB: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = prism(t, ".", "mlperf", "--what-if", "--launch", "mpirun -np 8", "checkpointing", filepath.Join("examples", "mlperf-procedure-llama3-8b.toml"))
	if r.code != 0 || !strings.Contains(r.stdout, "104.7GiB per checkpoint") || !strings.Contains(r.stdout, "step read") {
		t.Errorf("closed checkpointing example: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
