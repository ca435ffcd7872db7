package io

import (
	"errors"
	"fmt"
	"strings"
)

// Name is a path relative to a Dir, prepared for the hot path: one
// component ("f0.17") or several ("d3/f17", a tar entry "a/b/c"), never
// absolute, never ".", ".." or an empty component, so that it cannot name
// anything outside the directory it is used with. It holds the
// NUL-terminated bytes the kernel wants, built once in Setup, so that no
// timed op converts a string.
type Name struct {
	s string
	// b is s and a NUL: what a one-component call and openat2 take.
	b []byte
	// dir is the length of the directory part of s ("d3" in "d3/f17"), or
	// -1 for a single component.
	dir int
	// dirb is the directory part and a NUL, for openat2 of the parent.
	dirb []byte
	// parts is s with every '/' turned into NUL, for the component walk
	// that replaces openat2 where the kernel lacks it.
	parts []byte
}

// NewName prepares rel, refusing what could leave the directory it will
// be used with (an absolute path, "..") and what names nothing ("", "."
// or an empty component, a NUL byte).
func NewName(rel string) (Name, error) {
	if err := checkRel(rel); err != nil {
		return Name{}, err
	}
	n := Name{s: rel, b: append([]byte(rel), 0), dir: strings.LastIndexByte(rel, '/')}
	if n.dir >= 0 {
		n.dirb = append([]byte(rel[:n.dir]), 0)
		n.parts = append([]byte(rel), 0)
		for i, c := range n.parts {
			if c == '/' {
				n.parts[i] = 0
			}
		}
	}
	return n, nil
}

// MustName is NewName for names prism builds itself from clean parts.
func MustName(rel string) Name {
	n, err := NewName(rel)
	if err != nil {
		panic(err)
	}
	return n
}

// ErrBadName is the cause of every refusal of NewName.
var ErrBadName = errors.New("io: not a name below a directory")

func checkRel(rel string) error {
	bad := func(why string) error { return fmt.Errorf("%w: %q %s", ErrBadName, rel, why) }
	switch {
	case rel == "":
		return bad("is empty")
	case rel[0] == '/':
		return bad("is absolute")
	case strings.IndexByte(rel, 0) >= 0:
		return bad("contains a NUL byte")
	}
	for part := range strings.SplitSeq(rel, "/") {
		switch part {
		case "":
			return bad("has an empty component (// or a trailing /)")
		case ".", "..":
			return bad("has a " + part + " component")
		}
	}
	return nil
}

// String returns the name as given.
func (n Name) String() string { return n.s }

// Single reports whether n is one component, which every *at() call takes
// directly; a longer name is resolved below the directory first.
func (n Name) Single() bool { return n.dir < 0 }

// Ref points at the name's text without copying it, for a stall watchdog
// that must name the file of an op while it runs (Recorder.BeginOn).
func (n *Name) Ref() *string { return &n.s }
