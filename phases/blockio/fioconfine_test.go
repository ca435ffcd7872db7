package blockio

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/internal/fstest"
	"github.com/prism-hpc/prism/phases"
	"github.com/prism-hpc/prism/phases/phasestest"
)

// Every way found to make fio touch what prism did not create is refused
// at plan time — inline and in a job file — with the option named; jobs
// that only do I/O in the rank's directory still pass.
func TestFioConfinement(t *testing.T) {
	needFio(t)
	dir := t.TempDir()
	job := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return "job_file = \"" + p + "\""
	}
	os.WriteFile(filepath.Join(dir, "other.fio"), []byte("[x]\nfilename=/etc/passwd\nrw=write\n"), 0o644)
	bad := []struct{ name, body, want string }{
		{"name as a path, via filename_format", `options = ["name=../../victim.txt", "filename_format=$jobname", "rw=write", "size=4k"]`, "must not hold '/'"},
		{"filename_format escaping", `options = ["filename_format=../$jobname", "rw=write"]`, "relative paths below it"},
		{"filename_format env", `options = ["filename_format=${HOME}/x", "rw=write"]`, "${...}"},
		{"exec_prerun", `options = ["exec_prerun=touch /tmp/pwned", "rw=read"]`, "exec_prerun is not among"},
		{"exec_postrun", `options = ["exec_postrun=rm -rf /", "rw=read"]`, "exec_postrun is not among"},
		{"ioengine exec", `options = ["ioengine=exec", "program=/bin/sh"]`, "ioengine exec is not allowed"},
		{"ioengine external", `options = ["ioengine=external:/tmp/evil.so"]`, "not allowed"},
		{"absolute log", `options = ["write_lat_log=/etc/cron.d/x", "rw=read"]`, "plain name"},
		{"log with a directory", `options = ["write_bw_log=../bw", "rw=read"]`, "plain name"},
		{"daemonize", `options = ["daemonize=1", "rw=read"]`, "daemonize is not among"},
		{"trigger", `options = ["trigger=/bin/sh -c x", "rw=read"]`, "not among"},
		{"ioscheduler", `options = ["ioscheduler=none", "rw=read"]`, "ioscheduler is not among"},
		{"read_iolog", `options = ["read_iolog=/etc/shadow"]`, "read_iolog is not among"},
		{"env expansion", `options = ["size=${SIZE}", "rw=read"]`, "${...}"},
		{"job file include", job("inc.fio", "[j]\nrw=read\ninclude other.fio\n"), "include reads another job file"},
		{"job file env", job("env.fio", "[j]\nrw=write\nfilename=${HOME}/victim\n"), "${...}"},
		{"job file section name", job("sec.fio", "[../../victim]\nrw=write\nfilename_format=$jobname\n"), "must not hold '/'"},
		{"job file exec", job("exec.fio", "[global]\nexec_prerun=id\n[j]\nrw=read\n"), "exec_prerun"},
		{"job file absolute log", job("log.fio", "[j]\nrw=read\nwrite_iops_log=/var/log/x\n"), "plain name"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := phases.DecodePlan(registry(), "f.toml", []byte("[[phase]]\nkind = \"fio\"\n"+tc.body+"\n"))
			var pe *phases.PlanError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v; want a plan error with %q", err, tc.want)
			}
		})
	}
	good := []string{
		`options = ["ioengine=libaio", "direct=1", "rw=randread", "bs=4k", "size=32m", "iodepth=32", "numjobs=8", "group_reporting", "write_lat_log=lat", "filename_format=$jobname.$jobnum.$filenum"]`,
		job("ok.fio", "; the PoC's profile\n[global]\nioengine=io_uring\ndirect=1\ntime_based\nruntime=3\n[rand-read-4k]\nrw=randread\nbs=4k\nsize=64m\ndirectory=data\n"),
	}
	for _, body := range good {
		if _, err := phases.DecodePlan(registry(), "f.toml", []byte("[[phase]]\nkind = \"fio\"\n"+body+"\n")); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

// The first bypass is real: fio itself, run as prism would run it without
// the check, writes a file outside its working directory.
func TestFioNameBypassIsReal(t *testing.T) {
	needFio(t)
	root := t.TempDir()
	work := filepath.Join(root, "a", "b")
	os.MkdirAll(work, 0o755)
	cmd := exec.Command("fio", "--name=../../victim.txt", "--filename_format=$jobname", "--rw=write", "--size=4k", "--ioengine=psync")
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("fio refused the job itself: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(root, "victim.txt")); err != nil {
		t.Fatalf("fio did not write outside its directory (%v): then the check guards against nothing", err)
	}
}

// fio reads a job file line with fgets into 8 KiB and parses the rest of
// a longer line as a line of its own, so a padded description hid an
// exec_prerun that ran as root. Such lines are refused; fio itself shows
// the split is real.
func TestFioJobFileLongLine(t *testing.T) {
	needFio(t)
	dir := t.TempDir()
	pwned := filepath.Join(dir, "pwned")
	pad := "description=" + strings.Repeat("A", 8191-len("description="))
	job := filepath.Join(dir, "long.fio")
	os.WriteFile(job, []byte("[j]\nrw=read\nbs=4k\nsize=64k\nioengine=psync\n"+pad+"exec_prerun=touch "+pwned+"\n"), 0o644)
	_, err := phases.DecodePlan(registry(), "f.toml", []byte("[[phase]]\nkind = \"fio\"\njob_file = \""+job+"\"\n"))
	var pe *phases.PlanError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "line 6") || !strings.Contains(err.Error(), "parses the rest as another option") {
		t.Fatalf("%v; want a plan error naming line 6 as too long", err)
	}
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o755)
	cmd := exec.Command("fio", job)
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("fio refused the job itself: %v\n%s", err, out)
	}
	if _, err := os.Stat(pwned); err != nil {
		t.Fatalf("fio did not run the hidden exec_prerun (%v): then the check guards against nothing", err)
	}
}

// fio reads the job file prism checked, not whatever job_file holds by
// the time fio starts: rewritten after the check to run a program, the
// phase still runs the checked job and the program never runs.
func TestFioJobFileSwappedAfterCheck(t *testing.T) {
	needFio(t)
	dir := t.TempDir()
	pwned := filepath.Join(dir, "pwned")
	job := filepath.Join(dir, "job.fio")
	const checked = "[j]\nrw=write\nbs=4k\nsize=64k\nioengine=psync\n"
	os.WriteFile(job, []byte(checked), 0o644)
	p := &fioPhase{cfg: fioConfig{Binary: "fio", JobFile: job}}
	if err := p.cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(job, []byte(checked+"exec_prerun=touch "+pwned+"\n"), 0o644)
	env := phasestest.EnvIn(t, "fio", fstest.DiskDir(t))
	if err := p.Setup(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	defer p.Teardown(context.Background(), env)
	if err := p.Run(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Fatal("fio ran the exec_prerun written into job_file after prism checked it")
	}
	if p.ioBytes != 64<<10 {
		t.Fatalf("fio moved %d bytes, want the checked job's 64KiB", p.ioBytes)
	}
}
