// runtime/model/partition: contiguous, non-empty stages with the smallest possible
// bottleneck, checked against brute force over every split.
#include "runtime/model/partition.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
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

}  // namespace
}  // namespace actorpipe
