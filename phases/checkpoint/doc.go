// Package checkpoint is the checkpoint family (PRISM §3.1.4, MLPerf Storage checkpointing):
// DDP saves (rank 0 writes one torch.save file) and loads (every rank reads
// it), FSDP saves and loads (every rank its shard: PyTorch distributed
// checkpoint or sharded safetensors), and the RL consolidation load
// (readers read every shard). Models have the exact tensor lists of real
// architectures (package ckpt), the files are what the real tools write,
// and every load checks every tensor's CRC-32 against the one computed at
// save time, so storage that returns wrong bytes fails the phase with the
// tensor and the file named.
//
// mlperf_checkpoint's split runs (persist.go) keep a write run's
// checkpoints in a persistent directory (phases/persist.go) for a later
// read-only run's checkpoint = "<name>".
//
// I/O shape: by default a phase makes the system calls the framework
// makes (ckpt.Layout.WriteCalls and ReadCalls, which phases/ckpt checks
// against real torch under strace): torch.save's writev of the bytes it
// had buffered with each tensor, DCP's buffered writes, tell() lseeks and
// fsyncs, torch.load's buffered reads and one read per tensor,
// FileSystemReader's 8 KiB buffered reads item by item; safetensors loads
// map the file and touch every page (mmap, also for torch files on
// request). write_size and read_size replace that with pwrite/pread
// chunks; direct with aligned O_DIRECT chunks. A load at another rank
// count than the save reads what the framework reads when resharding:
// every saved DCP chunk its new rows overlap, or exactly those rows of
// each safetensors tensor.
//
// Memory: no checkpoint is ever held whole. Writes are cut from a pool of
// at most buffer_budget bytes generated before the timed region and
// stamped per 4 KiB (ckpt.Pool), a chunk at a time of at most the largest
// tensor (or write_size; a tensor larger than the pool goes out in
// several calls, counted in metrics.split_writes): nothing is generated
// between two clock reads, and no 4 KiB block repeats. Loads read into
// one buffer of the whole share when it fits buffer_budget and checksum
// it in Verify, outside the timed region; a larger share is read through
// one buffer (reads larger than the budget split, metrics.split_reads)
// and checksummed as it arrives (metrics.verify_inline_ranks counts the
// ranks that did; CRC-32 runs at ~25 GB/s per core, a fraction of a
// storage read). A mapped load is checked from the mapping in Verify.
//
// Object storage: with storage = "s3://bucket/prefix" every file is an
// object of the same name below the phase's place in the run's prefix
// (objPlace, store.go). A save streams a file's bytes in order into an
// io/s3 Upload (parts sent as they fill, part_concurrency in flight, one
// PUT for a file of one part or less, aborted on any failure); a load
// makes the same planned reads through an io/s3 RangeReader (a part_size
// readahead window, ranged GETs). Every key is tracked in the run's
// record before its first request, so the run's cleanup deletes what a
// failed phase left; ops are the requests (put, create, part, complete,
// head, get) beside save_file / load_file and the framework's read calls.
//
// Progress: every kind counts, in Setup, the timed ops its planned calls
// will record on this rank (ExpectedOps: writer.expectedOps and
// reader.expectedOps walk the same plan Run walks), so the progress line
// has a percentage and an ETA; the count differs by rank (a ddp_save's
// rank 0 writes everything, an rl_load's ranks past readers read
// nothing), and each rank reports its own. Over S3 it is 0: the requests
// an upload or a ranged read makes are decided as the bytes go.
//
// It imports only the framework (phases), phases/ckpt, io, io/s3, report and spmd
// (see phases/doc.go); phases/all registers its kinds.
package checkpoint
