// runtime/schedule/policy + policies/*: the pure policies, driven by hand-built stage
// views, and through runtime/schedule/simulator with uniform costs, whose emergent
// per-stage order must equal runtime/schedule/canonical's textbook order.
#include "runtime/schedule/policy.hpp"
#include "runtime/schedule/simulator.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "messages/ops.hpp"
#include "runtime/schedule/canonical.hpp"

namespace actorpipe {
namespace {

mb_set make_set(int microbatches, std::vector<int> members) {
  mb_set s;
  s.reset(microbatches);
  for (int mb : members) s.insert(mb);
  return s;
}

/// A stage view over two ready sets the caller owns.
stage_view view(int rank, int stages, int microbatches, int fwd_done, int bwd_done,
                const mb_set& fwd, const mb_set& bwd) {
  stage_view v;
  v.rank = rank;
  v.stages = stages;
  v.microbatches = microbatches;
  v.fwd_done = fwd_done;
  v.bwd_done = bwd_done;
  v.fwd_ready = &fwd;
  v.bwd_ready = &bwd;
  return v;
}

std::unique_ptr<policy> get(const std::string& name) {
  auto p = make_policy(name);
  EXPECT_NE(p, nullptr) << name;
  return p;
}

// -- mb_set ---------------------------------------------------------------------

TEST(MbSet, TracksMembershipCountAndLowest) {
  auto s = make_set(6, {4, 2, 4});
  EXPECT_EQ(s.size(), 2);
  EXPECT_EQ(s.lowest(), 2);
  EXPECT_TRUE(s.contains(4));
  EXPECT_FALSE(s.contains(3));
  s.erase(2);
  s.erase(2);
  EXPECT_EQ(s.size(), 1);
  EXPECT_EQ(s.lowest(), 4);
  s.erase(4);
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.lowest(), -1);
}

// -- registry -------------------------------------------------------------------

TEST(PolicyRegistry, ListsEveryBuiltInPolicyInOrder) {
  auto names = policy_names();
  EXPECT_EQ(names, (std::vector<std::string>{"naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev", "async",
                                             "greedy", "forward-first", "interleaved-greedy"}));
  for (const auto& n : names) {
    auto p = make_policy(n);
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(p->name(), n);
  }
}

TEST(PolicyRegistry, InterleavedTakesItsChunkCountFromTheOptions) {
  EXPECT_EQ(make_policy("interleaved", policy_options{3})->chunks(), 3);
  EXPECT_EQ(make_policy("interleaved")->chunks(), 1);
  EXPECT_EQ(make_policy("1f1b", policy_options{3})->chunks(), 1);
}

TEST(PolicyRegistry, UnknownNameIsNull) {
  EXPECT_EQ(make_policy("nope"), nullptr);
  EXPECT_EQ(make_policy(""), nullptr);
  EXPECT_EQ(make_policy("1F1B"), nullptr);
}

// -- 1F1B -----------------------------------------------------------------------

// Megatron's steady state: one forward after each backward. Below the
// bound a ready forward goes first, even with a backward ready (a faster
// downstream stage returned it early); at the bound the backward goes.
TEST(OneFOneBPolicy, PrefersReadyForwardBelowTheBoundOverReadyBackward) {
  auto p = get("1f1b");
  auto fwd = make_set(8, {3, 4});
  auto bwd = make_set(8, {2, 1});
  auto op = p->next(view(1, 4, 8, 3, 1, fwd, bwd));  // 2 in flight < 4 - 1
  ASSERT_TRUE(op);
  EXPECT_EQ(*op, (op_id{op_kind::F, 3, 0}));  // the lowest ready forward
  op = p->next(view(1, 4, 8, 4, 1, fwd, bwd));  // 3 in flight = 4 - 1
  ASSERT_TRUE(op);
  EXPECT_EQ(*op, (op_id{op_kind::B, 1, 0}));  // the lowest ready backward
  auto none = make_set(8, {});
  op = p->next(view(1, 4, 8, 3, 1, none, bwd));  // no forward ready: the backward
  ASSERT_TRUE(op);
  EXPECT_EQ(*op, (op_id{op_kind::B, 1, 0}));
}

TEST(OneFOneBPolicy, FiresLowestForwardWhileBelowStagesMinusRank) {
  auto p = get("1f1b");
  auto fwd = make_set(8, {5, 3});
  auto bwd = make_set(8, {});
  auto op = p->next(view(1, 4, 8, 3, 1, fwd, bwd));  // 2 in flight < 4 - 1
  ASSERT_TRUE(op);
  EXPECT_EQ(*op, (op_id{op_kind::F, 3, 0}));
}

TEST(OneFOneBPolicy, WaitsWhenStagesMinusRankAreInFlight) {
  auto p = get("1f1b");
  auto fwd = make_set(8, {3, 4});
  auto bwd = make_set(8, {});
  EXPECT_FALSE(p->next(view(1, 4, 8, 3, 0, fwd, bwd)));  // 3 in flight = 4 - 1
  EXPECT_FALSE(p->next(view(0, 4, 8, 4, 0, fwd, bwd)));  // 4 in flight = 4 - 0
  EXPECT_FALSE(p->next(view(3, 4, 8, 5, 4, fwd, bwd)));  // last stage: one at a time
  // One slot frees up: the forward goes.
  EXPECT_TRUE(p->next(view(1, 4, 8, 3, 1, fwd, bwd)));
}

TEST(OneFOneBPolicy, WaitsWithNothingReady) {
  auto p = get("1f1b");
  auto none = make_set(4, {});
  EXPECT_FALSE(p->next(view(0, 2, 4, 0, 0, none, none)));
}

TEST(OneFOneBPolicy, NeverExceedsStagesMinusRankInFlight) {
  // Every reachable counter state and ready set of a small pipeline.
  auto p = get("1f1b");
  const int m = 5;
  for (int s = 1; s <= 4; ++s)
    for (int r = 0; r < s; ++r)
      for (int f = 0; f <= m; ++f)
        for (int b = 0; b <= f; ++b)
          for (int fmask = 0; fmask < (1 << m); ++fmask)
            for (int bmask : {0, 1, 6}) {
              mb_set fwd, bwd;
              fwd.reset(m);
              bwd.reset(m);
              for (int i = 0; i < m; ++i) {
                if (fmask & (1 << i)) fwd.insert(i);
                if (bmask & (1 << i)) bwd.insert(i);
              }
              auto op = p->next(view(r, s, m, f, b, fwd, bwd));
              if (!op) {
                // It waits only when nothing may fire.
                EXPECT_TRUE(bwd.empty() && (fwd.empty() || f - b >= s - r));
                continue;
              }
              if (op->kind == op_kind::F) {
                EXPECT_TRUE(fwd.contains(op->mb));
                EXPECT_EQ(op->mb, fwd.lowest());
                EXPECT_LE(f - b + 1, s - r) << "S=" << s << " r=" << r << " f=" << f << " b=" << b;
              } else {
                EXPECT_TRUE(bwd.contains(op->mb));
                EXPECT_EQ(op->mb, bwd.lowest());
                // A backward only where no forward may go.
                EXPECT_TRUE(fwd.empty() || f - b >= s - r) << "S=" << s << " r=" << r << " f=" << f << " b=" << b;
              }
            }
}

// -- GPipe and naive ------------------------------------------------------------

TEST(GPipePolicy, FiresForwardWhileAnyIsReadyEvenWithBackwardsReady) {
  auto p = get("gpipe");
  auto fwd = make_set(4, {2, 3});
  auto bwd = make_set(4, {0});
  auto op = p->next(view(3, 4, 4, 2, 0, fwd, bwd));
  ASSERT_TRUE(op);
  EXPECT_EQ(*op, (op_id{op_kind::F, 2, 0}));
}

TEST(GPipePolicy, HasNoInFlightLimit) {
  auto p = get("gpipe");
  auto fwd = make_set(64, {40});
  auto none = make_set(64, {});
  auto op = p->next(view(3, 4, 64, 40, 0, fwd, none));
  ASSERT_TRUE(op);
  EXPECT_EQ(*op, (op_id{op_kind::F, 40, 0}));
}

TEST(GPipePolicy, BackwardOnlyAfterAllForwards) {
  auto p = get("gpipe");
  auto none = make_set(4, {});
  auto bwd = make_set(4, {1, 0});
  for (int f = 0; f < 4; ++f) EXPECT_FALSE(p->next(view(3, 4, 4, f, 0, none, bwd))) << f;
  auto op = p->next(view(3, 4, 4, 4, 0, none, bwd));
  ASSERT_TRUE(op);
  EXPECT_EQ(*op, (op_id{op_kind::B, 0, 0}));
}

TEST(NaivePolicy, DecidesExactlyLikeGPipe) {
  auto naive = get("naive");
  auto gpipe = get("gpipe");
  const int m = 4;
  for (int f = 0; f <= m; ++f)
    for (int b = 0; b <= f; ++b)
      for (int fmask = 0; fmask < (1 << m); ++fmask)
        for (int bmask = 0; bmask < (1 << m); ++bmask) {
          mb_set fwd, bwd;
          fwd.reset(m);
          bwd.reset(m);
          for (int i = 0; i < m; ++i) {
            if (fmask & (1 << i)) fwd.insert(i);
            if (bmask & (1 << i)) bwd.insert(i);
          }
          auto v = view(1, 3, m, f, b, fwd, bwd);
          auto a = naive->next(v), g = gpipe->next(v);
          ASSERT_EQ(a.has_value(), g.has_value());
          if (a) {
            EXPECT_EQ(*a, *g);
          }
        }
}

// -- the policies driven by the simulator (uniform costs) -------------------------

class EmergentOrder : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(EmergentOrder, GPipeEqualsCanonicalOrder) {
  auto [s, m] = GetParam();
  auto r = simulate(*get("gpipe"), s, m);
  ASSERT_FALSE(r.deadlock) << r.diagnosis;
  auto want = canonical_order("gpipe", s, m);
  for (int i = 0; i < s; ++i) EXPECT_EQ(to_string(r.order()[i]), to_string(want[i])) << "stage " << i;
  // Uniform costs: a step is 2(M + S - 1) units.
  EXPECT_DOUBLE_EQ(r.makespan, 2.0 * (m + s - 1));
}

TEST_P(EmergentOrder, OneFOneBEqualsCanonicalOrder) {
  auto [s, m] = GetParam();
  auto r = simulate(*get("1f1b"), s, m);
  ASSERT_FALSE(r.deadlock) << r.diagnosis;
  auto want = canonical_order("1f1b", s, m);
  for (int i = 0; i < s; ++i) EXPECT_EQ(to_string(r.order()[i]), to_string(want[i])) << "stage " << i;
  EXPECT_DOUBLE_EQ(r.makespan, 2.0 * (m + s - 1));
}

TEST_P(EmergentOrder, PeakInFlightOnStageZeroIsMinOfStagesAndMicrobatchesFor1F1B) {
  auto [s, m] = GetParam();
  auto r = simulate(*get("1f1b"), s, m);
  EXPECT_EQ(r.peak_stash[0], std::min(s, m));
  for (int i = 0; i < s; ++i) EXPECT_LE(r.peak_stash[i], s - i) << "stage " << i;
}

TEST_P(EmergentOrder, PeakInFlightOnStageZeroIsMicrobatchesForGPipe) {
  auto [s, m] = GetParam();
  auto r = simulate(*get("gpipe"), s, m);
  EXPECT_EQ(r.peak_stash[0], m);
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmergentOrder,
                         ::testing::Values(std::pair{1, 1}, std::pair{2, 4}, std::pair{4, 8},
                                           std::pair{4, 3}, std::pair{3, 5}),
                         [](const auto& info) {
                           return "S" + std::to_string(info.param.first) + "M" +
                                  std::to_string(info.param.second);
                         });

}  // namespace
}  // namespace actorpipe
