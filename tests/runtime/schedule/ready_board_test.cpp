#include "runtime/schedule/ready_board.hpp"

#include <gtest/gtest.h>

#include "runtime/schedule/op_grid.hpp"

namespace actorpipe {
namespace {

TEST(ReadyBoard, AnInputAheadOfItsTurnWaitsForEveryEarlierMicrobatch) {
  ready_board b;
  b.reset(4, 1, false);
  EXPECT_TRUE(b.arrive(op_kind::F, 0, 2));
  EXPECT_TRUE(b.arrive(op_kind::F, 0, 1));
  EXPECT_FALSE(b.ready({op_kind::F, 1, 0}));  // F0 has not come
  EXPECT_EQ(b.queued_ops(), (std::vector<op_id>{{op_kind::F, 1, 0}, {op_kind::F, 2, 0}}));
  EXPECT_TRUE(b.arrive(op_kind::F, 0, 0));
  EXPECT_EQ(b.ready_ops(), (std::vector<op_id>{{op_kind::F, 0, 0}}));
  b.fire({op_kind::F, 0, 0});
  EXPECT_EQ(b.ready_ops(), (std::vector<op_id>{{op_kind::F, 1, 0}}));
  EXPECT_EQ(b.fwd_done(), 1);
  EXPECT_EQ(b.open(), 1);
}

TEST(ReadyBoard, ASecondCopyOrAnOutOfRangeInputIsRefused) {
  ready_board b;
  b.reset(2, 2, false);
  EXPECT_TRUE(b.arrive(op_kind::B, 1, 0));
  EXPECT_FALSE(b.arrive(op_kind::B, 1, 0));
  EXPECT_FALSE(b.arrive(op_kind::F, 2, 0));
  EXPECT_FALSE(b.arrive(op_kind::F, 0, 2));
  EXPECT_FALSE(b.arrive(op_kind::W, 0, 0));
  EXPECT_EQ(b.ready_ops(), (std::vector<op_id>{{op_kind::B, 0, 1}}));
}

TEST(ReadyBoard, ASplitBackwardMakesItsWeightGradientReadyAndClosesAtW) {
  ready_board b;
  b.reset(1, 1, true);
  b.arrive(op_kind::F, 0, 0);
  b.fire({op_kind::F, 0, 0});
  b.arrive(op_kind::B, 0, 0);
  b.fire({op_kind::B, 0, 0});
  EXPECT_TRUE(b.ready({op_kind::W, 0, 0}));
  EXPECT_EQ(b.open(), 1);
  EXPECT_FALSE(b.done());
  b.fire({op_kind::W, 0, 0});
  EXPECT_EQ(b.open(), 0);
  EXPECT_TRUE(b.done());
  EXPECT_THROW(b.fire({op_kind::W, 0, 0}), std::logic_error);
}

TEST(OpGrid, NamesWhatIsReadyQueuedAndWhatTheFirstMissingInputsWaitFor) {
  ready_board b;
  b.reset(3, 1, false);
  b.arrive(op_kind::F, 0, 0);
  b.arrive(op_kind::F, 0, 2);
  const placement plc{placement_kind::round_robin, 2, 1};
  EXPECT_EQ(op_grid_row("stage 1", {}, &b, plc, 1),
            "stage 1: fired []  ready, not chosen: [F0]  in order after them: [F2]; F1 waits for its input from "
            "stage 0; B0 waits for its own forward");
  EXPECT_EQ(op_grid_row("stage 0", {{op_kind::F, 0, 0}}, nullptr, plc, 0), "stage 0: fired [F0]");
}

}  // namespace
}  // namespace actorpipe
