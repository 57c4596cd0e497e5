#!/usr/bin/env bash
# actorpipe side by side with torch's own pipelines on this machine, one
# command (docs/BENCHMARKS.md, "Peers"): the plain Python and LibTorch
# loops, torch's Pipe, actorpipe gpipe and 1f1b in one process and under
# `launch --nprocs 2`, and torch.distributed.pipelining where the installed
# torch has it; alternating rounds, medians and ratios from one run.
#
#   bash bench/peers.sh [--rounds 3] [--steps 12] [--microbatches 8,32] [--only REGEX] ...
#
# Needs build/actorpipe and build/peers_plain_bench
#   cmake --build build --target actorpipe peers_plain_bench
# and a python with torch: PYTHON=... (default /usr/bin/python3, Debian's
# python3-torch). See bench/peers_run.py --help for every option.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "${PYTHON:-/usr/bin/python3}" "$here/peers_run.py" "$@"
