package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The scripts `make bench` runs, each at its smallest size, and the one
// combined table over their samples. A script that breaks (an unset
// variable, a renamed cell, a manifest key it reads that moved) fails
// here, in make test, and not half an hour into make bench, which is
// where a `local` in scratch.sh leaving progress.sh's $fstype unset was
// found. Nothing about speed is asserted: only that each script finishes
// and that every cell it ran has a row in `paired.py --bench` with both
// sides' rates.
func TestBenchScriptsRun(t *testing.T) {
	if prismBin == "" {
		t.Skip("PRISM_BIN not set (make test sets it)")
	}
	if os.Geteuid() != 0 {
		t.Skip("the scripts loop-mount fresh filesystems: needs root")
	}
	for _, tool := range []string{"fio", "mkfs.xfs", "losetup", "python3", "gcc", "tar", "md5sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	// The scripts refuse a tmpfs BENCH_DIR (their images and files must
	// be on a disk): a TMPDIR on tmpfs moves them to /var/tmp.
	dir := t.TempDir()
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) == nil && fs.Type == unix.TMPFS_MAGIC {
		d, err := os.MkdirTemp("/var/tmp", "prism-bench-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		dir = d
	}
	table := filepath.Join(dir, "table.tsv")
	if err := os.WriteFile(table, []byte("#start\t2026-01-01T00:00:00Z\t0 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(script string, env ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join("phases", "bench", script))
		cmd.Env = append(os.Environ(), append([]string{"PRISM_BIN=" + prismBin, "BENCH_TABLE=" + table,
			"BENCH_DIR=" + dir, "MDTEST=", "IOR=", "PIN_CPU=", "STRICT="}, env...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", script, env, err, tail(string(out), 3000))
		}
		return string(out)
	}
	out := run("progress.sh", "COUNT=200", "ROUNDS=1", "NS=1")
	if !strings.Contains(out, "on ops/s") {
		t.Errorf("progress.sh printed no table:\n%s", out)
	}
	run("metadata.sh", "COUNT=200", "ROUNDS=1", "OPS=create stat")
	run("blockio.sh", "RUNTIME=1", "ROUNDS=1", "CELLS=rand-read-4k-qd1 tmpfs-rand-read-4k-qd1")
	run("workflow.sh", "ROUNDS=1", "CELLS=tar list md ior", "COUNT=200")

	got, err := exec.Command("python3", filepath.Join("phases", "bench", "paired.py"), "--bench", table).CombinedOutput()
	if err != nil {
		t.Fatalf("paired.py --bench: %v\n%s", err, got)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(got), "\n") {
		if len(line) > 46 {
			rows[strings.TrimSpace(line[:46])] = line[46:]
		}
	}
	// cell and peer as paired.py prints them (27 and 19 columns wide).
	for _, cp := range [][2]string{
		{"meta create -n1", "floor.c"}, {"meta stat -n1", "floor.c"},
		{"rand-read-4k-qd1", "fio io_uring"}, {"tmpfs-rand-read-4k-qd1", "fio psync"},
		{"tar", "GNU tar -cf"}, {"list+stat", "os.listdir+stat"}, {"list+stat", "fsspec ls"},
	} {
		key := strings.TrimSpace(padRight(cp[0], 27) + padRight(cp[1], 19))
		f := strings.Fields(rows[key])
		if len(f) < 4 {
			t.Errorf("no row for %s against %s in the combined table:\n%s", cp[0], cp[1], got)
			continue
		}
		for _, s := range f[1:3] { // unit, prism, peer
			if v, err := strconv.ParseFloat(s, 64); err != nil || !(v > 0) {
				t.Errorf("%s against %s: rate %q in %q", cp[0], cp[1], s, rows[key])
			}
		}
	}
	// Without MDTEST and IOR those cells say why, not nothing.
	if !strings.Contains(string(got), "not run") || !strings.Contains(string(got), "MDTEST") {
		t.Errorf("the mdtest and IOR cells do not say they were not run:\n%s", got)
	}
}

func padRight(s string, n int) string {
	if len(s) >= n {
		return s + " "
	}
	return s + strings.Repeat(" ", n-len(s))
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
