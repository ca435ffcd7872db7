#!/bin/bash
# The prototype behind docs/PERFORMANCE.md's "Checkpoint and dataload I/O
# through io_uring?": fio psync iodepth 1 (the path checkpoint loads/saves
# and dataload take: one request at a time) beside fio io_uring iodepth 4,
# 4 MiB chunks of a 1 GiB file, O_DIRECT and buffered, on a fresh XFS on a
# loop device with direct I/O, order alternating per round. Prints
# "round case psync_MiB/s io_uring_MiB/s" lines and the load average.
# Needs root and fio; ROUNDS (default 5), BENCH_DIR (default /var/tmp).
set -u
[[ $(id -u) == 0 ]] || { echo "ckptengine.sh: skipped: needs root (losetup, mount)" >&2; exit 0; }
work=$(mktemp -d "${TMPDIR:-/tmp}/prism-bench-ckptengine.XXXXXX"); mnt=$work/mnt; mkdir -p "$mnt"
img=$(mktemp "${BENCH_DIR:-/var/tmp}/prism-bench-ckptengine.XXXXXX.xfs"); truncate -s 4G "$img"
loop=$(losetup --direct-io=on -f --show "$img"); mkfs.xfs -q -f "$loop"; mount "$loop" "$mnt"
trap 'umount "$mnt"; losetup -d "$loop"; rm -f "$img"; rm -rf "$work"' EXIT
run() { # engine depth fio-args...
	fio --name=x --filename="$mnt/f" --bs=4m --size=1g --ioengine="$1" --iodepth="$2" "${@:3}" --output-format=json 2>/dev/null |
		python3 -c 'import json,sys;j=json.load(sys.stdin)["jobs"][0];print((j["read"]["bw_bytes"]+j["write"]["bw_bytes"])/2**20)'
}
fio --name=pre --filename="$mnt/f" --bs=4m --size=1g --rw=write --direct=1 >/dev/null 2>&1
for r in $(seq 1 "${ROUNDS:-5}"); do
	for c in dwrite dread bwrite bread; do
		case $c in
		dwrite) a=(--rw=write --direct=1) ;;
		dread) a=(--rw=read --direct=1) ;;
		bwrite) a=(--rw=write --direct=0 --end_fsync=1) ;;
		bread) a=(--rw=read --direct=0 --invalidate=1) ;;
		esac
		if ((r % 2)); then p=$(run psync 1 "${a[@]}"); u=$(run io_uring 4 "${a[@]}"); else u=$(run io_uring 4 "${a[@]}"); p=$(run psync 1 "${a[@]}"); fi
		echo "$r $c $p $u"
	done
done
cat /proc/loadavg
