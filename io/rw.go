package io

import (
	"errors"
	"fmt"
)

// ErrShortIO is returned when a read reaches end of file, or a write makes
// no progress, before the whole buffer moved.
var ErrShortIO = errors.New("io: short transfer (end of file reached before the whole buffer)")

// SyncMode is a flush policy: which call makes written data durable.
type SyncMode uint8

// Flush policies.
const (
	SyncNone      SyncMode = iota // leave it to the kernel's writeback
	SyncFsync                     // fsync(2): data and all metadata
	SyncFdatasync                 // fdatasync(2): data and the metadata needed to read it
)

// String names the policy as plans write it.
func (m SyncMode) String() string {
	switch m {
	case SyncFsync:
		return "fsync"
	case SyncFdatasync:
		return "fdatasync"
	}
	return "none"
}

// ParseSyncMode reads "none", "fsync" or "fdatasync".
func ParseSyncMode(s string) (SyncMode, error) {
	switch s {
	case "none", "":
		return SyncNone, nil
	case "fsync":
		return SyncFsync, nil
	case "fdatasync":
		return SyncFdatasync, nil
	}
	return SyncNone, fmt.Errorf("io: unknown sync mode %q (allowed: none, fsync, fdatasync)", s)
}
