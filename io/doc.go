// Package io owns how prism touches files: traversal-safe access relative
// to directory descriptors, allocation-free syscall wrappers for the timed
// loops, O_DIRECT and its alignment, fadvise and cache drop, the fsync
// policy, data generators, filesystem identification (statfs magic and
// /proc/self/mountinfo options for the manifest), and the workdir policy.
//
// prism runs as root on shared scratch, so below the workdir nothing is
// reached by a path resolved from the working directory: each rank holds a
// Dir (OpenWorkdir, then MakeSub for the run directory and every directory
// prism makes in it) and does every operation on a Name relative to it,
// never following a symbolic link (O_NOFOLLOW, openat2 RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS, or a component walk where openat2 is missing).
// Someone who renames the run directory and puts a link in its place
// misleads no operation; Verify and Wrap report the swap as a
// *ReplacedError, and RemoveContents and Remove replace os.RemoveAll for
// cleanup. The Path-based calls remain for paths outside prism's own
// directories.
//
// Importers alias it (pio "github.com/prism-hpc/prism/io") so the standard
// library's io keeps its name. It must not time anything or know about
// phases: callers wrap its calls with their own Recorder, and errors from
// the hot path are bare errnos that callers dress (Wrap, OpError) outside
// the timed region. Off Linux it compiles, and every file operation fails
// with ErrUnsupported.
package io
