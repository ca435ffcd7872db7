package io

import (
	"errors"
	"testing"
)

func TestNameRefusesWhatLeavesTheDirectory(t *testing.T) {
	for _, bad := range []string{"", "/etc/passwd", "..", ".", "a/../b", "../x", "a/./b", "a//b", "a/", "/", "a\x00b"} {
		if n, err := NewName(bad); !errors.Is(err, ErrBadName) {
			t.Errorf("NewName(%q) = %+v, %v; want ErrBadName", bad, n, err)
		}
	}
	for _, c := range []struct {
		rel    string
		single bool
		dir    string
	}{
		{"f0.17", true, ""},
		{"...", true, ""},
		{"..a", true, ""},
		{"d3/f17", false, "d3"},
		{"a/b/c", false, "a/b"},
	} {
		n, err := NewName(c.rel)
		if err != nil {
			t.Fatalf("NewName(%q): %v", c.rel, err)
		}
		if n.String() != c.rel || *n.Ref() != c.rel || n.Single() != c.single {
			t.Errorf("%q: String %q Single %v", c.rel, n.String(), n.Single())
		}
		if got := string(n.b); got != c.rel+"\x00" {
			t.Errorf("%q: bytes %q", c.rel, got)
		}
		if !c.single {
			if got := string(n.dirb); got != c.dir+"\x00" {
				t.Errorf("%q: directory part %q, want %q", c.rel, got, c.dir)
			}
			if got := string(n.b[n.dir+1:]); got != c.rel[len(c.dir)+1:]+"\x00" {
				t.Errorf("%q: last component %q", c.rel, got)
			}
		}
	}
}
