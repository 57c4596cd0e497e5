// Stages on a CUDA device: the same weights as the plain loop on the CPU.
// Skips, saying why, where LibTorch has no CUDA or the machine no GPU.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "actors/trainer.hpp"
#include "tests/actors/pipeline_fixtures.hpp"

namespace actorpipe {
namespace {

class CudaPipeline : public ::testing::TestWithParam<std::string> {
protected:
  void SetUp() override {
    if (!torch::cuda::is_available())
      GTEST_SKIP() << "no CUDA device (LibTorch built without CUDA, or no GPU): CUDA tests skipped";
  }
};

TEST_P(CudaPipeline, FourStagesOnOneGpuMatchThePlainCpuLoop) {
  auto c = small_config(GetParam(), 4, 8);
  c.pipeline.devices.assign(4, "cuda:0");
  auto out = run_training(c);
  std::vector<double> norms;
  auto ref = reference_weights(c, &norms);  // on the CPU
  ASSERT_EQ(out.weights.size(), ref.size());
  for (auto& [name, w] : out.weights) {
    auto& r = ref[name];
    double scale = r.abs().max().item<double>();
    double diff = (w - r).abs().max().item<double>();
    EXPECT_LE(diff, 1e-5 * scale) << name << " differs by " << diff;
  }
}

TEST(CudaPipelineSchedules, GpipeAndOneFOneBAreBitwiseIdenticalOnTheGpu) {
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no CUDA device (LibTorch built without CUDA, or no GPU): CUDA tests skipped";
  auto g = small_config("gpipe", 4, 8, true);
  auto f = small_config("1f1b", 4, 8, true);
  g.pipeline.devices.assign(4, "cuda:0");
  f.pipeline.devices.assign(4, "cuda:0");
  auto a = run_training(g).weights;
  auto b = run_training(f).weights;
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
}

INSTANTIATE_TEST_SUITE_P(Schedules, CudaPipeline, ::testing::Values("gpipe", "1f1b"));

}  // namespace
}  // namespace actorpipe
