package io

import (
	"errors"
	"fmt"
)

// OpError is a failed operation on a file: what was done (Op: "create",
// "write", "unlink", …), to which path, at which offset (-1 when the
// operation has none), and the errno or error underneath. Error() adds the
// remedy a storage engineer can act on (Remedy), so callers never format
// syscall failures by hand; errors.Is(err, unix.ENOSPC) and errors.As still
// see the cause through Unwrap.
type OpError struct {
	Op   string
	Path string
	Off  int64
	Err  error
}

// NewOpError returns an *OpError without an offset, or nil when err is nil,
// so a call can be wrapped in place: return pio.NewOpError("mkdir", p, err).
// path is a string or a Path (anything fmt prints as the file's name).
func NewOpError(op string, path any, err error) error {
	if err == nil {
		return nil
	}
	return &OpError{Op: op, Path: fmt.Sprint(path), Off: -1, Err: err}
}

// NewOpErrorAt is NewOpError for an operation at an offset.
func NewOpErrorAt(op string, path any, off int64, err error) error {
	if err == nil {
		return nil
	}
	return &OpError{Op: op, Path: fmt.Sprint(path), Off: off, Err: err}
}

func (e *OpError) Error() string {
	where := e.Path
	if e.Off >= 0 {
		where = fmt.Sprintf("%s@%d", e.Path, e.Off)
	}
	var inner *OpError
	if errors.As(e.Err, &inner) {
		// A wrapped OpError already carries its remedy.
		return fmt.Sprintf("%s %s: %v", e.Op, where, e.Err)
	}
	return fmt.Sprintf("%s %s: %v%s", e.Op, where, e.Err, Remedy(e.Err))
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }
