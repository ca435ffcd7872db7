// Package blockio is the blockio family: fio-style block I/O (the five-vendor PoC's profiles,
// seeds/002) on prism's own loop, so that its numbers land in the same
// histograms, manifest and expectations as every other phase.
//
// A rank runs `jobs` jobs; a job owns its file(s) and one offset sequence
// (bioJob.op). Two engines issue it. io_uring (uring.go, the default where it does not punt): one
// goroutine per job drives one ring with iodepth slots, submitting every
// ready request and waiting for at least one completion in a single
// io_uring_enter, as fio's io_uring engine does, so a completion costs no
// thread wake-up; where the kernel refuses a ring the phase falls back to
// psync and records why. ioengine = "auto" (the default) also runs psync
// for buffered I/O at iodepth 1 and buffered reads at any depth, page-cache
// copies where the ring's own cost per request is the larger
// (pageCacheChoice), and where uring.Punts says the kernel would hand every request of the job
// to an io-wq worker thread (tmpfs, buffered writes on ext4), which costs
// each request the wake-up the ring exists to avoid; an explicit
// "io_uring" keeps the ring there and notes the punt. psync: iodepth goroutines of the job take op
// numbers with one atomic add each and issue pread/pwrite themselves, so
// iodepth ops are really outstanding and a slow goroutine never leaves a
// tail of unclaimed work. Each worker has its own recorders, merged into
// the rank's when the run ends.
//
// It imports only the framework (phases), phases/ckpt, io, io/uring, report and spmd
// (see phases/doc.go); phases/all registers its kinds.
package blockio
