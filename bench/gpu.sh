#!/usr/bin/env bash
# On a GPU machine: builds against Python torch's CUDA LibTorch
# (scripts/build-cuda; ACTORPIPE_DEPS_PREFIX from scripts/gpu-deps where
# Debian's packages are missing), then runs the steps named in STEPS, each
# under its own time limit, writing every log to OUT_DIR:
#   tests   cuda_pipeline_test (incl. dualpipev's two streams),
#           collectives_test, cuda_launch_test ([cpu, cuda:0] ranks)
#   gpt     gpt_bench: the 1.06 B GPT of configs/gpt_h100.yaml, gpipe, 1f1b
#           and zb-h1 against the plain loop (tokens/s, MFU, peak memory)
#   pairs   dualpipev against zb-v and 1f1b on configs/gpu_blocks_s4.yaml
#   csv     torch's own schedule dumps against tests/data/schedule_csv, and
#           torch's _load_csv reading back our simulate --export files
#   peers   bench/peers.sh at 4 stages with torch.distributed.pipelining on
#           4 Gloo ranks, and --gpu (actorpipe and torch on cuda:0)
#   blocks  gpu_bench, compare with its report, hybrid dp2 x pp2 on one GPU
#   suite   the whole test suite against the CUDA build
#   ipc     bench/cuda_ipc_bench.py: two processes on one GPU, a CUDA IPC
#           buffer against staging through pinned shared host memory
# Usage: bench/gpu.sh [OUT_DIR]   (default gpu-results; BUILD_DIR: build-cuda;
#        STEPS default "tests gpt pairs csv": about 8 minutes on an H100 with the
#        build; run STEPS=peers as a call of its own, it takes about 4 more)
#        BUILD_TARGETS: ninja targets to build (default all); GPT_SCHEDULES
#        and GPT_ROUNDS (gpipe,1f1b,zb-h1 and 2); DEADLINE_S: seconds from the
#        start after which no step starts and each step's limit is cut to fit
set -uo pipefail
case "${1:-}" in -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0;; esac
here=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-gpu-results}" && cd "${1:-gpu-results}" && pwd)
build=${BUILD_DIR:-$here/build-cuda}
steps=" ${STEPS:-tests gpt pairs csv} "
[ -n "${ACTORPIPE_DEPS_PREFIX:-}" ] && export LD_LIBRARY_PATH="$ACTORPIPE_DEPS_PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
start_s=$(date +%s)
step() { echo; echo "== $* ($(date +%T), $(( $(date +%s) - start_s )) s in)"; }
# limit N: N seconds, or what is left before DEADLINE_S less 10 s (0: skip)
limit() {
  [ -z "${DEADLINE_S:-}" ] && { echo "$1"; return; }
  local left=$(( DEADLINE_S - ($(date +%s) - start_s) - 10 ))
  [ "$left" -lt 15 ] && { echo 0; return; }
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
run_for() { local n; n=$(limit "$1"); shift; [ "$n" -eq 0 ] && { echo "skipped: past DEADLINE_S"; return 124; }; timeout "$n" "$@"; }
wants() { [[ "$steps" == *" $1 "* ]]; }

step device
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/device.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$out/device.txt"

step build
t0=$(date +%s)
run_for 400 "$here/scripts/build-cuda" "$build" ${BUILD_TARGETS:-} > "$out/build.log" 2>&1
echo "build rc=$? in $(( $(date +%s) - t0 )) s"
grep -E "error:|FAILED:" "$out/build.log" | sort | uniq | head -40
cd "$build" || exit 1

if wants ipc; then
  step "two processes on one GPU: CUDA IPC against host staging"
  run_for 90 python3 "$here/bench/cuda_ipc_bench.py" 2>&1 | tee "$out/cuda_ipc.md"
fi

if wants tests; then
  step CUDA tests
  for t in cuda_pipeline_test collectives_test cuda_launch_test; do
    [ -x "$t" ] && run_for 150 "./$t" > "$out/$t.log" 2>&1; echo "$t rc=$?"
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|^note" "$out/$t.log" | head -20
  done
fi

if wants gpt; then
  step GPT on the GPU
  run_for 200 ./gpt_bench --device cuda:0 --blocks 24 --dim 1920 --heads 15 --seq 1024 --batch 32 --stages 4 \
    --microbatches 8 --dtype bfloat16 --steps 5 --rounds "${GPT_ROUNDS:-2}" --schedules "${GPT_SCHEDULES:-gpipe,1f1b,zb-h1}" 2>&1 | tee "$out/gpt_bench.log" | tail -7
fi

if wants pairs; then
  step "dualpipev's pairs on two streams, against zb-v and 1f1b"
  for s in dualpipev zb-v 1f1b dualpipev zb-v 1f1b; do
    run_for 60 ./actorpipe train "$here/configs/gpu_blocks_s4.yaml" --schedule "$s" --quiet 2>&1 | grep -E "^\| (dualpipev|zb-v|1f1b) "
  done | tee "$out/pairs.log"
fi

if wants csv; then
  step "torch's schedules and our exports"
  timeout 60 python3 "$here/tests/data/make_schedule_fixtures.py" --out "$out/torch_csv" --compare > "$out/csv_compare.log" 2>&1
  grep -E ": (same|DIFFERS)" "$out/csv_compare.log"
  mkdir -p "$out/exports" && specs=()
  for s in gpipe 1f1b interleaved zb-v dualpipev; do
    v=1; [ "$s" = interleaved ] || [ "$s" = zb-v ] || [ "$s" = dualpipev ] && v=2
    for form in compute comms; do
      f="$out/exports/${s}_$form.csv"
      ./actorpipe simulate --stages 4 --microbatches 8 --schedule "$s" --export "$f" --export-format "$form" > /dev/null
      specs+=("$f:$([ $form = comms ] && echo compute_comms || echo compute_only):4:$v:8")
    done
  done
  timeout 60 python3 "$here/tests/data/torch_reads_export.py" "${specs[@]}" 2>&1 | tee "$out/torch_reads.log" | sed "s|$out/exports/||"
fi

if wants peers; then
  step peers at 4 stages, with the GPU rows
  timeout 300 bash "$here/bench/peers.sh" --build "$build" --python python3 --stages 4 --schedules gpipe,1f1b,zb-v \
    --threads 4 --rounds 1 --steps 8 --warmup 3 --microbatches 8 --gpu > "$out/peers.md" 2> "$out/peers.err"
  echo "peers rc=$?"; grep -v "^$" "$out/peers.md" | tail -22; grep "!" "$out/peers.err" | cut -c1-200 | head
fi

if wants blocks; then
  step gpu_bench
  [ -x gpu_bench ] && timeout 300 ./gpu_bench ${GPU_BENCH_ARGS:-} 2>&1 | tee "$out/gpu_bench.log"
  step compare on the GPU
  timeout 300 ./actorpipe compare "$here/configs/gpu_blocks_s4.yaml" --schedules gpipe,1f1b,zb-h1 \
    --report "$out/compare_gpu.html" 2>&1 | tee "$out/compare_gpu.log" | tail -12
  step hybrid on one GPU
  timeout 120 ./actorpipe train "$here/configs/hybrid_dp2_pp2.yaml" --steps 20 --quiet --verify-replicas 2>&1 | tee "$out/hybrid_gpu.log"
fi

if wants suite; then
  step whole suite
  timeout "${SUITE_TIMEOUT:-400}" ctest -j "${SUITE_JOBS:-12}" --timeout 240 > "$out/ctest.log" 2>&1
  grep -E "tests passed|Failed|\(Failed\)|Timeout|Not Run" "$out/ctest.log" | head -40
fi
