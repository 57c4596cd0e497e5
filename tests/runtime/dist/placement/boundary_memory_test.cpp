// runtime/dist/placement/boundary_memory: which step boundaries a process keeps per slot
// (the four newest, or as many as asked), and that a kept copy comes back as it went in.
#include "runtime/dist/placement/boundary_memory.hpp"

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

TEST(BoundaryMemory, KeepsTheFourNewestPerSlot) {
  boundary_memory m;
  for (int64_t step = -1; step < 8; ++step) m.keep(0, step, marked(step));
  EXPECT_EQ(m.steps(0), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_FALSE(m.at(0, 3));
  EXPECT_TRUE(m.steps(1).empty());
  // Copies every third step (supervision.copy_every 3): after 2, 5, 8, 11.
  for (int64_t step : {-1, 2, 5, 8, 11}) m.keep(4, step, marked(step));
  EXPECT_EQ(m.steps(4), (std::vector<int64_t>{2, 5, 8, 11}));
}

// dp > 1 (a donor is a live replica): the step being applied and the one
// before; fewer than two is not a depth that can roll back an apply.
TEST(BoundaryMemory, KeepsAsManyAsAsked) {
  boundary_memory two(2), one(1);
  for (int64_t step = -1; step < 5; ++step) {
    two.keep(3, step, marked(step));
    one.keep(3, step, marked(step));
  }
  EXPECT_EQ(two.steps(3), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(one.steps(3), (std::vector<int64_t>{3, 4}));
  ASSERT_TRUE(two.at(3, 3));
  EXPECT_TRUE(torch::equal(two.at(3, 3)->weights[0].second, torch::full({2}, 3.0f)));
}

TEST(BoundaryMemory, AKeptCopyComesBackAsItWentIn) {
  boundary_memory m;
  m.keep(2, 4, marked(3));
  m.keep(2, 4, marked(4));  // the same step kept again (a re-run step) replaces it
  auto back = m.at(2, 4);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->rank, 1);
  ASSERT_EQ(back->weights.size(), 1u);
  EXPECT_TRUE(torch::equal(back->weights[0].second, torch::full({2}, 4.0f)));
  EXPECT_EQ(m.steps(2), (std::vector<int64_t>{4}));
}

// What a heal asks before it waits for a copy: whose copies are still on
// their way, one entry per sending process while any of its copies is.
TEST(BoundaryMemory, SaysWhoseCopiesAreStillArriving) {
  boundary_memory m;
  EXPECT_TRUE(m.arriving_from().empty());
  m.expect(2);
  m.expect(2);
  m.expect(1);
  EXPECT_EQ(m.arriving_from(), (std::vector<int32_t>{1, 2}));
  m.settle(2);
  EXPECT_EQ(m.arriving_from(), (std::vector<int32_t>{1, 2}));
  m.settle(2);
  m.settle(1);
  EXPECT_TRUE(m.arriving_from().empty());
  m.settle(1);  // one more than expected (a receive that failed twice) leaves nothing negative
  m.expect(1);
  EXPECT_EQ(m.arriving_from(), (std::vector<int32_t>{1}));
}

}  // namespace
}  // namespace actorpipe
