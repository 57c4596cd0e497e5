#pragma once
// Included by the tests that start several ranks (launch, torchrun's
// variables): they compare a multi-process run with one process on the
// CPU. On a GPU machine `devices: auto` would put each rank on its
// cuda:LOCAL_RANK, and a machine with fewer GPUs than ranks refuses that
// (exit 2), so these binaries, and every process they start, see no GPU.
// The CUDA tests (cuda_pipeline_test, collectives_test) are where GPUs run.
#include <cstdlib>

namespace actorpipe::test_support {

inline const bool gpus_hidden = [] {
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  return true;
}();

}  // namespace actorpipe::test_support
