// Package uring is a minimal io_uring ring for prism's timed loops: the
// three raw syscalls (io_uring_setup, io_uring_enter, io_uring_register)
// and the mmap of the submission queue, the completion queue and the SQE
// array, with nothing else — no goroutines, no callbacks, no allocation
// after New. A caller owns one Ring from one goroutine: it fills SQEs
// (Get, then the Prep* helpers), publishes and waits with one Enter per
// batch (every ready SQE submitted, at least one completion awaited), and
// reaps completions with Peek/Advance.
//
// Why not a library: the Go module proxy serves io_uring wrappers, but
// prism needs only read, write, read/write fixed and fsync on a ring that a
// single goroutine drives, and the hot path must be provably
// allocation-free; the wrappers add submission goroutines, channels or
// per-request objects. ~300 lines over golang.org/x/sys/unix, which prism
// already uses, are easier to audit than a dependency.
//
// Ordering: the ring's head and tail are shared with the kernel. Go's
// sync/atomic loads and stores are sequentially consistent, which is
// stronger than the acquire/release the io_uring ABI asks for: an SQE is
// fully written before the tail store that publishes it, and a CQE is read
// only after the tail load that shows it, and the head store that frees it
// comes after.
//
// Off Linux New fails with ErrUnsupported and callers fall back to
// blocking I/O. Setup errors are classified by Unavailable so that a
// caller can record why io_uring was not used (kernel.io_uring_disabled,
// a seccomp filter, an old kernel). Punts probes, with one zero-length
// RWF_NOWAIT request, whether the kernel would hand every read or write of
// a file to an io-wq worker thread, where a ring loses to blocking I/O.
package uring
