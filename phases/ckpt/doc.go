// Package ckpt owns what a checkpoint is, independent of timing: model
// architectures and their exact tensor lists (presets that follow the
// published HuggingFace configs, and config.json parsing), the content of
// every tensor byte (cut from a pre-generated pool, stamped per 4 KiB so no
// two blocks repeat), its CRC-32 computed without touching the bytes, the
// byte layout of the files real tools write (torch.save zip archives,
// safetensors, PyTorch distributed-checkpoint shards) and MLPerf Storage's
// checkpoint sizes.
//
// It must not do I/O on checkpoint files or time anything: the phases in
// package phases turn a Layout into timed syscalls.
package ckpt
