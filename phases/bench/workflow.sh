#!/usr/bin/env bash
# prism's workflow, data-check and metadata phases against the tools users
# would otherwise run, in one table (run by `make bench`).
#
# Cells (prism phase vs peers, the same input on the same filesystem):
#   tar        tar (source = the tree) vs GNU tar -cf: 1,000 files in 40
#              directories, 1-8 KiB each (seeded), files/s
#   untar      untar (archive = GNU tar's archive of that tree) vs tar -xf,
#              files/s
#   md5        md5_check of a 1,000-file persistent dataset (64 KiB files,
#              40 subdirectories) vs md5sum and a Python hashlib loop over
#              its files, MiB/s
#   list+stat  list_files (readdir + stat of 5,000 files) vs Python
#              os.listdir + os.stat and fsspec's local ls(detail=True) of a
#              directory of 5,000 empty files, files/s
#   md create / md stat / md unlink   create_files, list_files,
#              delete_files (COUNT files, empty) vs mdtest -F -n COUNT -C -T
#              -r, ops/s; only with MDTEST=/path/to/mdtest
#   ior write / ior read   blockio (psync, 1 MiB ops, IOR_SIZE, fsync at
#              close, its default one 1 MiB buffer, stamped per write) vs ior -a POSIX -F -t 1m -b IOR_SIZE -w -r -e, MiB/s;
#              only with IOR=/path/to/ior
# The page cache is warm on both sides (drop_caches = "none"; every side's
# warm-up run reads the input first): this compares the tools' own costs,
# not the device.
#
# Rounds: a discarded warm-up round, then ROUNDS rounds, each on a fresh
# loop-mounted XFS (scratch.sh's bench_renew) with its inputs made anew.
# In a round every cell runs prism and its peers back to back (prism first
# in even rounds, last in odd ones); each side does 1 warm-up + 3 measured
# runs. Verdict per cell and peer: paired.py's median over rounds of
# (prism median / peer median within the round), with its 90% bootstrap
# interval; above 1 prism is faster. External commands are charged their
# work only (peers.py subtracts their process start).
#
# Environment:
#   PRISM_BIN  absolute path of the prism binary (required; make sets it)
#   BENCH_DIR, BENCH_FS   as in metadata.sh (scratch.sh)
#   ROUNDS     measured rounds (default 5; an interval needs 4 or more)
#   MDTEST, IOR  paths of mdtest and ior (github.com/hpc/ior; not packaged
#              in Debian: ./bootstrap && ./configure && make, needs mpicc);
#              unset: those cells print "not run"
#   COUNT      files of the md cells (default 5000)
#   IOR_SIZE   bytes of the ior cells (default 256m)
#   PYTHON     the Python of the peers (default /usr/bin/python3)
#   CELLS      which cells to run (default "tar untar md5 list md ior")
#   PIN_CPU    a CPU list (taskset -c): prism and every peer run bound to
#              it, as in blockio.sh; unset, the scheduler places them (on
#              2 vCPUs the IOR write cell then depends on where the loop
#              device's kworker and the writer land: docs/PERFORMANCE.md)
#   SAMPLES    file to append the raw samples to (cell side round value unit)
#   BENCH_TABLE  the same, for make bench's one combined table (paired.py --bench)
set -euo pipefail

: "${PRISM_BIN:?set PRISM_BIN to the absolute path of bin/prism}"
pin=()
[[ -n ${PIN_CPU:-} ]] && pin=(taskset -c "$PIN_CPU")
ROUNDS=${ROUNDS:-5}
COUNT=${COUNT:-5000}
IOR_SIZE=${IOR_SIZE:-256m}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
RUNS=3
# Debian's python, where .ci/deps.sh --bench installs fsspec (a python3
# earlier in PATH, a pyenv one say, need not have it).
PYTHON=${PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

[[ -x $PRISM_BIN ]] || { echo "workflow.sh: $PRISM_BIN is not executable" >&2; exit 1; }
[[ -x $PYTHON ]] || { echo "workflow.sh: PYTHON=$PYTHON not found" >&2; exit 1; }
"$PYTHON" -c 'import fsspec' 2>/dev/null || { echo "workflow.sh: python3 fsspec missing (.ci/deps.sh --bench)" >&2; exit 1; }
[[ $ROUNDS =~ ^[1-9][0-9]*$ && $COUNT =~ ^[1-9][0-9]*$ ]] || { echo "workflow.sh: ROUNDS and COUNT must be integers >= 1" >&2; exit 1; }
for v in MDTEST IOR; do
	[[ -z ${!v:-} || -x ${!v} ]] || { echo "workflow.sh: $v=${!v} is not executable" >&2; exit 1; }
done

# shellcheck source=scratch.sh
. "$here/scratch.sh"
bench_scratch workflow.sh prism-wf 8G
samples="$work/samples.tsv"
: >"$samples"

# The inputs of a round: the tree (deterministic: the same bytes every
# round), GNU tar's archive of it (untar's input on both sides), the
# persistent dataset and its file list, the directory the Python listers
# read.
make_inputs() {
	"$PYTHON" - "$scratch" <<'PY'
import os, random, sys
root = sys.argv[1]
rng = random.Random(1)
for i in range(1000):
    d = os.path.join(root, "tree", f"pkg{i % 40:02d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"mod{i:04d}.py"), "wb") as f:
        f.write(rng.randbytes(rng.randint(1024, 8192)))
d = os.path.join(root, "list")
os.makedirs(d)
for i in range(5000):
    open(os.path.join(d, f"f{i:06d}"), "wb").close()
PY
	tar -cf "$scratch/tree.tar" -C "$scratch/tree" .
	plan prep <<EOF
[[phase]]
kind = "create_dataset"
persist = "md5set"
sizes = ["64KiB"]
copies = 1000
subdirs = 40
EOF
	run_prism prep "$scratch/wd" >/dev/null
	find "$scratch/wd/prism-datasets" -type f ! -name '.prism*' | sort >"$work/md5.list"
	[[ $(wc -l <"$work/md5.list") == 1000 ]] || { echo "workflow.sh: dataset has $(wc -l <"$work/md5.list") files, want 1000" >&2; exit 1; }
}

plan() { # name; the phases on stdin
	{
		printf '[plan]\nname = "bench-%s"\ndrop_caches = "none"\n\n' "$1"
		cat
	} >"$work/$1.toml"
}

run_prism() { # plan workdir -> the manifest's path on stdout
	local out="$work/$1.json"
	mkdir -p "$2"
	if ! "${pin[@]}" "$PRISM_BIN" run --workdir "$2" --results "$work/results" --json "$work/$1.toml" >"$out" 2>"$work/prism.err"; then
		echo "workflow.sh: prism plan $1 failed:" >&2
		cat "$work/prism.err" >&2
		exit 1
	fi
	echo "$out"
}

# prism_rates MANIFEST ROUND CELL=INDEX:OP:UNIT...: one sample per measured
# iteration of the plan's INDEX-th phase (from 0); files/s and ops/s count
# the op's ops, MiB/s its bytes; INDEX:-:UNIT:N counts N items per
# iteration instead (tar's op is one archive, the items are its files).
prism_rates() {
	"$PYTHON" - "$@" >>"$samples" <<'PY'
import json, sys
path, r, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
m, _ = json.JSONDecoder().raw_decode(open(path).read().lstrip())
for spec in specs:
    cell, rest = spec.split("=", 1)
    i, op, unit, *n = rest.split(":")
    ph = m["phases"][int(i)]
    if ph["status"] != "passed":
        sys.exit(f"prism phase {ph['name']} {ph['status']}: {ph.get('error', '')}")
    walls = ph["iterations"]
    if n:
        per = float(n[0])
    else:
        o = ph["ops_by_type"][op]
        per = (o["bytes"] / 2**20 if unit == "MiB/s" else o["ops"]) / len(walls)
    for w in walls:
        print(f"{cell}\tprism\t{r}\t{per / w:.3f}\t{unit}")
PY
}

peer() { # cell side round unit items mode args...
	local cell=$1 side=$2 r=$3 unit=$4
	shift 4
	"${pin[@]}" "$PYTHON" "$here/peers.py" "$RUNS" "$@" | while read -r v; do
		printf '%s\t%s\t%s\t%s\t%s\n' "$cell" "$side" "$r" "$v" "$unit"
	done >>"$samples"
}

iters="warmup = 1
iterations = $RUNS"
plan tar <<EOF
[[phase]]
kind = "tar"
source = "$scratch/tree"
$iters
EOF
plan untar <<EOF
[[phase]]
kind = "untar"
archive = "$scratch/tree.tar"
$iters
EOF
plan md5 <<EOF
[[phase]]
kind = "md5_check"
dataset = "md5set"
verify = "stat"
$iters
EOF
plan list <<EOF
[[phase]]
kind = "list_files"
count = 5000
$iters
EOF
plan md <<EOF
[[phase]]
kind = "create_files"
count = $COUNT
size = 0 # mdtest's default (-w 0): empty files
$iters

[[phase]]
kind = "list_files"
count = $COUNT
$iters

[[phase]]
kind = "delete_files"
count = $COUNT
$iters
EOF
plan ior <<EOF
[[phase]]
kind = "blockio"
rw = "write"
bs = "1MiB"
size = "$IOR_SIZE"
ioengine = "psync"
fsync_on_close = true
# blockio's default data model: one 1 MiB buffer per request in flight
# (here one), stamped per 512-byte sector before each write. IOR writes
# one transfer buffer over and over, unstamped; a 64 MiB pool of distinct
# blocks (buffer_pool) cost ~15% at page-cache speed here.
$iters

[[phase]]
kind = "blockio"
rw = "read"
bs = "1MiB"
size = "$IOR_SIZE"
ioengine = "psync"
$iters
EOF
# The scratch path changes with every fresh filesystem: the plans that
# name inputs are rewritten each round.
replan() {
	sed -i "s|^source = .*|source = \"$scratch/tree\"|" "$work/tar.toml"
	sed -i "s|^archive = .*|archive = \"$scratch/tree.tar\"|" "$work/untar.toml"
}

p_tar() {
	prism_rates "$(run_prism tar "$scratch/p")" "$1" "tar=0:-:files/s:1000"
}
q_tar() {
	peer tar "GNU tar -cf" "$1" files/s 1000 tar "$scratch/tree" "$scratch/peer.tar"
}
p_untar() {
	prism_rates "$(run_prism untar "$scratch/p")" "$1" "untar=0:-:files/s:1000"
}
q_untar() {
	peer untar "tar -xf" "$1" files/s 1000 untar "$scratch/tree.tar" "$scratch/x"
}
p_md5() {
	prism_rates "$(run_prism md5 "$scratch/wd")" "$1" "md5=0:read:MiB/s"
}
q_md5() {
	peer md5 md5sum "$1" MiB/s 62.5 md5sum "$work/md5.list"
	peer md5 "python hashlib" "$1" MiB/s 62.5 hashlib "$work/md5.list"
}
p_list() {
	prism_rates "$(run_prism list "$scratch/p")" "$1" "list+stat=0:-:files/s:5000"
}
q_list() {
	peer list+stat "os.listdir+stat" "$1" files/s 5000 listdir "$scratch/list"
	peer list+stat "fsspec ls" "$1" files/s 5000 fsspec "$scratch/list"
}
p_md() {
	prism_rates "$(run_prism md "$scratch/p")" "$1" "md create=0:create:ops/s" \
		"md stat=1:stat:ops/s" "md unlink=2:unlink:ops/s"
}
q_md() {
	local i out
	for ((i = 0; i <= RUNS; i++)); do
		out=$("${pin[@]}" "$MDTEST" -F -n "$COUNT" -C -T -r -d "$scratch/mdtest" 2>&1) || { echo "workflow.sh: mdtest failed: $out" >&2; exit 1; }
		((i == 0)) && continue
		awk -v r="$1" '/^ *File creation/ {c = $3} /^ *File stat/ {s = $3} /^ *File removal/ {u = $3}
			END {if (c == "" || s == "" || u == "") exit 1
			printf "md create\tmdtest\t%s\t%s\tops/s\nmd stat\tmdtest\t%s\t%s\tops/s\nmd unlink\tmdtest\t%s\t%s\tops/s\n", r, c, r, s, r, u}' \
			<<<"$out" >>"$samples" || { echo "workflow.sh: unexpected mdtest output: $out" >&2; exit 1; }
	done
}
p_ior() {
	prism_rates "$(run_prism ior "$scratch/p")" "$1" "ior write=0:write:MiB/s" "ior read=1:read:MiB/s"
}
q_ior() {
	local i out
	for ((i = 0; i <= RUNS; i++)); do
		out=$("${pin[@]}" "$IOR" -a POSIX -F -t 1m -b "$IOR_SIZE" -w -r -e -o "$scratch/ior/f" 2>&1) || { echo "workflow.sh: ior failed: $out" >&2; exit 1; }
		((i == 0)) && continue
		awk -v r="$1" '$1 == "Operation" {s = 1} s && $1 == "write" {w = $2} s && $1 == "read" {d = $2}
			END {if (w == "" || d == "") exit 1
			printf "ior write\tior\t%s\t%s\tMiB/s\nior read\tior\t%s\t%s\tMiB/s\n", r, w, r, d}' \
			<<<"$out" >>"$samples" || { echo "workflow.sh: unexpected ior output: $out" >&2; exit 1; }
	done
}

read -r -a cells <<<"${CELLS:-tar untar md5 list md ior}"
for c in "${cells[@]}"; do
	declare -F "p_$c" >/dev/null || { echo "workflow.sh: unknown cell $c in CELLS (tar untar md5 list md ior)" >&2; exit 1; }
done
[[ -n ${MDTEST:-} ]] || mapfile -t cells < <(printf '%s\n' "${cells[@]}" | grep -vx md)
[[ -n ${IOR:-} ]] || mapfile -t cells < <(printf '%s\n' "${cells[@]}" | grep -vx ior)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "prism workflow bench: $("$PRISM_BIN" version 2>/dev/null | head -n1 || echo prism)"
echo "scratch: fresh $(findmnt -n -o FSTYPE --target "$scratch" 2>/dev/null || stat -f -c %T "$scratch") per round, kernel $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "1 warm-up round (discarded) + $ROUNDS rounds x (1 warm-up + $RUNS measured) per side"
for ((r = 0; r <= ROUNDS; r++)); do
	((r == 0)) || bench_renew
	mkdir -p "$scratch/mdtest" "$scratch/ior"
	replan
	make_inputs
	for c in "${cells[@]}"; do
		rm -rf -- "${scratch:?}/p"
		if ((r % 2 == 0)); then
			"p_$c" "$r"
			"q_$c" "$r"
		else
			"q_$c" "$r"
			"p_$c" "$r"
		fi
	done
	echo "round $r/$ROUNDS done$( ((r)) || echo ' (warm-up, discarded)'), load $(cut -d' ' -f1-3 /proc/loadavg)"
done

# The warm-up round's samples go.
awk -F'\t' '$3 != 0' "$samples" >"$work/kept.tsv"
[[ -n ${MDTEST:-} || " ${CELLS:-md} " != *" md "* ]] || printf 'md create\tskip\tset MDTEST=/path (build from hpc/ior)\nmd stat\tskip\tset MDTEST=/path (build from hpc/ior)\nmd unlink\tskip\tset MDTEST=/path (build from hpc/ior)\n' >>"$work/kept.tsv"
[[ -n ${IOR:-} || " ${CELLS:-ior} " != *" ior "* ]] || printf 'ior write\tskip\tset IOR=/path (build from hpc/ior)\nior read\tskip\tset IOR=/path (build from hpc/ior)\n' >>"$work/kept.tsv"
[[ -z ${SAMPLES:-} ]] || cat "$work/kept.tsv" >>"$SAMPLES"
[[ -z ${BENCH_TABLE:-} ]] || cat "$work/kept.tsv" >>"$BENCH_TABLE"
echo
"$PYTHON" "$here/paired.py" "$work/kept.tsv" \
	"rates: median of all measured runs; prism÷peer: median over rounds of the in-round ratio of medians, 90% bootstrap interval over rounds"
