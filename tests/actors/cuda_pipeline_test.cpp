// Stages on a CUDA device: the same weights as the plain loop on the CPU.
// Skips, saying why, where LibTorch has no CUDA or the machine no GPU.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "actors/trainer.hpp"
#include "runtime/schedule/canonical.hpp"
#include "tests/actors/pipeline_fixtures.hpp"
#include "tests/test_util.hpp"

#define SKIP_WITHOUT_CUDA()         \
  if (!torch::cuda::is_available()) \
  GTEST_SKIP() << "no CUDA device (LibTorch built without CUDA, or no GPU): CUDA tests skipped"

namespace actorpipe {
namespace {

// Every weight within `rel` of the plain loop's on the CPU, relative to its
// largest magnitude.
void expect_close_to_reference(const config& c, const named_params& weights, double rel) {
  std::vector<double> norms;
  auto ref = reference_weights(c, &norms);  // on the CPU
  ASSERT_EQ(weights.size(), ref.size());
  for (const auto& [name, w] : weights) {
    const auto& r = ref.at(name);
    const double scale = r.abs().max().item<double>();
    const double diff = (w - r).abs().max().item<double>();
    EXPECT_LE(diff, rel * scale) << name << " differs by " << diff;
  }
}

class CudaPipeline : public ::testing::TestWithParam<std::string> {
protected:
  void SetUp() override { SKIP_WITHOUT_CUDA(); }
};

TEST_P(CudaPipeline, FourStagesOnOneGpuMatchThePlainCpuLoop) {
  auto c = small_config(GetParam(), 4, 8);
  c.pipeline.devices.assign(4, "cuda:0");
  auto out = run_training(c);
  expect_close_to_reference(c, out.weights, 1e-5);
}

TEST(CudaPipelineSchedules, GpipeAndOneFOneBAreBitwiseIdenticalOnTheGpu) {
  SKIP_WITHOUT_CUDA();
  auto g = small_config("gpipe", 4, 8, true);
  auto f = small_config("1f1b", 4, 8, true);
  g.pipeline.devices.assign(4, "cuda:0");
  f.pipeline.devices.assign(4, "cuda:0");
  auto a = run_training(g).weights;
  auto b = run_training(f).weights;
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
}

// Every stage on its own CUDA stream: a hand-off that skipped its event
// (or a block reused under a reader) would show up as wrong weights here,
// and the split backward and the two chunks per stage take other paths.
INSTANTIATE_TEST_SUITE_P(Schedules, CudaPipeline, ::testing::Values("gpipe", "1f1b", "zb-h1", "interleaved", "zb-v"),
                         [](const auto& info) { return testing_util::param_name(info.param); });

// DualPipeV with both stages on one GPU: each OVERLAP_F_B pair's F and B go
// on two streams of the stage, so the GPU may run them side by side. The
// weights still equal 1F1B's on the same stages bit for bit, dropout masks
// included, and every pair of the reference's order ran on two streams.
TEST(CudaPipelineSchedules, DualPipeVPairsRunOnTwoStreamsAndMatchOneFOneBBitwise) {
  SKIP_WITHOUT_CUDA();
  constexpr int stages = 2, microbatches = 8;
  for (const bool dropout : {false, true}) {
    auto f = small_config("1f1b", stages, microbatches, dropout);
    auto d = small_config("dualpipev", stages, microbatches, dropout);
    f.pipeline.devices.assign(stages, "cuda:0");
    d.pipeline.devices.assign(stages, "cuda:0");
    const auto a = run_training(f);
    const auto b = run_training(d);
    EXPECT_TRUE(bitwise_equal(a.weights, b.weights)) << (dropout ? "with dropout" : "without dropout");
    uint64_t per_step = 0;
    for (int r = 0; r < stages; ++r)
      for (const char o : canonical::dualpipev_program(stages, r, microbatches).overlap) per_step += o ? 1 : 0;
    ASSERT_GT(per_step, 0u);
    ASSERT_EQ(b.result.steps.size(), static_cast<size_t>(d.train.steps));
    for (const auto& step : b.result.steps) {
      uint64_t pairs = 0;
      for (const auto& st : step.stages) pairs += st.two_stream_pairs;
      EXPECT_EQ(pairs, per_step) << "step " << step.step;
    }
    // 1F1B has no pairs: its stages stay on their own streams.
    for (const auto& step : a.result.steps)
      for (const auto& st : step.stages) EXPECT_EQ(st.two_stream_pairs, 0u);
  }
}

// Two replicas of a 2-stage pipeline, all on one GPU. NCCL refuses two ranks
// on one device: asked for explicitly, or chosen by auto, the run falls back
// to Gloo with one notice, and still equals one module on the CPU.
class CudaHybridOnOneGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaHybridOnOneGpu, FallsBackToGlooWithANoticeAndMatchesThePlainLoop) {
  SKIP_WITHOUT_CUDA();
  auto c = small_config("1f1b", 2, 4);
  c.parallel.dp = 2;
  c.parallel.allreduce = GetParam();
  c.pipeline.devices.assign(2, "cuda:0");
  c.train.optimizer.type = "sgd";  // see hybrid_test: Adam magnifies the summation order
  c.train.optimizer.lr = 0.05;
  c.train.optimizer.momentum = 0.9;
  std::vector<std::string> notices;
  train_options opts;
  opts.verify_replicas = true;
  opts.on_notice = [&notices](const std::string& n) { notices.push_back(n); };
  auto out = run_training(c, opts);
  EXPECT_EQ(out.result.allreduce, "gloo");
  EXPECT_TRUE(out.result.replicas_verified);
  int gloo_notices = 0;
  for (const auto& n : notices) {
    std::printf("%s\n", n.c_str());
    if (n.find("NCCL refuses two ranks on one device") != std::string::npos && n.find("gloo") != std::string::npos)
      ++gloo_notices;
  }
  EXPECT_GE(gloo_notices, 1);
  expect_close_to_reference(c, out.weights, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Backends, CudaHybridOnOneGpu, ::testing::Values("nccl", "auto"));

// bfloat16 on the GPU: the weights stay bfloat16, and the split backward
// sums the same gradients as the full one, bit for bit.
TEST(CudaPipelineSchedules, BFloat16GpipeAndZeroBubbleAreBitwiseIdentical) {
  SKIP_WITHOUT_CUDA();
  auto g = small_config("gpipe", 4, 8);
  auto z = small_config("zb-h1", 4, 8);
  for (auto* c : {&g, &z}) {
    c->model.dtype = "bfloat16";
    c->pipeline.devices.assign(4, "cuda:0");
  }
  auto a = run_training(g).weights;
  auto b = run_training(z).weights;
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].second.scalar_type(), at::kBFloat16) << a[i].first;
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  }
}

}  // namespace
}  // namespace actorpipe
