package io

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestOpError(t *testing.T) {
	err := NewOpErrorAt("write", "/x/f", 4096, unix.ENOSPC)
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("errors.Is does not see ENOSPC through %v", err)
	}
	var oe *OpError
	if !errors.As(err, &oe) || oe.Op != "write" || oe.Path != "/x/f" || oe.Off != 4096 {
		t.Fatalf("errors.As: %#v", oe)
	}
	if got := err.Error(); !strings.HasPrefix(got, "write /x/f@4096: no space left on device; the filesystem is full") {
		t.Fatalf("message %q", got)
	}
	if got := NewOpError("unlink", "/x/g", unix.ENOENT).Error(); got != "unlink /x/g: no such file or directory" {
		t.Fatalf("message without offset or remedy: %q", got)
	}
	if NewOpError("mkdir", "/x", nil) != nil {
		t.Fatal("a nil cause must give a nil error")
	}
}
