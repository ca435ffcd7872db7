#!/usr/bin/env bash
# What live progress costs the metadata benchmark (run by `make bench`).
#
# create_files (COUNT files of SIZE bytes per rank, 1 warm-up + 3 measured
# iterations) runs with `--progress line --progress-interval 1s` (every
# rank reports its counters to rank 0 every 250 ms, rank 0 prints every
# second: a terminal's rate, so the most progress ever costs) and with
# `--progress none`, on 1 rank and on `prism run -n 2`, the two back to
# back in each round, alternating which goes first.
#
# Samples: one ops/s per measured iteration (the iteration's ops / its
# wall, from the manifest). Statistic: per round and rank count, median
# with progress / median without; printed is the median of those paired
# ratios over the rounds, with their min-max. 1.00 is no cost; on this
# kind of VM one round's ratio swings by +-0.1, so only the median over
# rounds means anything.
#
# Filesystem: as metadata.sh, a fresh XFS loop-mounted from an image in
# BENCH_DIR as root with mkfs.xfs (BENCH_FS=xfs, the default then), else
# BENCH_DIR itself (BENCH_FS=dir): on an ext4 without a journal create
# rates swing 10x from one iteration to the next with the inodes freed in
# the last minutes, which drowns any effect of progress.
#
# Environment:
#   PRISM_BIN  absolute path of the prism binary (required; make sets it)
#   BENCH_DIR  parent of the scratch directory or of the XFS image
#              (default /var/tmp; a disk filesystem, not tmpfs)
#   BENCH_FS   xfs or dir (see above)
#   COUNT      files per rank (default 20000)
#   SIZE       bytes per file (default 4096)
#   ROUNDS     rounds (default 5)
#   NS         rank counts (default "1 2")
set -euo pipefail

: "${PRISM_BIN:?set PRISM_BIN to the absolute path of bin/prism}"
COUNT=${COUNT:-20000}
SIZE=${SIZE:-4096}
ROUNDS=${ROUNDS:-5}
NS=${NS:-1 2}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
command -v python3 >/dev/null || { echo "progress.sh: python3 not found" >&2; exit 1; }
[[ -x $PRISM_BIN ]] || { echo "progress.sh: $PRISM_BIN is not executable" >&2; exit 1; }
[[ $COUNT =~ ^[1-9][0-9]*$ && $SIZE =~ ^[0-9]+$ && $ROUNDS =~ ^[1-9][0-9]*$ ]] ||
	{ echo "progress.sh: COUNT, SIZE and ROUNDS must be integers (COUNT, ROUNDS >= 1)" >&2; exit 1; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scratch.sh
. "$here/scratch.sh"
bench_scratch progress.sh prism-bench-progress 4G

cat >"$work/create.toml" <<EOF
[plan]
name = "bench-progress"
drop_caches = "none"

[[phase]]
kind = "create_files"
count = $COUNT
size = $SIZE
warmup = 1
iterations = 3
EOF

samples="$work/samples.tsv"
: >"$samples"

run() { # side (on|off) ranks round
	local side=$1 n=$2 r=$3 args=(--progress none) out
	[[ $side == on ]] && args=(--progress line --progress-interval 1s)
	((n > 1)) && args+=(-n "$n")
	out="$work/$side-$n.json"
	if ! "$PRISM_BIN" run "${args[@]}" --workdir "$scratch" --results "$work/results" --json \
		"$work/create.toml" >"$out" 2>"$work/err"; then
		echo "progress.sh: prism run ${args[*]} failed:" >&2
		cat "$work/err" >&2
		exit 1
	fi
	if [[ $side == on ]] && ! grep -q '^\[1/1\] create_files' "$work/err"; then
		echo "progress.sh: no progress printed with ${args[*]}:" >&2
		cat "$work/err" >&2
		exit 1
	fi
	python3 - "$out" "$side" "$n" "$r" >>"$samples" <<'PY'
import json, sys
path, side, n, r = sys.argv[1:]
m, _ = json.JSONDecoder().raw_decode(open(path).read().lstrip())
(ph,) = m["phases"]
if ph["status"] != "passed":
    sys.exit(f"prism phase {ph['name']} {ph['status']}: {ph.get('error', '')}")
walls = ph["iterations"]
per_iter = ph["ops_by_type"]["create"]["ops"] / len(walls)
for w in walls:
    print(f"{side}\t{n}\t{r}\t{per_iter / w:.1f}")
PY
}

echo "prism progress bench: $("$PRISM_BIN" version 2>/dev/null | head -n1 || echo prism)"
echo "scratch: $scratch ($(stat -f -c %T "$scratch")), kernel $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "create_files: $COUNT files of $SIZE B per rank; $ROUNDS rounds x (1 warm-up + 3 measured) per side"
for ((r = 0; r < ROUNDS; r++)); do
	for n in $NS; do
		if ((r % 2 == 0)); then
			run on "$n" "$r"
			run off "$n" "$r"
		else
			run off "$n" "$r"
			run on "$n" "$r"
		fi
	done
	echo "round $((r + 1))/$ROUNDS done, load $(cut -d' ' -f1-3 /proc/loadavg)"
done

python3 - "$samples" <<'PY'
import statistics as st, sys
from collections import defaultdict
s = defaultdict(list)
for line in open(sys.argv[1]):
    side, n, r, rate = line.split()
    s[(side, int(n), int(r))].append(float(rate))
print(f"{'ranks':>5}  {'on ops/s':>10}  {'off ops/s':>10}  {'paired on/off':>13}  {'min-max':>11}  rounds")
for n in sorted({k[1] for k in s}):
    rounds = sorted({k[2] for k in s if k[1] == n})
    ratios = [st.median(s[("on", n, r)]) / st.median(s[("off", n, r)]) for r in rounds]
    on = st.median(x for r in rounds for x in s[("on", n, r)])
    off = st.median(x for r in rounds for x in s[("off", n, r)])
    print(f"{n:>5}  {on:>10.0f}  {off:>10.0f}  {st.median(ratios):>13.3f}  {min(ratios):.3f}-{max(ratios):.3f}  {len(ratios)}")
PY
