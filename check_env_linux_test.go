package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/prism-hpc/prism/phases/dataload"
	"github.com/prism-hpc/prism/report"
)

// TestCheckResolves: prism check prints one block per phase with its
// parameters as the run resolves them (train's preset batch_size and
// read_threads, mlperf_checkpoint's processes, untar of the tar phase's
// archive without its own tree keys), train's default num_files as the
// dataset MLPerf's rule gives on this host (not 0B), the expectations with
// readable limits, and an environment section with the O_DIRECT probe
// (agreeing with an O_DIRECT open this test makes itself, and leaving no
// file) and the memory estimate, every line within 100 columns.
func TestCheckResolves(t *testing.T) {
	dir := t.TempDir()
	plan := writePlan(t, dir, `
[plan]
name = "resolve"
drop_caches = "none"

[[phase]]
kind = "train"

[[phase]]
kind = "mlperf_checkpoint"
scale = 0.0001

[[phase]]
kind = "tar"
files = 30
dirs = 3
compression = "gzip"

[[phase]]
kind = "untar"

[[phase]]
kind = "blockio"
size = "1MiB"
bs = "4KiB"
direct = true
[phase.expect]
min_iops = 1000000
p99 = "2ms"
`)
	r := prism(t, dir, "check", plan, "--workdir", dir)
	block := func(name string) string {
		_, b, _ := strings.Cut(r.stdout, "] "+name+"  ")
		b, _, _ = strings.Cut(b, "\n\n")
		return b
	}
	for i, l := range strings.Split(r.stdout, "\n") {
		if len([]rune(l)) > 100 {
			t.Errorf("line %d is %d columns: %q", i+1, len([]rune(l)), l)
		}
	}
	if b := block("train"); !strings.Contains(b, "batch_size=7 ") || !strings.Contains(b, "read_threads=4 ") || !strings.Contains(b, "compute_time=323ms") || !strings.Contains(b, "num_files = 0: MLPerf's minimum") {
		t.Errorf("train's preset is not resolved:\n%s", b)
	}
	pre, err := dataload.LookupTrainPreset("unet3d", "h100")
	mem, merr := dataload.HostMemory()
	if err != nil || merr != nil {
		t.Fatal(err, merr)
	}
	ds := dataload.MLPerfDatasize(pre, 1, 1, mem)
	if want := fmt.Sprintf("at 1 rank: %d files, %s per rank", ds.Files, report.FormatBytes(ds.Bytes)); !strings.Contains(block("train"), want) || ds.Bytes == 0 {
		t.Errorf("train's footprint: want %q in\n%s", want, block("train"))
	}
	if b := block("mlperf_checkpoint"); !strings.Contains(b, "processes=8 ") {
		t.Errorf("mlperf_checkpoint's processes not resolved:\n%s", b)
	}
	if b := block("untar"); !strings.Contains(b, "archive: phase 3 (tar)'s, 30 files in 3 dirs of 4KiB, gzip") || strings.Contains(b, "files=") || strings.Contains(b, "compression=") || !strings.Contains(b, "at 1 rank: 33 files,") {
		t.Errorf("untar does not show the tar phase's archive as its input:\n%s", b)
	}
	if b := block("blockio"); !strings.Contains(b, "expect: p99 <= 2ms, min_iops >= 1,000,000") {
		t.Errorf("blockio's expectations:\n%s", b)
	}
	if !regexp.MustCompile(`memory +about \S+ per rank`).MatchString(r.stdout) {
		t.Errorf("no memory estimate:\n%s", r.stdout)
	}
	// The oracle: does this filesystem take an O_DIRECT open and write?
	direct := func() bool {
		f := filepath.Join(dir, "oracle")
		fd, err := unix.Open(f, unix.O_CREAT|unix.O_WRONLY|unix.O_DIRECT, 0o600)
		defer os.Remove(f)
		if err != nil {
			return false
		}
		defer unix.Close(fd)
		buf := make([]byte, 8192)
		off := 4096 - int(uintptr(unsafe.Pointer(&buf[0]))%4096)
		_, err = unix.Pwrite(fd, buf[off%4096:off%4096+4096], 0)
		return err == nil
	}()
	switch {
	case direct && !strings.Contains(r.stdout, "O_DIRECT     supported (phase 5 (blockio);"):
		t.Errorf("O_DIRECT works here, check says otherwise:\n%s", r.stdout)
	case !direct && (r.code != 1 || !strings.Contains(r.stderr, "does not take O_DIRECT")):
		t.Errorf("O_DIRECT is refused here, check: exit %d\n%s", r.code, r.stderr)
	}
	// The unet3d dataset of this host does not fit most disks: exit 1
	// exactly when the free space says so.
	free, err := statfsFree(dir)
	if err != nil {
		t.Skip(err)
	}
	if fits := uint64(ds.Bytes) < free.bytes; direct && fits != (r.code == 0) {
		t.Errorf("train's %s against %d bytes free: exit %d\n%s", report.FormatBytes(ds.Bytes), free.bytes, r.code, r.stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".prism-check-*")); len(left) > 0 {
		t.Errorf("probe files left: %v", left)
	}
}

// TestCheckMemory: a plan whose phase needs more memory per rank than
// [plan] max_memory makes prism check exit 1 naming the phase and the
// keys to lower, and prism run refuses the same plan before it runs; a
// fio phase is weighed by fio's buffers.
func TestCheckMemory(t *testing.T) {
	dir := t.TempDir()
	plan := writePlan(t, dir, "[plan]\nname = \"mem\"\ndrop_caches = \"none\"\nmax_memory = \"8MiB\"\n[[phase]]\nkind = \"create_files\"\ncount = 10\n")
	r := prism(t, dir, "check", plan, "--workdir", dir)
	if r.code != 1 || !strings.Contains(r.stderr, "phase 1 (create_files) needs about") || !strings.Contains(r.stderr, "[plan] max_memory") {
		t.Errorf("check: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	run := prism(t, dir, "run", plan, "--workdir", dir, "--results", filepath.Join(dir, "res"))
	if run.code == 0 || !strings.Contains(run.stderr, "max_memory") {
		t.Errorf("run of the plan check refused: exit %d\n%s", run.code, run.stderr)
	}
	// fio's own buffers count too: 64 jobs x depth 1024 x 1 GiB is 64 TiB.
	fio := writePlan(t, dir, "[plan]\nname = \"mem\"\ndrop_caches = \"none\"\nmax_memory = \"1GiB\"\n[[phase]]\nkind = \"fio\"\noptions = [\"rw=read\", \"bs=1g\", \"iodepth=1024\", \"numjobs=64\", \"size=1g\"]\n")
	if r := prism(t, dir, "check", fio, "--workdir", dir); r.code != 1 || !strings.Contains(r.stderr, "phase 1 (fio) needs about") || !strings.Contains(r.stderr, "numjobs") {
		t.Errorf("check of a fio job of 64 TiB of buffers: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	ok := writePlan(t, dir, "[plan]\nname = \"mem\"\ndrop_caches = \"none\"\nmax_memory = \"1GiB\"\n[[phase]]\nkind = \"create_files\"\ncount = 10\n")
	if r := prism(t, dir, "check", ok, "--workdir", dir); r.code != 0 {
		t.Errorf("check with room: exit %d\n%s", r.code, r.stderr)
	}
}
