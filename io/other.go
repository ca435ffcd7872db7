//go:build !linux

package io

// This build is for an operating system prism's file layer does not run
// on: everything compiles, so `prism check` and the report tools work, and
// every file operation fails loudly with ErrUnsupported instead of falling
// back to calls that are not traversal-safe.

import "golang.org/x/sys/unix"

// Advice values for Fadvise; they mean nothing off Linux.
const (
	FadvNormal = iota
	FadvRandom
	FadvSequential
	FadvWillNeed
	FadvDontNeed
)

func Open(dirfd int, p Path, flags int, mode uint32) (int, error)  { return -1, ErrUnsupported }
func Write(fd int, b []byte) (int, error)                          { return 0, ErrUnsupported }
func Close(fd int) error                                           { return ErrUnsupported }
func Unlink(dirfd int, p Path) error                               { return ErrUnsupported }
func Rmdir(dirfd int, p Path) error                                { return ErrUnsupported }
func Mkdir(dirfd int, p Path, mode uint32) error                   { return ErrUnsupported }
func Rename(from, to Path) error                                   { return ErrUnsupported }
func RenameAt(fromDir int, from Path, toDir int, to Path) error    { return ErrUnsupported }
func Stat(dirfd int, p Path, st *unix.Stat_t) error                { return ErrUnsupported }
func StatName(dirfd int, name []byte, st *unix.Stat_t) error       { return ErrUnsupported }
func EachName(raw []byte, fn func(name []byte) error) (int, error) { return 0, ErrUnsupported }
func LstatName(dirfd int, name []byte, st *unix.Stat_t) error      { return ErrUnsupported }
func OpenName(dirfd int, name []byte, flags int) (int, error)      { return -1, ErrUnsupported }
func PreadFull(fd int, b []byte, off int64) (int, error)           { return 0, ErrUnsupported }
func PwriteFull(fd int, b []byte, off int64) (int, error)          { return 0, ErrUnsupported }
func Fsync(fd int) error                                           { return ErrUnsupported }
func Touch(fd int) error                                           { return ErrUnsupported }
func Fdatasync(fd int) error                                       { return ErrUnsupported }
func Sync(fd int, m SyncMode) error                                { return ErrUnsupported }
func Fallocate(fd int, off, n int64) error                         { return ErrUnsupported }
func Fadvise(fd int, off, n int64, advice int) error               { return ErrUnsupported }
func Evict(fd int) error                                           { return ErrUnsupported }
func DropCaches() error                                            { return ErrUnsupported }
func CanDropCaches() bool                                          { return false }
func AlignmentOf(path string) (Alignment, error)                   { return Alignment{}, ErrUnsupported }
func CheckDirect(dir string) (FSInfo, error)                       { return FSInfo{}, ErrUnsupported }
func OpenDirect(p Path, flags int, mode uint32) (int, error)       { return -1, ErrUnsupported }
func OpenDirectAt(dirfd int, p Path, flags int, mode uint32) (int, error) {
	return -1, ErrUnsupported
}
func StatFS(path string) (FSInfo, error) { return FSInfo{}, ErrUnsupported }
func OpenDir(path string) (*Dir, error)  { return nil, ErrUnsupported }
func Describe(st *unix.Stat_t) string    { return "a file" }
func OpenWorkdir(dir string, allowShared bool) (*Dir, []string, error) {
	return nil, nil, ErrUnsupported
}

func ReadDir(dirfd int, scratch, into []byte) ([]byte, []byte, error) {
	return scratch, into, ErrUnsupported
}

func (d *Dir) MakeSub(name string, mode uint32) (*Dir, error)         { return nil, ErrUnsupported }
func (d *Dir) OpenSub(name string) (*Dir, error)                      { return nil, ErrUnsupported }
func (d *Dir) EnsureSub(rel string, mode uint32) (*Dir, error)        { return nil, ErrUnsupported }
func (d *Dir) OpenPath(rel string) (*Dir, error)                      { return nil, ErrUnsupported }
func (d *Dir) Verify() error                                          { return ErrUnsupported }
func (d *Dir) ProcPath() string                                       { return "" }
func (d *Dir) Close() error                                           { return nil }
func (d *Dir) Open(n Name, flags int, mode uint32) (int, error)       { return -1, ErrUnsupported }
func (d *Dir) Stat(n Name, st *unix.Stat_t) error                     { return ErrUnsupported }
func (d *Dir) StatName(name []byte, st *unix.Stat_t) error            { return ErrUnsupported }
func (d *Dir) Unlink(n Name) error                                    { return ErrUnsupported }
func (d *Dir) Rmdir(n Name) error                                     { return ErrUnsupported }
func (d *Dir) Mkdir(n Name, mode uint32) error                        { return ErrUnsupported }
func (d *Dir) Rename(n Name, to *Dir, tn Name) error                  { return ErrUnsupported }
func (d *Dir) Link(n Name, to *Dir, tn Name) error                    { return ErrUnsupported }
func (d *Dir) Symlink(target Path, n Name) error                      { return ErrUnsupported }
func (d *Dir) Sync() error                                            { return ErrUnsupported }
func (d *Dir) WriteFile(name string, data []byte, perm uint32) error  { return ErrUnsupported }
func (d *Dir) ReadFile(name string, limit int64) ([]byte, error)      { return nil, ErrUnsupported }
func (d *Dir) RemoveContents() error                                  { return ErrUnsupported }
func (d *Dir) Remove() error                                          { return ErrUnsupported }
func (d *Dir) RemoveSub(name string) error                            { return ErrUnsupported }
func (d *Dir) AlignmentOf(n Name) (Alignment, error)                  { return Alignment{}, ErrUnsupported }
func (d *Dir) CheckDirect() (FSInfo, error)                           { return FSInfo{}, ErrUnsupported }
func (d *Dir) OpenDirect(n Name, flags int, mode uint32) (int, error) { return -1, ErrUnsupported }
func (d *Dir) StatFS() (FSInfo, error)                                { return FSInfo{}, ErrUnsupported }

func (d *Dir) Wrap(op string, n Name, err error) error { return NewOpError(op, d.Join(n.s), err) }

func (d *Dir) ReadDir(scratch, into []byte) ([]byte, []byte, error) {
	return scratch, into, ErrUnsupported
}

// ODirect is O_DIRECT where the platform has it.
const ODirect = 0
