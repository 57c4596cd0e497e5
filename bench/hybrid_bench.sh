#!/usr/bin/env bash
# Hybrid data x pipeline parallelism on this machine: dp=2 x pp=2 against
# dp=1 x pp=2 on the same global batch, in one run. Prints each run's table
# and allreduce line; figures go to docs/BENCHMARKS.md.
# Usage: bench/hybrid_bench.sh [BUILD_DIR]
set -euo pipefail
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then
  sed -n '2,/^# Usage/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 0
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$ROOT/build}/actorpipe"
for dp in 1 2; do
  echo "== dp=$dp x pp=2"
  "$BIN" train "$ROOT/bench/hybrid_dp${dp}_pp2.yaml" --quiet --verify-replicas | grep -E "allreduce|^\| 1f1b"
done
