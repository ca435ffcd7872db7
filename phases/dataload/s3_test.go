package dataload

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/io/s3/s3test"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/phasestest"
	"github.com/prism-hpc/prism/report"
)

// create_dataset, md5_check and train over a real S3 server on two ranks: every
// file an object named like it, every object read back and its MD5
// checked in random order over two epochs, a content budget too small for
// the share (content generated file by file), md5_check's own dataset in
// the bucket too, and the bucket left as it was after each run.
func TestDatasetOverS3(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	c := srv.Client(t, "datasets")
	if err := c.Put(context.Background(), "keep", []byte("x")); err != nil {
		t.Fatal(err)
	}
	reg := phases.NewRegistry()
	Register(reg)
	plan := fmt.Sprintf(`[plan]
drop_caches = "none"
[[phase]]
kind = "create_dataset"
%[1]s
sizes = ["8KiB", "100KiB"]
copies = 5
subdirs = 3
buffer_budget = "64KiB"
[[phase]]
kind = "md5_check"
%[1]s
epochs = 2
order = "random"
[[phase]]
kind = "train"
%[1]s
dataset = "latest"
workload = "unet3d"
accelerator = "h100"
record_size = "4KiB"
batch_size = 2
read_threads = 2
compute_time = "1ms"
[phase.expect]
min_au = 0 # what is tested is the reads over S3, not this machine's AU
`, srv.PlanLines("datasets", "ml"))
	// The storage keys go per phase here: [plan] storage would also ask
	// for a train phase, which does not run over S3.
	res := phasestest.Run(t, reg, plan, phasestest.Ranks(2))
	create, check := res.Phase(t, "create_dataset"), res.Phase(t, "md5_check")
	// md5_check's own dataset (no create_dataset before it) goes to the
	// bucket too.
	own := phasestest.Run(t, reg, fmt.Sprintf("[[phase]]\nkind = \"md5_check\"\n%s\nsizes = [\"4KiB\"]\ncopies = 7\n", srv.PlanLines("datasets", "ml")), phasestest.Ranks(2))
	for _, ph := range []*report.PhaseResult{create, check, own.Phase(t, "md5_check")} {
		if ph.Status != report.StatusPassed {
			t.Fatalf("%s: %s\n%s", ph.Name, ph.Error, res.Stderr)
		}
		if ph.Storage == nil || ph.Storage.URI != "s3://datasets/ml/" {
			t.Errorf("%s: storage %+v", ph.Name, ph.Storage)
		}
	}
	// train over the same objects: ranged GETs of 4 KiB samples (2 of
	// each 8 KiB file, 25 of each 100 KiB one), the [METRIC] lines as on
	// the workdir.
	tr := res.Phase(t, "train")
	if tr.Status != report.StatusPassed || tr.OpsByType["read"].Ops == 0 || tr.OpsByType["read"].Errors != 0 {
		t.Fatalf("train: %s %s, reads %+v", tr.Status, tr.Error, tr.OpsByType["read"])
	}
	// The same [METRIC] lines (names; the values are measurements) as the
	// same plan on the workdir.
	posix := phasestest.Run(t, reg, strings.ReplaceAll(plan, srv.PlanLines("datasets", "ml"), ""), phasestest.Ranks(2))
	if got, want := metricNames(res.Stdout), metricNames(posix.Stdout); len(got) < 4 || !slices.Equal(got, want) {
		t.Errorf("[METRIC] lines over S3 %q, on the workdir %q", got, want)
	}
	const files, bytes = 10, 5 * (8 + 100) << 10
	if st := create.OpsByType["create"]; st.Ops != files || st.Bytes != bytes {
		t.Errorf("create: %d ops, %d bytes; want %d, %d", st.Ops, st.Bytes, files, bytes)
	}
	if st := check.OpsByType["file"]; st.Ops != 2*files {
		t.Errorf("md5_check: %d file ops, want %d", st.Ops, 2*files)
	}
	if st := check.OpsByType["read"]; st.Ops != 2*files || st.Bytes != 2*bytes {
		t.Errorf("md5_check: %d reads of %d bytes, want %d of %d", st.Ops, st.Bytes, 2*files, 2*bytes)
	}
	if st := own.Phase(t, "md5_check").OpsByType["file"]; st.Ops != 7 {
		t.Errorf("own dataset: %d files checked, want 7", st.Ops)
	}
	if keys := s3test.Keys(t, c); !slices.Equal(keys, []string{"keep"}) {
		t.Errorf("the bucket holds %v after the run, want only keep", keys)
	}
}

// A dataset in one bucket read by an md5_check given another: refused,
// naming where the dataset is; train generating its own files over S3:
// refused.
func TestDatasetOtherBucket(t *testing.T) {
	srv := s3test.StartT(t)
	srv.SetEnv(t)
	srv.Client(t, "one")
	srv.Client(t, "two")
	reg := phases.NewRegistry()
	Register(reg)
	plan := fmt.Sprintf("[[phase]]\nkind = \"create_dataset\"\n%s\nsizes = [\"4KiB\"]\ncopies = 2\n[[phase]]\nkind = \"md5_check\"\n%s\n", srv.PlanLines("one", ""), srv.PlanLines("two", ""))
	res := phasestest.Run(t, reg, plan)
	if ph := res.Phase(t, "md5_check"); ph.Status != report.StatusFailed || !strings.Contains(ph.Error, "s3://one/") {
		t.Errorf("%s: %s", ph.Status, ph.Error)
	}
	// train's own generated files do not go to object storage: refused,
	// saying what to do instead.
	res = phasestest.Run(t, reg, fmt.Sprintf("[[phase]]\nkind = \"train\"\n%s\nnum_files = 8\n", srv.PlanLines("one", "")))
	if ph := res.Phase(t, "train"); ph.Status != report.StatusFailed || !strings.Contains(ph.Error, `dataset = "latest"`) {
		t.Errorf("train generating over S3: %s: %s", ph.Status, ph.Error)
	}
}

// metricNames are the [METRIC] lines of a summary without their values.
func metricNames(out string) []string {
	var names []string
	for _, l := range strings.Split(out, "\n") {
		if name, _, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && strings.HasPrefix(name, "[METRIC]") {
			names = append(names, name)
		}
	}
	return names
}
