package io

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWorkdirPolicy judges real directories and symbolic links to them:
// the verdict must follow the real path, and a refusal must name the path
// as given, as resolved, and the reason.
func TestWorkdirPolicy(t *testing.T) {
	base := t.TempDir()
	link := func(name, to string) string {
		p := filepath.Join(base, name)
		if err := os.Symlink(to, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dir := func(name string, mode os.FileMode) string {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	// A passwd of our own, with a home that exists, proves that every
	// listed home counts, not only $HOME.
	alice := dir("alice", 0o755)
	passwd := filepath.Join(base, "passwd")
	if err := os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/sh\nalice:x:1001:1001::"+alice+":/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	savedPasswd := passwdFile
	passwdFile = passwd
	t.Cleanup(func() { passwdFile = savedPasswd })
	bob := dir("bob", 0o755)
	t.Setenv("HOME", bob)

	private := dir("private", 0o755)
	if err := os.WriteFile(filepath.Join(base, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	foreign := dir("foreign", 0o755)
	foreignOwned := false
	if os.Geteuid() == 0 {
		foreignOwned = os.Chown(foreign, 65534, 65534) == nil
	}
	type want int
	const (
		ok want = iota
		refused
		warned // refused, and passes with a warning under allowShared
	)
	cases := []struct {
		path   string
		want   want
		reason string
	}{
		{"/", refused, "in /"},
		{link("to-root", "/"), refused, "in /"},
		{link("to-etc", "/etc"), refused, "system tree /etc"},
		{"/usr/share", refused, "system tree /usr"},
		{"/lib", refused, "system tree"}, // /usr/lib where /usr is merged
		{"/var", refused, "system tree /var"},
		{"/var/lib", refused, "system tree /var/lib"},
		{"/var/log", refused, "system tree /var/log"},
		{link("to-cache", "/var/cache"), refused, "system tree /var/cache"},
		{"/dev", refused, "system tree /dev"},
		{"/proc/self", refused, "system tree /proc"},
		{"/var/tmp", ok, ""},
		{"/dev/shm", ok, ""},
		{"/tmp", ok, ""},
		{"/root", refused, "home directory root"},
		{link("to-root-home", "/root"), refused, "home directory root"},
		{alice, refused, "home directory of user alice"},
		{link("to-alice", alice), refused, "home directory of user alice"},
		{bob, refused, "($HOME)"},
		{private, ok, ""},
		{link("to-private", private), ok, ""},
		{dir("alice/sub", 0o755), ok, ""},
		{dir("world", 0o777), warned, "mode 0777) and has no sticky bit"},
		{dir("group", 0o775), warned, "mode 0775) and has no sticky bit"},
		{link("to-group", filepath.Join(base, "group")), warned, "no sticky bit"},
		{dir("sticky", 0o777|os.ModeSticky), ok, ""},
		{filepath.Join(base, "missing"), refused, "does not exist"},
		{link("dangling", filepath.Join(base, "missing")), refused, "does not exist"},
		{filepath.Join(base, "file"), refused, "not a directory"},
		{"", refused, "it is empty"},
	}
	if foreignOwned {
		cases = append(cases, struct {
			path   string
			want   want
			reason string
		}{foreign, warned, "owned by uid 65534"})
	}
	for _, c := range cases {
		resolved, warnings, err := CheckWorkdir(c.path, false)
		switch c.want {
		case ok:
			if err != nil || len(warnings) != 0 {
				t.Errorf("%s: %v %v, want accepted", c.path, err, warnings)
			}
			real, _ := filepath.EvalSymlinks(c.path)
			if resolved != real {
				t.Errorf("%s: resolved %q, want %q", c.path, resolved, real)
			}
		case refused, warned:
			var we *WorkdirError
			if !errors.As(err, &we) {
				t.Errorf("%s: %v, want a *WorkdirError", c.path, err)
				continue
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "workdir "+c.path+" ") || !strings.Contains(msg, c.reason) {
				t.Errorf("%s: message %q, want it to name the path and %q", c.path, msg, c.reason)
			}
			if real, rerr := filepath.EvalSymlinks(c.path); rerr == nil && c.path != "" && real != c.path && !strings.Contains(msg, "(resolves to "+real+")") {
				t.Errorf("%s: message %q does not name the real path %s", c.path, msg, real)
			}
			_, warnings, err := CheckWorkdir(c.path, true)
			if c.want == refused && err == nil {
				t.Errorf("%s: allowShared let it through", c.path)
			}
			if c.want == warned && (err != nil || len(warnings) != 1 || !strings.HasPrefix(warnings[0], "WARNING: workdir "+c.path) || !strings.Contains(warnings[0], c.reason)) {
				t.Errorf("%s: with allowShared: %v %q", c.path, err, warnings)
			}
		}
	}
}

// TestSystemTree covers the names no machine here has as real
// directories (merged /usr turns /lib* into links).
func TestSystemTree(t *testing.T) {
	for p, want := range map[string]string{
		"/": "/", "/lib64/x": "/lib64", "/libx32": "/libx32", "/lib": "/lib", "/bin/x": "/bin",
		"/dev/shm": "", "/dev/shm/prism": "", "/dev/pts": "/dev", "/var/tmp/x": "", "/var/scratch": "",
		"/var/spool/x": "/var/spool", "/var": "/var", "/varx": "", "/run/user/0": "/run", "/usrlocal": "",
		"/scratch/lib": "", "/home/alice/x": "",
	} {
		if got, _ := systemTree(p); got != want {
			t.Errorf("systemTree(%s) = %q, want %q", p, got, want)
		}
	}
}

// TestOpenWorkdir: the Dir is the directory the policy judged, named as
// given; what CheckWorkdir refuses, OpenWorkdir refuses.
func TestOpenWorkdir(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "scratch")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	given := filepath.Join(base, "link")
	if err := os.Symlink(real, given); err != nil {
		t.Fatal(err)
	}
	d, warnings, err := OpenWorkdir(given, false)
	if err != nil || len(warnings) != 0 {
		t.Fatal(err, warnings)
	}
	defer d.Close()
	if d.Path() != given || d.ino != inode(t, real) {
		t.Fatalf("Dir %s ino %d, want %s ino %d", d.Path(), d.ino, given, inode(t, real))
	}
	run, err := d.MakeSub("prism-x", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	run.Close()
	if _, err := os.Stat(filepath.Join(real, "prism-x")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := OpenWorkdir(filepath.Join(base, "nope"), true); !errors.As(err, new(*WorkdirError)) {
		t.Errorf("missing workdir: %v", err)
	}
	if err := os.Chmod(real, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, _, err := OpenWorkdir(given, false); err == nil || !strings.Contains(err.Error(), "no sticky bit") {
		t.Errorf("shared workdir: %v", err)
	}
	d2, warnings, err := OpenWorkdir(given, true)
	if err != nil || len(warnings) != 1 {
		t.Fatalf("shared workdir allowed: %v %v", err, warnings)
	}
	d2.Close()
	fd, err := unix.Open(real, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if p, err := fdPath(fd); err != nil || p != real {
		t.Errorf("fdPath %q %v, want %s", p, err, real)
	}
}
