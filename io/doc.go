// Package io owns how prism touches files: allocation-free syscall wrappers
// for the timed loops (paths pre-converted to NUL-terminated bytes, EINTR
// retried), filesystem identification (statfs magic and /proc/self/mountinfo
// options for the manifest), and cache control (drop_caches).
//
// Importers alias it (pio "github.com/prism-hpc/prism/io") so the standard
// library's io keeps its name. It must not time anything or know about
// phases: callers wrap its calls with their own Recorder.
package io
