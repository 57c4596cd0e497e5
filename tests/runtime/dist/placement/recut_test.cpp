// runtime/dist/placement/recut: a shrink that cuts the model again over the
// processes left. Each case's expected pieces are worked out by hand from
// the placement rules (rank_placement.hpp: the keeper; heal_plan.hpp:
// donor_of) and balanced_partition's tie rule (earlier stages take more).
#include <gtest/gtest.h>

#include <stdexcept>

#include "runtime/dist/placement/recut.hpp"

namespace actorpipe {
namespace {

using pieces_t = std::vector<recut_piece>;

std::vector<int> owners_of(const rank_placement& p) {
  std::vector<int> out;
  for (int d = 0; d < p.dp(); ++d)
    for (int s = 0; s < p.pp(); ++s) out.push_back(p.owner(d, s));
  return out;
}

TEST(Recut, FourStagesLosingTheThirdProcessGoOnAsThreeWithEveryLayerFromMemory) {
  const rank_placement places(1, 4, 4);
  const recut r = recut_placement(places, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}, {2}, std::vector<int64_t>(8, 1), 4, false);
  ASSERT_EQ(r.why_not, "");
  EXPECT_EQ(r.kept, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(r.places.pp(), 3);
  EXPECT_EQ(r.places.world(), 3);
  EXPECT_EQ(owners_of(r.places), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(r.parts, (partition_t{{0, 2}, {3, 5}, {6, 7}}));
  EXPECT_FALSE(r.needs_disk);
  // Old stage 2's layers come from its keeper, stage 1's process (old rank
  // 1), under stage 2's own slot index.
  EXPECT_EQ(r.pieces.at(0), (pieces_t{{0, 0, 1, 0}, {1, 2, 2, 1}}));
  EXPECT_EQ(r.pieces.at(1), (pieces_t{{1, 3, 3, 1}, {2, 4, 5, 1}}));
  EXPECT_EQ(r.pieces.at(2), (pieces_t{{3, 6, 7, 3}}));
  EXPECT_EQ(describe_pieces(r),
            "stage 0 from rank 0's memory (layers 0-1), rank 1's memory (layer 2); stage 1 from rank 1's memory "
            "(layer 3), rank 1's memory (layers 4-5); stage 2 from rank 3's memory (layers 6-7)");
}

TEST(Recut, FromDiskEveryPieceIsReadFromTheCheckpoint) {
  const recut r =
      recut_placement(rank_placement(1, 4, 4), {{0, 1}, {2, 3}, {4, 5}, {6, 7}}, {2}, std::vector<int64_t>(8, 1), 4, true);
  ASSERT_EQ(r.why_not, "");
  EXPECT_TRUE(r.needs_disk);
  EXPECT_EQ(r.pieces.at(1), (pieces_t{{1, 3, 3, -1}, {2, 4, 5, -1}}));
}

TEST(Recut, TheCutFollowsTheCostsNotTheLayerCount) {
  // One heavy layer: the balanced cut of three stages gives it a stage of
  // its own.
  const recut r = recut_placement(rank_placement(1, 4, 4), {{0, 1}, {2, 3}, {4, 5}, {6, 7}}, {3},
                                  {1, 1, 1, 1, 1, 9, 1, 1}, 4, false);
  ASSERT_EQ(r.why_not, "");
  EXPECT_EQ(r.parts, balanced_partition({1, 1, 1, 1, 1, 9, 1, 1}, 3));
  EXPECT_EQ(r.parts, (partition_t{{0, 4}, {5, 5}, {6, 7}}));
  // Old stage 3 (layers 6-7) was on the lost rank 3: its keeper is stage 2's
  // process, rank 2.
  EXPECT_EQ(r.pieces.at(2), (pieces_t{{3, 6, 7, 2}}));
}

TEST(Recut, DataParallelKeepsOneCutForEveryReplicaAndTakesALostStageFromTheOtherReplica) {
  // dp 2 x pp 2 on 4: rank 1 ran replica 0's stage 1. Three workers hold
  // floor(3 / 2) = 1 stage per replica; old rank 3 holds none.
  const rank_placement places(2, 2, 4);
  const recut r = recut_placement(places, {{0, 1}, {2, 3}}, {1}, std::vector<int64_t>(4, 1), 2, false);
  ASSERT_EQ(r.why_not, "");
  EXPECT_EQ(r.kept, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(r.places.dp(), 2);
  EXPECT_EQ(r.places.pp(), 1);
  EXPECT_EQ(owners_of(r.places), (std::vector<int>{0, 1}));
  EXPECT_TRUE(r.places.owned(2).empty());
  EXPECT_EQ(r.parts, (partition_t{{0, 3}}));
  EXPECT_EQ(r.pieces.at(0), (pieces_t{{0, 0, 1, 0}, {3, 2, 3, 3}}));
  EXPECT_EQ(r.pieces.at(1), (pieces_t{{2, 0, 1, 2}, {3, 2, 3, 3}}));
  EXPECT_EQ(describe_pieces(r, {10, 11, 12, 13}),
            "stage 0 of replica 0 from rank 10's memory (layers 0-1), rank 13's memory (layers 2-3); stage 0 of "
            "replica 1 from rank 12's memory (layers 0-1), rank 13's memory (layers 2-3)");
}

TEST(Recut, ACoordinatorApartHoldsNoStageOfTheNewCut) {
  const rank_placement places = rank_placement::first(1, 3, 3, true);
  ASSERT_TRUE(places.owned(0).empty());
  const recut r = recut_placement(places, {{0, 1}, {2, 3}, {4, 5}}, {2}, std::vector<int64_t>(6, 1), 3, false);
  ASSERT_EQ(r.why_not, "");
  EXPECT_EQ(r.kept, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(owners_of(r.places), (std::vector<int>{1, 2}));
  EXPECT_TRUE(r.places.owned(0).empty());
  EXPECT_EQ(r.parts, (partition_t{{0, 2}, {3, 5}}));
  EXPECT_EQ(r.pieces.at(0), (pieces_t{{0, 0, 1, 1}, {1, 2, 2, 1}}));
  EXPECT_EQ(r.pieces.at(1), (pieces_t{{1, 3, 3, 1}, {2, 4, 5, 3}}));
}

TEST(Recut, NoneIsMadeWhereItCannotHelpAndItSaysWhy) {
  // dp 2 x pp 2 on 2 processes, one lost: one worker for two replicas.
  EXPECT_EQ(recut_placement(rank_placement(2, 2, 2), {{0, 1}, {2, 3}}, {1}, std::vector<int64_t>(4, 1), 2, false).why_not,
            "1 worker process is left for 2 replicas, which keep the same cut");
  // pp 2 over 4 processes (two joined and hold nothing): losing one leaves
  // three, but the config's 2 stages bound the cut, and so do 2 layers.
  const auto spare = rank_placement::of_owners(1, 2, 4, {0, 1});
  EXPECT_EQ(recut_placement(spare, {{0, 1}, {2, 3}}, {3}, std::vector<int64_t>(4, 1), 2, false).why_not,
            "the processes left hold 2 stages, one each, as before");
  EXPECT_EQ(recut_placement(spare, {{0, 0}, {1, 1}}, {3}, std::vector<int64_t>(2, 1), 4, false).why_not,
            "the processes left hold 2 stages, one each, as before");
  // Below the configured count, three workers may take three stages again.
  const recut up = recut_placement(spare, {{0, 1}, {2, 3}}, {3}, std::vector<int64_t>(4, 1), 3, false);
  EXPECT_EQ(up.why_not, "");
  EXPECT_EQ(up.places.pp(), 3);
  EXPECT_EQ(up.parts, (partition_t{{0, 1}, {2, 2}, {3, 3}}));
}

TEST(Recut, BadInputIsRefused) {
  EXPECT_THROW(recut_placement(rank_placement(1, 2, 2), {{0, 1}, {2, 3}}, {0, 1}, std::vector<int64_t>(4, 1), 2, false),
               std::invalid_argument);
  EXPECT_THROW(recut_placement(rank_placement(1, 2, 2), {{0, 3}}, {1}, std::vector<int64_t>(4, 1), 2, false),
               std::invalid_argument);
  EXPECT_THROW(recut_placement(rank_placement(1, 2, 2), {{0, 1}, {2, 3}}, {1}, std::vector<int64_t>(3, 1), 2, false),
               std::invalid_argument);
}

}  // namespace
}  // namespace actorpipe
