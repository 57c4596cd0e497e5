#!/usr/bin/env bash
# What supervision costs a healthy run: with supervision.max_restarts > 0
# every step boundary is kept in memory (every stage's weights and optimizer
# state) to roll back to. The seed MLP (11.1 M parameters, 4 stages, Adam),
# 12 steps, without and then with supervision, in one run.
# Usage: bench/snapshot_cost.sh [BUILD_DIR]
set -euo pipefail
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then
  sed -n '2,/^# Usage/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 0
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$ROOT/build}/actorpipe"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
sed 's/^  steps: 50/  steps: 12/' "$ROOT/configs/seed_mlp.yaml" > "$TMP/plain.yaml"
cp "$TMP/plain.yaml" "$TMP/supervised.yaml"
printf 'supervision:\n  max_restarts: 3\n' >> "$TMP/supervised.yaml"
# The snapshot is taken between steps, outside a step's own time: compare
# the whole run's wall time.
for run in plain supervised plain supervised; do
  start=$(date +%s.%N)
  "$BIN" train "$TMP/$run.yaml" --quiet > /dev/null
  end=$(date +%s.%N)
  echo "$run: $(awk "BEGIN { printf \"%.2f\", $end - $start }") s for 12 steps"
done
