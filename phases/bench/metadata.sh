#!/usr/bin/env bash
# Metadata rates of prism against the syscall floor (run by `make bench`).
#
# For create (create_files), stat (list_files), rename (move_files) and
# unlink (delete_files) this runs prism's phase on 1 rank and on `-n 2`
# ranks, and floor.c -- the same syscalls in a C loop, the same layout,
# counts and sizes, per-rank worker processes released together -- on the
# same filesystem, and prints prism ops/s / floor ops/s. Target: >= 0.95.
#
# Samples: each side yields one ops/s figure per measured iteration (prism:
# the ops of one iteration / its wall, max end - min start over ranks, read
# from the manifest; floor: one run, total ops / (last end - first start)).
# Each side does 1 warm-up (discarded) + 3 measured iterations per round,
# in one directory; prism and floor of one (op, ranks) run back to back,
# alternating which goes first from round to round.
#
# Statistic: the MEDIAN of all rounds' samples on each side, with their
# ratio (median prism / median floor), and the PAIRED ratio: in each round,
# median prism / median floor of that round's samples, then the median of
# those per-round ratios. The paired ratio is the verdict, flagged below the
# target: on a VM the speed of the whole machine drifts by 20-40% over
# minutes (host load), and pairing each prism block with the floor block
# run next to it cancels that drift, which pooled medians do not. The
# [min-max] spread and the ratio of the best samples (max / max) are shown
# too: on a machine shared with other work, noise only ever slows a sample
# down.
#
# Placement: prism run -n binds rank w to the w-th block of CPUs and floor
# binds worker w to the same block, so both sides place their loops alike
# (on a VM the vCPUs need not be equally fast).
#
# Filesystem: as root, with mkfs.xfs, both sides run on a fresh XFS
# loop-mounted from an image in BENCH_DIR (BENCH_FS=xfs, the default then),
# so every bench starts from the same empty filesystem: the host's own
# filesystem carries the history of every earlier run (on ext4 without a
# journal, create rates swing 10x with the inodes freed in the last
# minutes). BENCH_FS=dir runs in BENCH_DIR itself.
#
# Environment:
#   PRISM_BIN  absolute path of the prism binary (required; make sets it)
#   GOFLOOR_BIN  absolute path of gofloor (phases/bench/gofloor; make
#              builds it and sets this): floor.c's loop as a bare Go program
#              that times each op, run as a third side at 1 rank, so the
#              table shows what any Go loop timing each op reaches on this
#              machine (go/floor) and what prism adds to it (prism/go).
#              Unset: no third side.
#   BENCH_DIR  parent of the scratch directory, or of the XFS image
#              (default /var/tmp); must be a disk filesystem, not tmpfs
#   BENCH_FS   xfs (a fresh loop-mounted XFS, the default as root when
#              mkfs.xfs exists) or dir (BENCH_DIR's own filesystem)
#   COUNT      files per rank (default 20000)
#   SIZE       bytes written per created file (default 4096)
#   ROUNDS     repetitions of the whole comparison (default 5: one round's
#              paired ratio swings by up to +-0.2 on a VM, so the verdict is
#              a median over rounds, printed with a 90% bootstrap interval
#              from 4 rounds on; use 10 or more to judge a +-0.02 effect)
#   OPS        which ops to compare (default "create stat rename unlink")
#   SAMPLES    file to append the raw samples to (side op ranks round ops/s)
#   BENCH_TABLE  a file to append the samples to in paired.py's format, for
#              make bench's one combined table: cell "meta OP -nRANKS", peer
#              "floor.c" or "gofloor"
#   STRICT=1   exit 1 when a median ratio is below the target
set -euo pipefail

: "${PRISM_BIN:?set PRISM_BIN to the absolute path of bin/prism}"
COUNT=${COUNT:-20000}
SIZE=${SIZE:-4096}
ROUNDS=${ROUNDS:-5}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
TARGET=0.95
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

command -v gcc >/dev/null || { echo "metadata.sh: gcc not found (apt-get install gcc)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "metadata.sh: python3 not found" >&2; exit 1; }
[[ -x $PRISM_BIN ]] || { echo "metadata.sh: $PRISM_BIN is not executable" >&2; exit 1; }
[[ -z ${GOFLOOR_BIN:-} || -x $GOFLOOR_BIN ]] || { echo "metadata.sh: GOFLOOR_BIN=$GOFLOOR_BIN is not executable" >&2; exit 1; }
[[ $COUNT =~ ^[1-9][0-9]*$ && $SIZE =~ ^[0-9]+$ && $ROUNDS =~ ^[1-9][0-9]*$ ]] ||
	{ echo "metadata.sh: COUNT, SIZE and ROUNDS must be integers (COUNT, ROUNDS >= 1)" >&2; exit 1; }

# shellcheck source=scratch.sh
. "$here/scratch.sh"
bench_scratch metadata.sh prism-bench 8G

fstype=$(findmnt -n -o FSTYPE --target "$scratch" 2>/dev/null || stat -f -c %T "$scratch")
fssrc=$(findmnt -n -o SOURCE --target "$scratch" 2>/dev/null || echo "?")

# ext4 without a journal keeps a freed inode number out of reuse for 60 s
# (360 s while its inode table block is dirty), and every create scans past
# such inodes: create rates then depend on how many files were deleted in
# the last minutes, above all by this benchmark's own teardowns.
fsnote=""
if [[ $fstype == ext4 ]]; then
	dev=$(readlink -f -- "$fssrc" 2>/dev/null || true)
	jt="/sys/fs/ext4/${dev##*/}/journal_task"
	if [[ -n $dev && -r $jt && $(cat "$jt") == "<none>" ]]; then
		fsnote="ext4 without a journal: create rates swing with the inodes freed in the last minutes (kernel recently_deleted scan); treat the create rows as rough"
	fi
fi

gcc -O2 -Wall -o "$work/floor" "$here/floor.c"

# op name in prism's manifest (and floor's) -> phase kind, bytes per file
read -r -a ops <<<"${OPS:-create stat rename unlink}"
declare -A kind=([create]=create_files [stat]=list_files [rename]=move_files [unlink]=delete_files)
declare -A size=([create]=$SIZE [stat]=0 [rename]=0 [unlink]=0)
for op in "${ops[@]}"; do
	[[ -n ${kind[$op]:-} ]] || { echo "metadata.sh: unknown op $op in OPS (create, stat, rename, unlink)" >&2; exit 1; }
done

# One plan per op, so that prism and the floor of one op run back to back
# with the same history: on ext4 without a journal, for instance, a create
# skips over every inode freed in the last minute or more, so creates slow
# down after mass deletes, and that must hit both sides alike.
for op in "${ops[@]}"; do
	cat >"$work/$op.toml" <<EOF
[plan]
name = "bench-$op"
drop_caches = "none"

[[phase]]
kind = "${kind[$op]}"
count = $COUNT
size = ${size[$op]}
warmup = 1
iterations = 3
EOF
done

samples="$work/samples.tsv"
: >"$samples"

run_prism() { # op ranks round
	local op=$1 n=$2 r=$3 args=() out
	((n > 1)) && args=(-n "$n")
	mkdir -p "$scratch/prism"
	out="$work/prism-$op-n$n.json"
	if ! "$PRISM_BIN" run "${args[@]}" --workdir "$scratch/prism" --results "$work/results" --json \
		"$work/$op.toml" >"$out" 2>"$work/prism.err"; then
		echo "metadata.sh: prism ${kind[$op]} -n $n failed:" >&2
		cat "$work/prism.err" >&2
		exit 1
	fi
	# --json prints the manifest, then the manifest and report paths.
	python3 - "$out" "$op" "$n" "$r" >>"$samples" <<'PY'
import json, sys
path, op, n, r = sys.argv[1:]
m, _ = json.JSONDecoder().raw_decode(open(path).read().lstrip())
(ph,) = m["phases"]
if ph["status"] != "passed":
    sys.exit(f"prism phase {ph['name']} {ph['status']}: {ph.get('error', '')}")
walls = ph["iterations"]
per_iter = ph["ops_by_type"][op]["ops"] / len(walls)
for w in walls:
    print(f"prism\t{op}\t{n}\t{r}\t{per_iter / w:.1f}")
PY
	rm -rf -- "${scratch:?}/prism"
}

run_floor() { # op ranks round [side: floor (floor.c) or go (gofloor, 1 rank)]
	local op=$1 n=$2 r=$3 side=${4:-floor} dir line i rate cmd
	# The depth of prism's <workdir>/prism-<id>/01-<kind>/r<rank>/..., and a
	# fresh directory per measurement, as prism's run directory is.
	dir="$scratch/floor/prism-floor-n$n/01-${kind[$op]}"
	cmd=("$work/floor" "$op" "$dir" "$COUNT" "${size[$op]}" "$n")
	[[ $side == go ]] && cmd=("$GOFLOOR_BIN" "$op" "$dir" "$COUNT" "${size[$op]}") # one worker
	mkdir -p "$dir"
	for i in 0 1 2 3; do # warm-up, then 3 measured, in one directory
		line=$("${cmd[@]}")
		((i == 0)) && continue
		rate=$(sed -n 's/.*ops_per_sec=\([0-9.]*\).*/\1/p' <<<"$line")
		[[ -n $rate ]] || { echo "metadata.sh: unexpected $side output: $line" >&2; exit 1; }
		printf '%s\t%s\t%s\t%s\t%s\n' "$side" "$op" "$n" "$r" "$rate" >>"$samples"
	done
	rm -rf -- "${scratch:?}/floor"
}

echo "prism metadata bench: $("$PRISM_BIN" version 2>/dev/null | head -n1 || echo prism)"
echo "scratch: $scratch ($fstype on $fssrc), kernel $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$COUNT files per rank, create writes $SIZE B; $ROUNDS rounds x (1 warm-up + 3 measured) per side"
[[ -z $fsnote || " ${ops[*]} " != *" create "* ]] || echo "note: $fsnote"
for ((r = 0; r < ROUNDS; r++)); do
	for n in 1 2; do
		for op in "${ops[@]}"; do
			if ((r % 2 == 0)); then
				run_prism "$op" "$n" "$r"
				run_floor "$op" "$n" "$r"
				((n > 1)) || [[ -z ${GOFLOOR_BIN:-} ]] || run_floor "$op" "$n" "$r" go
			else
				((n > 1)) || [[ -z ${GOFLOOR_BIN:-} ]] || run_floor "$op" "$n" "$r" go
				run_floor "$op" "$n" "$r"
				run_prism "$op" "$n" "$r"
			fi
		done
	done
	echo "round $((r + 1))/$ROUNDS done, load $(cut -d' ' -f1-3 /proc/loadavg)"
done

[[ -z ${SAMPLES:-} ]] || cat "$samples" >>"$SAMPLES"
[[ -z ${BENCH_TABLE:-} ]] || awk -F'\t' -v OFS='\t' '
	{ side = $1 == "floor" ? "floor.c" : $1 == "go" ? "gofloor" : $1; print "meta " $2 " -n" $3, side, $4, $5, "ops/s" }' \
	"$samples" >>"$BENCH_TABLE"
python3 - "$samples" "$TARGET" "${STRICT:-0}" "$fsnote" "$here" <<'PY'
import statistics, sys
from collections import defaultdict
sys.path.insert(0, sys.argv[5])
from paired import fmt_interval, interval, paired_ratios
path, target, strict = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
s = defaultdict(list)
rounds = defaultdict(list)
for line in open(path):
    side, op, n, r, v = line.rstrip("\n").split("\t")
    s[side, op, int(n)].append(float(v))
    rounds[side, op, int(n), int(r)].append(float(v))
def cell(v):
    return f"{statistics.median(v):8.0f} [{min(v):.0f}-{max(v):.0f}]"
def paired(op, n, a="prism", b="floor"):
    by_round = lambda side: {r: v for (sd, o, k, r), v in rounds.items() if (sd, o, k) == (side, op, n)}
    ratios = paired_ratios(by_round(a), by_round(b))
    return (statistics.median(ratios) if ratios else None), ratios
def opt(x):
    return f"{x:6.3f}" if x is not None else f"{'-':>6}"
print()
print("ops/s: median of the measured iterations [min-max]; ratio = prism/floor of the medians;")
print("paired = median over rounds of (prism median / floor median) within the round (the verdict), with its 90%")
print("bootstrap interval over rounds (4 or more rounds); best = of maxima;")
print("go/floor, prism/go: paired, against gofloor (floor.c's loop in Go, timing each op; 1 rank, with GOFLOOR_BIN)")
print(f"{'op':<7} {'ranks':>5}  {'prism ops/s':<26} {'floor ops/s':<26} {'ratio':>6} {'paired':>6} {'90% CI':<11} {'best':>6} {'go/fl':>6} {'pr/go':>6}  per round")
below = 0
for op in ("create", "stat", "rename", "unlink"):
    for n in (1, 2):
        p, f = s.get(("prism", op, n)), s.get(("floor", op, n))
        if not p or not f:
            continue
        ratio = statistics.median(p) / statistics.median(f)
        pr, each = paired(op, n)
        gf, _ = paired(op, n, "go", "floor")
        pg, _ = paired(op, n, "prism", "go")
        best = max(p) / max(f)
        flag = "" if pr >= target else f"  < {target}"
        below += pr < target
        print(f"{op:<7} {n:>5}  {cell(p):<26} {cell(f):<26} {ratio:6.3f} {pr:6.3f} {fmt_interval(interval(each)):<11} {best:6.3f} {opt(gf)} {opt(pg)}  {' '.join(f'{x:.2f}' for x in each)}{flag}")
if sys.argv[4] and any(op == "create" for _, op, _ in s):
    print(f"\nnote: {sys.argv[4]}")
if below:
    print(f"\n{below} paired ratio(s) below the {target} target")
    if strict:
        sys.exit(1)
PY
