// runtime/dist/placement/rank_placement: dp x pp stage actors dealt to ranks in equal
// consecutive blocks, checked by hand on the shapes a run uses and over
// every dp, pp in 1..6 and every world that divides dp x pp.
#include "runtime/dist/placement/rank_placement.hpp"
#include "runtime/dist/launch/rank_env.hpp"  // rank_env_error

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace actorpipe {
namespace {

using slots = std::vector<stage_slot>;

TEST(RankPlacement, OneStagePerRank_1x4_World4) {
  const rank_placement p(1, 4, 4);
  EXPECT_EQ(p.actors_per_rank(), 1);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(p.owner(0, s), s);
    EXPECT_EQ(p.owned(s), (slots{{0, s}}));
    EXPECT_EQ(p.stage_group(s), (std::vector<int>{s}));
  }
  EXPECT_EQ(p.neighbours(0, 0).prev, -1);
  EXPECT_EQ(p.neighbours(0, 0).next, 1);
  EXPECT_EQ(p.neighbours(0, 2).prev, 1);
  EXPECT_EQ(p.neighbours(0, 2).next, 3);
  EXPECT_EQ(p.neighbours(0, 3).next, -1);
  EXPECT_TRUE(p.remote(0, 2, p.neighbours(0, 2).prev));
  EXPECT_TRUE(p.remote(0, 2, p.neighbours(0, 2).next));
  EXPECT_FALSE(p.remote(0, 3, p.neighbours(0, 3).next));  // the end: no link at all
}

TEST(RankPlacement, TwoStagesPerRank_1x4_World2) {
  const rank_placement p(1, 4, 2);
  EXPECT_EQ(p.actors_per_rank(), 2);
  EXPECT_EQ(p.owned(0), (slots{{0, 0}, {0, 1}}));
  EXPECT_EQ(p.owned(1), (slots{{0, 2}, {0, 3}}));
  EXPECT_EQ(p.owner(0, 1), 0);
  EXPECT_EQ(p.owner(0, 2), 1);
  // Stage 1: previous stage in-process, next stage on rank 1.
  EXPECT_EQ(p.neighbours(0, 1).prev, 0);
  EXPECT_EQ(p.neighbours(0, 1).next, 1);
  EXPECT_FALSE(p.remote(0, 1, 0));
  EXPECT_TRUE(p.remote(0, 1, 1));
  // Stage 2: previous stage remote (rank 0), next stage in-process.
  EXPECT_EQ(p.neighbours(0, 2).prev, 0);
  EXPECT_EQ(p.neighbours(0, 2).next, 1);
  EXPECT_TRUE(p.remote(0, 2, 0));
  EXPECT_FALSE(p.remote(0, 2, 1));
  EXPECT_EQ(p.stage_group(3), (std::vector<int>{1}));
}

TEST(RankPlacement, TwoReplicasOfTwoStages_2x2_World4) {
  const rank_placement p(2, 2, 4);
  EXPECT_EQ(p.owned(0), (slots{{0, 0}}));
  EXPECT_EQ(p.owned(1), (slots{{0, 1}}));
  EXPECT_EQ(p.owned(2), (slots{{1, 0}}));
  EXPECT_EQ(p.owned(3), (slots{{1, 1}}));
  EXPECT_EQ(p.owner(1, 0), 2);
  EXPECT_EQ(p.neighbours(1, 0).prev, -1);
  EXPECT_EQ(p.neighbours(1, 0).next, 3);
  EXPECT_EQ(p.neighbours(1, 1).prev, 2);
  EXPECT_EQ(p.neighbours(1, 1).next, -1);
  EXPECT_EQ(p.stage_group(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(p.stage_group(1), (std::vector<int>{1, 3}));
}

TEST(RankPlacement, OneReplicaPerRank_2x4_World2) {
  const rank_placement p(2, 4, 2);
  EXPECT_EQ(p.owned(0), (slots{{0, 0}, {0, 1}, {0, 2}, {0, 3}}));
  EXPECT_EQ(p.owned(1), (slots{{1, 0}, {1, 1}, {1, 2}, {1, 3}}));
  for (int r = 0; r < 2; ++r)
    for (int s = 0; s < 4; ++s) {
      const auto n = p.neighbours(r, s);
      EXPECT_FALSE(p.remote(r, s, n.prev));  // a whole pipeline per process
      EXPECT_FALSE(p.remote(r, s, n.next));
    }
  for (int s = 0; s < 4; ++s) EXPECT_EQ(p.stage_group(s), (std::vector<int>{0, 1}));
}

TEST(RankPlacement, EverythingOnOneRank_1x3_World1) {
  const rank_placement p(1, 3, 1);
  EXPECT_EQ(p.owned(0), (slots{{0, 0}, {0, 1}, {0, 2}}));
  EXPECT_EQ(p.neighbours(0, 1).prev, 0);
  EXPECT_EQ(p.neighbours(0, 1).next, 0);
  EXPECT_EQ(p.stage_group(1), (std::vector<int>{0}));
  // Several replicas of a stage on one rank appear once in its group.
  EXPECT_EQ(rank_placement(4, 1, 2).stage_group(0), (std::vector<int>{0, 1}));
}

// The keeper of a stage's boundary copy (dp = 1 healing), by hand: the
// nearest earlier stage in another process, none for rank 0's stages.
TEST(RankPlacement, TheKeeperIsTheNearestEarlierStageInAnotherProcess) {
  const rank_placement one_each(1, 3, 3);
  EXPECT_EQ(one_each.keeper(0, 0), -1);
  EXPECT_EQ(one_each.keeper(0, 1), 0);
  EXPECT_EQ(one_each.keeper(0, 2), 1);
  const rank_placement two_each(1, 4, 2);  // rank 0: stages 0-1, rank 1: 2-3
  EXPECT_EQ(two_each.keeper(0, 1), -1);
  EXPECT_EQ(two_each.keeper(0, 2), 1);
  EXPECT_EQ(two_each.keeper(0, 3), 1);
  EXPECT_EQ(rank_placement(1, 3, 1).keeper(0, 2), -1);  // one process: nothing to heal
  EXPECT_EQ(rank_placement(2, 2, 4).keeper(1, 1), 0);   // replica 1's own stage 0
}

// A coordinator apart (launch --coordinator process) is rank 0 and holds no
// stage: first() deals the default blocks over the workers and shifts each
// owner up by one.
TEST(RankPlacement, ACoordinatorApartHoldsNoStage) {
  // dp 1 x pp 3 on 3 workers: owners 0 1 2 shifted to 1 2 3, world 4.
  const auto p = rank_placement::first(1, 3, 3, true);
  EXPECT_EQ(p.world(), 4);
  EXPECT_EQ(p.dp(), 1);
  EXPECT_EQ(p.pp(), 3);
  EXPECT_TRUE(p.owned(0).empty());
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(p.owner(0, s), s + 1);
    EXPECT_EQ(p.owned(s + 1), (slots{{0, s}}));
    EXPECT_EQ(p.stage_group(s), (std::vector<int>{s + 1}));
  }
  EXPECT_EQ(p.neighbours(0, 0).prev, -1);
  EXPECT_EQ(p.neighbours(0, 0).next, 2);
  EXPECT_EQ(p.neighbours(0, 2).prev, 2);
  EXPECT_EQ(p.neighbours(0, 2).next, -1);
  EXPECT_EQ(p.encode(), "1 3 4 1 2 3");
}

TEST(RankPlacement, ACoordinatorApartWithTwoReplicasShiftsEveryOwner) {
  // dp 2 x pp 2 on 4 workers: owners 0 1 2 3 -> 1 2 3 4, world 5.
  const auto four = rank_placement::first(2, 2, 4, true);
  EXPECT_EQ(four.world(), 5);
  EXPECT_TRUE(four.owned(0).empty());
  EXPECT_EQ(four.owned(1), (slots{{0, 0}}));
  EXPECT_EQ(four.owned(2), (slots{{0, 1}}));
  EXPECT_EQ(four.owned(3), (slots{{1, 0}}));
  EXPECT_EQ(four.owned(4), (slots{{1, 1}}));
  EXPECT_EQ(four.stage_group(0), (std::vector<int>{1, 3}));
  EXPECT_EQ(four.stage_group(1), (std::vector<int>{2, 4}));
  EXPECT_EQ(four.neighbours(1, 1).prev, 3);
  // dp 2 x pp 2 on 2 workers: a replica per worker, owners 0 0 1 1 -> 1 1 2 2.
  const auto two = rank_placement::first(2, 2, 2, true);
  EXPECT_EQ(two.encode(), "2 2 3 1 1 2 2");
  EXPECT_TRUE(two.owned(0).empty());
  EXPECT_EQ(two.owned(1), (slots{{0, 0}, {0, 1}}));
  EXPECT_EQ(two.owned(2), (slots{{1, 0}, {1, 1}}));
  EXPECT_EQ(two.stage_group(0), (std::vector<int>{1, 2}));
}

TEST(RankPlacement, WithoutACoordinatorApartFirstIsTheDefault) {
  const auto p = rank_placement::first(2, 2, 4, false);
  EXPECT_EQ(p.encode(), rank_placement(2, 2, 4).encode());
  EXPECT_EQ(p.encode(), "2 2 4 0 1 2 3");
  // The workers must still divide the actors, apart or not.
  EXPECT_THROW(rank_placement::first(1, 4, 3, true), rank_env_error);
  EXPECT_THROW(rank_placement::first(1, 4, 3, false), rank_env_error);
}

// Off rank 0, stage 0 has no earlier stage to keep its copy: the nearest
// later stage in another process keeps it, so that worker RANK 0 can be
// healed from memory too.
TEST(RankPlacement, ApartStageZerosKeeperIsTheNearestLaterStageInAnotherProcess) {
  // pp 3 on 3 workers apart: stage s on rank s + 1.
  const auto one_each = rank_placement::first(1, 3, 3, true);
  EXPECT_EQ(one_each.keeper(0, 0), 1);  // no earlier stage: stage 1 (rank 2)
  EXPECT_EQ(one_each.keeper(0, 1), 0);  // earlier, as before
  EXPECT_EQ(one_each.keeper(0, 2), 1);
  // pp 4 on 2 workers apart: rank 1 holds stages 0-1, rank 2 stages 2-3.
  // Stages 0 and 1 have no earlier stage elsewhere: stage 2 keeps both.
  const auto two_each = rank_placement::first(1, 4, 2, true);
  EXPECT_EQ(two_each.keeper(0, 0), 2);
  EXPECT_EQ(two_each.keeper(0, 1), 2);
  EXPECT_EQ(two_each.keeper(0, 2), 1);
  EXPECT_EQ(two_each.keeper(0, 3), 1);
  // pp 2 on 2 workers apart: each keeps the other's copy.
  const auto pair = rank_placement::first(1, 2, 2, true);
  EXPECT_EQ(pair.keeper(0, 0), 1);
  EXPECT_EQ(pair.keeper(0, 1), 0);
  // The whole replica on one worker (pp 3 on 1 worker apart): none.
  const auto alone = rank_placement::first(1, 3, 1, true);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(alone.keeper(0, s), -1) << s;
}

TEST(RankPlacement, StageZeroOnRankZeroStillHasNoKeeper) {
  // The default placement: stage 0 on rank 0, where the supervisor lives.
  EXPECT_EQ(rank_placement(1, 3, 3).keeper(0, 0), -1);
  EXPECT_EQ(rank_placement::first(1, 3, 3, false).keeper(0, 0), -1);
  const rank_placement two_each(1, 4, 2);  // rank 0: stages 0-1
  EXPECT_EQ(two_each.keeper(0, 0), -1);
  EXPECT_EQ(two_each.keeper(0, 1), -1);
  // Any placement with the first stages on rank 0: none, even though a
  // later stage runs elsewhere.
  const auto p = rank_placement::of_owners(1, 3, 2, {0, 0, 1});
  EXPECT_EQ(p.keeper(0, 0), -1);
  EXPECT_EQ(p.keeper(0, 1), -1);
  EXPECT_EQ(p.keeper(0, 2), 1);
}

// The later keeper is not only for a coordinator apart: in the default
// placement replica 1's stage 0 is off rank 0 too (dp 2 x pp 2 on 4: rank 2),
// so its keeper is stage 1 (rank 3). Only dp 1 uses keepers (donor_of, the
// copies channel), where stage 0 without a coordinator is on rank 0.
TEST(RankPlacement, AReplicasStageZeroOffRankZeroIsKeptByALaterStage) {
  const rank_placement p(2, 2, 4);
  EXPECT_EQ(p.keeper(0, 0), -1);  // rank 0
  EXPECT_EQ(p.keeper(1, 0), 1);   // rank 2, kept by stage 1 on rank 3
  EXPECT_EQ(p.keeper(1, 1), 0);
}

TEST(RankPlacement, WorldMustDivideActors) {
  const std::string line = "WORLD_SIZE 3 does not divide parallel.dp 2 x pipeline stages 4";
  try {
    check_rank_placement(2, 4, 3);
    FAIL() << "no error";
  } catch (const rank_env_error& e) {
    EXPECT_EQ(std::string(e.what()), line);
  }
  try {
    rank_placement(2, 4, 3);
    FAIL() << "no error";
  } catch (const rank_env_error& e) {
    EXPECT_EQ(std::string(e.what()), line);
  }
  EXPECT_THROW(check_rank_placement(2, 4, 16), rank_env_error);  // more ranks than actors
  EXPECT_THROW(check_rank_placement(0, 4, 1), rank_env_error);
  EXPECT_THROW(rank_placement(1, 4, 4).owner(0, 4), std::out_of_range);
  EXPECT_THROW(rank_placement(1, 4, 4).owned(4), std::out_of_range);
}

TEST(RankPlacement, EveryShapeDealsEqualConsecutiveBlocks) {
  for (int dp = 1; dp <= 6; ++dp)
    for (int pp = 1; pp <= 6; ++pp)
      for (int world = 1; world <= dp * pp; ++world) {
        if ((dp * pp) % world != 0) {
          EXPECT_THROW(check_rank_placement(dp, pp, world), rank_env_error);
          continue;
        }
        SCOPED_TRACE("dp " + std::to_string(dp) + " pp " + std::to_string(pp) + " world " + std::to_string(world));
        const rank_placement p(dp, pp, world);
        const int per = dp * pp / world;
        std::vector<int> owners(dp * pp, 0);
        for (int rank = 0; rank < world; ++rank) {
          const auto mine = p.owned(rank);
          ASSERT_EQ(static_cast<int>(mine.size()), per);
          for (int k = 0; k < per; ++k) {
            const int index = mine[k].replica * pp + mine[k].stage;
            EXPECT_EQ(index, rank * per + k);  // consecutive, in order
            EXPECT_EQ(p.owner(mine[k].replica, mine[k].stage), rank);
            ++owners[index];
          }
        }
        for (int count : owners) EXPECT_EQ(count, 1);  // each actor exactly once
        for (int s = 0; s < pp; ++s) {
          const auto group = p.stage_group(s);
          EXPECT_EQ(group.front(), p.owner(0, s));
          EXPECT_EQ(group.back(), p.owner(dp - 1, s));
          for (int r = 0; r < dp; ++r) {
            const auto n = p.neighbours(r, s);
            EXPECT_EQ(n.prev, s > 0 ? p.owner(r, s - 1) : -1);
            EXPECT_EQ(n.next, s + 1 < pp ? p.owner(r, s + 1) : -1);
            // The keeper is the nearest earlier stage in another process;
            // where all earlier ones share this one's process and that is
            // not rank 0 (replica 1 and up), the nearest later one in
            // another process. Every stage between them shares this one's;
            // none where there is neither, or all earlier share rank 0.
            const int k = p.keeper(r, s);
            const int mine = p.owner(r, s);
            bool earlier_elsewhere = false;
            for (int e = 0; e < s; ++e) earlier_elsewhere = earlier_elsewhere || p.owner(r, e) != mine;
            if (k < 0) {
              EXPECT_FALSE(earlier_elsewhere);
              if (mine != 0) {
                for (int e = s + 1; e < pp; ++e) EXPECT_EQ(p.owner(r, e), mine);
              }
            } else if (k < s) {
              EXPECT_NE(p.owner(r, k), mine);
              for (int e = k + 1; e < s; ++e) EXPECT_EQ(p.owner(r, e), mine);
            } else {
              EXPECT_GT(k, s);
              EXPECT_FALSE(earlier_elsewhere);
              EXPECT_NE(mine, 0);
              EXPECT_NE(p.owner(r, k), mine);
              for (int e = s + 1; e < k; ++e) EXPECT_EQ(p.owner(r, e), mine);
            }
          }
        }
      }
}

}  // namespace
}  // namespace actorpipe

namespace actorpipe {
namespace {

// A placement is a value the supervisor may choose: any stage actor on any
// rank, uneven too. Its questions answer from the table, and its text (what
// the store carries to every rank) gives it back whole.
TEST(RankPlacementValue, AnyOwnersAnswerFromTheTableAndRoundTripThroughText) {
  // dp 2 x pp 3 on 3 ranks, uneven: rank 0 holds (0,0) (0,1); rank 1
  // holds (0,2) (1,2); rank 2 holds (1,0) (1,1).
  const auto p = rank_placement::of_owners(2, 3, 3, {0, 0, 1, 2, 2, 1});
  EXPECT_EQ(p.owner(0, 2), 1);
  EXPECT_EQ(p.owner(1, 0), 2);
  EXPECT_EQ(p.owned(1), (std::vector<stage_slot>{{0, 2}, {1, 2}}));
  EXPECT_EQ(p.owned(2), (std::vector<stage_slot>{{1, 0}, {1, 1}}));
  EXPECT_EQ(p.neighbours(1, 1).prev, 2);
  EXPECT_EQ(p.neighbours(1, 1).next, 1);
  EXPECT_EQ(p.keeper(1, 2), 1);  // the nearest earlier stage in another process
  EXPECT_EQ(p.keeper(0, 1), -1);
  EXPECT_EQ(p.stage_group(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(p.stage_group(2), (std::vector<int>{1}));
  const auto back = rank_placement::decode(p.encode());
  EXPECT_EQ(back.encode(), "2 3 3 0 0 1 2 2 1");
  for (int d = 0; d < 2; ++d)
    for (int r = 0; r < 3; ++r) EXPECT_EQ(back.owner(d, r), p.owner(d, r));
  // The default placement is a value like any other.
  const rank_placement blocks(2, 2, 4);
  EXPECT_EQ(blocks.encode(), "2 2 4 0 1 2 3");
  EXPECT_EQ(rank_placement::decode(blocks.encode()).owned(3), blocks.owned(3));
}

// Two hosts of two processes each (launch --nnodes 2, pp 4): stage 3's
// nearest earlier stage in another process is stage 2, on its own host; a
// host lost whole would take the copy with it. With the hosts known, each
// stage is kept on the other host where it can be: stage 1 by stage 2
// (later: no earlier stage is away, and rank 1 is not rank 0), stages 2
// and 3 by stage 1. Stage 0 on rank 0 still has none.
TEST(RankPlacement, WithHostsKnownAStageIsKeptOnAnotherHost) {
  rank_placement p(1, 4, 4);
  EXPECT_EQ(p.keeper(0, 3), 2);
  p.set_hosts({0, 0, 1, 1});
  EXPECT_EQ(p.keeper(0, 0), -1);
  EXPECT_EQ(p.keeper(0, 1), 2);
  EXPECT_EQ(p.keeper(0, 2), 1);
  EXPECT_EQ(p.keeper(0, 3), 1);
  // One host: the rule without hosts.
  p.set_hosts({0, 0, 0, 0});
  EXPECT_EQ(p.keeper(0, 1), 0);
  EXPECT_EQ(p.keeper(0, 3), 2);
  // A coordinator apart (rank 0, no stage, host -1) on host A with one
  // worker; host B holds two: stage 2's keeper is stage 0 on host A.
  rank_placement apart = rank_placement::of_owners(1, 3, 4, {1, 2, 3});
  apart.set_hosts({-1, 0, 1, 1});
  EXPECT_EQ(apart.keeper(0, 0), 1);  // later, on host B
  EXPECT_EQ(apart.keeper(0, 1), 0);
  EXPECT_EQ(apart.keeper(0, 2), 0);
  // The hosts travel with the placement, and only as many as the ranks.
  p.set_hosts({0, 0, 1, 1});
  EXPECT_EQ(p.encode(), "1 4 4 0 1 2 3 hosts 0 0 1 1");
  const auto back = rank_placement::decode(p.encode());
  EXPECT_EQ(back.hosts(), p.hosts());
  EXPECT_EQ(back.keeper(0, 3), 1);
  EXPECT_THROW(p.set_hosts({0, 1}), std::invalid_argument);
  p.set_hosts({});
  EXPECT_EQ(p.encode(), "1 4 4 0 1 2 3");
}

TEST(RankPlacementValue, ATextThatIsNotAPlacementIsRefused) {
  for (const char* bad : {"", "2 3", "2 3 3 0 0 1", "2 3 3 0 0 1 2 2 9", "2 3 3 0 0 1 2 2 x", "0 1 1",
                          "1 2 2 0 1 hosts 0", "1 2 2 0 1 hosts 0 1 hosts", "1 2 2 0 1 hosts 0 y"})
    EXPECT_THROW(rank_placement::decode(bad), std::invalid_argument) << "'" << bad << "'";
  EXPECT_THROW(rank_placement::of_owners(1, 2, 2, {0, 2}), std::invalid_argument);
}

}  // namespace
}  // namespace actorpipe
