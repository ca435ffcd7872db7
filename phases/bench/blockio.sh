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
# Every round gets a fresh XFS on a sparse image in BENCH_DIR, attached
# with `losetup --direct-io=on`, so an O_DIRECT request reaches the disk:
# a plain `mount -o loop` reads the image through the page cache, and
# the figures then depend on which side's file the kernel (or another
# process's drop_caches) happened to keep. Within a round the cells run in
# turn, prism first in even rounds and fio first in odd ones; each side
# lays out its own fresh file (untimed) and its files are removed after
# its run, so neither reads the other's or a stale one.
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
#   CELLS      the cells to run, space-separated (default all five)
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
[[ $(id -u) == 0 ]] || { echo "blockio.sh: skipped: needs root (losetup, mount)" >&2; exit 0; }

work=$(mktemp -d "${TMPDIR:-/tmp}/prism-bench-blockio.XXXXXX")
img="" loop="" mnt="$work/mnt"
mkdir -p "$mnt"
fs_down() {
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
}

cells=(${CELLS:-seq-read-1m seq-write-1m rand-read-4k-qd1 rand-read-4k-qd16 rand-write-4k})
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
)
common="--direct=1 --ioengine=io_uring"
declare -A fioopt=(
	[seq-read-1m]="--rw=read --bs=1m --size=1g $common --iodepth=1"
	[seq-write-1m]="--rw=write --bs=1m --size=1g $common --iodepth=1"
	[rand-read-4k-qd1]="--rw=randread --bs=4k --size=1g $common --iodepth=1"
	[rand-read-4k-qd16]="--rw=randread --bs=4k --size=1g $common --iodepth=16"
	[rand-write-4k]="--rw=randwrite --bs=4k --size=256m --numjobs=8 --group_reporting $common --iodepth=32"
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
ioengine = "io_uring"
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
	"${pin[@]}" "$PRISM_BIN" run --workdir "$mnt" --results "$work/results" --json "$work/$c.toml" >"$out" 2>>"$work/prism.log"
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
	local c=$1 out="$work/fio.json"
	wait_quiet
	mkdir -p "$mnt/fio"
	# shellcheck disable=SC2086 # the options are words on purpose
	"${pin[@]}" fio --name=bench --directory="$mnt/fio" ${fioopt[$c]} --time_based --runtime="$RUNTIME" \
		--output-format=json --output="$out" >/dev/null
	rm -rf -- "$mnt/fio"
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
echo "runtime ${RUNTIME}s, $ROUNDS rounds after a warm-up, both sides io_uring${PIN_CPU:+, both bound to CPU $PIN_CPU}"
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
print(f"{'cell':<18} {'prism MiB/s':>11} {'fio MiB/s':>10} {'ratio':>6} {'min-max':>11} {'95% bootstrap':>14} {'wall p/f s':>11}")
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
    print(f"{c:<18} {statistics.median(p.values()) / 2**20:>11.1f} {statistics.median(f.values()) / 2**20:>10.1f} "
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
