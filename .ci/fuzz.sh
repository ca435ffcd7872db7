#!/usr/bin/env bash
# Runs every fuzz target of the project for a budget each (default 10s; a
# number of seconds, or "3000x" for a number of inputs, which make test
# uses because a time budget can end in "context deadline exceeded" when
# the deadline falls while a worker is still starting on a loaded machine):
# the plan decoder and every parser of external input (Slurm host lists,
# HuggingFace config.json, fio JSON, manifests given to compare/report).
# Usage: .ci/fuzz.sh [seconds]   (extra go test flags from $GOFLAGS_FUZZ)
set -euo pipefail
cd "$(dirname "$0")/.."
budget="${1:-10}"
case "$budget" in *x) fuzztime="$budget" ;; *) fuzztime="${budget}s" ;; esac
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
  pkg="./$(dirname "${file#./}")"
  for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //'); do
    echo "fuzz: $pkg $target ($fuzztime)"
    go test ${GOFLAGS_FUZZ:-} -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" | grep -v '^fuzz: elapsed' || exit 1
  done
done
