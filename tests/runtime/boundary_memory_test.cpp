// runtime/boundary_memory: which step boundaries a process keeps per slot
// (the three newest and the two newest lasting), and that a kept copy
// comes back as it went in.
#include "runtime/boundary_memory.hpp"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace actorpipe {
namespace {

stage_snapshot marked(int64_t step) {
  stage_snapshot s;
  s.rank = 1;
  s.weights.emplace_back("w", torch::full({2}, static_cast<float>(step)));
  return s;
}

TEST(BoundaryMemory, KeepsTheThreeNewestWhenNoneIsLasting) {
  boundary_memory m;
  for (int64_t step = -1; step < 8; ++step) m.keep(0, step, marked(step), false);
  EXPECT_EQ(m.steps(0), (std::vector<int64_t>{5, 6, 7}));
  EXPECT_FALSE(m.at(0, 4));
  EXPECT_TRUE(m.steps(1).empty());
}

TEST(BoundaryMemory, KeepsTheTwoNewestLastingBesideTheThreeNewest) {
  boundary_memory m;
  // Copies every third step: after -1 (the start), 2, 5, 8.
  for (int64_t step = -1; step < 11; ++step) m.keep(3, step, marked(step), step == -1 || (step + 1) % 3 == 0);
  EXPECT_EQ(m.steps(3), (std::vector<int64_t>{5, 8, 9, 10}));
  for (int64_t step = 11; step < 15; ++step) m.keep(3, step, marked(step), (step + 1) % 3 == 0);
  EXPECT_EQ(m.steps(3), (std::vector<int64_t>{11, 12, 13, 14}));  // 11 and 14 lasting
  // A keeper's copies, all lasting: the three newest.
  for (int64_t step : {2, 5, 8, 11}) m.keep(4, step, marked(step));
  EXPECT_EQ(m.steps(4), (std::vector<int64_t>{5, 8, 11}));
}

TEST(BoundaryMemory, AKeptCopyComesBackAsItWentIn) {
  boundary_memory m;
  m.keep(2, 4, marked(4), false);
  m.keep(2, 4, marked(4), true);  // the same step kept again (a re-run step) replaces it
  auto back = m.at(2, 4);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->rank, 1);
  ASSERT_EQ(back->weights.size(), 1u);
  EXPECT_TRUE(torch::equal(back->weights[0].second, torch::full({2}, 4.0f)));
  EXPECT_EQ(m.steps(2), (std::vector<int64_t>{4}));
}

}  // namespace
}  // namespace actorpipe
