package spmd

// How a rank holds its job directory. The directory often sits where
// others can write its parent (a plan's rendezvous = "/shared/tmp/rdv-%j",
// PRISM_RENDEZVOUS under /tmp), and anyone who can write the parent can
// rename the job directory away and put a symbolic link, or a directory
// of their own, in its place. A rank that reached its files by path would
// then create, overwrite and remove files wherever that leads, as root.
//
// So each rank opens the job directory once, without following a link in
// its last component, checks that it is this user's and that no one else
// can write it, and from then on reaches every file of the job through
// that descriptor (pio.Dir: openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS,
// or a component walk refusing links): a swap of the path changes nothing
// about what the rank touches. Nobody else can write inside the directory,
// so nothing below it can have been planted either.
//
// Every rank opens the path itself (on another node that is the only
// way), so a swap is also noticed: each heartbeat compares the device and
// inode the path leads to with the directory the rank holds, and on a
// mismatch the rank fails its collectives with ErrDirReplaced and posts
// an abort notice, in the directory it holds, that brings the others down
// at once with the same reason. A rank that opens the path after the swap
// finds a link (refused), another user's directory (refused) or a
// directory without the job file (it claims it, and is then alone: the
// others time out or see it absent, and nothing of the victim is touched
// because no one else's directory passes the checks).
//
// Refused: a job directory that is a symbolic link (name the directory it
// leads to), one another user owns or can write, and one whose parent
// everyone can write without the sticky bit, since there anyone can do the
// swap above at any time, including between two ranks' opens; with the
// sticky bit only the directory's owner (and root) can rename it.

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	pio "github.com/prism-hpc/prism/io"
	"golang.org/x/sys/unix"
)

// ErrDirReplaced is what errors.Is finds in the error of a rank that saw
// its job directory's path lead somewhere else mid-run.
var ErrDirReplaced = errors.New("spmd: rendezvous directory was replaced")

// maxJobFile bounds what a rank reads from the job directory: a gathered
// payload of a large job, far above anything the engine sends.
const maxJobFile = 1 << 30

// jobDirs are the descriptors a rank holds for its job directory.
type jobDirs struct {
	root     *pio.Dir // the job directory: every file of the job is reached through it
	parent   *pio.Dir // its parent, which the job directory is removed from
	ancestor *pio.Dir // where the parent was made (openParent), or nil
	dev, ino uint64   // root's, which the path must keep leading to
	made     bool     // this rank created the job directory
}

func (d *jobDirs) close() {
	for _, x := range []*pio.Dir{d.root, d.parent, d.ancestor} {
		if x != nil {
			x.Close()
		}
	}
}

// openJobDir opens the job directory dir, creating it (and missing
// parents) if need be, and judges it (see the top of this file).
func openJobDir(dir string) (*jobDirs, error) {
	clean := filepath.Clean(dir)
	base := filepath.Base(clean)
	if base == "/" || base == "." || base == ".." {
		return nil, fmt.Errorf("rendezvous directory %s: not a directory a job can make and remove; name one of its own, e.g. %s",
			dir, filepath.Join(clean, "rdv-%j"))
	}
	parentPath := filepath.Dir(clean)
	d := &jobDirs{}
	var err error
	if d.parent, d.ancestor, err = openParent(parentPath, dir); err != nil {
		return nil, err
	}
	fail := func(err error) (*jobDirs, error) {
		d.close()
		return nil, err
	}
	if err := checkParent(d.parent, dir); err != nil {
		return fail(err)
	}
	n, err := pio.NewName(base)
	if err != nil {
		return fail(fmt.Errorf("rendezvous directory %s: %w", dir, err))
	}
	// 0755, not 0777 less a umask of 002: a group member must not be able
	// to plant links in the job directory.
	switch err := d.parent.Mkdir(n, 0o755); err {
	case nil:
		d.made = true
	case unix.EEXIST:
	default:
		return fail(pio.NewOpError("mkdir", dir, err))
	}
	d.root, err = d.parent.OpenSub(base)
	var re *pio.ReplacedError
	var st unix.Stat_t
	switch {
	case errors.Is(err, unix.ELOOP):
		return fail(fmt.Errorf("rendezvous directory %s refused: it is a symbolic link, and ranks open it without following one, "+
			"so that nobody can redirect it; name the directory the link leads to", dir))
	case errors.As(err, &re):
		return fail(fmt.Errorf("rendezvous directory %s refused: %s: another user could plant links there that ranks would follow; "+
			"give the job a directory of its own", dir, re.Now))
	case err != nil:
		return fail(err)
	}
	if err := unix.Fstat(d.root.Fd(), &st); err != nil {
		return fail(pio.NewOpError("stat", dir, err))
	}
	if st.Mode&0o022 != 0 {
		return fail(fmt.Errorf("rendezvous directory %s is writable by group or others (mode %o): another user could plant links there "+
			"that ranks would follow; chmod go-w it or give the job a directory of its own", dir, st.Mode&0o7777))
	}
	d.dev, d.ino = uint64(st.Dev), st.Ino
	return d, nil
}

// openParent opens the directory path, following links on it (where the
// user's directory is is theirs to choose), or makes it: from its deepest
// existing ancestor down, each component made and opened relative to the
// one above without following a link (EnsureSub), so that a link planted
// meanwhile cannot make this rank create directories elsewhere. The
// ancestor, when there is one, must stay open as long as the parent: the
// parent's Verify stats its name there.
func openParent(path, dir string) (parent, ancestor *pio.Dir, err error) {
	parent, err = pio.OpenDir(path)
	if !errors.Is(err, fs.ErrNotExist) {
		if err != nil {
			err = fmt.Errorf("rendezvous directory %s: %w", dir, err)
		}
		return parent, nil, err
	}
	var missing []string
	for anc := path; ; {
		missing = append(missing, filepath.Base(anc))
		up := filepath.Dir(anc)
		if up == anc {
			return nil, nil, fmt.Errorf("rendezvous directory %s: %w", dir, err) // not even the root exists
		}
		anc = up
		a, aerr := pio.OpenDir(anc)
		if errors.Is(aerr, fs.ErrNotExist) {
			continue
		}
		if aerr != nil {
			return nil, nil, fmt.Errorf("rendezvous directory %s: %w", dir, aerr)
		}
		// What is made there is as exposed as the job directory would be.
		if err := checkParent(a, dir); err != nil {
			a.Close()
			return nil, nil, err
		}
		slices.Reverse(missing)
		d, err := a.EnsureSub(strings.Join(missing, "/"), 0o755)
		if err != nil {
			a.Close()
			return nil, nil, fmt.Errorf("rendezvous directory %s: %w", dir, err)
		}
		return d, a, nil
	}
}

// checkParent refuses to make the job directory dir, or a directory
// above it, in p if everyone can write p and it has no sticky bit.
func checkParent(p *pio.Dir, dir string) error {
	var st unix.Stat_t
	if err := unix.Fstat(p.Fd(), &st); err != nil {
		return pio.NewOpError("stat", p.Path(), err)
	}
	if st.Mode&0o002 == 0 || st.Mode&unix.S_ISVTX != 0 {
		return nil
	}
	return fmt.Errorf("rendezvous directory %s refused: %s is writable by everyone (mode %o) and has no sticky bit, "+
		"so anyone can rename the job directory and put a link or a directory of theirs in its place; "+
		"set the sticky bit (chmod +t %s) or put the job directory in a directory only you can write",
		dir, p.Path(), st.Mode&0o7777, p.Path())
}

// watchPath runs at every heartbeat: the first time the path no longer
// leads to the directory this rank holds, it records why, which fails this
// rank's collectives from then on, and posts the abort notice in the
// directory it holds, so that the ranks that have not looked yet stop too.
func (j *job) watchPath() {
	if j.replaced.Load() != nil {
		return
	}
	f := j.checkPath()
	if f == nil {
		return
	}
	j.replaced.Store(f)
	_ = j.writeAbort(j.rank, 1, fmt.Sprintf("rank %d: %s", j.rank, f.detail))
}

// checkPath compares the device and inode the job directory's path leads
// to now, links followed as when the rank opened it, with the directory it
// holds.
func (j *job) checkPath() *failure {
	var st unix.Stat_t
	switch err := unix.Stat(j.dir, &st); {
	case err == nil && uint64(st.Dev) == j.dev && st.Ino == j.ino:
		return nil
	case err != nil && err != unix.ENOENT && err != unix.ENOTDIR && err != unix.ELOOP:
		return nil // EIO, ESTALE, EACCES: not a verdict; the next beat looks again
	}
	now := "nothing"
	if unix.Lstat(j.dir, &st) == nil {
		now = pio.Describe(&st)
	}
	parent := filepath.Dir(filepath.Clean(j.dir))
	return &failure{kind: failReplaced, rank: j.rank, detail: fmt.Sprintf(
		"%s now leads to %s, not to the job directory this rank opened (inode %d): someone who can write %s "+
			"(or a directory above it) renamed it mid-run. The ranks reach the job's files only through the directory they opened, "+
			"so nothing else was touched; put the job directory in a directory only you can write, or one with the sticky bit",
		j.dir, now, j.ino, parent)}
}

// The job's file operations. rel names a file or directory below the job
// directory ("hb/3", "c/w/17/result"); every call goes through the
// descriptor the rank holds and refuses a symbolic link anywhere below it
// (pio.Dir), and errors name the full path. Each holds dirsMu for reading
// for its one operation, and none calls another.

// errDirsClosed is what an operation gets once every communicator of the
// rank is closed (a watcher that outlived them).
var errDirsClosed = errors.New("spmd: the rendezvous directory was closed with the last communicator")

// root returns the job directory, read-locked, or an error once closed;
// the caller unlocks dirsMu.RUnlock when its operation is done.
func (j *job) root() (*pio.Dir, error) {
	j.dirsMu.RLock()
	if j.dirs == nil {
		j.dirsMu.RUnlock()
		return nil, errDirsClosed
	}
	return j.dirs.root, nil
}

// closeDirs closes the descriptors once no operation is using them.
func (j *job) closeDirs() {
	j.dirsMu.Lock()
	defer j.dirsMu.Unlock()
	if j.dirs != nil {
		j.dirs.close()
		j.dirs = nil
	}
}

// path is rel's path, for messages only.
func (j *job) path(rel string) string { return filepath.Join(j.dir, rel) }

func (j *job) read(rel string) ([]byte, error) {
	root, err := j.root()
	if err != nil {
		return nil, err
	}
	defer j.dirsMu.RUnlock()
	return root.ReadFile(rel, maxJobFile)
}

// stat reports whether rel exists (nil), without following a link.
func (j *job) stat(rel string) error {
	n, err := pio.NewName(rel)
	if err != nil {
		return err
	}
	root, err := j.root()
	if err != nil {
		return err
	}
	defer j.dirsMu.RUnlock()
	var st unix.Stat_t
	return root.Wrap("stat", n, root.Stat(n, &st))
}

// remove removes the file rel if it is there; what is left is swept with
// the communicator's directory.
func (j *job) remove(rel string) {
	if root, err := j.root(); err == nil {
		unlink(root, rel)
		j.dirsMu.RUnlock()
	}
}

func (j *job) rmdir(rel string) error {
	n, err := pio.NewName(rel)
	if err != nil {
		return err
	}
	root, err := j.root()
	if err != nil {
		return err
	}
	defer j.dirsMu.RUnlock()
	return root.Wrap("rmdir", n, root.Rmdir(n))
}

// removeTree removes the directory rel and everything below it, never
// through a link, never past a mount point (pio.Dir.Remove).
func (j *job) removeTree(rel string) {
	root, err := j.root()
	if err != nil {
		return
	}
	defer j.dirsMu.RUnlock()
	d, err := root.OpenPath(rel)
	if err != nil {
		return
	}
	_ = d.Remove()
	d.Close()
}

func (j *job) publish(rel, name string, data []byte) error {
	root, err := j.root()
	if err != nil {
		return err
	}
	defer j.dirsMu.RUnlock()
	return publish(root, rel, name, data, j.tmpTag())
}

func (j *job) writeAbort(rank, code int, reason string) error {
	root, err := j.root()
	if err != nil {
		return err
	}
	defer j.dirsMu.RUnlock()
	return writeAbortFile(root, rank, code, reason, j.tmpTag())
}

// removeJobDir removes the (by now empty) job directory this rank's job
// made, only if its name still leads to the directory the rank holds: a
// name someone swapped is theirs, and so is what it leads to.
func (j *job) removeJobDir() {
	j.dirsMu.RLock()
	defer j.dirsMu.RUnlock()
	if d := j.dirs; d != nil && d.root.Verify() == nil {
		d.parent.Rmdir(pio.MustName(filepath.Base(filepath.Clean(j.dir))))
	}
}

func joinRel(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

// mkdirs makes rel and its missing parents below root, 0755 at most (the
// umask only takes away): a group member must not be able to plant links
// there.
func mkdirs(root *pio.Dir, rel string) error {
	for i := 0; i <= len(rel); i++ {
		if i < len(rel) && rel[i] != '/' {
			continue
		}
		n, err := pio.NewName(rel[:i])
		if err != nil {
			return err
		}
		if err := root.Mkdir(n, 0o755); err != nil && err != unix.EEXIST {
			return root.Wrap("mkdir", n, err)
		}
	}
	return nil
}

func unlink(root *pio.Dir, rel string) {
	if n, err := pio.NewName(rel); err == nil {
		root.Unlink(n)
	}
}

func rename(root *pio.Dir, from, to string) error {
	return twoNames(root, "rename", from, to, root.Rename)
}

func link(root *pio.Dir, from, to string) error {
	return twoNames(root, "link", from, to, root.Link)
}

func twoNames(root *pio.Dir, op, from, to string, call func(pio.Name, *pio.Dir, pio.Name) error) error {
	fn, err := pio.NewName(from)
	if err != nil {
		return err
	}
	tn, err := pio.NewName(to)
	if err != nil {
		return err
	}
	return root.Wrap(op, tn, call(fn, root, tn))
}
