// runtime/model/partition: contiguous, non-empty stages with the smallest possible
// bottleneck, checked against brute force over every split; the rebalance of a
// straggler by measured speed, checked the same way.
#include "runtime/model/partition.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

namespace actorpipe {
namespace {

int64_t stage_cost(const std::vector<int64_t>& costs, std::pair<int, int> range) {
  int64_t sum = 0;
  for (int i = range.first; i <= range.second; ++i) sum += costs[i];
  return sum;
}

int64_t bottleneck(const std::vector<int64_t>& costs, const partition_t& p) {
  int64_t worst = 0;
  for (auto r : p) worst = std::max(worst, stage_cost(costs, r));
  return worst;
}

/// Every split of costs into `stages` non-empty contiguous ranges.
std::vector<partition_t> all_splits(int n, int stages) {
  std::vector<partition_t> out;
  partition_t cur;
  std::function<void(int, int)> rec = [&](int begin, int left) {
    if (left == 1) {
      cur.emplace_back(begin, n - 1);
      out.push_back(cur);
      cur.pop_back();
      return;
    }
    for (int end = begin; end <= n - left; ++end) {
      cur.emplace_back(begin, end);
      rec(end + 1, left - 1);
      cur.pop_back();
    }
  };
  rec(0, stages);
  return out;
}

void expect_contiguous_cover(const partition_t& p, int n, int stages) {
  ASSERT_EQ(static_cast<int>(p.size()), stages);
  int next = 0;
  for (auto [b, e] : p) {
    EXPECT_EQ(b, next);
    EXPECT_LE(b, e) << "empty stage";
    next = e + 1;
  }
  EXPECT_EQ(next, n);
}

TEST(BalancedPartition, CoversAllLayersContiguouslyWithNoEmptyStage) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    int n = 1 + static_cast<int>(rng() % 12);
    std::vector<int64_t> costs(n);
    for (auto& c : costs) c = (rng() % 3 == 0) ? 0 : static_cast<int64_t>(rng() % 1000);
    for (int s = 1; s <= n; ++s) expect_contiguous_cover(balanced_partition(costs, s), n, s);
  }
}

TEST(BalancedPartition, BottleneckIsMinimalAgainstBruteForce) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 300; ++trial) {
    int n = 1 + static_cast<int>(rng() % 9);
    std::vector<int64_t> costs(n);
    for (auto& c : costs) c = (rng() % 4 == 0) ? 0 : static_cast<int64_t>(rng() % 50);
    for (int s = 1; s <= n; ++s) {
      int64_t best = INT64_MAX;
      for (const auto& split : all_splits(n, s)) best = std::min(best, bottleneck(costs, split));
      auto p = balanced_partition(costs, s);
      EXPECT_EQ(bottleneck(costs, p), best) << "trial " << trial << " n=" << n << " S=" << s;
    }
  }
}

TEST(BalancedPartition, AmongOptimalSplitsEarlierStagesTakeAsManyLayersAsTheyCan) {
  // The documented tie-break: the split whose stage ends are lexicographically
  // largest among all splits with the minimal bottleneck.
  std::mt19937 rng(99);
  for (int trial = 0; trial < 300; ++trial) {
    int n = 1 + static_cast<int>(rng() % 8);
    std::vector<int64_t> costs(n);
    for (auto& c : costs) c = (rng() % 3 == 0) ? 0 : static_cast<int64_t>(1 + rng() % 20);
    for (int s = 1; s <= n; ++s) {
      auto splits = all_splits(n, s);
      int64_t best = INT64_MAX;
      for (const auto& split : splits) best = std::min(best, bottleneck(costs, split));
      partition_t want;
      for (const auto& split : splits)
        if (bottleneck(costs, split) == best && (want.empty() || split > want)) want = split;
      EXPECT_EQ(balanced_partition(costs, s), want) << "trial " << trial << " S=" << s;
    }
  }
}

TEST(BalancedPartition, ParameterlessLayerStaysWithTheLayerBefore) {
  // linear, relu, linear, relu: each relu goes with its linear.
  EXPECT_EQ(balanced_partition({10, 0, 10, 0}, 2), (partition_t{{0, 1}, {2, 3}}));
  // Trailing activations after the last linear end up on the last stage.
  EXPECT_EQ(balanced_partition({10, 0, 10, 0, 0}, 2), (partition_t{{0, 1}, {2, 4}}));
  // No stage starts with a parameterless layer when it can be avoided.
  EXPECT_EQ(balanced_partition({5, 0, 5, 0, 5, 0}, 3), (partition_t{{0, 1}, {2, 3}, {4, 5}}));
}

TEST(BalancedPartition, MlpSplitOverTwoAndThreeStages) {
  // linear 64->256, relu, linear 256->256, relu, linear 256->10.
  const std::vector<int64_t> mlp = {64 * 256 + 256, 0, 256 * 256 + 256, 0, 256 * 10 + 10};
  // Two stages: cutting after layer 0 or 1 gives a bottleneck of
  // 65792 + 2570 = 68362; cutting later gives 82432. The relu goes left.
  EXPECT_EQ(balanced_partition(mlp, 2), (partition_t{{0, 1}, {2, 4}}));
  // Three stages: the 256x256 layer alone is the lower bound (65792).
  EXPECT_EQ(balanced_partition(mlp, 3), (partition_t{{0, 1}, {2, 3}, {4, 4}}));
  // As many stages as layers: one layer each.
  EXPECT_EQ(balanced_partition(mlp, 5), (partition_t{{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}}));
  EXPECT_EQ(balanced_partition(mlp, 1), (partition_t{{0, 4}}));
}

TEST(BalancedPartition, AllZeroCostsStillGiveNonEmptyStages) {
  expect_contiguous_cover(balanced_partition({0, 0, 0, 0}, 3), 4, 3);
  EXPECT_EQ(balanced_partition({0, 0, 0, 0}, 4), (partition_t{{0, 0}, {1, 1}, {2, 2}, {3, 3}}));
}

TEST(BalancedPartition, RejectsImpossibleStageCounts) {
  EXPECT_THROW(balanced_partition({1, 2, 3}, 0), std::invalid_argument);
  EXPECT_THROW(balanced_partition({1, 2, 3}, 4), std::invalid_argument);
  EXPECT_THROW(balanced_partition({}, 1), std::invalid_argument);
}


// --- rebalance_partition: the model, computed here independently ------------

/// Per-layer time cost: a zero cost counts as `floor` of the mean nonzero one.
std::vector<double> time_costs(const std::vector<int64_t>& costs, double floor) {
  const auto nonzero = std::count_if(costs.begin(), costs.end(), [](int64_t c) { return c > 0; });
  const double total = static_cast<double>(std::accumulate(costs.begin(), costs.end(), int64_t{0}));
  const double zero = nonzero > 0 ? floor * total / static_cast<double>(nonzero) : 1.0;
  std::vector<double> out(costs.size(), zero);
  for (size_t i = 0; i < costs.size(); ++i)
    if (costs[i] > 0) out[i] = static_cast<double>(costs[i]);
  return out;
}

double range_time(const std::vector<double>& time, std::pair<int, int> range) {
  double sum = 0;
  for (int i = range.first; i <= range.second; ++i) sum += time[i];
  return sum;
}

/// busy[s] / cost(old[s]); every busy here is positive.
std::vector<double> factors(const std::vector<double>& time, const partition_t& old, const std::vector<double>& busy) {
  std::vector<double> f;
  for (size_t s = 0; s < old.size(); ++s) f.push_back(busy[s] / range_time(time, old[s]));
  return f;
}

/// max over s of factor[s] * cost(split[s]).
double slowest(const std::vector<double>& time, const std::vector<double>& f, const partition_t& split) {
  double worst = 0;
  for (size_t s = 0; s < split.size(); ++s) worst = std::max(worst, f[s] * range_time(time, split[s]));
  return worst;
}

double least_slowest(const std::vector<double>& time, const std::vector<double>& f, int stages) {
  double best = INFINITY;
  for (const auto& split : all_splits(static_cast<int>(time.size()), stages)) best = std::min(best, slowest(time, f, split));
  return best;
}

int boundary_moves(const partition_t& a, const partition_t& b) {
  int sum = 0;
  for (size_t s = 0; s < a.size(); ++s) sum += std::abs(a[s].second - b[s].second);
  return sum;
}

/// The documented choice by brute force: the least slowest time, then the
/// least boundary movement from `old`, then the largest stage ends in order.
partition_t brute_force_rebalance(const std::vector<double>& time, const std::vector<double>& f, const partition_t& old) {
  const int stages = static_cast<int>(old.size());
  const double best = least_slowest(time, f, stages);
  partition_t want;
  for (const auto& split : all_splits(static_cast<int>(time.size()), stages)) {
    if (slowest(time, f, split) > best * (1 + 1e-10)) continue;
    if (want.empty() || boundary_moves(split, old) < boundary_moves(want, old) ||
        (boundary_moves(split, old) == boundary_moves(want, old) && split > want))
      want = split;
  }
  return want;
}

const partition_t three_by_three = {{0, 2}, {3, 5}, {6, 8}};

TEST(RebalancePartition, EqualSpeedsOnABalancedSplitStay) {
  const std::vector<int64_t> costs(9, 10);
  auto v = rebalance_partition(costs, three_by_three, {1.0, 1.01, 0.99}, 0.1);
  EXPECT_FALSE(v.move);
  EXPECT_EQ(v.parts, three_by_three);
  EXPECT_EQ(v.slowest, 1);
  EXPECT_NEAR(v.over_share, 0.01, 1e-12);  // mean 1.0
  // Giving stage 1 fewer layers puts 4 on a neighbour: 0.99 * 4/3 > 1.01.
  EXPECT_DOUBLE_EQ(v.predicted, 1.0);
}

TEST(RebalancePartition, AStageThreeTimesSlowerShedsLayers) {
  const std::vector<int64_t> costs(9, 10);
  const std::vector<double> busy = {1, 3, 1};
  auto v = rebalance_partition(costs, three_by_three, busy, 0.2);
  ASSERT_TRUE(v.move);
  EXPECT_EQ(v.slowest, 1);
  EXPECT_NEAR(v.over_share, 3 / (5.0 / 3) - 1, 1e-12);  // 0.8
  // Brute force: the split with the least slowest time is unique here.
  const auto time = time_costs(costs, 0.05);
  const auto f = factors(time, three_by_three, busy);
  const double best = least_slowest(time, f, 3);
  int optimal = 0;
  for (const auto& split : all_splits(9, 3))
    if (slowest(time, f, split) <= best * (1 + 1e-12)) {
      ++optimal;
      EXPECT_EQ(v.parts, split);
    }
  EXPECT_EQ(optimal, 1);
  EXPECT_LT(v.parts[1].second - v.parts[1].first + 1, 3);
  // By hand: per layer, stages 0 and 2 take 1/3, stage 1 takes 1. Four, one
  // and four layers make the slowest 4/3 where it was 3.
  EXPECT_EQ(v.parts, (partition_t{{0, 3}, {4, 4}, {5, 8}}));
  EXPECT_NEAR(v.predicted, 4.0 / 9, 1e-12);
}

TEST(RebalancePartition, BelowTheThresholdNothingMoves) {
  const std::vector<int64_t> costs(9, 10);
  auto v = rebalance_partition(costs, three_by_three, {1, 1.05, 1}, 0.1);
  EXPECT_FALSE(v.move);
  EXPECT_EQ(v.parts, three_by_three);
  EXPECT_NEAR(v.over_share, 1.05 / (3.05 / 3) - 1, 1e-12);
}

TEST(RebalancePartition, AStragglerThatCannotShedALayerStays) {
  // One layer a stage: no other split exists, so nothing is predicted faster.
  const partition_t one_each = {{0, 0}, {1, 1}, {2, 2}};
  auto v = rebalance_partition({5, 5, 5}, one_each, {1, 3, 1}, 0.2);
  EXPECT_GT(v.over_share, 0.2);
  EXPECT_DOUBLE_EQ(v.predicted, 1.0);
  EXPECT_FALSE(v.move);
  EXPECT_EQ(v.parts, one_each);
}

TEST(RebalancePartition, AnIdleStageTakesTheMeanFactorOfTheOthers) {
  // Six layers of cost 1, two a stage; stage 1 reports no busy time. Factors
  // 0.5, (0.5 + 1.5) / 2 = 1, 1.5: layer counts (4,1,1) and (3,2,1) both give
  // a slowest time of 2; (3,2,1) moves the stage ends by 1 + 1, (4,1,1) by 2 + 1.
  const partition_t old = {{0, 1}, {2, 3}, {4, 5}};
  auto v = rebalance_partition({1, 1, 1, 1, 1, 1}, old, {1, 0, 3}, 0.1);
  ASSERT_TRUE(v.move);
  EXPECT_EQ(v.slowest, 2);
  EXPECT_EQ(v.parts, (partition_t{{0, 2}, {3, 4}, {5, 5}}));
  EXPECT_NEAR(v.predicted, 2.0 / 3, 1e-12);  // the slowest was stage 2's 1.5 * 2
  EXPECT_EQ(v.parts, brute_force_rebalance(time_costs({1, 1, 1, 1, 1, 1}, 0.05), {0.5, 1, 1.5}, old));
}

TEST(RebalancePartition, BestSplitMatchesBruteForceOnRandomInputs) {
  std::mt19937 rng(2024);
  std::uniform_real_distribution<double> speed(0.1, 10.0);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 4 + static_cast<int>(rng() % 7), stages = 2 + static_cast<int>(rng() % 3);
    std::vector<int64_t> costs(n);
    for (auto& c : costs) c = (rng() % 4 == 0) ? 0 : static_cast<int64_t>(rng() % 101);
    const auto olds = all_splits(n, stages);
    const partition_t old = olds[rng() % olds.size()];
    std::vector<double> busy(stages);
    for (auto& b : busy) b = speed(rng);
    const auto time = time_costs(costs, 0.05);
    const auto f = factors(time, old, busy);
    const double before = slowest(time, f, old), best = least_slowest(time, f, stages);
    auto v = rebalance_partition(costs, old, busy, 0.0);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + describe_partition(old));
    EXPECT_NEAR(v.predicted * before, best, 1e-9 * best);
    if (v.move) {
      expect_contiguous_cover(v.parts, n, stages);
      EXPECT_NEAR(slowest(time, f, v.parts), best, 1e-9 * best);
    } else {
      EXPECT_EQ(v.parts, old);
      EXPECT_NEAR(before, best, 1e-9 * best) << "threshold 0: only an optimal split stays";
    }
  }
}

TEST(RebalancePartition, AmongEqualSplitsTheClosestToTheOldOneWins) {
  // Small integer costs and busy times make ties common.
  std::mt19937 rng(77);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 4 + static_cast<int>(rng() % 5), stages = 2 + static_cast<int>(rng() % 3);
    std::vector<int64_t> costs(n);
    for (auto& c : costs) c = static_cast<int64_t>(rng() % 4);
    const auto olds = all_splits(n, stages);
    const partition_t old = olds[rng() % olds.size()];
    std::vector<double> busy(stages);
    for (auto& b : busy) b = static_cast<double>(1 + rng() % 3);
    busy[0] += 1;  // never all equal: over_share > 0, so only an optimal split stays
    const auto time = time_costs(costs, 0.05);
    auto v = rebalance_partition(costs, old, busy, 0.0);
    EXPECT_EQ(v.parts, brute_force_rebalance(time, factors(time, old, busy), old))
        << "trial " << trial << ": " << describe_partition(old);
  }
}

TEST(RebalancePartition, RejectsInputsThatDoNotAgree) {
  const std::vector<int64_t> costs(9, 10);
  // Sizes: busy for two of three stages; stages covering 8 of 9 layers.
  EXPECT_THROW(rebalance_partition(costs, three_by_three, {1, 1}, 0.1), std::invalid_argument);
  EXPECT_THROW(rebalance_partition(costs, {{0, 2}, {3, 5}, {6, 7}}, {1, 1, 1}, 0.1), std::invalid_argument);
  EXPECT_THROW(rebalance_partition(costs, {}, {}, 0.1), std::invalid_argument);
  // Busy: all zero, negative, not a number.
  EXPECT_THROW(rebalance_partition(costs, three_by_three, {0, 0, 0}, 0.1), std::invalid_argument);
  EXPECT_THROW(rebalance_partition(costs, three_by_three, {1, -1, 1}, 0.1), std::invalid_argument);
  EXPECT_THROW(rebalance_partition(costs, three_by_three, {1, NAN, 1}, 0.1), std::invalid_argument);
  // Not contiguous from layer 0: a gap, an overlap, a late start, an empty stage.
  EXPECT_THROW(rebalance_partition(costs, {{0, 2}, {4, 5}, {6, 8}}, {1, 1, 1}, 0.1), std::invalid_argument);
  EXPECT_THROW(rebalance_partition(costs, {{0, 3}, {3, 5}, {6, 8}}, {1, 1, 1}, 0.1), std::invalid_argument);
  EXPECT_THROW(rebalance_partition(costs, {{1, 2}, {3, 5}, {6, 8}}, {1, 1, 1}, 0.1), std::invalid_argument);
  EXPECT_THROW(rebalance_partition(costs, {{0, 2}, {3, 2}, {3, 8}}, {1, 1, 1}, 0.1), std::invalid_argument);
  // Costs and floor.
  EXPECT_THROW(rebalance_partition({1, -1, 1}, {{0, 0}, {1, 2}}, {1, 1}, 0.1), std::invalid_argument);
  EXPECT_THROW(rebalance_partition(costs, three_by_three, {1, 1, 1}, 0.1, -0.5), std::invalid_argument);
}

TEST(DescribePartition, RangesAndSingleLayers) {
  EXPECT_EQ(describe_partition(three_by_three), "0-2 | 3-5 | 6-8");
  EXPECT_EQ(describe_partition({{0, 3}, {4, 4}, {5, 8}}), "0-3 | 4 | 5-8");
  EXPECT_EQ(describe_partition({{0, 0}}), "0");
  EXPECT_EQ(describe_partition({}), "");
}

}  // namespace
}  // namespace actorpipe
