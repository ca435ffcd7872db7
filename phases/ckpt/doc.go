// Package ckpt owns what a checkpoint is, independent of timing: model
// architectures and their exact tensor lists (presets that follow the
// published HuggingFace configs, and config.json parsing), the optimizer
// state training keeps (torch.optim.Adam, or mixed-precision Adam with
// fp32 master weights), the object a training script saves (State), the
// content of every tensor byte (cut from a pre-generated pool, stamped per
// 4 KiB so no two blocks repeat), its CRC-32 computed without touching the
// bytes, the byte layout of the files real tools write, the system calls
// they write and read them with, and MLPerf Storage's checkpoint sizes.
//
// The files are the ones PyTorch writes, for the release a plan names
// (TorchVersion: 1.13 or 2.x):
//
//   - torch.save: a zip archive as PyTorchStreamWriter (miniz) writes it,
//     its data.pkl pickled as CPython's pickler pickles the same object;
//     for torch 1.13 the file is byte for byte what torch.save writes for
//     the same values;
//   - DCP (torch.distributed.checkpoint's FileSystemWriter): per-rank or
//     per-item .distcp files of torch.save'd items and a .metadata that
//     pickles torch's Metadata classes; for 1.13, byte for byte what
//     FileSystemWriter writes from one process;
//   - safetensors, as the safetensors library writes it.
//
// Layout.WriteCalls and ReadCalls give, per file, the write and read
// calls torch makes (writev of buffered headers with each tensor, 4 KiB or
// 8 KiB buffered reads, fsyncs), so the timed phases can issue the same.
// DCPEntries, DCPLoadPlan and EntryReadCalls give what a DCP load reads:
// the saved items a rank of any world size needs (resharding), in
// FileSystemReader's order, and the calls for each.
//
// The tests use real PyTorch (Debian's python3-torch, 1.13, under
// /usr/bin/python3) and strace as oracles: they skip without them, except
// in CI (CI=true, or PRISM_REQUIRE_TORCH=1, which .ci/run sets), where a
// missing torch or strace fails them; .ci/deps.sh installs both.
//
// It must not do I/O on checkpoint files or time anything: the checkpoint
// phases turn a Layout into timed syscalls.
package ckpt
