#!/usr/bin/env bash
# Per-phase coordination overhead of prism's communicators (run by
# `make bench`).
#
# The engine runs a fixed sequence of collectives per iteration and per
# phase (agreements, a barrier, the gather of per-rank records, the
# reduction of histogram count arrays); spmd's BenchmarkPhaseCoordination
# runs exactly that sequence. This script builds the spmd test binary with
# MPI and runs that benchmark on 2, 4 and 8 ranks of this host:
#   mpi         under mpirun (MPI collectives)
#   rendezvous  N copies started as `prism run -n N` starts its ranks
#               (PRISM_RANK/SIZE/RENDEZVOUS, a private directory)
# and prints, per mode and rank count, the median over ROUNDS runs of the
# slowest rank's mean time per iteration and per phase (one iteration, one
# op type). Ranks may outnumber cores: mpirun runs with --oversubscribe
# --bind-to none and mpi_yield_when_idle, as the tests do.
#
# Environment:
#   PRISM_BIN  prism binary, for the header line only (optional; make sets it)
#   NPS        rank counts (default "2 4 8")
#   ITERS      phases per run (default 100; the benchmark's -benchtime=Nx)
#   ROUNDS     runs per mode and rank count (default 3)
#   GO         go command (default go)
set -euo pipefail

NPS=${NPS:-2 4 8}
ITERS=${ITERS:-100}
ROUNDS=${ROUNDS:-3}
GO=${GO:-go}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

command -v python3 >/dev/null || { echo "coord.sh: python3 not found" >&2; exit 1; }
mpi=1
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
	echo "coord.sh: mpicc or mpirun not found: measuring the rendezvous only (apt-get install openmpi-bin libopenmpi-dev)" >&2
	mpi=0
fi

work=""
cleanup() {
	[[ -n $work ]] && rm -rf -- "$work"
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM
work=$(mktemp -d "${TMPDIR:-/tmp}/prism-coord.XXXXXX")

bin="$work/spmd.test"
if ((mpi)); then
	(cd "$root" && CGO_ENABLED=1 CC=mpicc "$GO" test -c -tags mpi -o "$bin" ./spmd)
else
	(cd "$root" && "$GO" test -c -o "$bin" ./spmd)
fi
bench_args=(-test.run '^$' -test.bench '^BenchmarkPhaseCoordination$' -test.benchtime "${ITERS}x")

samples="$work/samples.tsv"
: >"$samples"

# record mode np file: the benchmark lines of rank 0's output -> samples
record() {
	local mode=$1 np=$2 out=$3
	if ! grep -q 'us/phase' "$out"; then
		echo "coord.sh: $mode -np $np produced no result:" >&2
		cat "$out" >&2
		exit 1
	fi
	awk -v mode="$mode" -v np="$np" '
		{ for (i = 2; i <= NF; i++) if ($i == "us/iteration" || $i == "us/phase") printf "%s\t%s\t%s\t%s\n", mode, np, $i, $(i - 1) }
	' "$out" >>"$samples"
}

run_mpi() { # np
	local np=$1 out="$work/mpi-$1.out" root_args=()
	((EUID == 0)) && root_args=(--allow-run-as-root)
	# Only rank 0 prints; the others' stdout goes nowhere.
	timeout 600 mpirun "${root_args[@]}" --oversubscribe --bind-to none -np "$np" \
		-x OMPI_MCA_mpi_yield_when_idle=1 \
		sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then exec "$0" "$@"; else exec "$0" "$@" >/dev/null; fi' \
		"$bin" "${bench_args[@]}" >"$out"
	record mpi "$np" "$out"
}

run_rendezvous() { # np
	local np=$1 out="$work/rdv-$1.out" dir i pids=() rc=0
	dir=$(mktemp -d "$work/rendezvous.XXXXXX")
	for ((i = 0; i < np; i++)); do
		local dst=/dev/null
		((i == 0)) && dst=$out
		env -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_RANK \
			PRISM_RANK=$i PRISM_SIZE="$np" PRISM_LOCAL_RANK=$i PRISM_RENDEZVOUS="$dir" \
			timeout 600 "$bin" "${bench_args[@]}" >"$dst" &
		pids+=($!)
	done
	for i in "${pids[@]}"; do
		wait "$i" || rc=$?
	done
	rm -rf -- "$dir"
	((rc == 0)) || { echo "coord.sh: a rendezvous rank failed (status $rc)" >&2; cat "$out" >&2; exit 1; }
	record rendezvous "$np" "$out"
}

echo "prism coordination bench: ${PRISM_BIN:+$("$PRISM_BIN" version 2>/dev/null | head -n1)}"
((mpi)) && echo "MPI: $(mpirun --version 2>/dev/null | head -n1)"
echo "kernel $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $ITERS phases per run, $ROUNDS runs per cell"
for ((r = 0; r < ROUNDS; r++)); do
	for np in $NPS; do
		((mpi)) && run_mpi "$np"
		run_rendezvous "$np"
	done
	echo "round $((r + 1))/$ROUNDS done" >&2
done

python3 - "$samples" <<'PY'
import statistics, sys
from collections import defaultdict
s = defaultdict(list)
for line in open(sys.argv[1]):
    mode, np, unit, v = line.rstrip("\n").split("\t")
    s[mode, int(np), unit].append(float(v))
def cell(v):
    return f"{statistics.median(v):>10.0f} [{min(v):.0f}-{max(v):.0f}]" if v else "-"
print()
print("slowest rank's mean, median over runs [min-max], microseconds")
print(f"{'mode':<11} {'np':>3}  {'per iteration':<26} {'per phase':<26}")
for mode in ("mpi", "rendezvous"):
    for np in sorted({k[1] for k in s if k[0] == mode}):
        print(f"{mode:<11} {np:>3}  {cell(s[mode, np, 'us/iteration']):<26} {cell(s[mode, np, 'us/phase']):<26}")
PY
