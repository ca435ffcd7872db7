#!/usr/bin/env bash
# Runs every fuzz target of the project for a budget each (default 10s):
# the plan decoder and every parser of external input (Slurm host lists,
# HuggingFace config.json, fio JSON, manifests given to compare/report).
# Usage: .ci/fuzz.sh [seconds]   (extra go test flags from $GOFLAGS_FUZZ)
set -euo pipefail
cd "$(dirname "$0")/.."
budget="${1:-10}"
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
  pkg="./$(dirname "${file#./}")"
  for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //'); do
    echo "fuzz: $pkg $target (${budget}s)"
    go test ${GOFLAGS_FUZZ:-} -run '^$' -fuzz "^${target}\$" -fuzztime "${budget}s" "$pkg" | grep -v '^fuzz: elapsed' || exit 1
  done
done
