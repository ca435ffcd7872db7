package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prism-hpc/prism/io/s3/s3test"
)

// TestS3Binary: the prism binary over a real S3 server on two ranks. A
// run passes, records the endpoint, and leaves the bucket as it was (an
// object placed beforehand survives); the same plan with a wrong secret
// key ends with exit 1 at once, the endpoint and the S3 error code on
// stderr and in the manifest, and no secret anywhere.
func TestS3Binary(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	c := srv.Client(t, "binary")
	if err := c.Put(t.Context(), "keep/me", []byte("x")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plan := writePlan(t, dir, "[plan]\ndrop_caches = \"none\"\n"+srv.PlanLines("binary", "runs")+`
[[phase]]
kind = "s3_put"
count = 20
size = "4KiB"
workers = 2
[[phase]]
kind = "s3_list"
count = 20
size = "0B"
page_size = 7
`)
	r := prism(t, dir, "run", "-n", "2", "--results", filepath.Join(dir, "res"), plan)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	m := loadManifest(t, r)
	if st := m.Phases[0].Storage; st == nil || !strings.Contains(st.RunPrefix, m.RunID) {
		t.Errorf("manifest storage %+v", st)
	}
	if keys := s3test.Keys(t, c); !slices.Equal(keys, []string{"keep/me"}) {
		t.Errorf("the bucket holds %v after the run, want only keep/me", keys)
	}

	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-0123456789abcdefghijklmnop")
	r = prism(t, dir, "run", "-n", "2", "--results", filepath.Join(dir, "res"), plan)
	t.Log(r.stdout + r.stderr)
	if r.code != 1 {
		t.Fatalf("exit %d with a wrong secret key, want 1\n%s", r.code, r.stderr)
	}
	for _, want := range []string{srv.Endpoint, "SignatureDoesNotMatch"} {
		if !strings.Contains(r.stdout+r.stderr, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	if s := r.stdout + r.stderr; strings.Contains(s, "wrong-secret") || strings.Contains(s, srv.SecretKey) {
		t.Error("a secret key is in the output")
	}
	// A liveness bound: a hang would run to the test's timeout.
	if r.elapsed > time.Minute {
		t.Errorf("the refusal took %v", r.elapsed)
	}
}

// TestS3CheckpointBinary: mlperf_checkpoint through the prism binary with
// [plan] storage = "s3://…" (no longer a plan error for the checkpoint
// family) prints MLPerf's [METRIC] lines on stdout, as over the workdir,
// and leaves the bucket as it was, with no multipart upload in progress.
func TestS3CheckpointBinary(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	c := srv.Client(t, "ckbin")
	if err := c.Put(t.Context(), "keep/me", []byte("x")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plan := writePlan(t, dir, "[plan]\ndrop_caches = \"none\"\n"+srv.PlanLines("ckbin", "runs")+`
[[phase]]
kind = "mlperf_checkpoint"
scale = 0.00002
num_checkpoints_write = 1
num_checkpoints_read = 1
time_between_checkpoints = "0s"
part_size = "5MiB"
[[phase]]
kind = "fsdp_save"
layers = 2
[[phase]]
kind = "fsdp_load"
layers = 2
`)
	r := prism(t, dir, "run", "-n", "2", "--results", filepath.Join(dir, "res"), plan)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"[METRIC] Checkpoint save duration (seconds):", "[METRIC] Checkpoint load I/O Throughput (GiB/second):"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if keys := s3test.Keys(t, c); !slices.Equal(keys, []string{"keep/me"}) {
		t.Errorf("the bucket holds %v after the run, want only keep/me", keys)
	}
	if ups, err := c.ListUploads(t.Context(), ""); err != nil || len(ups) != 0 {
		t.Errorf("uploads in progress after the run: %v (%v)", ups, err)
	}
}
