package all

import (
	"slices"
	"testing"

	"github.com/prism-hpc/prism/phases"
)

// TestParamsResolved: a phase's manifest params are what applied: a
// preset's values instead of 0 (train, mlperf_checkpoint), none of the keys
// an inherited input replaced (untar after tar, md5_check after
// create_dataset) nor of another order's (seed, stride) or size
// distribution's (mean, mu ... of a fixed size), no storage or
// s3_* keys on the workdir, and over object storage the s3_* keys the phase
// inherits from [plan]; notes on inherited inputs go to "resolved".
func TestParamsResolved(t *testing.T) {
	p, err := phases.DecodePlan(Registry(), "p.toml", []byte(`
[plan]
s3_endpoint = "http://127.0.0.1:9"

[[phase]]
kind = "tar"
files = 30
dirs = 3

[[phase]]
kind = "untar"

[[phase]]
kind = "untar"
name = "own"
archive = "generate"

[[phase]]
kind = "create_dataset"

[[phase]]
kind = "md5_check"

[[phase]]
kind = "train"
workload = "resnet50"

[[phase]]
kind = "mlperf_checkpoint"

[[phase]]
kind = "md5_check"
name = "over-s3"
storage = "s3://bucket/x"
order = "random"

[[phase]]
kind = "s3_get"
storage = "s3://bucket/y"
count = 10
`))
	if err != nil {
		t.Fatal(err)
	}
	params := func(i int) map[string]any { return phases.ParamValues(p.Phases[i]) }
	has := func(i int, keys ...string) {
		t.Helper()
		for _, k := range keys {
			if _, ok := params(i)[k]; !ok {
				t.Errorf("phase %d (%s) lacks %s: %v", i+1, p.Phases[i].Name, k, params(i))
			}
		}
	}
	lacks := func(i int, keys ...string) {
		t.Helper()
		for _, k := range keys {
			if v, ok := params(i)[k]; ok {
				t.Errorf("phase %d (%s) records %s = %v, which did not apply", i+1, p.Phases[i].Name, k, v)
			}
		}
	}
	lacks(0, "source")
	lacks(1, "files", "dirs", "file_size", "seed", "compression", "archive")
	has(1, "resolved", "max_entries")
	if notes, _ := params(1)["resolved"].([]string); len(notes) != 1 || notes[0] == "" || !slices.ContainsFunc(notes, func(s string) bool { return len(s) > 20 && s[:20] == "archive: phase 1 (ta" }) {
		t.Errorf("untar's resolved notes %q", notes)
	}
	has(2, "files", "dirs", "compression", "archive")
	lacks(4, "sizes", "copies", "subdirs", "data_seed", "seed", "stride", "storage", "s3_endpoint")
	has(4, "resolved", "chunk", "order")
	tr := params(5)
	if tr["batch_size"] != int64(400) || tr["read_threads"] != int64(8) {
		t.Errorf("train resnet50: batch_size %v, read_threads %v: want the preset's 400 and 8", tr["batch_size"], tr["read_threads"])
	}
	if rs, _ := tr["record_size"].(map[string]any); rs["bytes"] != int64(114660) {
		t.Errorf("train record_size %v: want the preset's 114660 bytes", tr["record_size"])
	}
	if ct, _ := tr["compute_time"].(map[string]any); ct["ns"] == int64(0) || ct["ns"] == nil {
		t.Errorf("train compute_time %v: want the preset's", tr["compute_time"])
	}
	lacks(5, "storage", "s3_endpoint", "s3_region")
	if v := params(6)["processes"]; v != int64(8) {
		t.Errorf("mlperf_checkpoint processes = %#v, want the closed run's 8", v)
	}
	has(7, "storage", "s3_endpoint", "seed")
	lacks(7, "stride", "sizes")
	if params(7)["s3_endpoint"] != "http://127.0.0.1:9" {
		t.Errorf("over-s3's s3_endpoint %v: want [plan]'s", params(7)["s3_endpoint"])
	}
	// An object kind: its StorageOptions and Sizes sit in an embedded
	// BaseConfig; a fixed size reads size alone.
	has(8, "storage", "s3_endpoint", "size", "size_dist", "count")
	lacks(8, "mean", "min", "max", "mu", "sigma", "min_size", "max_size")
}
