// pipeline.rebalance's decisions over measured windows: the model's move
// once a stage is slow enough, nothing on noise, back to a faster split
// tried before when a move did not pay, and never the same exploration
// twice (runtime/model/rebalancer.hpp).
#include "runtime/model/rebalancer.hpp"

#include <gtest/gtest.h>

namespace actorpipe {
namespace {

// Nine layers of equal cost over three stages.
const std::vector<int64_t> kCosts(9, 10);
const partition_t kEven{{0, 2}, {3, 5}, {6, 8}};

// `steps` steps of `step_ms`, each stage busy `busy` per step, from `first`.
void feed(rebalancer& r, int64_t first, int steps, double step_ms, const std::vector<double>& busy) {
  for (int i = 0; i < steps; ++i) r.add(first + i, step_ms, busy);
}

TEST(Rebalancer, WaitsForAWholeWindowThenMovesLayersOffASlowStage) {
  rebalancer r(kCosts, 3, 0.2);
  r.start(kEven);
  feed(r, 1, 2, 30, {10, 30, 10});
  EXPECT_FALSE(r.check());  // two steps of a window of three
  feed(r, 3, 1, 30, {10, 30, 10});
  const auto move = r.check();
  ASSERT_TRUE(move);
  // Stage 1 three times slower per layer: the split that minimises the
  // slowest stage gives it one layer (3 x 10 = 30 against 4 x 10 = 40 for
  // its neighbours), the others four each.
  EXPECT_EQ(move->parts, (partition_t{{0, 3}, {4, 4}, {5, 8}}));
  EXPECT_NE(move->why.find("stage 1 busy 180 % of the mean over steps 1-3"), std::string::npos) << move->why;
  EXPECT_EQ(r.tried().at(kEven), 30);
}

TEST(Rebalancer, StagesWithinTheThresholdStay) {
  rebalancer r(kCosts, 2, 0.2);
  r.start(kEven);
  feed(r, 1, 2, 20, {10, 11.5, 10});
  EXPECT_FALSE(r.check());
  feed(r, 3, 2, 20, {10, 11.5, 10});
  EXPECT_FALSE(r.check());
}

// Stage 1 slow under the even split, the model's move, and that move
// slower (45 ms a step against 30): back to the even split, which runs
// from step 7 on.
void move_and_back(rebalancer& r) {
  r.start(kEven);
  feed(r, 1, 2, 30, {10, 30, 10});
  const auto first = r.check();
  ASSERT_TRUE(first);
  r.start(first->parts);
  feed(r, 4, 2, 45, {40, 10, 40});
  const auto back = r.check();
  ASSERT_TRUE(back);
  EXPECT_EQ(back->parts, kEven);
  EXPECT_NE(back->why.find("back to it"), std::string::npos) << back->why;
  r.start(back->parts);
}

// A move that made steps slower is undone, and the split it came from is
// not explored again: the layers settle.
TEST(Rebalancer, AMoveThatDidNotPayGoesBackAndIsNotTriedAgain) {
  rebalancer r(kCosts, 2, 0.2);
  move_and_back(r);
  // The same slow stage again: the model would move the same way; that was
  // tried, so the layers stay.
  feed(r, 7, 2, 30, {10, 30, 10});
  EXPECT_FALSE(r.check());
  feed(r, 9, 2, 30, {10, 30, 10});
  EXPECT_FALSE(r.check());
}

// Times measured apart drift (a host slows down for good): after going
// back from B to A, B is never gone back to, however A fares now.
TEST(Rebalancer, NoBackAndForthBetweenTwoSplits) {
  rebalancer r(kCosts, 2, 0.2);
  move_and_back(r);
  feed(r, 7, 2, 90, {30, 90, 30});  // everything slower now: 90 against the 45 measured under the other split
  EXPECT_FALSE(r.check());
  EXPECT_EQ(r.tried().at(kEven), 90);
}

TEST(Rebalancer, RefusesBadSettingsAndBusyTimesOfAnotherShape) {
  EXPECT_THROW(rebalancer(kCosts, 0, 0.2), std::invalid_argument);
  EXPECT_THROW(rebalancer(kCosts, 2, 0), std::invalid_argument);
  rebalancer r(kCosts, 2, 0.2);
  r.start(kEven);
  EXPECT_THROW(r.add(1, 10, {1, 2}), std::invalid_argument);
  // Two replicas: a stage counts as its slowest.
  r.add(1, 30, {10, 10, 10, 10, 30, 10});
  r.add(2, 30, {10, 10, 10, 10, 30, 10});
  const auto move = r.check();
  ASSERT_TRUE(move);
  EXPECT_EQ(move->parts, (partition_t{{0, 3}, {4, 4}, {5, 8}}));
}

}  // namespace
}  // namespace actorpipe
