// Ranks on different devices (CUDA build, one GPU): NCCL refuses two ranks
// on one device, so a GPU rank works beside CPU ranks. `launch` of a
// config whose stages sit on [cpu, cuda:0] (and [cpu, cpu, cuda:0]) saves
// the bytes the same config saves in one process: the tensors between the
// ranks go over Gloo through the host, and the held-out evaluation's batch
// too. Skipped where LibTorch has no CUDA device.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/apps/child_process.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using testing_util::child_result;

std::string config_text(const std::string& devices, int stages) {
  return "model:\n"
         "  layers:\n"
         "    - {type: linear, in: 16, out: 32}\n"
         "    - {type: relu}\n"
         "    - {type: dropout, p: 0.1}\n"
         "    - {type: linear, in: 32, out: 32}\n"
         "    - {type: tanh}\n"
         "    - {type: linear, in: 32, out: 32}\n"
         "    - {type: relu}\n"
         "    - {type: linear, in: 32, out: 4}\n"
         "data:\n"
         "  kind: synthetic\n"
         "  synthetic: {samples: 512, features: 16, classes: 4}\n"
         "  test_fraction: 0.25\n"
         "train:\n"
         "  steps: 4\n"
         "  batch_size: 48\n"
         "  optimizer: {type: adam, lr: 0.01}\n"
         "  clip_grad_norm: 1.0\n"
         "  seed: 7\n"
         "pipeline:\n"
         "  stages: " +
         std::to_string(stages) +
         "\n"
         "  schedule: 1f1b\n"
         "  microbatches: 6\n"
         "  devices: [" +
         devices + "]\n";
}

child_result actorpipe(const std::vector<std::string>& args) {
  testing_util::child_limits limits;
  limits.timeout_s = 120;
  return testing_util::run_child(ACTORPIPE_BIN, args, limits);
}

std::string output_of(const child_result& r) {
  return "exit " + std::to_string(r.code) + (r.timed_out ? " (timed out)" : "") + "\n" + r.out + r.err;
}

void expect_launch_equals_one_process(const std::string& devices, int stages) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the mixed-device launch is not run";
  const fs::path dir = testing_util::test_dir("actorpipe_cuda_launch_test");
  const std::string config = testing_util::write(dir / "mixed.yaml", config_text(devices, stages));
  const std::string one = (dir / "one.pt").string(), many = (dir / "many.pt").string();
  const auto a = actorpipe({"train", config, "--quiet", "--save", one});
  ASSERT_EQ(a.code, 0) << output_of(a);
  const auto b = actorpipe({"launch", "--nprocs", std::to_string(stages), config, "--quiet", "--save", many});
  ASSERT_EQ(b.code, 0) << output_of(b);
  const std::string x = testing_util::slurp_file(one);
  ASSERT_FALSE(x.empty());
  EXPECT_TRUE(x == testing_util::slurp_file(many))
      << "launch --nprocs " << stages << " on [" << devices << "] saved other bytes than one process";
}

TEST(CudaLaunch, ACpuRankAndAGpuRankSaveTheBytesOfOneProcess) { expect_launch_equals_one_process("cpu, cuda:0", 2); }

TEST(CudaLaunch, TwoCpuRanksBesideAGpuRankSaveTheBytesOfOneProcess) {
  expect_launch_equals_one_process("cpu, cpu, cuda:0", 3);
}

}  // namespace
}  // namespace actorpipe
