#!/usr/bin/env bash
# What on-disk checkpoints cost: the seed MLP (11.1 M parameters, 4 stages,
# Adam), 12 steps, a checkpoint after every step (weights and optimizer
# state as plain tensors, each file written to a temporary name, fsynced and
# renamed; checkpoint.keep_last 3), then the same without checkpoints.
# Prints the binary's own "checkpoints: ... ms writing in all" line, the
# file size and both runs' wall times.
# Usage: bench/checkpoint_cost.sh [BUILD_DIR]
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
cp "$TMP/plain.yaml" "$TMP/ckpt.yaml"
printf 'checkpoint:\n  dir: %s/ckpt\n  every: 1\n' "$TMP" >> "$TMP/ckpt.yaml"
for run in plain ckpt plain ckpt; do
  start=$(date +%s.%N)
  out=$("$BIN" train "$TMP/$run.yaml" --quiet)
  end=$(date +%s.%N)
  echo "$run: $(awk "BEGIN { printf \"%.2f\", $end - $start }") s for 12 steps"
  if [ "$run" = ckpt ]; then
    echo "$out" | grep '^checkpoints:'
    echo "  $(ls "$TMP/ckpt" | wc -l) files kept, $(du -h "$(ls -d "$TMP"/ckpt/step_* | tail -1)" | cut -f1) each"
    rm -rf "$TMP/ckpt"
  fi
done
