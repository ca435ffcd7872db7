package io

import (
	"bytes"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// RemoveContents removes everything below d, and leaves d itself. It never
// follows a symbolic link: files and links are removed with unlinkat, which
// acts on the name itself; a directory is entered only by opening its name
// with O_NOFOLLOW|O_DIRECTORY relative to its parent's descriptor, and
// removed with unlinkat(AT_REMOVEDIR) once empty. An entry that turns into
// something else between the listing and the unlink is looked at again as
// what it is now. It stays on d's filesystem and goes at most
// MaxRemoveDepth levels down. What it cannot remove it leaves, and the
// error names the first such entry and how many there were.
//
// Only entries already inside prism's directories are ever removed: the
// kernel lets nobody move a directory they cannot write into one of them,
// and fs.protected_hardlinks keeps others from linking files they do not
// own there (a removed hard link leaves the file and its other names).
func (d *Dir) RemoveContents() error {
	fd, err := openPtr(d.fd, unsafe.Pointer(&dot[0]), dirFlags, 0)
	if err != nil {
		return NewOpError("open", d.path, err)
	}
	r := remover{dev: d.dev}
	r.run(rmFrame{fd: fd, path: d.path})
	return r.result()
}

// Remove removes d with everything below it, then its name in its parent,
// if that name still leads to d (a *ReplacedError otherwise: a name that
// now leads elsewhere is never removed). d stays open; Close it after. A
// Dir from OpenDir is not prism's to remove.
func (d *Dir) Remove() error {
	if d.parent == nil {
		return fmt.Errorf("io: not removing %s: prism did not create it", d.path)
	}
	if err := d.RemoveContents(); err != nil {
		return err
	}
	if err := d.verifyName(); err != nil {
		return err
	}
	// Between the check and the rmdir, only someone who can write the
	// parent could swap the name, and what rmdir could then remove is an
	// empty directory they could remove themselves.
	err := d.parent.Rmdir(d.name)
	for i := 0; err == unix.ENOTEMPTY && i < len(notEmptyWait); i++ {
		time.Sleep(notEmptyWait[i]) // a cached listing (see notEmptyWait)
		if err = d.RemoveContents(); err != nil {
			return err
		}
		err = d.parent.Rmdir(d.name)
	}
	return NewOpError("rmdir", d.path, err)
}

// RemoveSub removes the directory name (one component) below d and
// everything in it, as OpenSub and Remove do.
func (d *Dir) RemoveSub(name string) error {
	sub, err := d.OpenSub(name)
	if err != nil {
		return err
	}
	err = sub.Remove()
	sub.Close()
	return err
}

type rmFrame struct {
	fd   int
	name string // in the parent frame's directory; "" for the top
	path string
	idle int // sweeps in a row that removed nothing
	// A sweep reads the directory once from its start. It goes on where
	// it left off after a descent, in the chunk it had read: a FUSE
	// client (sshfs) answers a listing restarted after an entry was
	// removed with nothing for as long as its directory cache lasts,
	// which would make each sweep remove one subdirectory.
	buf                    []byte // this depth's getdents chunk (remover.bufs)
	n, off                 int    // the chunk's length and the next entry in it
	swept                  bool   // a sweep is under way (off, n are valid)
	seen, removed, skipped int    // counts of the sweep under way
	// failed are the entries given up on, by name: a FUSE filesystem's
	// listing may give every entry the same inode number. retries
	// counts, per subdirectory, listings done again after an rmdir found
	// it not empty.
	failed  map[string]bool
	retries map[string]int
}

// remover empties a tree depth first with an explicit stack of open
// directories, so its descriptors and its memory are bounded by the depth,
// not by the size of the tree.
type remover struct {
	dev   uint64
	bufs  [][]byte // one getdents chunk per depth, reused
	stack []rmFrame
	first error
	nfail int
}

// notEmptyWait are the waits before listing a directory again whose rmdir
// found entries the last listing did not show: NFS and FUSE clients
// (sshfs) cache directory listings for seconds (sshfs's dcache_timeout,
// NFS's acdirmin), and entries other nodes created meanwhile are missing
// from the cached one. 6.3 s in all, beyond the usual 3-5 s caches.
var notEmptyWait = []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 3 * time.Second}

// maxIdle is how many sweeps over a directory may remove nothing before
// its remaining entries are given up on (they keep changing type).
const maxIdle = 8

// giveUp marks f's entry name as one the sweeps skip.
func (f *rmFrame) giveUp(name string) {
	if f.failed == nil {
		f.failed = map[string]bool{}
	}
	f.failed[name] = true
}

// fail records err against the entry name of f (nil f: the top).
func (r *remover) fail(f *rmFrame, name string, err error) {
	if f != nil {
		f.giveUp(name)
	}
	if r.first == nil {
		r.first = err
	}
	r.nfail++
}

func (r *remover) result() error {
	if r.nfail > 1 {
		return fmt.Errorf("%w (and %d more entries not removed)", r.first, r.nfail-1)
	}
	return r.first
}

// push puts f on the stack with the chunk buffer of its depth.
func (r *remover) push(f rmFrame) {
	d := len(r.stack)
	if d == len(r.bufs) {
		r.bufs = append(r.bufs, make([]byte, 32<<10))
	}
	f.buf = r.bufs[d]
	r.stack = append(r.stack, f)
}

func (r *remover) run(top rmFrame) {
	r.stack = r.stack[:0]
	r.push(top)
	for len(r.stack) > 0 {
		f := &r.stack[len(r.stack)-1]
		var parent *rmFrame
		if len(r.stack) > 1 {
			parent = &r.stack[len(r.stack)-2]
		}
		child, state := r.pass(f, parent)
		switch state {
		case passDescend:
			if len(r.stack) >= MaxRemoveDepth {
				Close(child.fd)
				r.fail(f, child.name, NewOpError("remove", child.path, ErrTooDeep))
				continue
			}
			r.push(child)
		case passEmpty, passStuck:
			done := *f
			Close(done.fd)
			r.stack = r.stack[:len(r.stack)-1]
			if parent == nil {
				continue
			}
			if state == passStuck {
				parent.giveUp(done.name) // its errors are counted already
				continue
			}
			name := append([]byte(done.name), 0)
			err := atPtr(unix.SYS_UNLINKAT, parent.fd, unsafe.Pointer(&name[0]), unix.AT_REMOVEDIR)
			if err == unix.ENOTEMPTY && parent.retries[done.name] < len(notEmptyWait) {
				// A network filesystem's client served a cached listing
				// (entries other nodes made since are missing from it):
				// wait for the cache to expire and list it afresh.
				if parent.retries == nil {
					parent.retries = map[string]int{}
				}
				time.Sleep(notEmptyWait[parent.retries[done.name]])
				parent.retries[done.name]++
				if child, ok := r.enter(parent, name); ok {
					r.push(child)
				}
				continue
			}
			switch err {
			case nil:
				parent.removed++
			case unix.ENOENT:
			default:
				r.fail(parent, done.name, NewOpError("rmdir", done.path, err))
			}
		}
	}
}

const (
	passAgain = iota
	passDescend
	passEmpty
	passStuck
)

// pass goes on with f's sweep, unlinking every non-directory, until it
// finds a directory to descend into or reaches the end of the listing.
// parent is the frame f is in (nil for the top), for failures of f
// itself.
func (r *remover) pass(f, parent *rmFrame) (rmFrame, int) {
	stuck := func(op string, err error) (rmFrame, int) {
		if parent != nil {
			r.fail(parent, f.name, NewOpError(op, f.path, err))
		} else {
			r.fail(nil, "", NewOpError(op, f.path, err))
		}
		return rmFrame{}, passStuck
	}
	if !f.swept {
		if _, err := unix.Seek(f.fd, 0, 0); err != nil {
			return stuck("seek", err)
		}
		f.swept, f.n, f.off = true, 0, 0
		f.seen, f.removed, f.skipped = 0, 0, 0
	}
	for {
		if f.off >= f.n {
			n, err := unix.Getdents(f.fd, f.buf)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return stuck("readdir", err)
			}
			if n <= 0 {
				break
			}
			f.n, f.off = n, 0
		}
		for f.off < f.n {
			next, _, typ, name, err := dirent(f.buf[:f.n], f.off)
			if err != nil {
				return stuck("readdir", err)
			}
			f.off = next
			if dotOrDotDot(name) {
				continue
			}
			f.seen++
			if f.failed[string(cname(name))] {
				f.skipped++
				continue
			}
			np := unsafe.Pointer(&name[0])
			if typ != unix.DT_DIR {
				err := atPtr(unix.SYS_UNLINKAT, f.fd, np, 0)
				if err == nil {
					f.removed++
					continue
				}
				if err == unix.ENOENT {
					continue
				}
				if err != unix.EISDIR {
					r.fail(f, string(cname(name)), NewOpError("unlink", joinName(f.path, name), err))
					f.skipped++
					continue
				}
				// A directory now (or d_type was unknown): enter it.
			}
			if child, ok := r.enter(f, name); ok {
				return child, passDescend
			}
			if f.failed[string(cname(name))] {
				f.skipped++
			}
		}
	}
	f.swept = false
	switch {
	case f.seen == 0:
		return rmFrame{}, passEmpty
	case f.seen == f.skipped:
		return rmFrame{}, passStuck
	case f.removed == 0:
		if f.idle++; f.idle >= maxIdle {
			return stuck("remove", errors.New("io: its entries kept changing type; left in place"))
		}
	default:
		f.idle = 0
	}
	return rmFrame{}, passAgain
}

// cname is a dirent name without its NUL terminator and padding.
func cname(name []byte) []byte {
	if i := bytes.IndexByte(name, 0); i >= 0 {
		return name[:i]
	}
	return name
}

// enter opens the directory name in f without following a link. ok is
// false when it is no longer a directory (the next pass unlinks whatever
// it has become), gone, or refused (recorded).
func (r *remover) enter(f *rmFrame, name []byte) (rmFrame, bool) {
	if beforeEnter != nil {
		beforeEnter(joinName(f.path, name))
	}
	np := unsafe.Pointer(&name[0])
	fd, err := openPtr(f.fd, np, dirFlags, 0)
	switch err {
	case nil:
	case unix.ENOENT, unix.ENOTDIR, unix.ELOOP:
		return rmFrame{}, false
	default:
		r.fail(f, unix.ByteSliceToString(name), NewOpError("open", joinName(f.path, name), err))
		return rmFrame{}, false
	}
	path := joinName(f.path, name)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		Close(fd)
		r.fail(f, unix.ByteSliceToString(name), NewOpError("stat", path, err))
		return rmFrame{}, false
	}
	if uint64(st.Dev) != r.dev {
		Close(fd)
		r.fail(f, unix.ByteSliceToString(name), NewOpError("remove", path, ErrOtherFilesystem))
		return rmFrame{}, false
	}
	return rmFrame{fd: fd, name: unix.ByteSliceToString(name), path: path}, true
}

// beforeEnter, when set (by tests), runs between reading a directory's
// entry and opening it: the window in which the entry can change type.
var beforeEnter func(path string)

func joinName(dir string, name []byte) string {
	return dir + "/" + unix.ByteSliceToString(name)
}
