// The null and sim devices: the runtime with the model taken out. Every op
// of every step still fires, in microbatch order per chunk; nothing touches
// the weights; a sim op takes its configured time.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "actors/trainer.hpp"
#include "pipeline_fixtures.hpp"
#include "runtime/schedule/policy.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

struct measuring_case {
  std::string schedule;
  std::string threads;
};

class NullDevice : public ::testing::TestWithParam<measuring_case> {};

TEST_P(NullDevice, FiresEveryOpInOrderAndLeavesTheWeightsAlone) {
  const auto& p = GetParam();
  auto c = small_config(p.schedule, 4, 8);
  c.train.steps = 3;
  if (p.schedule == "async") c.train.clip_grad_norm = 0.0;
  c.pipeline.devices.assign(4, "null");
  c.pipeline.threads = p.threads;
  auto initial = build_layers(c);
  auto out = run_training(c);

  auto pol = make_policy(p.schedule, policy_options{c.pipeline.virtual_stages});
  const int m = c.pipeline.microbatches, chunks = c.pipeline.virtual_stages;
  const size_t per_stage = static_cast<size_t>(m * chunks * (pol->splits_backward() ? 3 : 2));
  ASSERT_EQ(out.result.steps.size(), 3u);
  for (const auto& step : out.result.steps) {
    ASSERT_EQ(step.stages.size(), 4u);
    for (size_t r = 0; r < step.stages.size(); ++r) {
      const auto& events = step.stages[r].events;
      EXPECT_EQ(events.size(), per_stage) << "step " << step.step << " stage " << r;
      std::vector<std::vector<int>> next(3, std::vector<int>(chunks, 0));  // by kind, chunk
      for (const auto& e : events) {
        auto& want = next[static_cast<int>(e.op.kind)][e.op.chunk];
        EXPECT_EQ(e.op.mb, want) << to_string(e.op) << " out of order on stage " << r << ", step " << step.step;
        want = e.op.mb + 1;
      }
    }
  }
  // Nothing was computed, so there was no gradient to step with.
  size_t i = 0;
  for (const auto& l : initial)
    for (const auto& [name, t] : l.parameters()) {
      ASSERT_LT(i, out.weights.size());
      EXPECT_TRUE(torch::equal(out.weights[i].second, t)) << out.weights[i].first;
      ++i;
    }
  EXPECT_EQ(i, out.weights.size());
}

std::vector<measuring_case> null_cases() {
  std::vector<measuring_case> out;
  for (const char* threads : {"shared", "dedicated"})
    for (const char* s : {"naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "greedy", "async"})
      out.push_back({s, threads});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Schedules, NullDevice, ::testing::ValuesIn(null_cases()),
                         [](const auto& info) {
                           return testing_util::param_name(info.param.schedule + "_" + info.param.threads);
                         });

// F, B and W each take their time; a full backward takes B + W.
TEST(SimDevice, EveryOpTakesItsConfiguredTime) {
  for (const char* schedule : {"1f1b", "zb-h1"}) {
    auto c = small_config(schedule, 2, 4);
    c.train.steps = 2;
    c.pipeline.devices.assign(2, "sim");
    c.pipeline.sim_f_ms = 2.0;
    c.pipeline.sim_b_ms = 1.0;
    c.pipeline.sim_w_ms = 3.0;
    const bool split = std::string(schedule) == "zb-h1";
    const double want_ms[3] = {2.0, split ? 1.0 : 4.0, 3.0};
    auto out = run_training(c);
    for (const auto& step : out.result.steps)
      for (const auto& st : step.stages)
        for (const auto& e : st.events) {
          const double took_ms = static_cast<double>(e.end_ns - e.start_ns) * 1e-6;
          // The trace's start is the instant the op's time counts from.
          EXPECT_GE(took_ms, want_ms[static_cast<int>(e.op.kind)]) << schedule << " " << to_string(e.op);
        }
  }
}

}  // namespace
}  // namespace actorpipe
