package phasestest

import (
	"errors"
	"os"
	"strings"
	"testing"

	pio "github.com/prism-hpc/prism/io"
	"github.com/prism-hpc/prism/phases"
)

// shmDir is a fresh directory on /dev/shm (tmpfs), removed after the test;
// the test is skipped when /dev/shm is missing or the same filesystem type
// as t.TempDir().
func shmDir(t *testing.T) (disk, shm string) {
	t.Helper()
	disk = t.TempDir()
	a, err1 := pio.StatFS(disk)
	b, err2 := pio.StatFS("/dev/shm")
	if err1 != nil || err2 != nil || a.Type == b.Type {
		t.Skipf("need /dev/shm on another filesystem type than %s (%v, %v)", disk, err1, err2)
	}
	shm, err := os.MkdirTemp("/dev/shm", "prism-fs-test-")
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	return disk, shm
}

// Ranks whose workdirs are on different filesystems (a missing mount
// falls through to the disk below it) stop the run before the first phase:
// rank 0's error names each rank and what it sees, and nothing ran. With
// [plan] allow_mixed_fs = true the run goes on, warns, and the manifest's
// hosts[] records each rank's filesystem.
func TestMixedFilesystemsStopTheRun(t *testing.T) {
	disk, shm := shmDir(t)
	plan := "[[phase]]\nkind = \"tick\"\n"
	res := Run(t, tickRegistry(), plan, Ranks(2), RankWorkdirs(disk, shm), ExpectError())
	var mixed *phases.MixedFSError
	if !errors.As(res.Errs[0], &mixed) {
		t.Fatalf("rank 0: %v, want a MixedFSError", res.Errs[0])
	}
	if res.Errs[1] == nil {
		t.Errorf("rank 1 ran on")
	}
	for _, want := range []string{"rank 0 on localhost", "rank 1 on localhost", "tmpfs", disk, shm, "allow_mixed_fs"} {
		if !strings.Contains(mixed.Msg, want) {
			t.Errorf("message lacks %q: %s", want, mixed.Msg)
		}
	}
	if res.Manifest != nil {
		t.Errorf("a manifest was written: a phase ran")
	}
	for _, d := range []string{disk, shm} {
		if left := LeftBehind(d); len(left) != 0 {
			t.Errorf("run directory created in %s: %v", d, left)
		}
	}

	res = Run(t, tickRegistry(), "[plan]\ndrop_caches = \"none\"\nallow_mixed_fs = true\n"+plan, Ranks(2), RankWorkdirs(disk, shm))
	m := res.Manifest
	if m.Status != "passed" {
		t.Fatalf("allow_mixed_fs: status %s\n%s", m.Status, res.Stderr)
	}
	if len(m.Hosts) != 2 || m.Hosts[0].Ranks[0] != 0 || m.Hosts[1].Ranks[0] != 1 || m.Hosts[1].FSType != "tmpfs" || m.Hosts[0].FSType == "tmpfs" || m.Hosts[0].FSID == "" || m.Hosts[0].FSID == m.Hosts[1].FSID || m.Hosts[1].Workdir != shm {
		t.Errorf("hosts: %+v", m.Hosts)
	}
	warned := false
	for _, w := range m.Host.Warnings {
		warned = warned || strings.Contains(w, "different filesystems")
	}
	if !warned {
		t.Errorf("no warning: %v", m.Host.Warnings)
	}
}

// Ranks on one filesystem run; hosts[] has one entry per host with its
// ranks and the filesystem's facts.
func TestHostsRecordEveryRank(t *testing.T) {
	res := Run(t, tickRegistry(), "[[phase]]\nkind = \"tick\"\n", Ranks(3), Hosts("a", "b", "b"))
	h := res.Manifest.Hosts
	if len(h) != 2 || h[0].Hostname != "a" || len(h[0].Ranks) != 1 || h[1].Hostname != "b" || len(h[1].Ranks) != 2 || h[1].Ranks[1] != 2 {
		t.Fatalf("hosts: %+v", h)
	}
	for _, want := range []string{"host a ranks 0: ", "host b ranks 1-2: "} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, res.Stdout)
		}
	}
	for _, x := range h {
		if x.FSType == "" || x.MountPoint == "" || x.FSID == "" || x.Workdir != res.Workdir || x.Error != "" {
			t.Errorf("host %s: %+v", x.Hostname, x)
		}
	}
}
