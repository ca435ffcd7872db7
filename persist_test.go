package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// persistPlan creates the persistent dataset "tiny" (or reuses it) and
// reads it back by name with md5_check and train.
const persistPlan = `
[plan]
name = "persist"
drop_caches = "none"

[[phase]]
kind = "create_dataset"
sizes = ["8KiB", "96KiB"]
copies = 6
subdirs = 2
persist = "tiny"

[[phase]]
kind = "md5_check"
dataset = "tiny"
verify = "VERIFY"

[[phase]]
kind = "train"
dataset = "tiny"
record_size = "4KiB"
batch_size = 4
read_threads = 2
compute_time = "1ms"
au_threshold = 0
`

// readerPlan only reads "tiny", as a later run on other ranks does.
const readerPlan = `
[plan]
name = "reader"
drop_caches = "none"

[[phase]]
kind = "md5_check"
dataset = "tiny"
verify = "full"

[[phase]]
kind = "train"
dataset = "tiny"
record_size = "4KiB"
batch_size = 2
read_threads = 1
compute_time = "1ms"
au_threshold = 0
`

type fileID struct {
	ino   uint64
	mtime int64
}

// datasetFiles maps every data file of the dataset directory to its inode
// and mtime.
func datasetFiles(t *testing.T, dir string) map[string]fileID {
	t.Helper()
	out := map[string]fileID{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() && strings.HasSuffix(p, ".bin") {
			st := fi.Sys().(*syscall.Stat_t)
			out[p] = fileID{uint64(st.Ino), fi.ModTime().UnixNano()}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func persistDir(t *testing.T, work string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(work, "prism-datasets", "tiny-*"))
	if len(m) != 1 {
		t.Fatalf("persistent directories of tiny: %v", m)
	}
	return m[0]
}

func reusedMetric(t *testing.T, r result) float64 {
	t.Helper()
	return createMetric(t, r, "dataset_reused")
}

// createMetric is the metric name of the run's create_dataset phase.
func createMetric(t *testing.T, r result, name string) float64 {
	t.Helper()
	for _, p := range loadManifest(t, r).Phases {
		if p.Kind == "create_dataset" {
			v, ok := p.Metrics[name]
			if !ok {
				t.Errorf("create_dataset has no metric %s", name)
			}
			return v
		}
	}
	t.Fatal("no create_dataset in the manifest")
	return 0
}

// TestPersistentDatasetReused: the first run writes the dataset outside
// its run directory and leaves it; the second (two ranks) finds it
// complete and writes nothing (same inodes and mtimes), and both read it
// by name.
func TestPersistentDatasetReused(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	plan := writePlan(t, dir, strings.Replace(persistPlan, "VERIFY", "full", 1))
	r := prism(t, dir, "run", "--workdir", work, "--results", filepath.Join(dir, "res"), plan)
	if r.code != 0 {
		t.Fatalf("first run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if v := reusedMetric(t, r); v != 0 {
		t.Fatalf("first run: dataset_reused = %v", v)
	}
	pd := persistDir(t, work)
	before := datasetFiles(t, pd)
	if len(before) != 12 {
		t.Fatalf("%d files in %s, want 12", len(before), pd)
	}
	if runs, _ := filepath.Glob(filepath.Join(work, "prism-2*")); len(runs) != 0 {
		t.Fatalf("run directories left: %v", runs)
	}
	r = prism(t, dir, "run", "-n", "2", "--workdir", work, "--results", filepath.Join(dir, "res"), plan)
	if r.code != 0 {
		t.Fatalf("second run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if v := reusedMetric(t, r); v != 1 {
		t.Fatalf("second run: dataset_reused = %v", v)
	}
	if !strings.Contains(r.stderr, "reusing the persistent dataset "+pd) {
		t.Errorf("second run does not say it reuses %s:\n%s", pd, r.stderr)
	}
	after := datasetFiles(t, pd)
	for p, id := range before {
		if after[p] != id {
			t.Errorf("%s was written again: %+v, then %+v", p, id, after[p])
		}
	}
	// The list of prism datasets names it complete.
	l := prism(t, dir, "datasets", "--workdir", work, "list")
	if l.code != 0 || !strings.Contains(l.stdout, filepath.Base(pd)) || !strings.Contains(l.stdout, "complete") {
		t.Errorf("datasets list: exit %d\n%s%s", l.code, l.stdout, l.stderr)
	}
	// Other parameters: another directory beside it.
	other := writePlan(t, dir, strings.Replace(strings.Replace(persistPlan, "VERIFY", "stat", 1), "copies = 6", "copies = 4", 1))
	if r := prism(t, dir, "run", "--workdir", work, "--results", filepath.Join(dir, "res"), other); r.code != 1 || !strings.Contains(r.stdout+r.stderr, "2 persistent directories of that name") {
		t.Errorf("two tiny-* and dataset = \"tiny\": exit %d, want 1 naming both\n%s", r.code, r.stderr)
	}
}

// TestPersistentDatasetCorrupt: a file whose size changed fails the stat
// pass, a flipped byte fails verify = "full"; both name the file, exit 1.
func TestPersistentDatasetCorrupt(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	stat := writePlan(t, dir, strings.Replace(persistPlan, "VERIFY", "stat", 1))
	if r := prism(t, dir, "run", "--workdir", work, "--results", filepath.Join(dir, "res"), stat); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	pd := persistDir(t, work)
	flipped := filepath.Join(pd, "d0001", "f0000003.bin")
	f, err := os.OpenFile(flipped, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	f.ReadAt(b, 100)
	b[0] ^= 0xff
	f.WriteAt(b, 100)
	f.Close()
	full := filepath.Join(dir, "full.toml")
	os.WriteFile(full, []byte(readerPlan), 0o644)
	r := prism(t, dir, "run", "--workdir", work, "--results", filepath.Join(dir, "res"), full)
	if r.code != 1 || !strings.Contains(r.stdout+r.stderr, "MD5 mismatch in "+flipped) {
		t.Errorf("byte flipped, verify = full: exit %d, want 1 naming %s\n%s", r.code, flipped, r.stderr)
	}
	short := filepath.Join(pd, "d0000", "f0000002.bin")
	if err := os.Truncate(short, 5); err != nil {
		t.Fatal(err)
	}
	r = prism(t, dir, "run", "--workdir", work, "--results", filepath.Join(dir, "res"), stat)
	if r.code != 1 || !strings.Contains(r.stdout+r.stderr, short+" holds 5 bytes, the list says 8192") {
		t.Errorf("file truncated: exit %d, want 1 naming %s\n%s", r.code, short, r.stderr)
	}
	// The failed runs left the dataset where it was, marker included.
	if _, err := os.Stat(filepath.Join(pd, ".prism-persistent")); err != nil {
		t.Errorf("marker gone after failed runs: %v", err)
	}
	// A list changed after the marker was written is refused too, by
	// the creator and by a reader.
	lf, _ := os.OpenFile(filepath.Join(pd, ".prism-files.json"), os.O_APPEND|os.O_WRONLY, 0)
	lf.WriteString(" ")
	lf.Close()
	for _, p := range []string{stat, full} {
		if r := prism(t, dir, "run", "--workdir", work, "--results", filepath.Join(dir, "res"), p); r.code != 1 || !strings.Contains(r.stdout+r.stderr, "the list was changed") {
			t.Errorf("%s over a changed list: exit %d\n%s", p, r.code, r.stdout+r.stderr)
		}
	}
}

// TestPersistentDatasetUnfinished: a creation that crashed (partial
// marker, no marker) is not taken for complete: the next run writes it
// again and marks it.
func TestPersistentDatasetUnfinished(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	plan := writePlan(t, dir, strings.Replace(persistPlan, "VERIFY", "stat", 1))
	if r := prism(t, dir, "run", "--workdir", work, "--results", filepath.Join(dir, "res"), plan); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	pd := persistDir(t, work)
	marker, _ := os.ReadFile(filepath.Join(pd, ".prism-persistent"))
	// What a crash before the marker leaves: the partial marker, a file
	// missing, the list maybe.
	os.Remove(filepath.Join(pd, ".prism-persistent"))
	os.WriteFile(filepath.Join(pd, ".prism-persistent-partial"), marker, 0o644)
	// Its creator died an hour ago: the lease has long run out.
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(pd, ".prism-persistent-partial"), old, old)
	os.Remove(filepath.Join(pd, "d0000", "f0000004.bin"))
	before := datasetFiles(t, pd)
	r := prism(t, dir, "run", "--workdir", work, "--results", filepath.Join(dir, "res"), plan)
	if r.code != 0 || !strings.Contains(r.stderr, "unfinished creation: writing it again") {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if v := reusedMetric(t, r); v != 0 {
		t.Errorf("an unfinished dataset was reused")
	}
	after := datasetFiles(t, pd)
	if len(after) != 12 {
		t.Errorf("%d files after re-creation, want 12", len(after))
	}
	for p, id := range before {
		if after[p] == id {
			t.Errorf("%s of the unfinished creation kept", p)
		}
	}
	if _, err := os.Stat(filepath.Join(pd, ".prism-persistent-partial")); !os.IsNotExist(err) {
		t.Errorf("partial marker left: %v", err)
	}
}

// TestDatasetsRmRefusesForeign: rm removes a marked directory and refuses
// one without prism's marker, leaving it as it was; create_dataset also
// refuses to write into such a directory.
func TestDatasetsRmRefusesForeign(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	foreign := filepath.Join(work, "prism-datasets", "mine-0123456789ab")
	if err := os.MkdirAll(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(foreign, "precious"), []byte("x"), 0o644)
	r := prism(t, dir, "datasets", "--workdir", work, "rm", "mine")
	if r.code != 1 || !strings.Contains(r.stderr, "not removing "+foreign+": it carries no marker") {
		t.Errorf("rm foreign: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(foreign, "precious")); err != nil {
		t.Errorf("rm touched the foreign directory: %v", err)
	}
	plan := writePlan(t, dir, strings.Replace(persistPlan, "VERIFY", "stat", 1))
	if r := prism(t, dir, "run", "--workdir", work, "--results", filepath.Join(dir, "res"), plan); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	pd := persistDir(t, work)
	// A foreign directory with the very name a plan would create.
	clash := filepath.Join(work, "prism-datasets", "x")
	os.Mkdir(clash, 0o755)
	r = prism(t, dir, "datasets", "--workdir", work, "rm", filepath.Base(pd))
	if r.code != 0 || !strings.Contains(r.stdout, "removed "+pd) {
		t.Errorf("rm tiny: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(pd); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", pd, err)
	}
	os.MkdirAll(pd, 0o755)
	os.WriteFile(filepath.Join(pd, "f"), nil, 0o644)
	if r := prism(t, dir, "run", "--workdir", work, "--results", filepath.Join(dir, "res"), plan); r.code != 1 || !strings.Contains(r.stdout+r.stderr, "carries none of prism's markers") {
		t.Errorf("create over a foreign directory: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(pd, "f")); err != nil {
		t.Errorf("the foreign directory was touched: %v", err)
	}
	// prism-datasets itself a link to elsewhere: neither rm nor a run
	// follows it.
	work2 := filepath.Join(dir, "work2")
	os.Mkdir(work2, 0o755)
	if err := os.Symlink(filepath.Join(work, "prism-datasets"), filepath.Join(work2, "prism-datasets")); err != nil {
		t.Fatal(err)
	}
	if r := prism(t, dir, "datasets", "--workdir", work2, "rm", "mine"); r.code != 1 {
		t.Errorf("rm through a linked prism-datasets: exit %d\n%s", r.code, r.stderr)
	}
	if r := prism(t, dir, "run", "--workdir", work2, "--results", filepath.Join(dir, "res"), plan); r.code != 1 {
		t.Errorf("a run through a linked prism-datasets: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(foreign, "precious")); err != nil {
		t.Errorf("reached through the link: %v", err)
	}
	if r := prism(t, dir, "datasets", "--workdir", work, "rm", "../x"); r.code != 2 {
		t.Errorf("rm ../x: exit %d, want 2", r.code)
	}
	if _, err := os.Stat(clash); err != nil {
		t.Errorf("%s touched: %v", clash, err)
	}
}

// TestPersistentDatasetMPI: a dataset one run wrote is read by a later
// run of 2 MPI ranks, checked in full, without writing it again.
func TestPersistentDatasetMPI(t *testing.T) {
	mpirun := needMPI(t)
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	plan := writePlan(t, dir, strings.Replace(persistPlan, "VERIFY", "stat", 1))
	if r := prism(t, dir, "run", "--workdir", work, "--results", filepath.Join(dir, "res"), plan); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	pd := persistDir(t, work)
	before := datasetFiles(t, pd)
	reader := filepath.Join(dir, "reader.toml")
	os.WriteFile(reader, []byte(readerPlan), 0o644)
	r := runMPI(t, mpirun, dir, mpirunArgs("2", prismBin, "run", "--workdir", work, "--results", filepath.Join(dir, "res"), reader)...)
	if r.code != 0 {
		t.Fatalf("mpirun: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	m := loadManifest(t, r)
	for _, p := range m.Phases {
		if p.Ranks != 2 || p.Status != "passed" {
			t.Errorf("%s: %d ranks, %s", p.Name, p.Ranks, p.Status)
		}
		if p.Kind == "md5_check" && p.Ops == 0 {
			t.Errorf("md5_check read nothing")
		}
	}
	for p, id := range datasetFiles(t, pd) {
		if before[p] != id {
			t.Errorf("%s changed under the MPI readers", p)
		}
	}
}

const ckptWritePlan = `
[plan]
name = "ckw"
drop_caches = "none"

[[phase]]
kind = "mlperf_checkpoint"
scale = 0.00002
num_checkpoints_write = 2
num_checkpoints_read = 0
time_between_checkpoints = "0s"
persist = "ck"
`

const ckptReadPlan = `
[plan]
name = "ckr"
drop_caches = "none"

[[phase]]
kind = "mlperf_checkpoint"
scale = SCALE
num_checkpoints_write = 0
num_checkpoints_read = 3
time_between_checkpoints = "0s"
checkpoint = "ck"
`

// TestSplitCheckpointRun: a write run (2 ranks) keeps its checkpoints; a
// later read-only run (1 rank) reads them, CRCs checked, without writing;
// a reader of other parameters and a truncated file are refused.
func TestSplitCheckpointRun(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	res := filepath.Join(dir, "res")
	w := writePlan(t, dir, ckptWritePlan)
	r := prism(t, dir, "run", "-n", "2", "--workdir", work, "--results", res, w)
	if r.code != 0 {
		t.Fatalf("write run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	m, _ := filepath.Glob(filepath.Join(work, "prism-datasets", "ck-*"))
	if len(m) != 1 {
		t.Fatalf("kept checkpoints: %v", m)
	}
	step2, _ := filepath.Glob(filepath.Join(m[0], "global_epoch1_step2", "*.pt"))
	if len(step2) != 16 {
		t.Fatalf("%d files in the second checkpoint, want 16 (8 processes x model + optimizer)", len(step2))
	}
	before := map[string]int64{}
	for _, f := range step2 {
		fi, _ := os.Stat(f)
		before[f] = fi.ModTime().UnixNano()
	}
	rd := filepath.Join(dir, "read.toml")
	os.WriteFile(rd, []byte(strings.Replace(ckptReadPlan, "SCALE", "0.00002", 1)), 0o644)
	r = prism(t, dir, "run", "--workdir", work, "--results", res, rd)
	if r.code != 0 {
		t.Fatalf("read run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	ph := loadManifest(t, r).Phases[0]
	if ph.Metrics["load_checkpoints"] != 3 || ph.Metrics["save_checkpoints"] != 0 || ph.OpsByType["read"].Ops == 0 {
		t.Errorf("read run: %v loads, %v saves, %d reads", ph.Metrics["load_checkpoints"], ph.Metrics["save_checkpoints"], ph.OpsByType["read"].Ops)
	}
	if _, ok := ph.OpsByType["write"]; ok {
		t.Errorf("the read-only run wrote")
	}
	for f, mt := range before {
		if fi, _ := os.Stat(f); fi.ModTime().UnixNano() != mt {
			t.Errorf("%s written again by the read-only run", f)
		}
	}
	os.WriteFile(rd, []byte(strings.Replace(ckptReadPlan, "SCALE", "0.00003", 1)), 0o644)
	if r := prism(t, dir, "run", "--workdir", work, "--results", res, rd); r.code != 1 || !strings.Contains(r.stdout+r.stderr, "was written with") {
		t.Errorf("reader of another scale: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	os.Truncate(step2[3], 100)
	os.WriteFile(rd, []byte(strings.Replace(ckptReadPlan, "SCALE", "0.00002", 1)), 0o644)
	if r := prism(t, dir, "run", "--workdir", work, "--results", res, rd); r.code != 1 || !strings.Contains(r.stdout+r.stderr, step2[3]+" holds 100 bytes") {
		t.Errorf("truncated checkpoint file: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestDatagen: prism datagen runs only the create_dataset phases that
// keep their dataset, on 2 ranks; the run that reads it after finds it
// complete; a plan with none to keep is a plan error.
func TestDatagen(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	plan := writePlan(t, dir, strings.Replace(persistPlan, "VERIFY", "stat", 1))
	r := prism(t, dir, "datagen", "-n", "2", "--workdir", work, "--results", filepath.Join(dir, "res"), plan)
	if r.code != 0 {
		t.Fatalf("datagen: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	m := loadManifest(t, r)
	if len(m.Phases) != 1 || m.Phases[0].Kind != "create_dataset" || m.Phases[0].Ranks != 2 {
		t.Fatalf("datagen ran %+v", m.Phases)
	}
	pd := persistDir(t, work)
	before := datasetFiles(t, pd)
	r = prism(t, dir, "run", "--workdir", work, "--results", filepath.Join(dir, "res"), plan)
	if r.code != 0 || reusedMetric(t, r) != 1 {
		t.Fatalf("run after datagen: exit %d\n%s", r.code, r.stderr)
	}
	for p, id := range datasetFiles(t, pd) {
		if before[p] != id {
			t.Errorf("%s written again", p)
		}
	}
	none := filepath.Join(dir, "none.toml")
	os.WriteFile(none, []byte(strings.Replace(strings.Replace(persistPlan, "VERIFY", "stat", 1), `persist = "tiny"`, "", 1)), 0o644)
	if r := prism(t, dir, "datagen", "--workdir", work, none); r.code != 2 || !strings.Contains(r.stderr, "no create_dataset phase of the plan has persist") {
		t.Errorf("datagen without persist: exit %d\n%s", r.code, r.stderr)
	}
}

// racePlan creates the persistent dataset "race", large enough (16 MiB,
// fsynced) that two jobs started together overlap while it is written.
const racePlan = `
[plan]
name = "race"
drop_caches = "none"

[[phase]]
kind = "create_dataset"
sizes = ["256KiB"]
copies = 64
subdirs = 2
fsync = true
persist = "race"
`

const raceReaderPlan = `
[plan]
name = "race-reader"
drop_caches = "none"

[[phase]]
kind = "md5_check"
dataset = "race"
verify = "full"
`

// TestPersistentDatasetConcurrentCreate: two jobs of 2 ranks each create
// the same persistent dataset at the same time, and a third reads it right
// after. Exactly one writes it; the other either waits for it and reuses
// it (dataset_reused = 1) or fails at once naming the directory and the
// creating run, host and lease; no data file is written after the marker
// (nothing rewritten under the creator), and the reader finds every MD5
// right.
func TestPersistentDatasetConcurrentCreate(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	plan := writePlan(t, dir, racePlan)
	var rs [2]asyncResult
	var wg sync.WaitGroup
	for i := range rs {
		wg.Go(func() {
			rs[i] = prismAsync(dir, "run", "-n", "2", "--workdir", work, "--results", filepath.Join(dir, fmt.Sprint("res", i)), plan)
		})
	}
	wg.Wait()
	m, _ := filepath.Glob(filepath.Join(work, "prism-datasets", "race-*"))
	if len(m) != 1 {
		t.Fatalf("persistent directories of race: %v", m)
	}
	pd := m[0]
	writers := 0
	for i, r := range rs {
		if r.err != nil {
			t.Fatalf("job %d: %v", i, r.err)
		}
		switch {
		case r.code == 0 && reusedMetric(t, r.result) == 0:
			writers++
		case r.code == 0:
			// Waited for the other job (or started after it), then
			// reused it; the wait is in the manifest.
			wait := createMetric(t, r.result, "dataset_wait_s")
			if said := strings.Contains(r.stderr, "waiting for it"); said != (wait > 0) {
				t.Errorf("job %d: says it waited: %v, dataset_wait_s = %v", i, said, wait)
			}
		default:
			for _, want := range []string{pd, "is being created by run ", " on host ", "its lease renewed "} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("job %d failed (exit %d) without naming %q:\n%s", i, r.code, want, r.stderr)
				}
			}
		}
		t.Logf("job %d: exit %d\n%s", i, r.code, r.stderr)
		if strings.Contains(r.stderr, "panic") {
			t.Errorf("job %d panicked:\n%s", i, r.stderr)
		}
	}
	if writers != 1 {
		t.Errorf("%d jobs wrote the dataset, want exactly 1\njob 0 (exit %d):\n%s\njob 1 (exit %d):\n%s", writers, rs[0].code, rs[0].stderr, rs[1].code, rs[1].stderr)
	}
	mk, err := os.Stat(filepath.Join(pd, ".prism-persistent"))
	if err != nil {
		t.Fatalf("no marker: %v", err)
	}
	files := datasetFiles(t, pd)
	if len(files) != 64 {
		t.Errorf("%d files in %s, want 64", len(files), pd)
	}
	for p, id := range files {
		if id.mtime > mk.ModTime().UnixNano() {
			t.Errorf("%s written after the marker", p)
		}
	}
	reader := filepath.Join(dir, "reader.toml")
	os.WriteFile(reader, []byte(raceReaderPlan), 0o644)
	if r := prism(t, dir, "run", "-n", "2", "--workdir", work, "--results", filepath.Join(dir, "res"), reader); r.code != 0 {
		t.Errorf("reader: exit %d\n%s", r.code, r.stderr)
	}
}

type asyncResult struct {
	result
	err error
}

// prismAsync is prism for a goroutine: it reports a failure to start in
// err instead of failing the test.
func prismAsync(dir string, args ...string) asyncResult {
	cmd := exec.Command(prismBin, args...)
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := asyncResult{result: result{stdout: out.String(), stderr: errb.String()}}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else {
		r.err = err
	}
	return r
}

// TestPersistentDatasetWaitOutlastsCoordination: a job of 2 ranks waits
// for another job's live claim longer than its coordination_timeout (rank
// 0 looks once a second and its ranks follow round by round, so no rank
// sits in one collective for the whole wait), then, the claim released,
// writes the dataset itself.
func TestPersistentDatasetWaitOutlastsCoordination(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	plan := writePlan(t, dir, strings.NewReplacer("VERIFY", "stat", `persist = "tiny"`, "persist = \"tiny\"\npersist_wait = \"1m\"",
		`drop_caches = "none"`, "drop_caches = \"none\"\ncoordination_timeout = \"1s\"").Replace(persistPlan))
	if r := prism(t, dir, "run", "--workdir", work, "--results", filepath.Join(dir, "res"), plan); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	pd := persistDir(t, work)
	if r := prism(t, dir, "datasets", "--workdir", work, "rm", filepath.Base(pd)); r.code != 0 {
		t.Fatalf("rm: exit %d\n%s", r.code, r.stderr)
	}
	// Another job's claim, live: renewed by this test until released.
	os.Mkdir(pd, 0o755)
	partial := filepath.Join(pd, ".prism-persistent-partial")
	os.WriteFile(partial, []byte(`{"prism":"persistent","kind":"dataset","run_id":"other-run","host":"other-host","pid":1,"rank":0,"token":"t0","lease_s":30,"renew_s":1}`), 0o644)
	stop := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		for i := 0; ; i++ {
			select {
			case <-stop:
				os.Rename(partial, partial+".released-t0")
				return
			case <-time.After(200 * time.Millisecond):
				now := time.Now()
				os.Chtimes(partial, now, now)
			}
		}
	}()
	var r asyncResult
	done := make(chan struct{})
	go func() {
		r = prismAsync(dir, "run", "-n", "2", "--workdir", work, "--results", filepath.Join(dir, "res"), plan)
		close(done)
	}()
	// Released once the job has waited three coordination timeouts
	// (counted from its run directory's appearance).
	for i := 0; ; i++ {
		if runs, _ := filepath.Glob(filepath.Join(work, "prism-2*")); len(runs) > 0 || i == 600 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	close(stop)
	<-renewed
	<-done
	if r.err != nil || r.code != 0 {
		t.Fatalf("exit %d, %v\n%s", r.code, r.err, r.stderr)
	}
	for _, want := range []string{"is being created by run other-run on host other-host", "waiting for it", "unfinished creation: writing it again"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
		}
	}
	if v := reusedMetric(t, r.result); v != 0 {
		t.Errorf("dataset_reused = %v", v)
	}
	if w := createMetric(t, r.result, "dataset_wait_s"); w <= 0 {
		t.Errorf("dataset_wait_s = %v", w)
	}
	if len(datasetFiles(t, pd)) != 12 {
		t.Errorf("not written")
	}
}
