// runtime/schedule/cost_fit: F, B and W per stage from a Chrome trace, as the
// simulator's cost model.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "runtime/schedule/cost_fit.hpp"

namespace actorpipe {
namespace {

std::string op(int tid, const char* cat, double dur_us) {
  return std::string(R"({"ph":"X","pid":1,"tid":)") + std::to_string(tid) + R"(,"name":"x","cat":")" + cat +
         R"(","ts":0,"dur":)" + std::to_string(dur_us) + "}";
}

// Two stages: stage 1 twice as slow; medians ignore the one slow outlier.
std::string two_stage_trace() {
  std::string ev = R"({"ph":"M","name":"process_name","pid":1,"args":{"name":"x"}})";
  for (int i = 0; i < 3; ++i) {
    ev += "," + op(0, "forward", 1000) + "," + op(0, "backward", 2000) + "," + op(0, "weight-grad", 500);
    ev += "," + op(1, "forward", 2000) + "," + op(1, "backward", 4000) + "," + op(1, "weight-grad", 1000);
  }
  ev += "," + op(0, "forward", 90000);  // a warm-up op: the median keeps 1 ms
  ev += "," + op(0, "allreduce", 7000);  // not an op of the cost model
  return R"({"traceEvents":[)" + ev + "]}";
}

TEST(CostFit, MediansPerStageAndTheirMeanAsOpCosts) {
  const fitted_cost fit = fit_cost(two_stage_trace(), 2, "t.json");
  EXPECT_EQ(fit.ops, 19u);
  EXPECT_DOUBLE_EQ(fit.f[0], 1.0);
  EXPECT_DOUBLE_EQ(fit.f[1], 2.0);
  EXPECT_DOUBLE_EQ(fit.b[1], 4.0);
  EXPECT_DOUBLE_EQ(fit.w[0], 0.5);
  EXPECT_DOUBLE_EQ(fit.cost.f, 1.5);
  EXPECT_DOUBLE_EQ(fit.cost.b, 3.0);
  EXPECT_DOUBLE_EQ(fit.cost.w, 0.75);
  ASSERT_EQ(fit.cost.stage_factor.size(), 2u);
  EXPECT_DOUBLE_EQ(fit.cost.stage_factor[0], 3.5 / 5.25);
  EXPECT_DOUBLE_EQ(fit.cost.stage_factor[1], 7.0 / 5.25);
}

TEST(CostFit, ReplicaTracksCountForTheirStage) {
  // dp 2 x pp 1: tracks 0 and 1 are replicas of stage 0.
  const std::string t = R"({"traceEvents":[)" + op(0, "forward", 1000) + "," + op(1, "forward", 3000) + "," +
                        op(0, "backward", 2000) + "," + op(1, "backward", 2000) + "]}";
  const fitted_cost fit = fit_cost(t, 1, "t.json");
  EXPECT_DOUBLE_EQ(fit.f[0], 2.0);
  EXPECT_DOUBLE_EQ(fit.b[0], 2.0);
  EXPECT_DOUBLE_EQ(fit.cost.w, 0.0);
}

TEST(CostFit, RefusesWhatIsNotATraceOfThoseStages) {
  EXPECT_THROW(fit_cost("not json", 2, "t.json"), std::invalid_argument);
  EXPECT_THROW(fit_cost(R"({"a":1})", 2, "t.json"), std::invalid_argument);
  EXPECT_THROW(fit_cost(two_stage_trace(), 3, "t.json"), std::invalid_argument);  // 2 tracks, 3 stages
  const std::string one_track = R"({"traceEvents":[)" + op(0, "forward", 1) + "," + op(0, "backward", 1) + "]}";
  try {
    fit_cost(R"({"traceEvents":[)" + op(0, "forward", 1) + "," + op(1, "forward", 1) + "," + op(1, "backward", 1) + "]}",
             2, "t.json");
    FAIL() << "a stage without a backward was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("stage 0 has no forward or no backward"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(fit_cost(one_track, 1, "t.json"));
}

}  // namespace
}  // namespace actorpipe
