package io

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
)

// Dir is an open directory that every operation below it is relative to,
// so that no op re-resolves a path from the working directory: once a rank
// holds the Dir of its run directory, renaming that directory, or putting
// a symbolic link where it was, changes nothing about what the rank
// touches. That is what makes "prism creates <workdir>/prism-<run-id>/ and
// touches nothing else" hold against another user who can write the
// workdir.
//
// A Dir comes from OpenDir (a directory prism did not create: a workdir, a
// user's dataset) or from its parent's MakeSub, OpenSub or EnsureSub (one
// prism created). It remembers the device, inode and owner it was opened
// as, and its parent and name, so Verify can tell whether the name still
// leads to it.
//
// The descriptor is an ordinary O_RDONLY|O_DIRECTORY one, not O_PATH:
// getdents64 and fsync refuse O_PATH descriptors with EBADF.
//
// Every method may be called from several goroutines at once, except
// Close, which must come after all others, children's first: a child's
// Verify stats its name in its parent's descriptor.
type Dir struct {
	fd       int
	parent   *Dir
	name     Name // in parent; zero for a Dir from OpenDir
	path     string
	dev, ino uint64
	uid      uint32
	owned    []*Dir // the intermediate Dirs of EnsureSub, closed with this one
}

// Path returns the directory's path as prism named it, for messages. It is
// never used to reach the directory, and may no longer lead to it.
func (d *Dir) Path() string { return d.path }

// Fd returns the directory's descriptor, for calls this package does not
// wrap. It stays owned by d.
func (d *Dir) Fd() int { return d.fd }

// Join returns the path of rel below d, for messages.
func (d *Dir) Join(rel string) string {
	if strings.HasSuffix(d.path, "/") {
		return d.path + rel
	}
	return d.path + "/" + rel
}

// ErrReplaced is what errors.Is finds in every *ReplacedError.
var ErrReplaced = errors.New("io: run directory was replaced")

// ReplacedError says that the name of a directory prism created no longer
// leads to it: someone renamed it and put something else (a symbolic link,
// another directory, nothing) in its place. prism's own operations are not
// misled, since they go through the descriptor it holds, but the run was
// tampered with and must fail.
type ReplacedError struct {
	Path string // the directory as prism named it
	Now  string // what the name leads to now
	Err  error  // the errno of the operation that led to the check, if any
}

func (e *ReplacedError) Error() string {
	return fmt.Sprintf("run directory was replaced: %s is no longer the directory prism created (%s); "+
		"someone who can write its parent renamed it: set the sticky bit on the workdir (chmod +t) or use one only you can write",
		e.Path, e.Now)
}

// Is makes errors.Is(err, ErrReplaced) true.
func (e *ReplacedError) Is(target error) bool { return target == ErrReplaced }

// Unwrap returns the errno of the operation that led to the check.
func (e *ReplacedError) Unwrap() error { return e.Err }

// MaxRemoveDepth bounds how deep RemoveContents descends, and so how many
// descriptors it holds at once (one per level). prism's deepest trees
// (folder_bench, extracted archives) stay far below it.
const MaxRemoveDepth = 256

// ErrTooDeep is the cause when a tree goes deeper than MaxRemoveDepth.
var ErrTooDeep = fmt.Errorf("io: directory tree deeper than %d levels: not removed below that", MaxRemoveDepth)

// ErrOtherFilesystem is the cause when a directory below the one being
// emptied is a mount point: removal never crosses into another filesystem.
var ErrOtherFilesystem = errors.New("io: a mount point: removal does not cross filesystems")

// ErrUnsupported is what every file operation returns in a build for an
// operating system other than Linux: prism's file layer needs openat2,
// getdents64, O_DIRECT and posix_fadvise.
var ErrUnsupported = errors.New("io: prism's file layer needs Linux (openat2, getdents64, O_DIRECT, fadvise); this binary was built for " + runtime.GOOS)
