#!/usr/bin/env bash
# blockio against the real fio, same filesystem, same file size, same
# pattern (run by `make bench`). Prints prism / fio throughput per case:
#
#   seq-1m-direct-qd1    1 MiB sequential O_DIRECT reads, QD1, disk
#                        (fio ioengine=psync)                     target >= 1.0
#   rand-4k-cached-qd1   4 KiB random reads of a page-cached file on tmpfs,
#                        QD1: per-op CPU overhead (fio psync)     target >= 1.0
#   rand-4k-direct-qd16  4 KiB random O_DIRECT reads, 16 in flight, disk
#                        (fio libaio iodepth=16; prism ioengine=psync:
#                        16 goroutines doing pread)                target >= 0.9
#   rand-4k-direct-qd16-uring  the same, both sides io_uring        target >= 1.0
#   rand-write-4k-uring  the PoC's rand-write-4k (8 jobs x QD32, direct, fresh
#                        fallocated files of 256 MiB), both io_uring target >= 1.0
#
# Both sides lay out their own fresh file of the same size in the same
# scratch directory before every run (prism's files live in its run
# directory and are removed after each run, so fio cannot reuse them),
# untimed, then run time-based. prism's
# figure is its manifest's bytes_per_sec (bytes / wall of the timed run,
# start-up and the last op's completion included); fio's is its bw_bytes
# (bytes / its own runtime). Rounds alternate which side runs first; the
# table shows the median of ROUNDS samples and their min-max spread.
#
# Environment:
#   PRISM_BIN  absolute path of the prism binary (required; make sets it)
#   BENCH_DIR  parent of the disk scratch directory (default /var/tmp)
#   TMPFS_DIR  a tmpfs directory for the cached case (default: a 1 GiB tmpfs
#              mounted for the run when root, else /dev/shm)
#   RUNTIME    seconds per run (default 5)
#   ROUNDS     samples per side and case (default 3)
#   CASES      the cases to run, space-separated (default all three)
#   STRICT=1   exit 1 when a ratio is below its target
set -euo pipefail

: "${PRISM_BIN:?set PRISM_BIN to the absolute path of bin/prism}"
BENCH_DIR=${BENCH_DIR:-/var/tmp}
RUNTIME=${RUNTIME:-5}
ROUNDS=${ROUNDS:-3}

command -v fio >/dev/null || { echo "blockio.sh: fio not found (apt-get install fio)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "blockio.sh: python3 not found" >&2; exit 1; }
[[ -x $PRISM_BIN ]] || { echo "blockio.sh: $PRISM_BIN is not executable" >&2; exit 1; }

work=""
scratch=""
tmpfs=""
mounted=""
cleanup() {
	[[ -n $work ]] && rm -rf -- "$work"
	[[ -n $scratch ]] && rm -rf -- "$scratch"
	if [[ -n $mounted ]]; then
		umount "$mounted" 2>/dev/null || true
		rmdir "$mounted" 2>/dev/null || true
	elif [[ -n $tmpfs ]]; then
		rm -rf -- "$tmpfs"
	fi
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

work=$(mktemp -d "${TMPDIR:-/tmp}/prism-bench-tools.XXXXXX")
scratch=$(mktemp -d "$BENCH_DIR/prism-bench.XXXXXX")
fstype() { findmnt -n -o FSTYPE --target "$1" 2>/dev/null || stat -f -c %T "$1"; }
case $(fstype "$scratch") in
tmpfs | ramfs)
	echo "blockio.sh: $scratch is on $(fstype "$scratch"); point BENCH_DIR at a disk filesystem" >&2
	exit 1
	;;
esac
if [[ -n ${TMPFS_DIR:-} ]]; then
	tmpfs=$(mktemp -d "$TMPFS_DIR/prism-bench.XXXXXX")
elif [[ $(id -u) == 0 ]]; then
	mounted=$(mktemp -d "${TMPDIR:-/tmp}/prism-bench-tmpfs.XXXXXX")
	mount -t tmpfs -o size=1g tmpfs "$mounted"
	tmpfs=$mounted
else
	tmpfs=$(mktemp -d /dev/shm/prism-bench.XXXXXX)
fi
[[ $(fstype "$tmpfs") == tmpfs ]] || { echo "blockio.sh: $tmpfs is not tmpfs" >&2; exit 1; }

# case -> directory, prism keys, fio options, target
cases=(${CASES:-seq-1m-direct-qd1 rand-4k-cached-qd1 rand-4k-direct-qd16 rand-4k-direct-qd16-uring rand-write-4k-uring})
declare -A dir=([seq-1m-direct-qd1]=$scratch [rand-4k-cached-qd1]=$tmpfs [rand-4k-direct-qd16]=$scratch
	[rand-4k-direct-qd16-uring]=$scratch [rand-write-4k-uring]=$scratch)
declare -A prism=(
	[seq-1m-direct-qd1]='rw = "read"
bs = "1MiB"
size = "1GiB"
direct = true'
	[rand-4k-cached-qd1]='rw = "randread"
bs = "4KiB"
size = "256MiB"'
	[rand-4k-direct-qd16]='rw = "randread"
bs = "4KiB"
size = "1GiB"
iodepth = 16
direct = true
ioengine = "psync"'
	[rand-4k-direct-qd16-uring]='rw = "randread"
bs = "4KiB"
size = "1GiB"
iodepth = 16
direct = true
ioengine = "io_uring"'
	[rand-write-4k-uring]='profile = "rand-write-4k"
size = "256MiB"
ioengine = "io_uring"'
)
declare -A fioopt=(
	[seq-1m-direct-qd1]="--rw=read --bs=1m --size=1g --direct=1 --ioengine=psync"
	[rand-4k-cached-qd1]="--rw=randread --bs=4k --size=256m --ioengine=psync"
	[rand-4k-direct-qd16]="--rw=randread --bs=4k --size=1g --direct=1 --ioengine=libaio --iodepth=16"
	[rand-4k-direct-qd16-uring]="--rw=randread --bs=4k --size=1g --direct=1 --ioengine=io_uring --iodepth=16"
	[rand-write-4k-uring]="--rw=randwrite --bs=4k --size=256m --numjobs=8 --group_reporting --direct=1 --ioengine=io_uring --iodepth=32"
)
declare -A target=([seq-1m-direct-qd1]=1.0 [rand-4k-cached-qd1]=1.0 [rand-4k-direct-qd16]=0.9
	[rand-4k-direct-qd16-uring]=1.0 [rand-write-4k-uring]=1.0)

for c in "${cases[@]}"; do
	cat >"$work/$c.toml" <<EOF
[plan]
name = "bench-$c"
drop_caches = "none"

[[phase]]
kind = "blockio"
${prism[$c]}
time_based = true
runtime = "${RUNTIME}s"
verify = false
EOF
done

samples="$work/samples.tsv"
: >"$samples"

run_prism() { # case
	local c=$1 out="$work/prism-$1.json"
	mkdir -p "${dir[$c]}/prism"
	"$PRISM_BIN" run --workdir "${dir[$c]}/prism" --results "$work/results" --json "$work/$c.toml" >"$out" 2>>"$work/prism.log"
	python3 - "$out" "$c" >>"$samples" <<'PY'
import json, sys
path, case = sys.argv[1:]
m, _ = json.JSONDecoder().raw_decode(open(path).read().lstrip())
(ph,) = m["phases"]
if ph["status"] != "passed":
    sys.exit(f"prism {case}: {ph['status']}: {ph.get('error', '')}")
r = ph["ops_by_type"].get("read") or ph["ops_by_type"]["write"]
print(f"prism\t{case}\t{ph['bytes_per_sec']:.0f}\t{r['latency_ns']['p50']}\t{(ph.get('metrics') or {}).get('direct', 0):.0f}")
PY
	rm -rf -- "${dir[$c]:?}/prism"
}

run_fio() { # case
	local c=$1 out="$work/fio-$1.json"
	# A fresh file every run, as prism's: reading a file written seconds ago
	# and one that has sat for minutes can differ on a virtual disk.
	rm -rf -- "${dir[$c]:?}/fio"
	mkdir -p "${dir[$c]}/fio"
	# shellcheck disable=SC2086 # the options are words on purpose
	fio --name=bench --directory="${dir[$c]}/fio" ${fioopt[$c]} --time_based --runtime="$RUNTIME" \
		--output-format=json --output="$out" >/dev/null
	python3 - "$out" "$c" >>"$samples" <<'PY'
import json, sys
path, case = sys.argv[1:]
text = open(path).read()
m = json.loads(text[text.index("{"):])
(job,) = m["jobs"]
if job["error"]:
    sys.exit(f"fio {case}: error {job['error']}")
r = job["read"] if job["read"]["io_bytes"] else job["write"]
p50 = r["clat_ns"].get("percentile", {}).get("50.000000", 0)
print(f"fio\t{case}\t{r['bw_bytes']:.0f}\t{p50}\t-")
PY
}

echo "prism blockio bench: $("$PRISM_BIN" version 2>/dev/null | head -n1 || echo prism); $(fio --version)"
echo "date $(date -u +%Y-%m-%dT%H:%MZ), kernel $(uname -r), $(nproc) CPUs ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1)), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "disk: $scratch ($(fstype "$scratch") on $(findmnt -n -o SOURCE --target "$scratch" 2>/dev/null || echo ?)); cached: $tmpfs ($(fstype "$tmpfs"))"
echo "runtime ${RUNTIME}s, $ROUNDS rounds per side"
# A warm-up round per case, discarded: the first run after a build or an
# idle spell pays for cold caches and a cold disk on both sides.
for c in "${cases[@]}"; do
	run_prism "$c"
	run_fio "$c"
done
: >"$samples"
echo "warm-up done" >&2
for ((r = 0; r < ROUNDS; r++)); do
	for c in "${cases[@]}"; do
		if ((r % 2 == 0)); then
			run_prism "$c"
			run_fio "$c"
		else
			run_fio "$c"
			run_prism "$c"
		fi
	done
	echo "round $((r + 1))/$ROUNDS done" >&2
done
rm -rf -- "${scratch:?}/fio" "${tmpfs:?}/fio"

targets=""
for c in "${cases[@]}"; do targets+="$c=${target[$c]} "; done
python3 - "$samples" "${STRICT:-0}" $targets <<'PY'
import statistics, sys
from collections import defaultdict
targets = {k: float(v) for k, v in (a.split("=") for a in sys.argv[3:])}
cases = list(targets)
bw, p50, direct = defaultdict(list), defaultdict(list), {}
for line in open(sys.argv[1]):
    side, case, b, p, d = line.rstrip("\n").split("\t")
    bw[side, case].append(float(b))
    p50[side, case].append(float(p))
    if side == "prism":
        direct[case] = d
def mib(v):
    return f"{statistics.median(v) / 2**20:>8.1f} [{min(v) / 2**20:.0f}-{max(v) / 2**20:.0f}]"
print()
print("median MiB/s over rounds [min-max]; p50 latency in µs")
print("ratio: median of the per-round prism/fio ratios (min-max)")
print(f"{'case':<26} {'prism MiB/s':<22} {'fio MiB/s':<22} {'p50 prism':>9} {'p50 fio':>8} {'ratio (min-max)':>18} target")
below = 0
for c in cases:
    p, f = bw.get(("prism", c)), bw.get(("fio", c))
    if not p or not f:
        continue
    paired = [a / b for a, b in zip(p, f)]
    ratio = statistics.median(paired)
    flag = "" if ratio >= targets[c] else "  BELOW"
    below += ratio < targets[c]
    span = f"{ratio:.3f} ({min(paired):.2f}-{max(paired):.2f})"
    print(f"{c:<26} {mib(p):<22} {mib(f):<22} {statistics.median(p50['prism', c]) / 1e3:>9.1f} {statistics.median(p50['fio', c]) / 1e3:>8.1f} {span:>18} >= {targets[c]}{flag}")
if below:
    print(f"\n{below} ratio(s) below target")
    if sys.argv[2] == "1":
        sys.exit(1)
PY
