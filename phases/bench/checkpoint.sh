#!/usr/bin/env bash
# Checkpoint saves of prism against real PyTorch (run by `make bench`).
#
# Two comparisons of the same ~400 MB state (a synthetic model of 8
# Linear(2048, 2048) layers, fp32, with torch.optim.Adam's state: 403 MB):
#   ddp:  prism's ddp_save (a torch.save zip, no fsync) against torch.save
#         of the state torch's own model and Adam hold;
#   dcp:  prism's fsdp_save on one rank (DCP, one .distcp file, fsync) against
#         torch 1.13's save_state_dict with FileSystemWriter(single_file_per_rank
#         = True), no_dist, of the same flattened state.
# Both sides write the same files (phases/ckpt's tests check them byte for
# byte) into the same directory; prism generates its data before the clock,
# torch holds its tensors in memory, so neither side times data creation.
# Target: prism's wall time no longer than the framework's (ratio <= 1).
#
# Samples: one wall time per measured save (prism: the phase's iteration
# wall from the manifest; torch: time.perf_counter around the save call).
# Each side runs a block of 1 warm-up + ITER measured saves in one process,
# each save into a fresh file (the previous one removed first, as prism's
# next iteration does), after a `sync` before the block; prism and torch
# blocks of one comparison run back to back, alternating which goes first
# from round to round.
#
# Statistic: the PAIRED ratio: in each round, the median prism wall over
# the median torch wall of that round's blocks; the verdict is the median
# of the per-round ratios, with a 90% bootstrap interval over rounds (4 or
# more rounds). Pairing cancels the drift of a VM's speed over minutes.
#
# Environment:
#   PRISM_BIN  absolute path of the prism binary (required; make sets it)
#   PYTHON     interpreter with torch (default /usr/bin/python3: Debian's
#              python3-torch, 1.13)
#   BENCH_DIR  parent of the scratch directory (default /var/tmp); must be
#              a disk filesystem, not tmpfs
#   LAYERS     Linear(2048, 2048) layers of the model (default 8: 403 MB
#              with Adam)
#   ROUNDS     repetitions of each comparison (default 5)
#   ITER       measured saves per block (default 3)
#   STRICT=1   exit 1 when a paired ratio is above the target
#   BENCH_TABLE  a file to append the samples to in paired.py's format, for
#              make bench's one combined table: cells "ckpt ddp_save" (peer
#              torch.save) and "ckpt fsdp_save" (peer DCP save), as saves/s
#              so that above 1 prism is faster, as in every other cell
# Without torch it prints why and skips (exit 0), so the rest of make bench
# still runs.
set -euo pipefail

: "${PRISM_BIN:?set PRISM_BIN to the absolute path of bin/prism}"
PYTHON=${PYTHON:-/usr/bin/python3}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
LAYERS=${LAYERS:-8}
ROUNDS=${ROUNDS:-5}
ITER=${ITER:-3}
TARGET=1.00
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
oracle="$here/../ckpt/testdata"

[[ -x $PRISM_BIN ]] || { echo "checkpoint.sh: $PRISM_BIN is not executable" >&2; exit 1; }
"$PYTHON" -c 'import torch' 2>/dev/null || {
	echo "checkpoint.sh: skipped: $PYTHON cannot import torch: apt-get install -y python3-torch" >&2
	[[ -z ${BENCH_TABLE:-} ]] || printf 'ckpt ddp_save\tskip\tno torch in %s\nckpt fsdp_save\tskip\tno torch in %s\n' "$PYTHON" "$PYTHON" >>"$BENCH_TABLE"
	exit 0
}

work=""
scratch=""
cleanup() {
	[[ -n $work ]] && rm -rf -- "$work"
	[[ -n $scratch ]] && rm -rf -- "$scratch"
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

work=$(mktemp -d "${TMPDIR:-/tmp}/prism-bench-ckpt.XXXXXX")
scratch=$(mktemp -d "$BENCH_DIR/prism-bench-ckpt.XXXXXX")
fstype=$(findmnt -n -o FSTYPE --target "$scratch" 2>/dev/null || stat -f -c %T "$scratch")
fssrc=$(findmnt -n -o SOURCE --target "$scratch" 2>/dev/null || echo "?")
case $fstype in
tmpfs | ramfs)
	echo "checkpoint.sh: $scratch is on $fstype; point BENCH_DIR at a disk filesystem" >&2
	exit 1
	;;
esac

model="layers = $LAYERS
input_dim = 2048
hidden_dim = 2048
optimizer = \"adam\"
buffer_budget = \"512MiB\""
for side in ddp dcp; do
	kind=ddp_save
	[[ $side == dcp ]] && kind=fsdp_save
	cat >"$work/$side.toml" <<EOF
[plan]
name = "bench-ckpt-$side"
drop_caches = "none"

[[phase]]
kind = "$kind"
$model
warmup = 1
iterations = $ITER
EOF
done
printf '{"layers": %d, "input": 2048, "hidden": 2048, "dtype": "float32", "optimizer": "adam", "step": 1000}\n' "$LAYERS" >"$work/spec.json"

# The torch side: the state torch's own nn.Linear model and Adam hold
# (torch_oracle.py builds them), saved 1 + ITER times.
cat >"$work/torch_save.py" <<'PY'
import json, os, shutil, sys, time
sys.path.insert(0, sys.argv[1])
import torch
import torch_oracle as oracle
mode, spec_path, out, n = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
spec = json.load(open(spec_path))
if mode == "ddp":
    model, opt, masters = oracle.build(spec)
    state = oracle.saved(model, opt, masters)
    def save(path):
        torch.save(state, path)
else:
    from dcp113 import dcp
    state = oracle.flatten(oracle.fqn_state(spec))
    def save(path):
        dcp.save_state_dict(state, dcp.FileSystemWriter(path, single_file_per_rank=True), no_dist=True)
for i in range(n):
    path = os.path.join(out, "checkpoint.pt" if mode == "ddp" else "checkpoint")
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)
    t0 = time.perf_counter()
    save(path)
    dt = time.perf_counter() - t0
    if i > 0:  # the first is the warm-up
        print(dt)
PY

samples="$work/samples.tsv"
: >"$samples"

run_prism() { # side round
	mkdir -p "$scratch/prism"
	sync
	"$PRISM_BIN" run --workdir "$scratch/prism" --results "$work/results" --json "$work/$1.toml" >"$work/prism.json" 2>"$work/prism.err" ||
		{ cat "$work/prism.err" >&2; exit 1; }
	"$PYTHON" - "$work/prism.json" "$1" "$2" >>"$samples" <<'PY'
import json, sys
m, _ = json.JSONDecoder().raw_decode(open(sys.argv[1]).read().lstrip())
(ph,) = m["phases"]
if ph["status"] != "passed":
    sys.exit(f"prism phase {ph['name']} {ph['status']}: {ph.get('error', '')}")
for w in ph["iterations"]:
    print(f"prism\t{sys.argv[2]}\t{sys.argv[3]}\t{w:.6f}\t{ph['bytes'] // len(ph['iterations'])}")
PY
	rm -rf -- "${scratch:?}/prism"
}

run_torch() { # side round
	mkdir -p "$scratch/torch"
	sync
	PYTHONPATH="$oracle" "$PYTHON" "$work/torch_save.py" "$oracle" "$1" "$work/spec.json" "$scratch/torch" $((ITER + 1)) >"$work/torch.out" ||
		{ echo "checkpoint.sh: torch $1 save failed" >&2; exit 1; }
	awk -v side="$1" -v r="$2" '{ printf "torch\t%s\t%s\t%s\t0\n", side, r, $1 }' "$work/torch.out" >>"$samples"
	rm -rf -- "${scratch:?}/torch"
}

echo "prism checkpoint bench: $("$PRISM_BIN" version 2>/dev/null | head -n1 || echo prism)"
echo "scratch: $scratch ($fstype on $fssrc), kernel $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "state: $LAYERS x Linear(2048, 2048) fp32 + Adam; torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"
echo "$ROUNDS rounds x (1 warm-up + $ITER measured) per side and comparison"
for ((r = 0; r < ROUNDS; r++)); do
	for side in ddp dcp; do
		if ((r % 2 == 0)); then
			run_prism "$side" "$r"
			run_torch "$side" "$r"
		else
			run_torch "$side" "$r"
			run_prism "$side" "$r"
		fi
	done
	echo "round $((r + 1))/$ROUNDS done" >&2
done

[[ -z ${BENCH_TABLE:-} ]] || awk -F'\t' -v OFS='\t' '
	{ cell = $2 == "ddp" ? "ckpt ddp_save" : "ckpt fsdp_save"; side = $1 == "prism" ? "prism" : $2 == "ddp" ? "torch.save" : "DCP save"
	  print cell, side, $3, 1 / $4, "saves/s" }' "$samples" >>"$BENCH_TABLE"

"$PYTHON" - "$samples" "$TARGET" "${STRICT:-0}" "$here" <<'PY'
import statistics, sys
sys.path.insert(0, sys.argv[4])
from paired import fmt_interval, interval, paired_ratios
target, strict = float(sys.argv[2]), sys.argv[3] == "1"
s, size = {}, {}
for line in open(sys.argv[1]):
    who, side, r, w, b = line.rstrip("\n").split("\t")
    s.setdefault((who, side, int(r)), []).append(float(w))
    if int(b):
        size[side] = int(b)
print()
print("wall seconds per save: median over all measured saves [min-max]; paired = median over rounds")
print("of (prism median / torch median) within the round, with its 90% bootstrap interval over rounds")
print(f"{'save':<5} {'MB':>5}  {'prism s':<22} {'torch s':<22} {'paired':>6} {'90% CI':<15} per round")
above = 0
for side, what in (("ddp", "torch.save"), ("dcp", "DCP save")):
    rounds = sorted(r for (who, sd, r) in s if who == "prism" and sd == side)
    p = [w for r in rounds for w in s[("prism", side, r)]]
    t = [w for r in rounds for w in s.get(("torch", side, r), [])]
    if not p or not t:
        continue
    by_round = lambda who: {r: s[(who, side, r)] for r in rounds if (who, side, r) in s}
    ratios = paired_ratios(by_round("prism"), by_round("torch"))
    pr = statistics.median(ratios)
    cell = lambda v: f"{statistics.median(v):7.3f} [{min(v):.3f}-{max(v):.3f}]"
    flag = "" if pr <= target else f"  > {target}"
    above += pr > target
    print(f"{side:<5} {size.get(side, 0) / 1e6:5.0f}  {cell(p):<22} {cell(t):<22} {pr:6.3f} {fmt_interval(interval(ratios), 3):<15} {' '.join(f'{x:.2f}' for x in ratios)}{flag}  (vs {what})")
if above:
    print(f"\n{above} paired ratio(s) above the {target} target: prism slower than the framework")
    if strict:
        sys.exit(1)
PY
