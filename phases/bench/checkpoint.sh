#!/usr/bin/env bash
# Checkpoint save bandwidth of prism against dd (run by `make bench`).
#
# prism's ddp_save writes one torch.save-format file of N bytes (a
# synthetic fp32 model of 8192x8192 layers, 2 MiB writes, fsync at the
# end) on one rank; `dd if=/dev/zero bs=2M count=N/2M conv=fsync` writes
# the same N bytes to a new file on the same filesystem. Both sides create
# a fresh file each time and include the fsync; the ratio is prism's
# bytes/s over dd's. Target: >= 0.95 (prism's zip headers, its per-4KiB
# content stamps and its timing cost under 5%).
#
# Statistic: each side produces one bytes/s sample per measured
# repetition (prism: the phase's bytes over its iteration's wall; dd: N
# over the wall time of the dd process); one warm-up repetition per round
# is discarded; the table shows the median and the min-max spread over
# all rounds. Rounds alternate which side runs first.
#
# Environment:
#   PRISM_BIN  absolute path of the prism binary (required; make sets it)
#   BENCH_DIR  parent of the scratch directory (default /var/tmp); must be
#              a disk filesystem, not tmpfs
#   SIZE_MIB   bytes per save, in MiB, a multiple of 256 (default 1024)
#   ROUNDS     repetitions of the whole comparison (default 3)
#   STRICT=1   exit 1 when the ratio is below the target
set -euo pipefail

: "${PRISM_BIN:?set PRISM_BIN to the absolute path of bin/prism}"
SIZE_MIB=${SIZE_MIB:-1024}
ROUNDS=${ROUNDS:-3}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
TARGET=0.95
ITER=3

command -v python3 >/dev/null || { echo "checkpoint.sh: python3 not found" >&2; exit 1; }
[[ -x $PRISM_BIN ]] || { echo "checkpoint.sh: $PRISM_BIN is not executable" >&2; exit 1; }
((SIZE_MIB >= 256 && SIZE_MIB % 256 == 0)) || { echo "checkpoint.sh: SIZE_MIB must be a multiple of 256" >&2; exit 1; }

work=""
scratch=""
cleanup() {
	[[ -n $work ]] && rm -rf -- "$work"
	[[ -n $scratch ]] && rm -rf -- "$scratch"
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

work=$(mktemp -d "${TMPDIR:-/tmp}/prism-bench-tools.XXXXXX")
scratch=$(mktemp -d "$BENCH_DIR/prism-bench.XXXXXX")
fstype=$(findmnt -n -o FSTYPE --target "$scratch" 2>/dev/null || stat -f -c %T "$scratch")
fssrc=$(findmnt -n -o SOURCE --target "$scratch" 2>/dev/null || echo "?")
case $fstype in
tmpfs | ramfs)
	echo "checkpoint.sh: $scratch is on $fstype; point BENCH_DIR at a disk filesystem" >&2
	exit 1
	;;
esac

# 8192 x 8192 fp32 = 256 MiB per layer, plus a 32 KiB bias.
layers=$((SIZE_MIB / 256))
bytes=$((layers * (8192 * 8192 * 4 + 8192 * 4)))
count=$(((bytes + 2097151) / 2097152)) # dd writes whole 2 MiB blocks: N rounded up
ddbytes=$((count * 2097152))

cat >"$work/save.toml" <<EOF
[plan]
name = "bench-ckpt"
drop_caches = "none"

[[phase]]
kind = "ddp_save"
format = "torch"
layers = $layers
input_dim = 8192
hidden_dim = 8192
write_size = "2MiB"
fsync = true
buffer_budget = "256MiB"
warmup = 1
iterations = $ITER
EOF

samples="$work/samples.tsv"
: >"$samples"

run_prism() {
	mkdir -p "$scratch/prism"
	"$PRISM_BIN" run --workdir "$scratch/prism" --results "$work/results" --json "$work/save.toml" >"$work/prism.json" 2>"$work/prism.err" ||
		{ cat "$work/prism.err" >&2; exit 1; }
	python3 - "$work/prism.json" >>"$samples" <<'PY'
import json, sys
m, _ = json.JSONDecoder().raw_decode(open(sys.argv[1]).read().lstrip())
(ph,) = m["phases"]
if ph["status"] != "passed":
    sys.exit(f"prism phase {ph['name']} {ph['status']}: {ph.get('error', '')}")
per_iter = ph["bytes"] / len(ph["iterations"])
for w in ph["iterations"]:
    print(f"prism\t{per_iter / w:.0f}")
PY
	rm -rf -- "${scratch:?}/prism"
}

run_dd() {
	local i t0 t1
	for i in 0 1 2 3; do # warm-up, then $ITER measured
		rm -f -- "$scratch/dd.bin"
		sync
		t0=$(date +%s.%N)
		dd if=/dev/zero of="$scratch/dd.bin" bs=2M count="$count" conv=fsync status=none
		t1=$(date +%s.%N)
		((i == 0)) && continue
		python3 -c "import sys; print(f'dd\t{$ddbytes / ($t1 - $t0):.0f}')" >>"$samples"
	done
	rm -f -- "$scratch/dd.bin"
}

echo "prism checkpoint bench: $("$PRISM_BIN" version 2>/dev/null | head -n1 || echo prism)"
echo "scratch: $scratch ($fstype on $fssrc), kernel $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "ddp_save of $bytes bytes (torch format, 2 MiB writes, fsync) vs dd bs=2M count=$count conv=fsync ($ddbytes bytes)"
echo "$ROUNDS rounds x (1 warm-up + $ITER measured) per side"
for ((r = 0; r < ROUNDS; r++)); do
	if ((r % 2 == 0)); then
		run_prism
		run_dd
	else
		run_dd
		run_prism
	fi
	echo "round $((r + 1))/$ROUNDS done" >&2
done

python3 - "$samples" "$TARGET" "${STRICT:-0}" <<'PY'
import statistics, sys
target = float(sys.argv[2])
s = {"prism": [], "dd": []}
for line in open(sys.argv[1]):
    side, v = line.split("\t")
    s[side].append(float(v))
mib = lambda v: v / (1 << 20)
def cell(v):
    return f"{mib(statistics.median(v)):>8.1f} [{mib(min(v)):.1f}-{mib(max(v)):.1f}]"
ratio = statistics.median(s["prism"]) / statistics.median(s["dd"])
print()
print("median MiB/s over measured repetitions [min-max]")
print(f"{'side':<6} {'MiB/s':<26}")
print(f"{'prism':<6} {cell(s['prism']):<26}")
print(f"{'dd':<6} {cell(s['dd']):<26}")
flag = "" if ratio >= target else f"  BELOW {target}"
print(f"ratio prism/dd: {ratio:.3f}{flag}")
if ratio < target and sys.argv[3] == "1":
    sys.exit(1)
PY
