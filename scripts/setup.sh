#!/usr/bin/env bash
# Shared by scripts/demo and scripts/test: install what is missing (Debian,
# as root or with sudo), then configure and build in Release.
# Usage: source scripts/setup.sh; build_targets [TARGET...]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${ACTORPIPE_BUILD_DIR:-$ROOT/build}"
if ! declare -p ACTORPIPE_CMAKE_ARGS >/dev/null 2>&1; then ACTORPIPE_CMAKE_ARGS=(); fi
PACKAGES=(build-essential cmake ninja-build ccache pkg-config
          libcaf-dev libtorch-dev libgloo-dev libyaml-cpp-dev libgtest-dev libbenchmark-dev
          zlib1g-dev nlohmann-json3-dev libcli11-dev python3-torch python3-sklearn
          libopenblas0-openmp  # without it LibTorch falls back to reference BLAS, ~6x slower (docs/benchmarks/models.md, "BLAS")
          openmpi-bin  # mpirun: tests/apps/launchers_test.cpp starts ranks with it
          etcd-server etcd-client  # a run's durable record: tests/runtime/dist/coord/ start a 3-member cluster
          libsentencepiece-dev sentencepiece  # tokenizers: `actorpipe tokenize`, data.tokenizer; tests run spm_train
          fortunes)  # the fortune-cookie texts: configs/gpt_fortunes.yaml trains a byte-level GPT on them
# scripts/test also opens the HTML report in a real headless browser.
if [ "${ACTORPIPE_WITH_BROWSER:-0}" = 1 ]; then PACKAGES+=(chromium); fi

install_missing() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then return; fi
  echo "==> installing: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# The digits set ships with python3-sklearn; the default app reads it from data/.
fetch_digits() {
  local src=/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz
  mkdir -p "$ROOT/data"
  if [ ! -f "$ROOT/data/digits.csv.gz" ]; then cp "$src" "$ROOT/data/digits.csv.gz"; fi
}

# ACTORPIPE_BUILD_TYPE and ACTORPIPE_CMAKE_ARGS (an array) change the build:
# scripts/test --sanitize uses them for its own directory.
build_targets() {
  local launcher=()
  if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${ACTORPIPE_BUILD_TYPE:-Release}" "${launcher[@]}" \
        "${ACTORPIPE_CMAKE_ARGS[@]}" >/dev/null
  # LibTorch headers need about 1 GiB per compiler; two jobs fit small machines.
  local jobs="${ACTORPIPE_JOBS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}"
  if [ $# -eq 0 ]; then
    cmake --build "$BUILD_DIR" -j "$jobs"
  else
    cmake --build "$BUILD_DIR" -j "$jobs" --target "$@"
  fi
}

# configs/gpt_fortunes.yaml reads every fortune file of Debian's fortunes
# package as one text, in name order, without the '%' lines between cookies.
fetch_fortunes() {
  local dir=/usr/share/games/fortunes out="$ROOT/data/fortunes.txt"
  mkdir -p "$ROOT/data"
  if [ -s "$out" ]; then return; fi
  local files=()
  for f in "$dir"/*; do
    case "$f" in *.dat|*.u8) continue ;; esac
    [ -f "$f" ] && [ ! -L "$f" ] && files+=("$f")
  done
  cat "${files[@]}" | grep -v '^%$' > "$out.tmp"
  mv "$out.tmp" "$out"
}

# configs/llama_fortunes.yaml's tokenizer: a SentencePiece BPE model of the
# fortunes (2048 pieces, about 3 s), trained once. The same input and
# options give the same pieces every time.
make_fortunes_tokenizer() {
  local out="$ROOT/data/fortunes_spm"
  if [ -s "$out.model" ]; then return; fi
  spm_train --input="$ROOT/data/fortunes.txt" --model_prefix="$out.tmp" --vocab_size=2048 --model_type=bpe \
            --character_coverage=1.0 --num_threads=1 >"$out.log" 2>&1 || { cat "$out.log" >&2; return 1; }
  mv "$out.tmp.vocab" "$out.vocab"
  mv "$out.tmp.model" "$out.model"
}

install_missing
fetch_digits
fetch_fortunes
make_fortunes_tokenizer
