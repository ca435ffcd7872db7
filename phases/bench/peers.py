#!/usr/bin/env python3
"""The peer side of workflow.sh: times one peer tool on the same input as
prism's phase and prints one rate per measured run (ITEMS / seconds).

    peers.py RUNS ITEMS MODE ARGS...

Each mode runs 1 warm-up (discarded) + RUNS measured repetitions, as the
prism plan does (warmup = 1, iterations = RUNS); undoing a run (removing
the archive or the extracted tree) is untimed, as prism's is.

External commands (GNU tar, md5sum) are timed from fork to exit, which
charges them their process start; prism's figure starts inside a running
process. So the median wall of `BIN --version` (the same start, no work),
taken right before, is subtracted: what is left is the command's work.
"""
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import time


def wall(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run(cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def exec_floor(binary):
    return statistics.median(wall(lambda: run([binary, "--version"])) for _ in range(7))


def files_of(listfile):
    return [l.rstrip("\n") for l in open(listfile) if l.strip()]


def main():
    runs, items, mode, args = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4:]
    undo, floor = (lambda: None), 0.0
    if mode == "tar":  # TREE OUT
        tree, out = args
        floor = exec_floor("tar")
        fn = lambda: run(["tar", "-cf", out, "-C", tree, "."])
        undo = lambda: os.unlink(out)
    elif mode == "untar":  # ARCHIVE DIR
        archive, target = args

        def fn():
            os.mkdir(target)
            run(["tar", "-xf", archive, "-C", target])
        undo = lambda: shutil.rmtree(target)
        floor = exec_floor("tar")
    elif mode == "md5sum":  # LISTFILE
        files = files_of(args[0])
        floor = exec_floor("md5sum")
        fn = lambda: run(["md5sum", "--"] + files)
    elif mode == "hashlib":  # LISTFILE: read in 1 MiB chunks, as a data loader's check would
        files = files_of(args[0])

        def fn():
            buf = bytearray(1 << 20)
            view = memoryview(buf)
            for p in files:
                h = hashlib.md5()
                with open(p, "rb", buffering=0) as f:
                    while n := f.readinto(buf):
                        h.update(view[:n])
                h.hexdigest()
    elif mode == "listdir":  # DIR: os.listdir + os.stat of every entry
        d = args[0]

        def fn():
            for name in os.listdir(d):
                os.stat(os.path.join(d, name))
    elif mode == "fsspec":  # DIR: fsspec's local filesystem, ls with details
        import fsspec
        fs = fsspec.filesystem("file")
        d = args[0]
        fn = lambda: fs.ls(d, detail=True)
    else:
        sys.exit(f"peers.py: unknown mode {mode}")
    for i in range(runs + 1):
        w = wall(fn) - floor
        undo()
        if i:
            print(f"{items / w:.3f}")


if __name__ == "__main__":
    main()
