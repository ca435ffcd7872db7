#!/usr/bin/env bash
# blockio against the real fio (run by `make bench`): the same pattern on
# the same fresh filesystem, both sides io_uring (prism's default engine),
# printed as one table:
#
#   seq-read-1m     1 MiB sequential O_DIRECT reads, QD1, 1 GiB file
#   seq-write-1m    1 MiB sequential O_DIRECT writes, QD1, fallocated 1 GiB
#   rand-read-4k-qd1   4 KiB random O_DIRECT reads, QD1, 1 GiB file
#   rand-read-4k-qd16  the same, 16 in flight
#   rand-write-4k   the rand-write-4k profile: 8 jobs x QD32 4 KiB random
#                   O_DIRECT writes to fresh fallocated 256 MiB files
#
# and cells whose peer is another fio engine, or that run elsewhere:
#   rand-read-4k-qd16-libaio  rand-read-4k-qd16 (prism io_uring) vs fio
#                   libaio, the engine most fio job files name
#   seq-read-1m-psync-qd1  1 MiB sequential O_DIRECT reads of a 1 GiB file,
#                   prism ioengine = "psync" vs fio psync
#   seq-read-1m-psync-qd4  the same with iodepth = 4: prism runs 4
#                   goroutines in pread; fio's sync engines cap iodepth at
#                   1, so the peer is fio psync at QD1 and the ratio is what
#                   the 4 threads gain
#   tmpfs-rand-read-4k-qd1  4 KiB random buffered reads, QD1, of a 1 GiB
#                   file on a fresh tmpfs (no device: the syscall path),
#                   both sides psync
#   multi-file-rand-read-128k  the multi-file-rand-read-128k profile (16
#                   jobs x QD32 128 KiB random O_DIRECT reads over 32 files
#                   per job) with 2 MiB files (1 GiB per side) vs fio
#                   --nrfiles=32 --file_service_type=random, both io_uring
#
# Every round gets a fresh XFS on a sparse image in BENCH_DIR, attached
# with `losetup --direct-io=on`, so an O_DIRECT request reaches the disk:
# a plain `mount -o loop` reads the image through the page cache, and
# the figures then depend on which side's file the kernel (or another
# process's drop_caches) happened to keep. Within a round the cells run in
# turn, prism first in even rounds and fio first in odd ones; each side
# lays out its own fresh file (untimed) and its files are removed after
# its run, so neither reads the other's or a stale one.
#
# Writes carry each side's default data: fio's one buffer per I/O unit
# with scramble_buffers=1, prism's one buffer per request in flight with
# scramble_buffers = true (every 512-byte sector stamped per write).
#
# What is divided by what: prism's figure is its manifest's
# bytes_per_sec, the bytes moved over the wall of the phase's Run (from
# just before the workers start to the last completion; ring setup, file
# open and layout are in Setup, outside it); fio's is bw_bytes, io_bytes
# over its job runtime. The script also prints both walls' medians.
#
# The ratio column is the median of the per-round prism/fio ratios, with
# their min-max and a 95% bootstrap interval of that median (10000
# resamples of the rounds, fixed seed).
#
# Environment:
#   PRISM_BIN  absolute path of the prism binary (required; make sets it)
#   BENCH_DIR  where the images are made (default /var/tmp)
#   RUNTIME    seconds per run (default 5)
#   ROUNDS     measured rounds, after one discarded warm-up (default 5)
#   CELLS      the cells to run, space-separated (default all of them)
#   BENCH_TABLE  a file to append the measured samples to, in paired.py's
#              format (cell, peer, round, MiB/s, unit), for make bench's
#              one combined table
#   STRICT=1   exit 1 when a ratio's median is below 1.0
#   PIN_CPU    a CPU list (taskset -c): both sides run bound to it. Unset,
#              the scheduler places each side's waiting thread, and at QD1
#              under load that placement decides the round: a thread that
#              sleeps on the CPU taking the disk's completion interrupt is
#              woken locally, one elsewhere needs a cross-CPU wake-up (on
#              the 2-vCPU test VM ~17 µs against ~5 µs; docs/PERFORMANCE.md).
#              The header names the CPU each block IRQ is delivered to.
#   BENCH_WAIT_FOR  a file: while it exists, runs wait (polling every 20 s),
#              so the benchmark yields to a shared machine's test suite
# Without root it prints why and skips (exit 0).
set -euo pipefail

: "${PRISM_BIN:?set PRISM_BIN to the absolute path of bin/prism}"
BENCH_DIR=${BENCH_DIR:-/var/tmp}
RUNTIME=${RUNTIME:-5}
ROUNDS=${ROUNDS:-5}

for t in fio python3 losetup mkfs.xfs; do
	command -v $t >/dev/null || { echo "blockio.sh: $t not found" >&2; exit 1; }
done
[[ -x $PRISM_BIN ]] || { echo "blockio.sh: $PRISM_BIN is not executable" >&2; exit 1; }
# Without root there is no fresh filesystem to give both sides: skip, so
# the rest of `make bench` still runs.
if [[ $(id -u) != 0 ]]; then
	echo "blockio.sh: skipped: needs root (losetup, mount)" >&2
	[[ -z ${BENCH_TABLE:-} ]] || printf 'blockio cells\tskip\tneeds root (losetup, mount)\n' >>"$BENCH_TABLE"
	exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/prism-bench-blockio.XXXXXX")
img="" loop="" mnt="$work/mnt" tfs="$work/tmpfs" tfs_up=0
mkdir -p "$mnt" "$tfs"
fs_down() {
	((tfs_up == 0)) || umount -- "$tfs" 2>/dev/null || umount -l -- "$tfs" 2>/dev/null || true
	tfs_up=0
	if [[ -n $loop ]]; then
		umount -- "$mnt" 2>/dev/null || umount -l -- "$mnt" 2>/dev/null || true
		losetup -d "$loop" 2>/dev/null || true
	fi
	[[ -n $img ]] && rm -f -- "$img"
	img="" loop=""
}
cleanup() {
	fs_down
	rm -rf -- "$work"
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fs_up() {
	img=$(mktemp "$BENCH_DIR/prism-bench-blockio.XXXXXX.xfs")
	truncate -s 4G "$img"
	loop=$(losetup --direct-io=on -f --show "$img")
	[[ $(cat "/sys/block/${loop#/dev/}/loop/dio") == 1 ]] || echo "blockio.sh: $loop has no direct I/O" >&2
	mkfs.xfs -q -f "$loop"
	mount -- "$loop" "$mnt"
	# A fresh tmpfs too, for the cells that measure the path without a
	# device: room for one side's 1 GiB file at a time.
	mount -t tmpfs -o size=1536m prism-bench "$tfs"
	tfs_up=1
}

dir_of() { # cell: the directory its files go in this round
	if [[ -n ${ontmpfs[$1]:-} ]]; then echo "$tfs"; else echo "$mnt"; fi
}

cells=(${CELLS:-seq-read-1m seq-write-1m rand-read-4k-qd1 rand-read-4k-qd16 rand-write-4k
	rand-read-4k-qd16-libaio seq-read-1m-psync-qd1 seq-read-1m-psync-qd4 tmpfs-rand-read-4k-qd1
	multi-file-rand-read-128k})
declare -A prism=(
	[seq-read-1m]='rw = "read"
bs = "1MiB"
size = "1GiB"
direct = true'
	[seq-write-1m]='rw = "write"
bs = "1MiB"
size = "1GiB"
direct = true'
	[rand-read-4k-qd1]='rw = "randread"
bs = "4KiB"
size = "1GiB"
direct = true'
	[rand-read-4k-qd16]='rw = "randread"
bs = "4KiB"
size = "1GiB"
iodepth = 16
direct = true'
	[rand-write-4k]='profile = "rand-write-4k"
size = "256MiB"'
	[rand-read-4k-qd16-libaio]='rw = "randread"
bs = "4KiB"
size = "1GiB"
iodepth = 16
direct = true'
	[seq-read-1m-psync-qd1]='rw = "read"
bs = "1MiB"
size = "1GiB"
direct = true'
	[seq-read-1m-psync-qd4]='rw = "read"
bs = "1MiB"
size = "1GiB"
iodepth = 4
direct = true'
	[tmpfs-rand-read-4k-qd1]='rw = "randread"
bs = "4KiB"
size = "1GiB"
direct = false'
	[multi-file-rand-read-128k]='profile = "multi-file-rand-read-128k"
file_size = "2MiB"'
)
# prism's engine where it is not io_uring, fio's engine in the table's peer
# column, and the cells that run on the round's tmpfs instead of its XFS.
declare -A engine=([seq-read-1m-psync-qd1]=psync [seq-read-1m-psync-qd4]=psync [tmpfs-rand-read-4k-qd1]=psync)
declare -A peer=([rand-read-4k-qd16-libaio]="fio libaio" [seq-read-1m-psync-qd1]="fio psync"
	[seq-read-1m-psync-qd4]="fio psync" [tmpfs-rand-read-4k-qd1]="fio psync")
declare -A ontmpfs=([tmpfs-rand-read-4k-qd1]=1)
common="--direct=1 --ioengine=io_uring"
declare -A fioopt=(
	[seq-read-1m]="--rw=read --bs=1m --size=1g $common --iodepth=1"
	[seq-write-1m]="--rw=write --bs=1m --size=1g $common --iodepth=1"
	[rand-read-4k-qd1]="--rw=randread --bs=4k --size=1g $common --iodepth=1"
	[rand-read-4k-qd16]="--rw=randread --bs=4k --size=1g $common --iodepth=16"
	[rand-write-4k]="--rw=randwrite --bs=4k --size=256m --numjobs=8 --group_reporting $common --iodepth=32"
	[rand-read-4k-qd16-libaio]="--rw=randread --bs=4k --size=1g --direct=1 --ioengine=libaio --iodepth=16"
	[seq-read-1m-psync-qd1]="--rw=read --bs=1m --size=1g --direct=1 --ioengine=psync --iodepth=1"
	[seq-read-1m-psync-qd4]="--rw=read --bs=1m --size=1g --direct=1 --ioengine=psync --iodepth=1"
	[tmpfs-rand-read-4k-qd1]="--rw=randread --bs=4k --size=1g --direct=0 --ioengine=psync --iodepth=1"
	[multi-file-rand-read-128k]="--rw=randread --bs=128k --nrfiles=32 --filesize=2m --file_service_type=random --numjobs=16 --group_reporting $common --iodepth=32"
)
for c in "${cells[@]}"; do
	[[ -n ${prism[$c]:-} ]] || { echo "blockio.sh: unknown cell $c" >&2; exit 1; }
	cat >"$work/$c.toml" <<EOF
[plan]
name = "bench-$c"
drop_caches = "none"

[[phase]]
kind = "blockio"
${prism[$c]}
ioengine = "${engine[$c]:-io_uring}"
time_based = true
runtime = "${RUNTIME}s"
verify = false
EOF
done

samples="$work/samples.tsv"
pin=()
[[ -n ${PIN_CPU:-} ]] && pin=(taskset -c "$PIN_CPU")

wait_quiet() {
	while [[ -n ${BENCH_WAIT_FOR:-} && -e $BENCH_WAIT_FOR ]]; do sleep 20; done
}

run_prism() { # cell round
	local c=$1 out="$work/prism.json"
	wait_quiet
	"${pin[@]}" "$PRISM_BIN" run --workdir "$(dir_of "$c")" --results "$work/results" --json "$work/$c.toml" >"$out" 2>>"$work/prism.log"
	python3 - "$out" "$c" "$2" >>"$samples" <<'PY'
import json, sys
path, cell, rnd = sys.argv[1:]
m, _ = json.JSONDecoder().raw_decode(open(path).read().lstrip())
(ph,) = m["phases"]
if ph["status"] != "passed":
    sys.exit(f"prism {cell}: {ph['status']}: {ph.get('error', '')}")
print(f"prism\t{cell}\t{rnd}\t{ph['bytes_per_sec']:.0f}\t{ph['wall_seconds']:.4f}")
PY
}

run_fio() { # cell round
	local c=$1 out="$work/fio.json" d
	wait_quiet
	d="$(dir_of "$c")/fio"
	mkdir -p "$d"
	# shellcheck disable=SC2086 # the options are words on purpose
	"${pin[@]}" fio --name=bench --directory="$d" ${fioopt[$c]} --time_based --runtime="$RUNTIME" \
		--output-format=json --output="$out" >/dev/null
	rm -rf -- "$d"
	python3 - "$out" "$c" "$2" >>"$samples" <<'PY'
import json, sys
path, cell, rnd = sys.argv[1:]
text = open(path).read()
m = json.loads(text[text.index("{"):])
(job,) = m["jobs"]
if job["error"]:
    sys.exit(f"fio {cell}: error {job['error']}")
r = job["read"] if job["read"]["io_bytes"] else job["write"]
print(f"fio\t{cell}\t{rnd}\t{r['bw_bytes']:.0f}\t{r['runtime'] / 1e3:.4f}")
PY
}

echo "prism blockio bench: $("$PRISM_BIN" version 2>/dev/null | head -n1 || echo prism); $(fio --version)"
echo "date $(date -u +%Y-%m-%dT%H:%MZ), kernel $(uname -r), $(nproc) CPUs ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1)), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "images in $BENCH_DIR ($(findmnt -n -o FSTYPE,SOURCE --target "$BENCH_DIR" 2>/dev/null || echo ?)), fresh XFS per round, loop direct-io=on"
echo "runtime ${RUNTIME}s, $ROUNDS rounds after a warm-up, both sides io_uring unless the cell names an engine (-libaio, -psync, tmpfs: psync)${PIN_CPU:+, both bound to CPU $PIN_CPU}"
# Where completions arrive: the CPU each block-device interrupt is
# delivered to (a waiter elsewhere is woken by a cross-CPU interrupt).
irqs=$(awk -F: '/virtio[0-9]*-req|nvme|blk/ {gsub(/ /, "", $1); print $1}' /proc/interrupts 2>/dev/null | while read -r i; do
	printf '%s->CPU%s ' "$(awk -v i="$i:" '$1 == i {print $NF}' /proc/interrupts)" "$(cat "/proc/irq/$i/effective_affinity_list" 2>/dev/null || echo ?)"
done)
[[ -n $irqs ]] && echo "block IRQs: $irqs"
# Round 0 is a warm-up, discarded: the first run after a build or an idle
# spell pays for cold caches and a cold disk on both sides.
for ((r = 0; r <= ROUNDS; r++)); do
	fs_up
	for c in "${cells[@]}"; do
		if ((r % 2 == 0)); then
			run_prism "$c" "$r"
			run_fio "$c" "$r"
		else
			run_fio "$c" "$r"
			run_prism "$c" "$r"
		fi
	done
	fs_down
	echo "round $r/$ROUNDS done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done

if [[ -n ${BENCH_TABLE:-} ]]; then
	for c in "${!peer[@]}"; do printf '%s\t%s\n' "$c" "${peer[$c]}"; done >"$work/peers.tsv"
	awk -F'\t' -v OFS='\t' 'NR == FNR { peer[$1] = $2; next }
		$3 != 0 { print $2, ($1 == "fio" ? ($2 in peer ? peer[$2] : "fio io_uring") : $1), $3, $4 / 1048576, "MiB/s" }' \
		"$work/peers.tsv" "$samples" >>"$BENCH_TABLE"
fi

python3 - "$samples" "${STRICT:-0}" "${cells[@]}" <<'PY'
import random, statistics, sys
from collections import defaultdict
cells = sys.argv[3:]
bw, wall = defaultdict(dict), defaultdict(list)
for line in open(sys.argv[1]):
    side, cell, rnd, b, w = line.rstrip("\n").split("\t")
    if rnd == "0":
        continue
    bw[side, cell][rnd] = float(b)
    wall[side, cell].append(float(w))
def boot(xs, n=10000):
    rng = random.Random(1)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]
print()
print("MiB/s: median over rounds; ratio: median of the per-round prism/fio ratios")
print(f"{'cell':<26} {'prism MiB/s':>11} {'fio MiB/s':>10} {'ratio':>6} {'min-max':>11} {'95% bootstrap':>14} {'wall p/f s':>11}")
below = 0
per_round = []
for c in cells:
    p, f = bw.get(("prism", c), {}), bw.get(("fio", c), {})
    rounds = sorted(set(p) & set(f))
    if not rounds:
        continue
    paired = [p[r] / f[r] for r in rounds]
    ratio = statistics.median(paired)
    lo, hi = boot(paired)
    below += ratio < 1.0
    per_round.append(f"{c}: " + " ".join(f"{x:.2f}" for x in paired))
    print(f"{c:<26} {statistics.median(p.values()) / 2**20:>11.1f} {statistics.median(f.values()) / 2**20:>10.1f} "
          f"{ratio:>6.3f} {min(paired):>5.2f}-{max(paired):<5.2f} {lo:>6.2f}-{hi:<7.2f} "
          f"{statistics.median(wall['prism', c]):>5.2f}/{statistics.median(wall['fio', c]):<5.2f}")
print("\nper-round ratios, rounds 1..N:")
for line in per_round:
    print("  " + line)
if below:
    print(f"\n{below} ratio(s) below 1.0")
    if sys.argv[2] == "1":
        sys.exit(1)
PY
