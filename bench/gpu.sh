#!/usr/bin/env bash
# On a GPU machine: builds against Python torch's CUDA LibTorch
# (scripts/build-cuda), then runs, writing every log and page to OUT_DIR:
#   - nvidia-smi's device name;
#   - the CUDA and NCCL tests (cuda_pipeline_test, collectives_test);
#   - build-cuda/gpu_bench: 4 stages on one GPU against the plain loop;
#   - compare on configs/gpu_blocks_s4.yaml with its report (timelines and
#     the CUDA allocator's memory plots of GPipe, 1F1B and ZB-H1);
#   - configs/hybrid_dp2_pp2.yaml on the GPU (device map, Gloo fallback);
#   - the whole test suite against the CUDA build.
# Usage: bench/gpu.sh [OUT_DIR]   (default gpu-results; BUILD_DIR: build-cuda)
set -uo pipefail
case "${1:-}" in -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0;; esac
here=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-gpu-results}" && cd "${1:-gpu-results}" && pwd)
build=${BUILD_DIR:-$here/build-cuda}
[ -n "${ACTORPIPE_DEPS_PREFIX:-}" ] && export LD_LIBRARY_PATH="$ACTORPIPE_DEPS_PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
step() { echo; echo "== $* ($(date +%T))"; }

step device
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/device.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$out/device.txt"

step build
t0=$(date +%s)
"$here/scripts/build-cuda" "$build" > "$out/build.log" 2>&1
echo "build rc=$? in $(( $(date +%s) - t0 )) s"
grep -E "error|FAILED" "$out/build.log" | sort | uniq | head -40

cd "$build" || exit 1
step CUDA and NCCL tests
for t in cuda_pipeline_test collectives_test; do
  [ -x "$t" ] && timeout 300 "./$t" > "$out/$t.log" 2>&1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|^note|using gloo" "$out/$t.log"
done

step gpu_bench
[ -x gpu_bench ] && timeout 300 ./gpu_bench ${GPU_BENCH_ARGS:-} 2>&1 | tee "$out/gpu_bench.log"

step compare on the GPU
timeout 300 ./actorpipe compare "$here/configs/gpu_blocks_s4.yaml" --schedules gpipe,1f1b,zb-h1 \
  --report "$out/compare_gpu.html" 2>&1 | tee "$out/compare_gpu.log" | tail -12
timeout 300 ./actorpipe train "$here/configs/gpu_blocks_s4.yaml" --quiet --memory "$out/memory_1f1b_gpu.svg" \
  --timeline "$out/timeline_1f1b_gpu.svg" --results "$out/results_1f1b_gpu.json" 2>&1 | tail -12
timeout 300 ./actorpipe train "$here/configs/gpu_blocks_s4.yaml" --quiet --schedule gpipe \
  --memory "$out/memory_gpipe_gpu.svg" 2>&1 | tail -6

step hybrid on one GPU
timeout 120 ./actorpipe train "$here/configs/hybrid_dp2_pp2.yaml" --steps 20 --quiet --verify-replicas 2>&1 | tee "$out/hybrid_gpu.log"
sed 's/allreduce: auto /allreduce: nccl /' "$here/configs/hybrid_dp2_pp2.yaml" > "$out/hybrid_nccl.yaml"
timeout 120 ./actorpipe train "$out/hybrid_nccl.yaml" --steps 20 --quiet --verify-replicas 2>&1 | tee -a "$out/hybrid_gpu.log"

[ "${RUN_SUITE:-1}" = 1 ] || exit 0
step whole suite
timeout "${SUITE_TIMEOUT:-300}" ctest -j "${SUITE_JOBS:-12}" --timeout 240 > "$out/ctest.log" 2>&1
grep -E "tests passed|Failed|\(Failed\)|Timeout|Not Run" "$out/ctest.log" | head -40
if grep -q "tests failed" "$out/ctest.log"; then
  step the failed tests again, with their output
  timeout 120 ctest --rerun-failed --output-on-failure > "$out/ctest_failed.log" 2>&1
  tail -c 20000 "$out/ctest_failed.log" | grep -v "^\s*$" | tail -150
fi
