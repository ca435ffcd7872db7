package blockio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/prism-hpc/prism/internal/fstest"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/phasestest"
)

func readTestdata(t testing.TB, name string) []byte {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// binsMean is the mean latency the recorded distribution will have.
func binsMean(bins []FioBin) float64 {
	var sum, n float64
	for _, b := range bins {
		sum += float64(b.Ns) * float64(b.Count)
		n += float64(b.Count)
	}
	return sum / n
}

// TestParseFioJSON reads real fio 3.33 json+ outputs captured on ext4:
// psync (clat bins only, slat 0), libaio direct with lat_percentiles=1 and
// fsync=8 (lat bins, real slat, sync bins), and a two-job job file.
func TestParseFioJSON(t *testing.T) {
	type want struct {
		job, op        string
		ioBytes, ops   int64
		latMean        float64 // fio's own lat_ns mean
		latBinsPresent bool
	}
	cases := []struct {
		file  string
		jobs  int
		wants []want
	}{
		{"fio-3.33-psync-randrw.json", 1, []want{
			{"capture", "read", 733184, 179, 1495706.497207, false},
			{"capture", "write", 315392, 77, 11903.012987, false},
		}},
		{"fio-3.33-libaio-randrw-fsync.json", 1, []want{
			{"capture", "read", 516096, 126, 881253.928571, true},
			{"capture", "write", 532480, 130, 1693933.046154, true},
			{"capture", "sync", 0, 29, 3347694.551724, true},
		}},
		{"fio-3.33-two-jobs.json", 2, []want{
			{"j1", "read", 262144, 64, 79265.96875, true},
			{"j2", "write", 262144, 64, 5855.6875, true},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			b := readTestdata(t, tc.file)
			rep, err := ParseFioJSON(b)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Version != "fio-3.33" || len(rep.Jobs) != tc.jobs {
				t.Fatalf("version %q, %d jobs", rep.Version, len(rep.Jobs))
			}
			for _, w := range tc.wants {
				var job *FioJob
				for i := range rep.Jobs {
					if rep.Jobs[i].Name == w.job {
						job = &rep.Jobs[i]
					}
				}
				if job == nil {
					t.Fatalf("no job %s", w.job)
				}
				op := map[string]*FioOp{"read": job.Read, "write": job.Write, "trim": job.Trim, "sync": job.Sync}[w.op]
				if op == nil || op.IOBytes != w.ioBytes || op.TotalIOs != w.ops {
					t.Fatalf("%s %s: %+v", w.job, w.op, op)
				}
				if got := len(op.Lat.Bins) > 0; got != w.latBinsPresent {
					t.Errorf("%s %s: lat bins present %v", w.job, w.op, got)
				}
				bins := op.Latencies()
				if n := binsTotal(bins); n != w.ops {
					t.Errorf("%s %s: bins count %d ops, want %d", w.job, w.op, n, w.ops)
				}
				// Bins are fio's buckets (≤ 1/64 wide), so the mean of the
				// recorded distribution is fio's lat mean within a few %.
				if m := binsMean(bins); math.Abs(m-w.latMean)/w.latMean > 0.03 {
					t.Errorf("%s %s: recorded mean %.0f ns, fio's lat mean %.0f ns", w.job, w.op, m, w.latMean)
				}
			}
		})
	}
	// fio sometimes prints notes before the JSON object.
	b := readTestdata(t, "fio-3.33-psync-randrw.json")
	noted := append([]byte("note: both iodepth >= 1 and synchronous I/O engine are selected, queue depth will be capped at 1\n"), b...)
	if rep, err := ParseFioJSON(noted); err != nil || rep.Jobs[0].Read.TotalIOs != 179 {
		t.Fatalf("with a leading note: %v", err)
	}
	for _, bad := range []string{"", "no json here", "{", `{"jobs": 3}`, `{"fio version": "x"}`,
		`{"jobs":[{"read":{"io_bytes":-1}}]}`,
		`{"jobs":[{"read":{"clat_ns":{"bins":{"abc":1}}}}]}`,
		`{"jobs":[{"read":{"clat_ns":{"bins":{"100":-3}}}}]}`,
		`{"jobs":[{"read":{"clat_ns":{"bins":{"100":1125899906842625}}}}]}`} {
		if _, err := ParseFioJSON([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// FuzzParseFioJSON: no input may panic the parser or make it return
// bins that claim more ops than the bound ingestion relies on.
func FuzzParseFioJSON(f *testing.F) {
	for _, n := range []string{"fio-3.33-psync-randrw.json", "fio-3.33-libaio-randrw-fsync.json", "fio-3.33-two-jobs.json"} {
		f.Add(readTestdata(f, n))
	}
	f.Add([]byte(`{"jobs":[{"jobname":"x","read":{"io_bytes":4096,"total_ios":1,"lat_ns":{"mean":5}}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := ParseFioJSON(b)
		if err != nil {
			return
		}
		var total int64
		for _, j := range rep.Jobs {
			for _, op := range []*FioOp{j.Read, j.Write, j.Trim, j.Sync} {
				if op == nil {
					continue
				}
				for _, bin := range op.Latencies() {
					if bin.Count < 0 || bin.Ns < 0 {
						t.Fatalf("negative bin %+v", bin)
					}
					total += bin.Count
				}
				if op.IOBytes < 0 {
					t.Fatal("negative bytes")
				}
			}
		}
		if total < 0 || total > 4*maxFioOps {
			t.Fatalf("bins claim %d ops", total)
		}
	})
}

func needFio(t *testing.T) {
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("fio not installed (apt-get install fio)")
	}
}

// TestFioPhaseBytes: the bytes prism records equal fio's own io_bytes and
// the job's configured size, and the ops equal size/bs.
func TestFioPhaseBytes(t *testing.T) {
	needFio(t)
	ph := bioRunPlan(t, fstest.DiskDir(t), `
[[phase]]
kind = "fio"
options = ["rw=write", "bs=4k", "size=1m", "ioengine=psync"]
layout = false
[[phase]]
kind = "fio"
name = "table"
[phase.options]
rw = "randread"
bs = "16k"
size = "2m"
ioengine = "psync"
norandommap = false
`)
	w, r := ph[0], ph[1]
	if w.Status != "passed" || r.Status != "passed" {
		t.Fatalf("status %s %s: %s %s", w.Status, r.Status, w.Error, r.Error)
	}
	if w.Bytes != 1<<20 || int64(w.Metrics["fio_io_bytes"]) != w.Bytes || w.OpsByType["write"].Ops != 256 {
		t.Fatalf("write: bytes %d, fio_io_bytes %v, ops %d", w.Bytes, w.Metrics["fio_io_bytes"], w.OpsByType["write"].Ops)
	}
	if r.Bytes != 2<<20 || int64(r.Metrics["fio_io_bytes"]) != r.Bytes || r.OpsByType["read"].Ops != 128 {
		t.Fatalf("read: bytes %d, fio_io_bytes %v, ops %d", r.Bytes, r.Metrics["fio_io_bytes"], r.OpsByType["read"].Ops)
	}
	if r.Latency.P50 <= 0 || r.Metrics["fio_iops"] <= 0 {
		t.Fatalf("latency %+v metrics %v", r.Latency, r.Metrics)
	}
}

func TestFioJobFile(t *testing.T) {
	needFio(t)
	job := filepath.Join(t.TempDir(), "two.fio")
	os.WriteFile(job, []byte("[global]\nbs=4k\nsize=256k\nioengine=psync\n\n[reader]\nrw=read\n\n; a writer\n[writer]\nrw=write\nfsync=16\n"), 0o644)
	ph := bioRunPlan(t, fstest.DiskDir(t), `
[[phase]]
kind = "fio"
job_file = "`+job+`"
`)
	p := ph[0]
	if p.Status != "passed" || p.Bytes != 512<<10 || p.OpsByType["read"].Bytes != 256<<10 || p.OpsByType["fsync"].Ops < 3 {
		t.Fatalf("%s %s: bytes %d, by type %+v", p.Status, p.Error, p.Bytes, p.OpsByType)
	}
}

func TestFioPlanErrors(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside.fio")
	os.WriteFile(outside, []byte("[j]\nrw=read\nfilename=/dev/sda\n"), 0o644)
	cases := []struct{ name, body, key, msg string }{
		{"nothing", ``, "job_file", "job_file or inline options"},
		{"both", "job_file = \"x\"\noptions = [\"rw=read\"]", "options", "not both"},
		{"absolute filename", `options = ["filename=/dev/sda", "rw=read"]`, "options", "relative path"},
		{"escaping directory", `options = ["directory=../..", "rw=read"]`, "options", "relative path"},
		{"dashes", `options = ["--rw=read"]`, "options", "without dashes"},
		{"owned", `options = ["output=x"]`, "options", "prism sets output"},
		{"job file outside", "job_file = \"" + outside + "\"", "job_file", "line 3"},
		{"missing job file", `job_file = "/nonexistent/x.fio"`, "job_file", "cannot read"},
		{"missing binary", "options = [\"rw=read\"]\nbinary = \"fio-not-installed-here\"", "binary", "apt-get install fio"},
		{"bad option type", `options = [1, 2]`, "options", "strings"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := phases.DecodePlan(registry(), "f.toml", []byte("[[phase]]\nkind = \"fio\"\n"+tc.body+"\n"))
			var pe *phases.PlanError
			if !errors.As(err, &pe) || pe.Key != tc.key || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("%v (key %q), want key %s and %q", err, keyOf(pe), tc.key, tc.msg)
			}
		})
	}
	p, err := phases.DecodePlan(registry(), "f.toml", []byte("[[phase]]\nkind = \"fio\"\n[phase.options]\nrw = \"read\"\nioengine = \"libaio\"\ndirect = true\ntime_based = false\n"))
	if err == nil {
		got := strings.Join(p.Phases[0].Phase.Config().(*fioConfig).Options, " ")
		if got != "ioengine=libaio direct rw=read time_based=0" {
			t.Errorf("table options ordered as %q", got)
		}
	} else if !strings.Contains(err.Error(), "binary") {
		t.Fatal(err)
	}
}

func keyOf(pe *phases.PlanError) string {
	if pe == nil {
		return ""
	}
	return pe.Key
}

// TestFioCancelled: cancelling the context stops fio promptly (SIGTERM,
// then kill), so an interrupted run does not wait out fio's runtime.
func TestFioCancelled(t *testing.T) {
	needFio(t)
	dir := fstest.DiskDir(t)
	p := &fioPhase{cfg: fioConfig{Binary: "fio", Options: FioOptions{"rw=read", "bs=4k", "size=1m", "time_based", "runtime=60", "ioengine=psync"}}}
	if err := p.cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	env := phasestest.EnvIn(t, "fio", dir)
	if err := p.Setup(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	defer p.Teardown(context.Background(), env)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := p.Run(ctx, env)
	if err == nil || time.Since(start) > 15*time.Second {
		t.Fatalf("Run returned %v after %v", err, time.Since(start))
	}
}

// TestFioHeadlineIsFios: on 2 ranks, two jobs each (numjobs = 2, no
// group_reporting), the phase's bandwidth and IOPS (and write's) are the
// sum of every job's bw_bytes and iops in the fio JSON kept beside the
// manifest (fio-<phase>-r<rank>.json), not prism's bytes over a wall that
// includes fio's start-up (kept as prism_bytes_per_sec, lower); the
// latencies still come from the histograms.
func TestFioHeadlineIsFios(t *testing.T) {
	needFio(t)
	res := phasestest.Run(t, registry(), `
[[phase]]
kind = "fio"
name = "seqw"
options = ["rw=write", "bs=4k", "size=1m", "ioengine=psync", "numjobs=2"]
layout = false
`, phasestest.Workdir(fstest.DiskDir(t)), phasestest.Ranks(2))
	ph := res.Phase(t, "seqw")
	if ph.Status != "passed" {
		t.Fatalf("status %s: %s", ph.Status, ph.Error)
	}
	dir := filepath.Dir(res.Outcome.ManifestPath)
	var bw, iops float64
	for r := 0; r < 2; r++ {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("fio-seqw-r%d.json", r)))
		if err != nil {
			t.Fatalf("fio's JSON not kept: %v", err)
		}
		rep, err := ParseFioJSON(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Jobs) != 2 {
			t.Fatalf("rank %d: %d jobs, want 2", r, len(rep.Jobs))
		}
		for _, j := range rep.Jobs {
			bw += j.Write.BWBytes
			iops += j.Write.IOPS
		}
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }
	if bw <= 0 || !near(ph.BytesPerSec, bw) || !near(ph.OpsPerSec, iops) {
		t.Errorf("headline %.0f B/s, %.0f IOPS; fio's JSON sums to %.0f B/s, %.0f IOPS", ph.BytesPerSec, ph.OpsPerSec, bw, iops)
	}
	if w := ph.OpsByType["write"]; !near(w.BytesPerSec, bw) || !near(w.OpsPerSec, iops) {
		t.Errorf("write: %.0f B/s, %.0f IOPS; want fio's %.0f, %.0f", w.BytesPerSec, w.OpsPerSec, bw, iops)
	}
	if p := ph.Metrics["prism_bytes_per_sec"]; !(p > 0 && p < ph.BytesPerSec) {
		t.Errorf("prism_bytes_per_sec %.0f, want below fio's %.0f (its wall includes fio's start-up)", p, ph.BytesPerSec)
	}
	if ph.Bytes != 4<<20 || ph.OpsByType["write"].Ops != 1024 || ph.Latency.P50 <= 0 {
		t.Errorf("bytes %d, write ops %d, p50 %d", ph.Bytes, ph.OpsByType["write"].Ops, ph.Latency.P50)
	}
}

// readFioObjects hands over every whole top-level object fio wrote, in
// order, however the pipe splits them: text before and between objects
// is skipped, and so is an object cut short by text.
func TestReadFioObjects(t *testing.T) {
	in := "fio: note: both iodepth >= 1 and synchronous I/O engine\n" +
		"{\n  \"jobs\" : [ {\"read\" : {\"total_ios\" : 1}} ]\n}\n" +
		"{\n  \"jobs\" : [ {\"read\" : \n" + // cut short by a note
		"fio: pid=12, err=5/file:io_u.c:1889, func=io_u error\n" +
		"{\n  \"jobs\" : [ {\"read\" : {\"total_ios\" : 3}} ],\n  \"x\" : \"{\"\n}\n" +
		"fio: trailing words\n"
	for name, r := range map[string]io.Reader{"whole": strings.NewReader(in), "byte by byte": iotest.OneByteReader(strings.NewReader(in))} {
		var got []int64
		err := readFioObjects(r, func(obj []byte) {
			ops, _, ok := fioTotals(obj)
			if !ok {
				t.Errorf("%s: handed a non-object %q", name, obj)
			}
			got = append(got, ops)
		})
		if err != nil || len(got) != 2 || got[0] != 1 || got[1] != 3 {
			t.Errorf("%s: objects with %v ops (%v), want [1 3]", name, got, err)
		}
	}
}

// TestFioLiveProgress: with progress on, fio reports its status every
// interval (--status-interval) on prism's pipe, and progress shows fio's
// ops while fio runs (not 0 until it exits); the last line counts them
// once, as the manifest does.
func TestFioLiveProgress(t *testing.T) {
	needFio(t)
	res := phasestest.Run(t, registry(), `
[plan]
drop_caches = "none"
[[phase]]
kind = "fio"
name = "live"
options = ["rw=randread", "bs=4k", "size=4m", "ioengine=psync", "time_based", "runtime=4"]
`, phasestest.Workdir(fstest.DiskDir(t)), phasestest.Progress(phases.ProgressLine, time.Second))
	ph := res.Phase(t, "live")
	if ph.Status != "passed" {
		t.Fatalf("status %s: %s", ph.Status, ph.Error)
	}
	var during []int64
	var last string
	for _, l := range strings.Split(res.Stderr, "\n") {
		if !strings.HasPrefix(l, "[1/1] live:") {
			continue
		}
		if strings.HasPrefix(l, "[1/1] live: done") {
			last = l
			continue
		}
		var el string
		var ops int64
		if _, err := fmt.Sscanf(l, "[1/1] live: %s %d ops", &el, &ops); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		during = append(during, ops)
	}
	if len(during) == 0 || slices.Max(during) == 0 {
		t.Fatalf("no progress line counted fio's ops while it ran (%v):\n%s", during, res.Stderr)
	}
	if want := fmt.Sprintf("[1/1] live: done, %d ops", ph.Ops); !strings.HasPrefix(last, want) {
		t.Errorf("last line %q, want it to start %q (the manifest's ops, counted once)", last, want)
	}
}
