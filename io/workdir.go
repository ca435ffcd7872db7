package io

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// WorkdirError is a refusal of a workdir: the path as the plan or the
// command line gave it, what it resolves to once symbolic links are
// followed, why, and what to do instead.
type WorkdirError struct {
	Path     string
	Resolved string // "" when it could not be resolved
	Reason   string
	Remedy   string
	Err      error // the underlying failure, when there is one
}

func (e *WorkdirError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "workdir %s", e.Path)
	if e.Resolved != "" && e.Resolved != e.Path {
		fmt.Fprintf(&b, " (resolves to %s)", e.Resolved)
	}
	fmt.Fprintf(&b, " refused: %s", e.Reason)
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.Remedy != "" {
		fmt.Fprintf(&b, "; %s", e.Remedy)
	}
	return b.String()
}

func (e *WorkdirError) Unwrap() error { return e.Err }

// passwdFile is where the homes CheckWorkdir protects are listed; tests
// point it at their own.
var passwdFile = "/etc/passwd"

const scratchRemedy = "point workdir at a scratch directory (a subdirectory of /tmp, /var/tmp, /dev/shm or of the filesystem under test)"

// CheckWorkdir judges dir as the place where prism creates its run
// directory, on the real path symbolic links lead to (a link to / is /).
// It returns that path, and warnings to print when allowShared let a
// shared directory through. Refused, with a *WorkdirError:
//
//   - a missing path, or one that is not a directory;
//   - / and the system trees: /bin, /boot, /dev (but /dev/shm, the
//     memory-backed scratch every Linux node has, is allowed), /etc,
//     /lib*, /proc, /run, /sbin, /sys, /usr and everything below them;
//     /var itself and its system trees (/var/lib, /var/log, /var/cache,
//     /var/spool, /var/mail, /var/backups, …) but not /var/tmp or a site's
//     own /var/<scratch>;
//   - /home, /root, $HOME and the home directory of every user in
//     /etc/passwd (the directory itself: a subdirectory of a home is fine);
//   - unless allowShared, a directory others can write (group- or
//     world-writable without the sticky bit, or owned by another user):
//     any of them could rename prism's run directory and put a link in
//     its place.
//
// Homes known only to LDAP or another name service are not listed in
// /etc/passwd and so are not recognised, unless they are $HOME.
func CheckWorkdir(dir string, allowShared bool) (string, []string, error) {
	resolved, fi, err := resolveWorkdir(dir)
	if err != nil {
		return resolved, nil, err
	}
	uid := -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		uid = int(st.Uid)
	}
	warnings, err := judgeWorkdir(dir, resolved, fi.Mode(), uid, allowShared)
	return resolved, warnings, err
}

func resolveWorkdir(dir string) (string, os.FileInfo, error) {
	refuse := func(resolved, reason, remedy string, err error) (string, os.FileInfo, error) {
		return resolved, nil, &WorkdirError{Path: dir, Resolved: resolved, Reason: reason, Remedy: remedy, Err: err}
	}
	if dir == "" {
		return refuse("", "it is empty", "set [plan] workdir or pass --workdir", nil)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return refuse("", "cannot make it absolute", "", err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return refuse("", "it does not exist (or a symbolic link on it leads nowhere)", "create it first: prism creates only prism-<run-id>/ inside it", nil)
	}
	if err != nil {
		return refuse("", "cannot resolve it", "", err)
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return refuse(resolved, "cannot stat it", "", err)
	}
	if !fi.IsDir() {
		return refuse(resolved, "it is not a directory", scratchRemedy, nil)
	}
	return resolved, fi, nil
}

// judgeWorkdir applies the policy to the directory at resolved (no links
// left on it), of mode and owner uid (-1 when unknown).
func judgeWorkdir(given, resolved string, mode fs.FileMode, uid int, allowShared bool) ([]string, error) {
	refuse := func(reason, remedy string) ([]string, error) {
		return nil, &WorkdirError{Path: given, Resolved: resolved, Reason: reason, Remedy: remedy}
	}
	if tree, ok := systemTree(resolved); ok {
		if tree == "/" {
			return refuse("prism does not create run directories in /", scratchRemedy)
		}
		return refuse("it is in the system tree "+tree, scratchRemedy)
	}
	if who, ok := homeOf(resolved); ok {
		return refuse("it is "+who, "use a subdirectory such as "+filepath.Join(resolved, "prism-scratch"))
	}
	var shared []string
	if mode.Perm()&0o022 != 0 && mode&fs.ModeSticky == 0 {
		shared = append(shared, fmt.Sprintf("it is writable by its group or by everyone (mode %#o) and has no sticky bit", mode.Perm()))
	}
	if euid := os.Geteuid(); uid >= 0 && uid != euid && uid != 0 {
		shared = append(shared, fmt.Sprintf("it is owned by uid %d, not by this process's uid %d nor by root", uid, euid))
	}
	if len(shared) == 0 {
		return nil, nil
	}
	why := strings.Join(shared, ", and ") + ", so another user can rename prism's run directory and put a symbolic link in its place"
	if !allowShared {
		return refuse(why, "set the sticky bit (chmod +t "+resolved+"), use a subdirectory only you can write, or allow a shared workdir explicitly")
	}
	return []string{fmt.Sprintf("WARNING: workdir %s: %s; prism works only through the directory it opened and fails the run if it is replaced, but another user can still disturb the run", given, why)}, nil
}

// varSystem are the trees below /var that belong to the system (FHS);
// anything else there, /var/tmp first, may be scratch.
var varSystem = map[string]bool{
	"account": true, "adm": true, "backups": true, "cache": true, "crash": true, "db": true,
	"empty": true, "games": true, "lib": true, "local": true, "lock": true, "log": true,
	"mail": true, "opt": true, "run": true, "spool": true, "www": true, "yp": true,
}

// systemTree reports whether the clean absolute path p is /, or in a
// system tree, and which.
func systemTree(p string) (string, bool) {
	if p == "/" {
		return "/", true
	}
	parts := strings.SplitN(strings.TrimPrefix(p, "/"), "/", 3)
	top := parts[0]
	switch {
	case top == "bin" || top == "boot" || top == "etc" || top == "proc" || top == "run" || top == "sbin" || top == "sys" || top == "usr":
		return "/" + top, true
	case strings.HasPrefix(top, "lib"):
		return "/" + top, true
	case top == "dev":
		// /dev/shm is a tmpfs every Linux node has, world-writable with
		// the sticky bit: the node-local scratch of last resort.
		if len(parts) >= 2 && parts[1] == "shm" {
			return "", false
		}
		return "/dev", true
	case top == "var":
		if len(parts) == 1 {
			return "/var", true
		}
		if varSystem[parts[1]] {
			return "/var/" + parts[1], true
		}
	}
	return "", false
}

// homeOf reports whether p is a home directory root, and whose.
func homeOf(p string) (string, bool) {
	if p == "/home" || p == "/root" {
		return "a home directory root", true
	}
	same := func(home string) bool {
		if home == "" || !filepath.IsAbs(home) {
			return false
		}
		home = filepath.Clean(home)
		if home == p {
			return true
		}
		real, err := filepath.EvalSymlinks(home)
		return err == nil && real == p
	}
	if same(os.Getenv("HOME")) {
		return "the home directory of this user ($HOME)", true
	}
	f, err := os.Open(passwdFile)
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// name:password:uid:gid:gecos:home:shell
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 7 || !same(fields[5]) || sharedTemp(p) {
			continue
		}
		return "the home directory of user " + fields[0] + " (" + passwdFile + ")", true
	}
	return "", false
}

// sharedTemp reports whether p is a world-writable sticky directory such
// as /tmp: a system account may list it as its home, but it is nobody's.
func sharedTemp(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode()&fs.ModeSticky != 0 && fi.Mode().Perm()&0o002 != 0
}
