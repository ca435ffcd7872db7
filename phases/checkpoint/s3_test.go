package checkpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prism-hpc/prism/internal/torchtest"
	ps3 "github.com/prism-hpc/prism/io/s3"
	"github.com/prism-hpc/prism/io/s3/s3test"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/phasestest"
	"github.com/prism-hpc/prism/report"
)

// noUploads fails if a multipart upload is left in progress in the bucket.
func noUploads(t *testing.T, c *ps3.Client) {
	t.Helper()
	ups, err := c.ListUploads(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) > 0 {
		t.Errorf("multipart uploads left in progress: %v", ups)
	}
}

// Every checkpoint kind over a real S3 server on two ranks: saves of each
// format (torch.save, safetensors, DCP) in several parts each (5 MiB
// parts of ~12 MiB files), loads that verify every tensor's CRC (a
// resharding DCP load and rl_load included), the requests recorded per
// op, and a bucket left as it was: the object placed before survives,
// nothing of the run and no multipart upload remains.
func TestCheckpointsOverS3(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	c := srv.Client(t, "ckpt")
	if err := c.Put(context.Background(), "base/keep-me", []byte("mine")); err != nil {
		t.Fatal(err)
	}
	const model = "layers = 3\ninput_dim = 1024\nhidden_dim = 1024\noptimizer = \"adam\"\npart_size = \"5MiB\"\npart_concurrency = 2\n"
	plan := fmt.Sprintf(`[plan]
drop_caches = "none"
%s
[[phase]]
kind = "ddp_save"
%[2]s
[[phase]]
kind = "ddp_load"
%[2]s
[[phase]]
kind = "ddp_save"
name = "st-save"
format = "safetensors"
%[2]s
[[phase]]
kind = "ddp_load"
name = "st-load"
%[2]s
[[phase]]
kind = "fsdp_save"
%[2]s
[[phase]]
kind = "fsdp_load"
%[2]s
[[phase]]
kind = "fsdp_load"
name = "reshard"
ranks = 1
%[2]s
[[phase]]
kind = "rl_load"
readers = 1
%[2]s
[[phase]]
kind = "fsdp_save"
name = "fsdp-st"
format = "safetensors"
%[2]s
[[phase]]
kind = "fsdp_load"
name = "fsdp-st-load"
%[2]s
`, srv.PlanLines("ckpt", "base"), model)
	res := phasestest.Run(t, registry(), plan, phasestest.Ranks(2))
	bytes := float64(tinyModelBytes(t))
	for _, ph := range res.Manifest.Phases {
		if ph.Status != report.StatusPassed {
			t.Errorf("%s: %s: %s", ph.Name, ph.Status, ph.Error)
			continue
		}
		if ph.Storage == nil || ph.Storage.URI != "s3://ckpt/base/" {
			t.Errorf("%s: storage %+v", ph.Name, ph.Storage)
		}
		if m := ph.Metrics["fsync"]; m != 0 {
			t.Errorf("%s: metrics.fsync = %v over S3", ph.Name, m)
		}
		if m := ph.Metrics["checkpoint_bytes"]; m != bytes {
			t.Errorf("%s: checkpoint_bytes %v, want %v", ph.Name, m, bytes)
		}
		save := strings.Contains(ph.Kind, "save")
		for _, op := range map[bool][]string{true: {"part", "complete", "save_file"}, false: {"head", "get", "read", "load_file"}}[save] {
			if ph.Kind == "rl_load" && op == "load_file" {
				op = "load_state"
			}
			st, ok := ph.OpsByType[op]
			if !ok || st.Ops == 0 || st.Errors != 0 {
				t.Errorf("%s: op %s: %+v (have %v)", ph.Name, op, st, ph.OpsByType)
			}
		}
		if _, ok := ph.OpsByType["write"]; ok {
			t.Errorf("%s: a write op over S3", ph.Name)
		}
		if save {
			// Every tensor byte went out in parts or PUTs, once.
			var sent int64
			for _, op := range []string{"put", "part"} {
				sent += ph.OpsByType[op].Bytes
			}
			if sent < int64(bytes) {
				t.Errorf("%s: %d bytes in parts and PUTs, the checkpoint is %v", ph.Name, sent, bytes)
			}
		}
	}
	if got := res.Phase(t, "reshard").Metrics["resharded"]; got != 1 {
		t.Errorf("reshard: resharded = %v", got)
	}
	if keys := s3test.Keys(t, c); !slices.Equal(keys, []string{"base/keep-me"}) {
		t.Errorf("the bucket holds %v after the run, want only the object placed before", keys)
	}
	noUploads(t, c)
}

func tinyModelBytes(t *testing.T) int64 {
	mk := defaultModelKeys()
	mk.Layers, mk.InputDim, mk.HiddenDim, mk.Optimizer = 3, 1024, 1024, "adam"
	if err := mk.validate(); err != nil {
		t.Fatal(err)
	}
	return mk.model().Bytes()
}

// A corrupted object fails the load with the object named: the loads
// check what the server returned, not what the client sent.
func TestCorruptObjectFails(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	c := srv.Client(t, "bad")
	reg := registry()
	reg.Register(phases.Kind{Name: "spoil", Family: "test", New: func() phases.Phase { return &spoiler{c: c} }})
	plan := fmt.Sprintf("[plan]\ndrop_caches = \"none\"\n%s\n[[phase]]\nkind = \"ddp_save\"\nlayers = 2\n[[phase]]\nkind = \"spoil\"\n[[phase]]\nkind = \"ddp_load\"\nlayers = 2\n", srv.PlanLines("bad", "p"))
	res := phasestest.Run(t, reg, plan)
	ph := res.Phase(t, "ddp_load")
	if ph.Status != report.StatusFailed || !strings.Contains(ph.Error, "checkpoint.pt") {
		t.Errorf("ddp_load of a spoiled object: %s %q", ph.Status, ph.Error)
	}
	if keys := s3test.Keys(t, c); len(keys) != 0 {
		t.Errorf("left %v", keys)
	}
}

// spoiler overwrites the latest checkpoint object with the same number of
// different bytes.
type spoiler struct {
	c   *ps3.Client
	cfg struct{ phases.StorageOptions } // takes [plan] storage, uses its own client
}

func (s *spoiler) Config() any                                 { return &s.cfg }
func (s *spoiler) Setup(context.Context, *phases.Env) error    { return nil }
func (s *spoiler) Verify(context.Context, *phases.Env) error   { return nil }
func (s *spoiler) Teardown(context.Context, *phases.Env) error { return nil }
func (s *spoiler) Run(ctx context.Context, env *phases.Env) error {
	rec := store(env).recs[0]
	key := rec.obj.key("checkpoint.pt")
	info, err := s.c.Head(ctx, key)
	if err != nil {
		return err
	}
	b := make([]byte, info.Size)
	if _, err := s.c.Get(ctx, key, b); err != nil {
		return err
	}
	b[len(b)/2] ^= 0xff
	return s.c.Put(ctx, key, b)
}

// peek is a test phase that runs fn while the run's objects exist (no
// keep = true, which would leave the run's connections open and the
// server waiting on them at its stop).
type peek struct {
	fn  func(ctx context.Context, env *phases.Env) error
	cfg struct{ phases.StorageOptions }
}

func (p *peek) Config() any                                    { return &p.cfg }
func (p *peek) Setup(context.Context, *phases.Env) error       { return nil }
func (p *peek) Verify(context.Context, *phases.Env) error      { return nil }
func (p *peek) Teardown(context.Context, *phases.Env) error    { return nil }
func (p *peek) Run(ctx context.Context, env *phases.Env) error { return p.fn(ctx, env) }

func withPeek(reg *phases.Registry, fn func(ctx context.Context, env *phases.Env) error) *phases.Registry {
	reg.Register(phases.Kind{Name: "peek", Family: "test", New: func() phases.Phase { return &peek{fn: fn} }})
	return reg
}

// mlperf_checkpoint over S3 prints the same [METRIC] lines as over POSIX,
// and its objects are named as DLIO's files.
func TestMLPerfOverS3(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	c := srv.Client(t, "mlp")
	var keys []string
	reg := withPeek(registry(), func(context.Context, *phases.Env) error { keys = s3test.Keys(t, c); return nil })
	plan := fmt.Sprintf(`[plan]
drop_caches = "none"
%s
[[phase]]
kind = "mlperf_checkpoint"
scale = 0.00002
processes = 8
num_checkpoints_write = 1
num_checkpoints_read = 1
time_between_checkpoints = "0s"
part_size = "5MiB"
[[phase]]
kind = "peek"
ranks = 1
`, srv.PlanLines("mlp", "m"))
	res := phasestest.Run(t, reg, plan, phasestest.Ranks(2))
	ph := res.Phase(t, "mlperf_checkpoint")
	if ph.Status != report.StatusPassed {
		t.Fatalf("%s: %s", ph.Status, ph.Error)
	}
	lines := strings.Join(mlperfMetricLines(ph), "\n")
	for _, want := range []string{"[METRIC] Checkpoint save duration (seconds):", "[METRIC] Checkpoint save I/O Throughput (GiB/second):",
		"[METRIC] Checkpoint load duration (seconds):", "[METRIC] Checkpoint load I/O Throughput (GiB/second):"} {
		if !strings.Contains(lines, want) {
			t.Errorf("no %q in\n%s", want, lines)
		}
	}
	var names []string
	for _, k := range keys {
		if i := strings.Index(k, "/global_epoch1_step1/"); i >= 0 {
			names = append(names, k[i+len("/global_epoch1_step1/"):])
		}
	}
	if !slices.Contains(names, "model_states-layer0-tp0-pp0-dp0.pt") && !slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, "optim_states.pt") }) {
		t.Errorf("objects %v: not DLIO's file names", names)
	}
	if left := s3test.Keys(t, c); len(left) != 0 {
		t.Errorf("the bucket holds %v after the run", left)
	}
	noUploads(t, c)
}

// The torch oracle over S3: objects prism saved, downloaded to files,
// load in real PyTorch (torch.load of a torch.save object, safetensors of
// a sharded save) with every tensor's CRC equal to the one prism wrote.
func TestTorchOracleOverS3(t *testing.T) {
	py := torchtest.Python(t)
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	c := srv.Client(t, "oracle")
	work := t.TempDir()
	// Every object of the two checkpoints, downloaded into files while the run holds them.
	dl := func(phase string) string {
		dir := filepath.Join(work, phase)
		os.MkdirAll(dir, 0o755)
		for _, k := range s3test.Keys(t, c) {
			if !strings.Contains(k, "-"+phase+"/checkpoint/") {
				continue
			}
			info, err := c.Head(context.Background(), k)
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, info.Size)
			if _, err := c.Get(context.Background(), k, b); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(k)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	var tdir, sdir string
	reg := withPeek(registry(), func(context.Context, *phases.Env) error { tdir, sdir = dl("torch"), dl("st"); return nil })
	reg.Register(phases.Kind{Name: "capture", Family: "test", New: func() phases.Phase { return &capture{} }})
	torchSpec := spec(2, "float32", "adam")
	stSpec := spec(3, "bfloat16", "adam")
	where := srv.PlanLines("oracle", "o") + "\n"
	plan := "[plan]\ndrop_caches = \"none\"\n" +
		fmt.Sprintf("[[phase]]\nkind = \"ddp_save\"\nname = \"torch\"\npart_size = \"5MiB\"\n%s%s[[phase]]\nkind = \"capture\"\nranks = 1\nout = %q\n", where, torchSpec.keys(), filepath.Join(work, "torch.json")) +
		fmt.Sprintf("[[phase]]\nkind = \"fsdp_save\"\nname = \"st\"\nformat = \"safetensors\"\n%s%s[[phase]]\nkind = \"capture\"\nname = \"capture2\"\nranks = 1\nout = %q\n", where, stSpec.keys(), filepath.Join(work, "st.json")) +
		"[[phase]]\nkind = \"peek\"\nranks = 1\n"
	res := phasestest.Run(t, reg, plan, phasestest.Ranks(2))
	if res.Outcome.Status != report.StatusPassed {
		for _, ph := range res.Manifest.Phases {
			t.Logf("%s: %s %s", ph.Name, ph.Status, ph.Error)
		}
		t.Fatal(res.Outcome.Status)
	}
	read := func(name string) captured {
		var cp captured
		b, err := os.ReadFile(filepath.Join(work, name))
		if err == nil {
			err = json.Unmarshal(b, &cp)
		}
		if err != nil {
			t.Fatal(err)
		}
		return cp
	}
	shards, _ := filepath.Glob(filepath.Join(sdir, "*.safetensors"))
	if len(shards) != 2 {
		t.Fatalf("downloaded shards %v, want 2", shards)
	}
	os.MkdirAll(filepath.Join(work, "ref"), 0o755)
	jobs := []map[string]any{
		{"cmd": "torch", "spec": torchSpec, "args": []string{filepath.Join(tdir, "checkpoint.pt"), filepath.Join(work, "ref", "checkpoint.pt")}},
		{"cmd": "safetensors", "args": shards},
	}
	jb, _ := json.Marshal(jobs)
	jf := filepath.Join(work, "jobs.json")
	os.WriteFile(jf, jb, 0o644)
	cmd := exec.Command(py, filepath.Join("testdata", "oracle_batch.py"), jf)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join("..", "ckpt", "testdata"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle_batch.py: %v", err)
	}
	var answers []json.RawMessage
	if err := json.Unmarshal(out, &answers); err != nil || len(answers) != 2 {
		t.Fatalf("oracle_batch.py: %v\n%s", err, out)
	}
	oc := &oracleCkpt{name: "torch", ranks: 2, kind: "ddp_save", spec: torchSpec}
	t.Run("torch.load", func(t *testing.T) {
		checkTorchLoad(t, oc, filepath.Join(tdir, "checkpoint.pt"), filepath.Join(work, "ref", "checkpoint.pt"), answers[0])
	})
	t.Run("safetensors", func(t *testing.T) { checkSafetensors(t, read("st.json"), answers[1]) })
	_ = read("torch.json")
}

// A save with wrong credentials fails at once, naming the endpoint and the
// S3 error code; with the server killed mid-save it fails, bounded.
func TestSaveFailuresOverS3(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	c := srv.Client(t, "fail")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-0123456789abcdefghijklmnop")
	res := phasestest.Run(t, registry(), fmt.Sprintf("[plan]\ndrop_caches = \"none\"\n%s\n[[phase]]\nkind = \"fsdp_save\"\nlayers = 2\n", srv.PlanLines("fail", "x")))
	ph := res.Phase(t, "fsdp_save")
	if ph.Status != report.StatusFailed || !strings.Contains(ph.Error, srv.Endpoint) || !strings.Contains(ph.Error, "SignatureDoesNotMatch") {
		t.Errorf("wrong credentials: %s %q", ph.Status, ph.Error)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	if keys := s3test.Keys(t, c); len(keys) != 0 {
		t.Errorf("the bucket holds %v", keys)
	}
	noUploads(t, c)
	// ~200 MiB in 5 MiB parts, one at a time: the kill lands mid-upload.
	plan := fmt.Sprintf("[plan]\ndrop_caches = \"none\"\n%s\ns3_request_timeout = \"20s\"\n[[phase]]\nkind = \"ddp_save\"\nlayers = 50\npart_size = \"5MiB\"\npart_concurrency = 1\n", srv.PlanLines("fail", "k"))
	go func() {
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			if ups, _ := c.ListUploads(context.Background(), ""); len(ups) > 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		srv.Kill()
	}()
	start := time.Now()
	res = phasestest.Run(t, registry(), plan, phasestest.ExpectError())
	if took := time.Since(start); took > 2*time.Minute {
		t.Errorf("the save took %v after the kill", took)
	}
	ph = res.Phase(t, "ddp_save")
	t.Logf("killed mid-save after %d parts: %s", ph.OpsByType["part"].Ops, ph.Error)
	if ph.Status != report.StatusFailed || !strings.Contains(ph.Error, srv.Endpoint) || !strings.Contains(ph.Error, "multipart") {
		t.Errorf("server killed: %s %q; want failed naming the endpoint and the upload", ph.Status, ph.Error)
	}
}

// The S3 keys of the checkpoint family are checked at plan time, naming
// the key; a checkpoint phase with [plan] storage is no plan error.
func TestS3PlanKeys(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"[[phase]]\nkind = \"ddp_save\"\npart_size = \"1MiB\"", "part_size: 1MiB out of range (5MiB .. 5GiB"},
		{"[[phase]]\nkind = \"fsdp_load\"\npart_concurrency = 0", "part_concurrency: 0 out of range"},
		{"[[phase]]\nkind = \"mlperf_checkpoint\"\npart_concurrency = 1000", "part_concurrency: 1000 out of range"},
		{"[[phase]]\nkind = \"rl_load\"\nstorage = \"ftp://x\"", "storage"},
	} {
		_, err := phases.DecodePlan(registry(), "p.toml", []byte(tc.body+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n error %v\n want %q", tc.body, err, tc.want)
		}
	}
	for _, kind := range []string{"ddp_save", "ddp_load", "fsdp_save", "fsdp_load", "rl_load", "mlperf_checkpoint"} {
		if _, err := phases.DecodePlan(registry(), "p.toml", []byte("[plan]\nstorage = \"s3://bucket/p\"\n[[phase]]\nkind = \""+kind+"\"\n")); err != nil {
			t.Errorf("%s with [plan] storage: %v", kind, err)
		}
	}
}

// direct = true has no meaning over S3: the load's setup says so.
func TestDirectOverS3Refused(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	c := srv.Client(t, "direct")
	res := phasestest.Run(t, registry(), fmt.Sprintf("[plan]\ndrop_caches = \"none\"\n%s\n[[phase]]\nkind = \"ddp_load\"\nlayers = 2\ndirect = true\n", srv.PlanLines("direct", "d")))
	ph := res.Phase(t, "ddp_load")
	if ph.Status != report.StatusFailed || !strings.Contains(ph.Error, "direct = true") || !strings.Contains(ph.Error, "s3://direct/d/") {
		t.Errorf("direct over S3: %s %q", ph.Status, ph.Error)
	}
	if keys := s3test.Keys(t, c); len(keys) != 0 {
		t.Errorf("left %v", keys)
	}
}

// A save cancelled while its multipart upload is in flight (the server
// up): the upload is aborted and the run's cleanup leaves the bucket as it
// was, no object and no upload of the run in it.
func TestCancelledSaveOverS3(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	c := srv.Client(t, "cancel")
	if err := c.Put(context.Background(), "keep-me", []byte("x")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := make(chan bool, 1)
	go func() {
		defer cancel()
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			if ups, _ := c.ListUploads(context.Background(), ""); len(ups) > 0 {
				seen <- true
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		seen <- false
	}()
	plan := fmt.Sprintf("[plan]\ndrop_caches = \"none\"\n%s\n[[phase]]\nkind = \"ddp_save\"\nlayers = 50\npart_size = \"5MiB\"\npart_concurrency = 1\n", srv.PlanLines("cancel", "c"))
	res := phasestest.Run(t, registry(), plan, phasestest.Context(ctx), phasestest.ExpectError())
	if !<-seen {
		t.Fatal("no multipart upload was seen in progress: nothing was cancelled mid-upload")
	}
	if st := res.Phase(t, "ddp_save").Status; st == report.StatusPassed {
		t.Errorf("the cancelled save passed")
	}
	if keys := s3test.Keys(t, c); !slices.Equal(keys, []string{"keep-me"}) {
		t.Errorf("the bucket holds %v after the cancelled run, want only keep-me", keys)
	}
	noUploads(t, c)
}
