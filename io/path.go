package io

import (
	"errors"
	"fmt"
	"strings"
)

// Path is a file name prepared for the hot path: the NUL-terminated bytes the
// kernel wants, built once in Setup so that no timed op converts a string
// (unix.Open and friends allocate for that on every call).
type Path struct {
	s string
	b []byte
	v string // what the system calls take, when not s (PathVia)
}

// NewPath prepares s. A path containing NUL cannot name a file.
func NewPath(s string) (Path, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return Path{}, fmt.Errorf("io: path %q contains a NUL byte", s)
	}
	b := make([]byte, len(s)+1)
	copy(b, s)
	return Path{s: s, b: b}, nil
}

// MustPath is NewPath for names prism builds itself from clean parts.
func MustPath(s string) Path {
	p, err := NewPath(s)
	if err != nil {
		panic(err)
	}
	return p
}

// PathVia prepares a path whose system calls use via — a path through a
// directory descriptor (Dir.ProcPath), which no rename or link above the
// directory can redirect — while messages and the stall watchdog name
// shown, the path a user recognises.
func PathVia(shown, via string) (Path, error) {
	p, err := NewPath(via)
	if err != nil {
		return Path{}, err
	}
	p.s, p.v = shown, via
	return p, nil
}

// MustPathVia is PathVia for paths prism builds itself from clean parts.
func MustPathVia(shown, via string) Path {
	p, err := PathVia(shown, via)
	if err != nil {
		panic(err)
	}
	return p
}

// Via returns the path the system calls use (for a Path from PathVia,
// not the one String shows).
func (p Path) Via() string {
	if p.v != "" {
		return p.v
	}
	return p.s
}

// String returns the path as given.
func (p Path) String() string { return p.s }

// Name points at the path's text without copying it, for a stall watchdog
// that must name the file of an op while it runs (Recorder.BeginOn).
func (p *Path) Name() *string { return &p.s }

// ErrEmptyPath is returned when a zero Path is used.
var ErrEmptyPath = errors.New("io: empty path")
