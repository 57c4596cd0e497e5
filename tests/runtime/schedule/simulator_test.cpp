// The simulator against the canonical orders and the analytic bubble, its
// deadlock report, the CSV round trip and the SVG lanes.
#include <gtest/gtest.h>

#include <regex>

#include "runtime/schedule/canonical.hpp"
#include "runtime/schedule/policies/fixed_order.hpp"
#include "runtime/observe/report.hpp"
#include "runtime/schedule/schedule_csv.hpp"
#include "runtime/schedule/simulator.hpp"

namespace actorpipe {
namespace {

using shape = std::tuple<std::string, int, int>;

class SimulatedSchedule : public ::testing::TestWithParam<shape> {};

TEST_P(SimulatedSchedule, OrderEqualsTheCanonicalOrder) {
  auto [schedule, s, m] = GetParam();
  auto r = simulate(schedule, s, m);
  ASSERT_FALSE(r.deadlock) << r.diagnosis;
  auto canon = canonical_order(schedule, s, m);
  for (int rank = 0; rank < s; ++rank)
    EXPECT_EQ(to_string(r.order()[rank]), to_string(canon[rank])) << "stage " << rank;
}

TEST_P(SimulatedSchedule, UniformCostBubbleEqualsTheAnalyticFormula) {
  auto [schedule, s, m] = GetParam();
  auto r = simulate(schedule, s, m);
  int mm = schedule == "naive" ? 1 : m;
  double expect = static_cast<double>(s - 1) / static_cast<double>(mm + s - 1);
  EXPECT_NEAR(r.bubble(), expect, 1e-9);
  for (int rank = 0; rank < s; ++rank) EXPECT_NEAR(r.stage_bubble(rank), expect, 1e-9);
}

TEST_P(SimulatedSchedule, MakespanIsMPlusSMinusOneTimesFPlusBWhenBackwardCostsTwice) {
  auto [schedule, s, m] = GetParam();
  cost_model c;
  c.f = 1.0;
  c.b = 2.0;
  auto r = simulate(schedule, s, m, c);
  int mm = schedule == "naive" ? 1 : m;
  EXPECT_NEAR(r.makespan, (mm + s - 1) * 3.0, 1e-9);
}

TEST_P(SimulatedSchedule, PeakStashIsTheScheduleMemoryBound) {
  auto [schedule, s, m] = GetParam();
  auto r = simulate(schedule, s, m);
  int mm = schedule == "naive" ? 1 : m;
  for (int rank = 0; rank < s; ++rank)
    EXPECT_EQ(r.peak_stash[rank], schedule == "1f1b" ? std::min(s - rank, mm) : mm) << rank;
}

TEST_P(SimulatedSchedule, CsvExportThenImportReplaysTheSameOrder) {
  auto [schedule, s, m] = GetParam();
  auto r = simulate(schedule, s, m);
  int mm = schedule == "naive" ? 1 : m;
  auto csv = to_schedule_csv(r.order(), s);
  auto replay = simulate(fixed_order_policy(parse_schedule_csv(csv, s, mm)), s, mm);
  ASSERT_FALSE(replay.deadlock) << replay.diagnosis;
  EXPECT_EQ(replay.order(), r.order());
  EXPECT_DOUBLE_EQ(replay.makespan, r.makespan);
}

std::string shape_name(const ::testing::TestParamInfo<shape>& info) {
  const auto& schedule = std::get<0>(info.param);
  return (schedule == "1f1b" ? std::string("OneFOneB") : schedule) + "_S" +
         std::to_string(std::get<1>(info.param)) + "M" + std::to_string(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SimulatedSchedule,
    ::testing::Values(shape{"naive", 4, 1}, shape{"gpipe", 1, 1}, shape{"gpipe", 2, 4},
                      shape{"gpipe", 4, 8}, shape{"gpipe", 4, 3}, shape{"gpipe", 8, 32},
                      shape{"1f1b", 1, 1}, shape{"1f1b", 2, 4}, shape{"1f1b", 4, 8},
                      shape{"1f1b", 4, 3}, shape{"1f1b", 8, 32}, shape{"1f1b", 5, 7}),
    shape_name);

TEST(Simulator, UnevenStagesStretchTheMakespanToTheSlowestStage) {
  cost_model c;
  c.stage_factor = {1, 1, 3, 1};
  auto r = simulate("1f1b", 4, 16, c);
  // The slow stage is busy 3 * 2 * M units and bounds the step from below.
  EXPECT_GE(r.makespan, 3.0 * 2 * 16);
  EXPECT_NEAR(r.busy[2], 3.0 * 2 * 16, 1e-9);
}

TEST(Simulator, CommLatencyAddsToTheFillAndDrain) {
  cost_model c;
  c.comm = 0.5;
  auto r = simulate("gpipe", 4, 8, c);
  // Forward fill and backward drain each cross S-1 links.
  EXPECT_NEAR(r.makespan, (8 + 4 - 1) * 2.0 + 2 * 3 * 0.5, 1e-9);
}

/// Test-only: forwards only, never a backward.
class never_backward : public policy {
public:
  std::string name() const override { return "never-b"; }
  std::optional<op_id> next(const stage_view& v) const override {
    if (!v.fwd_ready->empty()) return op_id{op_kind::F, v.fwd_ready->lowest(), 0};
    return std::nullopt;
  }
};

TEST(Simulator, DeadlockIsReportedWithTheStuckOpsMarked) {
  auto r = simulate(never_backward{}, 3, 2);
  ASSERT_TRUE(r.deadlock);
  EXPECT_NE(r.diagnosis.find(">> stage 2: fired [F0 F1]"), std::string::npos) << r.diagnosis;
  // In-order promotion, as on the real stages (ready_board): B1's input is
  // there, but it waits for B0 to fire first.
  EXPECT_NE(r.diagnosis.find("ready, not chosen: [B0]  in order after them: [B1]"), std::string::npos)
      << r.diagnosis;
  EXPECT_NE(r.diagnosis.find("B0 waits for its gradient from stage 1"), std::string::npos)
      << r.diagnosis;
}

/// Test-only: claims a forward whose input never came.
class fires_unready : public policy {
public:
  std::string name() const override { return "unready"; }
  std::optional<op_id> next(const stage_view& v) const override { return op_id{op_kind::F, 0, 0}; }
};

TEST(Simulator, APolicyThatFiresAnUnreadyOpIsAnErrorNamingIt) {
  try {
    simulate(fires_unready{}, 2, 1);
    FAIL() << "no error";
  } catch (const std::logic_error& e) {
    EXPECT_EQ(std::string(e.what()), "policy unready chose F0 on stage 1, which is not ready");
  }
}

TEST(Simulator, LargePipelineRunsEveryOp) {
  auto r = simulate("1f1b", 64, 512);
  ASSERT_FALSE(r.deadlock);
  for (const auto& lane : r.timeline) EXPECT_EQ(lane.size(), 1024u);
  EXPECT_NEAR(r.bubble(), 63.0 / (512 + 63), 1e-9);
}

TEST(Simulator, UnknownScheduleAndBadSizesAreErrors) {
  EXPECT_THROW(simulate("gpip", 4, 8), std::invalid_argument);
  EXPECT_THROW(simulate("gpipe", 0, 8), std::invalid_argument);
}

TEST(CostModel, ParsesAnySubsetAndRejectsNonsense) {
  auto c = parse_cost("F=1.5,B=3,comm=0.05");
  EXPECT_DOUBLE_EQ(c.f, 1.5);
  EXPECT_DOUBLE_EQ(c.b, 3.0);
  EXPECT_DOUBLE_EQ(c.w, 0.0);  // default: a full backward costs B
  EXPECT_DOUBLE_EQ(c.comm, 0.05);
  EXPECT_THROW(parse_cost("F=-1"), std::invalid_argument);
  EXPECT_THROW(parse_cost("X=1"), std::invalid_argument);
  EXPECT_THROW(parse_cost("F"), std::invalid_argument);
}

TEST(ScheduleCsv, BadCellsNameRowAndColumn) {
  auto err = [](const std::string& text) {
    try {
      parse_schedule_csv(text, 2, 1, "s.csv");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(err("0F0,0B0\n1F0,1X0\n"),
            "s.csv:2:2: '1X0': expected {stage}{action}{microbatch}, e.g. 0F3, with action F, B, I, W, SEND_F, "
            "RECV_F, SEND_B or RECV_B; {stage}UNSHARD, {stage}RESHARD or {stage}REDUCE_GRAD; or "
            "(0F3;1B2)OVERLAP_F_B");
  EXPECT_EQ(err("0F0,0B0\n0F0,1B0\n"), "s.csv:2:1: '0F0': stage 0 does not live on rank 1");
  EXPECT_EQ(err("0F0\n1F0,1B0\n"), "s.csv:1: rank 0 never runs 0B0");
  EXPECT_EQ(err("0F0,0B0,0F0\n1F0,1B0\n"), "s.csv:1:3: '0F0': appears twice in the row");
  EXPECT_EQ(err("0F0,0B0\n"), "s.csv: 1 rows, expected one per stage (2)");
}

TEST(TimelineSvg, HasOneLanePerStageAndABlockPerOp) {
  auto r = simulate("1f1b", 4, 8);
  auto svg = simulation_svg(r);
  std::regex lane("class=\"lane\"");
  EXPECT_EQ(std::distance(std::sregex_iterator(svg.begin(), svg.end(), lane), std::sregex_iterator()), 4);
  std::regex block("<title>[FB][0-9]+ ");
  EXPECT_EQ(std::distance(std::sregex_iterator(svg.begin(), svg.end(), block), std::sregex_iterator()),
            4 * 16);
  EXPECT_EQ(svg.rfind("</svg>"), svg.size() - 7);
}

}  // namespace
}  // namespace actorpipe

namespace actorpipe {
namespace {

using inter_shape = std::tuple<int, int, int, double>;  // S, M, v, B cost

class SimulatedInterleaved : public ::testing::TestWithParam<inter_shape> {};

// The shapes a prototype checked against Megatron's order, with B = F and
// B = 2F.
TEST_P(SimulatedInterleaved, OrderEqualsMegatronsOrder) {
  auto [s, m, v, b] = GetParam();
  cost_model c;
  c.b = b;
  auto r = simulate("interleaved", s, m, c, v);
  ASSERT_FALSE(r.deadlock) << r.diagnosis;
  auto canon = canonical_order("interleaved", s, m, v);
  for (int rank = 0; rank < s; ++rank)
    EXPECT_EQ(to_string(r.order()[rank]), to_string(canon[rank])) << "stage " << rank;
}

TEST_P(SimulatedInterleaved, StrictOrderIsNeverSlowerThanFiringAnyReadyOp) {
  auto [s, m, v, b] = GetParam();
  cost_model c;
  c.b = b;
  auto strict = simulate("interleaved", s, m, c, v);
  auto greedy = simulate("interleaved-greedy", s, m, c, v);
  if (!greedy.deadlock) {
    EXPECT_LE(strict.makespan, greedy.makespan);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SimulatedInterleaved,
                         ::testing::Values(inter_shape{4, 8, 2, 1.0}, inter_shape{2, 4, 2, 1.0},
                                           inter_shape{4, 8, 3, 1.0}, inter_shape{8, 16, 2, 1.0},
                                           inter_shape{4, 4, 2, 1.0}, inter_shape{4, 8, 2, 2.0},
                                           inter_shape{2, 4, 2, 2.0}, inter_shape{4, 8, 3, 2.0},
                                           inter_shape{8, 16, 2, 2.0}, inter_shape{4, 4, 2, 2.0}));

TEST(SimulatedInterleavedBubble, UniformCostBubbleIsSMinusOneOverVMPlusSMinusOne) {
  for (auto [s, m, v] : std::vector<std::tuple<int, int, int>>{{4, 8, 2}, {4, 16, 2}, {8, 32, 4}, {4, 8, 3}}) {
    auto r = simulate("interleaved", s, m, {}, v);
    EXPECT_NEAR(r.bubble(), static_cast<double>(s - 1) / (v * m + s - 1), 1e-9)
        << "S=" << s << " M=" << m << " v=" << v;
  }
}

TEST(SimulatedInterleavedBubble, GreedyVariantDeadlocksUnderTheSameBoundWithSeveralGroups) {
  // Firing whatever is ready fills the in-flight budget with later groups'
  // forwards; the backwards that would free it never get a slot.
  auto r = simulate("interleaved-greedy", 4, 16, {}, 2);
  EXPECT_TRUE(r.deadlock);
  EXPECT_NE(r.diagnosis.find(">> stage 0"), std::string::npos);
}

TEST(SimulatedInterleavedBubble, MicrobatchesMustBeAMultipleOfStages) {
  EXPECT_THROW(simulate("interleaved", 4, 6, {}, 2), std::invalid_argument);
  EXPECT_THROW(canonical_order("interleaved", 4, 6, 2), std::invalid_argument);
}

}  // namespace
}  // namespace actorpipe

namespace actorpipe {
namespace {

using zb_shape = std::tuple<int, int, double>;  // S, M, B cost (F = W = 1)

class SimulatedZeroBubble : public ::testing::TestWithParam<zb_shape> {
protected:
  /// F = W = 1 and the shape's B.
  cost_model cost() const {
    cost_model c;
    c.b = std::get<2>(GetParam());
    c.w = 1.0;
    return c;
  }
};

TEST_P(SimulatedZeroBubble, OrderEqualsTheZbH1Construction) {
  auto [s, m, b] = GetParam();
  const auto c = cost();
  auto r = simulate("zb-h1", s, m, c);
  ASSERT_FALSE(r.deadlock) << r.diagnosis;
  auto canon = canonical_order("zb-h1", s, m);
  for (int rank = 0; rank < s; ++rank)
    EXPECT_EQ(to_string(r.order()[rank]), to_string(canon[rank])) << "stage " << rank;
}

TEST_P(SimulatedZeroBubble, ActivationsNeverExceedOneFOneBsPeak) {
  auto [s, m, b] = GetParam();
  const auto c = cost();
  auto zb = simulate("zb-h1", s, m, c);
  auto one = simulate("1f1b", s, m, c);
  const int one_peak = *std::max_element(one.peak_stash.begin(), one.peak_stash.end());
  for (int rank = 0; rank < s; ++rank) EXPECT_LE(zb.peak_stash[rank], one_peak) << rank;
}

TEST_P(SimulatedZeroBubble, CsvWithInputAndWeightGradientsReplays) {
  auto [s, m, b] = GetParam();
  const auto c = cost();
  auto r = simulate("zb-h1", s, m, c);
  auto csv = to_schedule_csv(r.order(), s, true);
  EXPECT_NE(csv.find("0I0"), std::string::npos);
  auto replay = simulate(fixed_order_policy(parse_schedule_csv(csv, s, m)), s, m, c);
  EXPECT_EQ(replay.order(), r.order());
  EXPECT_DOUBLE_EQ(replay.makespan, r.makespan);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SimulatedZeroBubble,
                         ::testing::Values(zb_shape{4, 8, 1.0}, zb_shape{4, 12, 1.0}, zb_shape{8, 16, 1.0},
                                           zb_shape{2, 4, 1.0}, zb_shape{4, 3, 1.0}, zb_shape{3, 5, 1.0},
                                           zb_shape{1, 2, 1.0}, zb_shape{4, 8, 2.0}, zb_shape{8, 16, 2.0},
                                           zb_shape{4, 3, 2.0}));

TEST(SimulatedZeroBubbleIdle, IsAThirdOfOneFOneBsWhenFBAndWCostTheSame) {
  cost_model c;
  c.w = 1.0;  // 1F1B's full backward then costs B + W = 2
  for (auto [s, m] : std::vector<std::pair<int, int>>{{4, 8}, {4, 12}, {8, 16}, {8, 32}, {2, 4}}) {
    auto zb = simulate("zb-h1", s, m, c);
    auto one = simulate("1f1b", s, m, c);
    double zb_idle = 0, one_idle = 0;
    for (int r = 0; r < s; ++r) {
      zb_idle += zb.makespan - zb.busy[r];
      one_idle += one.makespan - one.busy[r];
    }
    EXPECT_NEAR(3.0 * zb_idle, one_idle, 1e-9) << "S=" << s << " M=" << m;
    EXPECT_NEAR(zb.bubble(), static_cast<double>(s - 1) / (3 * m + s - 1), 1e-9);
  }
}

// -- zb-v ------------------------------------------------------------------------

// The same shapes and costs as ZB-H1's suite, its own instantiation.
class SimulatedZeroBubbleV : public SimulatedZeroBubble {};

TEST_P(SimulatedZeroBubbleV, OrderEqualsThePapersConstruction) {
  auto [s, m, b] = GetParam();
  auto r = simulate("zb-v", s, m, cost());
  ASSERT_FALSE(r.deadlock) << r.diagnosis;
  EXPECT_EQ(r.order(), canonical_order("zb-v", s, m));
}

// Chunks are half a stage, so 2S chunk entries hold what 1F1B's S do.
TEST_P(SimulatedZeroBubbleV, ActivationsStayWithinOneFOneBsPeak) {
  auto [s, m, b] = GetParam();
  auto zb = simulate("zb-v", s, m, cost());
  auto one = simulate("1f1b", s, m, cost());
  const int one_peak = *std::max_element(one.peak_stash.begin(), one.peak_stash.end());
  for (int rank = 0; rank < s; ++rank) EXPECT_LE(zb.peak_stash[rank], 2 * one_peak) << rank;
}

TEST_P(SimulatedZeroBubbleV, CsvKeepsTheVAndReplays) {
  auto [s, m, b] = GetParam();
  auto r = simulate("zb-v", s, m, cost());
  auto csv = to_schedule_csv(r.order(), s, true, r.placement);
  // Rank 0 runs the first and the last virtual stage.
  EXPECT_EQ(csv.rfind("0F0", 0), 0u);
  EXPECT_NE(csv.substr(0, csv.find('\n')).find(std::to_string(2 * s - 1) + "I0"), std::string::npos);
  placement_kind detected = placement_kind::round_robin;
  auto order = parse_schedule_csv(csv, s, m, "zbv.csv", &detected);
  if (s > 1) {
    EXPECT_EQ(detected, placement_kind::v_shape);
  }
  auto replay = simulate(fixed_order_policy(order, detected), s, m, cost());
  EXPECT_EQ(replay.order(), r.order());
  EXPECT_DOUBLE_EQ(replay.makespan, r.makespan);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SimulatedZeroBubbleV,
                         ::testing::Values(zb_shape{4, 8, 1.0}, zb_shape{4, 16, 1.0}, zb_shape{8, 16, 1.0},
                                           zb_shape{2, 4, 1.0}, zb_shape{4, 3, 1.0}, zb_shape{3, 5, 1.0},
                                           zb_shape{1, 2, 1.0}, zb_shape{4, 8, 2.0}, zb_shape{8, 32, 2.0},
                                           zb_shape{4, 1, 2.0}));

// -- DualPipeV ----------------------------------------------------------------

TEST(SimulatedDualPipeV, OrderEqualsTheReferenceProgramAtAnyCost) {
  for (auto [s, m] : std::vector<std::pair<int, int>>{{2, 4}, {4, 8}, {4, 10}, {8, 16}, {6, 20}})
    for (double w : {0.0, 1.0}) {
      cost_model c;
      c.w = w;
      auto r = simulate("dualpipev", s, m, c);
      ASSERT_FALSE(r.deadlock) << r.diagnosis;
      EXPECT_EQ(r.order(), canonical_order("dualpipev", s, m)) << "S=" << s << " M=" << m << " W=" << w;
      EXPECT_EQ(r.placement, placement_kind::v_shape);
      EXPECT_EQ(r.chunks, 2);
    }
}

// DeepSeek's (PP/2 - 1)(F&B + B - 3W) with PP = 2S chunks: each rank idles
// (S-1)(F&B + B - 3W). On a device that runs the pair in turn F&B is F + B
// (+ W when B is split off), so with F = B = W = 1 the idle is S - 1 of
// 6M + S - 1, and with W = 0 it is 3(S - 1).
TEST(SimulatedDualPipeV, IdleMatchesDeepSeeksFormula) {
  for (auto [s, m] : std::vector<std::pair<int, int>>{{2, 4}, {2, 6}, {4, 8}, {4, 10}, {6, 12}, {8, 16}, {8, 32}}) {
    for (double w : {1.0, 0.0}) {
      cost_model c;
      c.f = c.b = 1.0;
      c.w = w;
      auto r = simulate("dualpipev", s, m, c);
      ASSERT_FALSE(r.deadlock);
      const double fb = c.f + c.b + c.w;  // F&B in turn
      const double idle = (s - 1) * (fb + c.b - 3 * c.w);
      const double work = 2.0 * m * (c.f + c.b + c.w);
      for (int rank = 0; rank < s; ++rank) {
        EXPECT_DOUBLE_EQ(r.busy[rank], work) << "S=" << s << " M=" << m << " rank " << rank;
        EXPECT_DOUBLE_EQ(r.makespan - r.busy[rank], idle) << "S=" << s << " M=" << m << " W=" << w;
      }
      if (w == 1.0) {
        EXPECT_NEAR(r.bubble(), analytic_bubble("dualpipev", s, m), 1e-12);
        // Below 1F1B's on the same model (2S stages of half a rank each).
        EXPECT_LT(r.bubble(), analytic_bubble("1f1b", 2 * s, m));
      }
    }
  }
}

// Where the device overlaps the pair (two CUDA streams) it costs max(F, B):
// the same order, shorter, and the pair's two ops share their start.
TEST(SimulatedDualPipeV, AnOverlappingDeviceRunsEachPairAtOnce) {
  cost_model serial;
  serial.w = 1.0;
  cost_model overlap = serial;
  overlap.overlap = true;
  auto a = simulate("dualpipev", 4, 16, serial);
  auto b = simulate("dualpipev", 4, 16, overlap);
  ASSERT_FALSE(b.deadlock) << b.diagnosis;
  EXPECT_EQ(a.order(), b.order());
  EXPECT_LT(b.makespan, a.makespan);
  int pairs = 0;
  const auto prog = canonical::dualpipev_program(4, 1, 16);
  for (size_t i = 0; i < prog.ops.size(); ++i)
    if (prog.overlap[i]) {
      ++pairs;
      EXPECT_DOUBLE_EQ(b.timeline[1][i].start, b.timeline[1][i + 1].start) << i;
      EXPECT_DOUBLE_EQ(a.timeline[1][i].end, a.timeline[1][i + 1].start) << i;
    }
  EXPECT_GT(pairs, 0);
  // Each pair saves min(F, B) = 1 on rank 1's busy time.
  EXPECT_DOUBLE_EQ(a.busy[1] - b.busy[1], pairs);
}

TEST(SimulatedDualPipeV, RefusesShapesTheReferenceRefuses) {
  EXPECT_THROW(simulate("dualpipev", 3, 8), std::invalid_argument);
  EXPECT_THROW(simulate("dualpipev", 4, 7), std::invalid_argument);
}

// An imported order with OVERLAP_F_B pairs replays through the fixed-order
// policy: the same order and makespan as the policy's own.
TEST(SimulatedDualPipeV, FixedOrderWithOverlapFlagsReplaysIt) {
  cost_model c;
  c.w = 1.0;
  c.overlap = true;
  const int s = 4, m = 8;
  std::vector<std::vector<op_id>> order;
  std::vector<std::vector<char>> overlap;
  for (int r = 0; r < s; ++r) {
    auto p = canonical::dualpipev_program(s, r, m);
    order.push_back(p.ops);
    overlap.push_back(p.overlap);
  }
  auto own = simulate("dualpipev", s, m, c);
  auto replay = simulate(fixed_order_policy(order, placement_kind::v_shape, overlap), s, m, c);
  ASSERT_FALSE(replay.deadlock) << replay.diagnosis;
  EXPECT_EQ(replay.order(), own.order());
  EXPECT_DOUBLE_EQ(replay.makespan, own.makespan);
  // Without the flags the pairs run in turn: longer.
  auto unflagged = simulate(fixed_order_policy(order, placement_kind::v_shape), s, m, c);
  EXPECT_GT(unflagged.makespan, own.makespan);
  // A flag on an op that is not an F followed by a B is refused.
  overlap[0].assign(order[0].size(), 0);
  overlap[0].back() = 1;
  EXPECT_THROW(fixed_order_policy(order, placement_kind::v_shape, overlap), std::invalid_argument);
}

TEST(SimulatedZeroBubbleVIdle, IsStagesMinusOneChunkOpsPerStageWhenFIAndWCostTheSame) {
  cost_model c;
  c.w = 1.0;
  for (auto [s, m] : std::vector<std::pair<int, int>>{{2, 4}, {4, 8}, {4, 12}, {8, 16}, {8, 32}, {16, 64}}) {
    auto r = simulate("zb-v", s, m, c);
    ASSERT_FALSE(r.deadlock);
    EXPECT_NEAR(r.bubble(), analytic_bubble("zb-v", s, m), 1e-9) << "S=" << s << " M=" << m;
    EXPECT_NEAR(r.bubble(), static_cast<double>(s - 1) / (6 * m + s - 1), 1e-9);
    // Below ZB-H1's (S-1)/(3M+S-1) on the same chunk costs.
    EXPECT_LT(r.bubble(), analytic_bubble("zb-h1", s, m));
  }
}

TEST(ScheduleCsvPlacement, RoundRobinChunksAreDetectedAndAMixIsAnError) {
  // Interleaved, S = 2: rank 0 holds stages 0 and 2.
  auto r = simulate("interleaved", 2, 2, {}, 2);
  auto csv = to_schedule_csv(r.order(), 2);
  placement_kind detected = placement_kind::v_shape;
  auto order = parse_schedule_csv(csv, 2, 2, "i.csv", &detected);
  EXPECT_EQ(detected, placement_kind::round_robin);
  EXPECT_EQ(order, r.order());
  try {
    // Row 0 has stage 3 (a V) and row 1 stage 3 (round-robin).
    parse_schedule_csv("0F0,3F0,3B0,0B0\n1F0,3F0,3B0,1B0\n", 2, 1, "m.csv");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "m.csv:2:2: '3F0': stage 3 on rank 1 places chunks round-robin, but m.csv:1:2 placed them "
              "in a V");
  }
}

// -- greedy -----------------------------------------------------------------------

// Deadlock freedom and the memory bound over shapes, chunk counts, bounds
// and cost models, uneven stages and latency included.
TEST(GreedyPolicy, NeverDeadlocksAndKeepsItsMemoryBound) {
  int runs = 0;
  for (int s : {1, 2, 3, 4, 8})
    for (int m : {1, 3, 8, 17})
      for (int v : {1, 2, 3})
        for (int bound : {0, 1, 2, 5})
          for (int model = 0; model < 3; ++model) {
            cost_model c;
            if (model == 1) c.b = 2.0, c.comm = 0.3;
            if (model == 2)
              for (int r = 0; r < s; ++r) c.stage_factor.push_back(1.0 + (r * 7 % 5) * 0.5);
            auto r = simulate("greedy", s, m, c, v, bound);
            ++runs;
            ASSERT_FALSE(r.deadlock) << "S=" << s << " M=" << m << " v=" << v << " bound=" << bound << "\n"
                                     << r.diagnosis;
            for (int rank = 0; rank < s; ++rank) {
              const int open = bound > 0 ? bound : s - rank + (v - 1) * s;
              // A stash entry per open microbatch and chunk at most.
              EXPECT_LE(r.peak_stash[rank], open * v) << "S=" << s << " M=" << m << " v=" << v << " rank " << rank;
              if (v == 1) {
                EXPECT_LE(r.peak_stash[rank], std::min(open, m));
              }
            }
          }
  EXPECT_EQ(runs, 5 * 4 * 3 * 4 * 3);
}

// One chunk, default bound: forward-first under S - rank open microbatches
// is 1F1B's order, whatever the cost ratio.
TEST(GreedyPolicy, OneChunkWithTheDefaultBoundRunsOneFOneBsOrder) {
  for (double b : {1.0, 2.0, 0.5}) {
    cost_model c;
    c.b = b;
    for (auto [s, m] : std::vector<std::pair<int, int>>{{2, 4}, {4, 8}, {4, 3}, {8, 32}})
      EXPECT_EQ(simulate("greedy", s, m, c).order(), canonical_order("1f1b", s, m)) << "S=" << s << " M=" << m;
  }
}

// Two chunks: within 10% of Megatron's interleaved makespan (it is dynamic,
// not tuned to the shape) with the default bound.
TEST(GreedyPolicy, TwoChunksComeCloseToInterleaved) {
  for (auto [s, m] : std::vector<std::pair<int, int>>{{4, 8}, {8, 32}}) {
    auto g = simulate("greedy", s, m, {}, 2);
    auto i = simulate("interleaved", s, m, {}, 2);
    EXPECT_LE(g.makespan, 1.1 * i.makespan) << "S=" << s << " M=" << m;
    EXPECT_LT(g.makespan, simulate("1f1b", s, m).makespan * 2) << "v=2 ops cost the same, so 2x is 1F1B";
  }
}

// torch writes a full backward B inside a split schedule (DualPipeV does):
// it is the I of that microbatch and stage, then at once its W. A second W
// of its own for the same op is then one too many. (A B with one W of its
// own in the row is the zero-bubble notation's B, the I alone: below.)
TEST(ScheduleCsvSplit, AFullBackwardInASplitScheduleIsItsIThenItsW) {
  auto imported = read_schedule_csv("0F0,0B0\n1F0,1I0,1W0\n", 2, 1, "s.csv");
  EXPECT_TRUE(imported.split_backward);
  const std::vector<op_id> fbw{{op_kind::F, 0, 0}, {op_kind::B, 0, 0}, {op_kind::W, 0, 0}};
  EXPECT_EQ(imported.order[0], fbw);
  EXPECT_EQ(imported.order[1], fbw);
  try {
    parse_schedule_csv("0F0,0B0,0W0,0W0\n1F0,1I0,1W0\n", 2, 1, "s.csv");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "s.csv:1:4: '0W0': appears twice in the row");
  }
}

// The Zero Bubble paper's notation (and older torch dumps): F, B, W, where B
// is the input gradient alone. ZB-H1 at S = 4, M = 8 written so imports to
// the canonical zb-h1 order, with no full-backward notice.
TEST(ScheduleCsvSplit, ZeroBubbleNotationBWithItsWImportsAsTheZbH1Order) {
  const std::string zb =
      "0F0,0F1,0F2,0F3,0B0,0W0,0F4,0B1,0W1,0F5,0B2,0W2,0F6,0B3,0W3,0F7,0B4,0W4,0B5,0W5,0B6,0W6,0B7,0W7\n"
      "1F0,1F1,1F2,1B0,1F3,1B1,1W0,1F4,1B2,1W1,1F5,1B3,1W2,1F6,1B4,1W3,1F7,1B5,1W4,1B6,1W5,1B7,1W6,1W7\n"
      "2F0,2F1,2B0,2F2,2B1,2F3,2B2,2W0,2F4,2B3,2W1,2F5,2B4,2W2,2F6,2B5,2W3,2F7,2B6,2W4,2B7,2W5,2W6,2W7\n"
      "3F0,3B0,3F1,3B1,3F2,3B2,3F3,3B3,3W0,3F4,3B4,3W1,3F5,3B5,3W2,3F6,3B6,3W3,3F7,3B7,3W4,3W5,3W6,3W7\n";
  auto imported = read_schedule_csv(zb, 4, 8, "zb.csv");
  EXPECT_TRUE(imported.split_backward);
  EXPECT_TRUE(imported.notices.empty());
  const auto canon = canonical_order("zb-h1", 4, 8);
  ASSERT_EQ(imported.order.size(), canon.size());
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_EQ(to_string(imported.order[rank]), to_string(canon[rank])) << "rank " << rank;
  // It simulates as zb-h1 does (F = B = W).
  cost_model c;
  c.w = 1.0;
  auto replay = simulate(fixed_order_policy(imported.order), 4, 8, c);
  ASSERT_FALSE(replay.deadlock) << replay.diagnosis;
  EXPECT_DOUBLE_EQ(replay.makespan, simulate("zb-h1", 4, 8, c).makespan);

  // Both spellings in one file: rank 0's B0 has its W (the I), its B1 has
  // none (a full backward: its I, then its W, with the one notice).
  auto mixed = read_schedule_csv("0F0,0F1,0B0,0B1,0W0\n1F0,1I0,1F1,1I1,1W0,1W1\n", 2, 2, "s.csv");
  const std::vector<op_id> rank0{{op_kind::F, 0, 0}, {op_kind::F, 1, 0}, {op_kind::B, 0, 0},
                                 {op_kind::B, 1, 0}, {op_kind::W, 1, 0}, {op_kind::W, 0, 0}};
  EXPECT_EQ(mixed.order[0], rank0);
  ASSERT_EQ(mixed.notices.size(), 1u);
  EXPECT_EQ(mixed.notices[0].action, "B");
  EXPECT_EQ(mixed.notices[0].count, 1);
  EXPECT_EQ(mixed.notices[0].first, "s.csv:1:4");
}

TEST(ScheduleCsvSplit, ZeroBubbleNotationErrorsNameTheCell) {
  auto err = [](const std::string& text) {
    try {
      read_schedule_csv(text, 2, 1, "s.csv");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(err("0F0,0B0,0W0\n1F0,1B0,1W0\n"), "no error");
  EXPECT_EQ(err("0F0,0B0,0W0\n1F0,1W0\n"),
            "s.csv:2:2: '1W0': a W (weight gradient) without a backward of microbatch 0 on stage 1 in the row "
            "(B or I, e.g. 1B0)");
  EXPECT_EQ(err("0F0,0B0,0W0,0B0\n1F0,1B0,1W0\n"), "s.csv:1:4: '0B0': appears twice in the row");
  EXPECT_EQ(err("0F0,0B0,0W0\n1F0,1B0,1W0,1W0\n"), "s.csv:2:4: '1W0': appears twice in the row");
  EXPECT_EQ(err("0F0,0I0,0B0,0W0\n1F0,1B0,1W0\n"), "s.csv:1:3: '0B0': appears twice in the row");
  // A W before its B: the order as written, which the dry run finds stuck.
  auto late = read_schedule_csv("0F0,0B0,0W0\n1F0,1W0,1B0\n", 2, 1, "s.csv");
  EXPECT_TRUE(simulate(fixed_order_policy(late.order), 2, 1).deadlock);
}

}  // namespace
}  // namespace actorpipe
