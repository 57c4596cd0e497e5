// runtime/dist/placement/heal_plan: where a lost stage's live copy is, and the boundary
// every stage rolls back to, checked by hand on the meshes the heal tests
// run (the multi-process tests see them work end to end).
#include "runtime/dist/placement/heal_plan.hpp"

#include <gtest/gtest.h>

#include <map>
#include <utility>

#include "runtime/dist/transport/rendezvous.hpp"

namespace actorpipe {
namespace {

heal_plan replacing(std::vector<int> ranks) {
  heal_plan hp;
  hp.replaced = std::move(ranks);
  return hp;
}

void expect_donor(const donor& d, int rank, int index) {
  EXPECT_EQ(d.rank, rank);
  EXPECT_EQ(d.index, index);
}

TEST(HealPlan, TravelsAsOneLine) {
  heal_plan hp;
  hp.generation = 3;
  hp.resume_after = -1;
  hp.from_disk = true;
  hp.fired_through = 7;
  hp.replaced = {1, 4};
  const heal_plan back = heal_plan::decode(hp.encode());
  EXPECT_EQ(back.generation, 3u);
  EXPECT_EQ(back.resume_after, -1);
  EXPECT_TRUE(back.from_disk);
  EXPECT_EQ(back.fired_through, 7);
  EXPECT_EQ(back.replaced, (std::vector<int>{1, 4}));
  EXPECT_TRUE(back.was_replaced(4));
  EXPECT_FALSE(back.was_replaced(0));
  EXPECT_THROW(heal_plan::decode("3 -1 tape 7"), rendezvous_error);
  EXPECT_THROW(heal_plan::decode("three"), rendezvous_error);
  EXPECT_TRUE(back.members.empty());
  EXPECT_TRUE(back.sources.empty());
}

TEST(HealPlan, ARecutTravelsWithItsPartitionAndPieces) {
  heal_plan hp;
  hp.generation = 4;
  hp.resume_after = 11;
  hp.fired_through = 11;
  hp.members = {0, 1, 3};
  hp.parts = {{0, 2}, {3, 5}, {6, 7}};
  hp.pieces = {{0, {{0, 0, 1, 0}, {1, 2, 2, 1}}}, {1, {{1, 3, 3, 1}, {2, 4, 5, 1}}}, {2, {{3, 6, 7, 2}}}};
  const std::string line = hp.encode();
  EXPECT_EQ(line, "4 11 memory 11 ; 0 1 3 ; ; ; 0-2 3-5 6-7 ; 0:0:0:1:0 0:1:2:2:1 1:1:3:3:1 1:2:4:5:1 2:3:6:7:2");
  const heal_plan back = heal_plan::decode(line);
  EXPECT_EQ(back.members, hp.members);
  EXPECT_EQ(back.parts, hp.parts);
  EXPECT_EQ(back.pieces, hp.pieces);
  EXPECT_EQ(back.encode(), line);
  // A plan without pieces reads as before, and one with a bad piece is refused.
  EXPECT_TRUE(heal_plan::decode("4 11 memory 11 ; 0 1 3 ; ; ; 0-2 3-5 6-7").pieces.empty());
  for (const char* bad : {"4 11 memory 11 ; 0 1 ; ; ; 0-7 ; 0:0:0:1", "4 11 memory 11 ; 0 1 ; ; ; 0-7 ; 0:0:0:1:x",
                          "4 11 memory 11 ; 0 1 ; ; ; 0-7 ; 0:0:0:1:2:3", "4 11 memory 11 ; 0 1 ; ; ; 0-7 ; 0:0 ; 1"})
    EXPECT_THROW(heal_plan::decode(bad), rendezvous_error) << bad;
}

TEST(HealPlan, AReplacementTravelsWithItsMembersAndSources) {
  heal_plan hp;
  hp.generation = 2;
  hp.resume_after = 9;
  hp.fired_through = 9;
  hp.members = {0, 1, 3};
  hp.sources = {{3, 1}, {6, 2}};
  const heal_plan back = heal_plan::decode(hp.encode());
  EXPECT_EQ(back.generation, 2u);
  EXPECT_EQ(back.resume_after, 9);
  EXPECT_FALSE(back.from_disk);
  EXPECT_TRUE(back.replaced.empty());
  EXPECT_EQ(back.members, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(back.sources, (std::map<int, int>{{3, 1}, {6, 2}}));
  EXPECT_THROW(heal_plan::decode("2 9 memory 9 ; 0 1 ; 3-1"), rendezvous_error);
  EXPECT_THROW(heal_plan::decode("2 9 memory 9 ; 0 x ; 3:1"), rendezvous_error);
  EXPECT_THROW(heal_plan::decode("2 9 memory 9 ; 0 1"), rendezvous_error);
}

// Checked by hand: the survivors keep their stages, renumbered in rank
// order; a lost stage goes where its copy is, so that nothing travels.
TEST(ShrinkPlacement, LostStagesGoToTheProcessHoldingTheirCopy) {
  // pp 4 on 4, rank 2 gone: stage 2's copy is with its keeper, stage 1.
  const auto a = shrink_placement(rank_placement(1, 4, 4), {2}, false);
  EXPECT_EQ(describe_placement(a.places), "0 | 1 2 | 3");
  EXPECT_EQ(a.kept, (std::vector<int>{0, 1, 3}));
  EXPECT_TRUE(a.sources.empty());  // the keeper holds it under its own slot
  EXPECT_EQ(a.from, (std::map<int, int>{{2, 1}}));
  EXPECT_EQ(a.places.keeper(0, 3), 2);  // the last stage's copies go to rank 1 now
  EXPECT_EQ(a.places.keeper(0, 2), 0);
  // pp 4 on 4, rank 1 gone: to rank 0, the supervisor's.
  EXPECT_EQ(describe_placement(shrink_placement(rank_placement(1, 4, 4), {1}, false).places), "0 1 | 2 | 3");
  // dp 2 x pp 2 on 4, rank 3 (replica 1, stage 1) gone: to replica 0's
  // stage 1, kept there under slot 1.
  const auto b = shrink_placement(rank_placement(2, 2, 4), {3}, false);
  EXPECT_EQ(describe_placement(b.places), "0.0 | 0.1 1.1 | 1.0");
  EXPECT_EQ(b.sources, (std::map<int, int>{{3, 1}}));
  EXPECT_EQ(b.places.stage_group(1), (std::vector<int>{1}));
  // From disk: to the survivors with the fewest stages, lowest first.
  const auto c = shrink_placement(rank_placement(1, 4, 4), {1, 2}, true);
  EXPECT_EQ(describe_placement(c.places), "0 1 | 2 3");
  EXPECT_EQ(c.from, (std::map<int, int>{{1, -1}, {2, -1}}));
  EXPECT_THROW(shrink_placement(rank_placement(1, 2, 2), {0, 1}, false), std::invalid_argument);
}

// A coordinator apart is rank 0 and holds no stage: a lost stage goes to a
// worker, never to it, and its text shows "-" for it.
TEST(ShrinkPlacement, ACoordinatorApartNeverTakesALostStageFromDisk) {
  // pp 3 on 3 workers apart: "- | 0 | 1 | 2" (ranks 1 2 3). Rank 2 (stage 1)
  // gone from disk: kept 0 1 3 -> 0 1 2, loads 0 1 1; without the rule the
  // coordinator (load 0) would win, with it the lowest worker, new rank 1.
  const auto p = rank_placement::first(1, 3, 3, true);
  const auto a = shrink_placement(p, {2}, true);
  EXPECT_EQ(a.kept, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(describe_placement(a.places), "- | 0 1 | 2");
  EXPECT_TRUE(a.places.owned(0).empty());
  EXPECT_EQ(a.from, (std::map<int, int>{{1, -1}}));
  // Rank 1 (stage 0, worker RANK 0) gone from disk: kept 0 2 3, stage 0 to
  // new rank 1 (loads 1 1: the lowest).
  const auto b = shrink_placement(p, {1}, true);
  EXPECT_EQ(b.kept, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(describe_placement(b.places), "- | 0 1 | 2");
  EXPECT_EQ(b.from, (std::map<int, int>{{0, -1}}));
  // Two of three gone (ranks 1 and 3): both stages to the one worker left.
  const auto c = shrink_placement(p, {1, 3}, true);
  EXPECT_EQ(c.kept, (std::vector<int>{0, 2}));
  EXPECT_EQ(describe_placement(c.places), "- | 0 1 2");
  EXPECT_EQ(c.from, (std::map<int, int>{{0, -1}, {2, -1}}));
  // dp 2 x pp 2 on 2 workers apart ("- | 0.0 0.1 | 1.0 1.1"), rank 2 gone
  // from disk: replica 1 to the other worker, not to the idle coordinator.
  const auto d = shrink_placement(rank_placement::first(2, 2, 2, true), {2}, true);
  EXPECT_EQ(describe_placement(d.places), "- | 0.0 0.1 1.0 1.1");
  EXPECT_EQ(d.from, (std::map<int, int>{{2, -1}, {3, -1}}));
  // Every worker gone: the coordinator apart is no place for a stage.
  EXPECT_THROW(shrink_placement(rank_placement::first(1, 2, 2, true), {1, 2}, true), std::invalid_argument);
  EXPECT_THROW(shrink_placement(rank_placement::first(1, 2, 1, true), {1}, false), std::invalid_argument);
}

TEST(ShrinkPlacement, ACoordinatorApartLosingStageZerosWorkerHealsFromTheLaterKeeper) {
  // pp 3 on 3 workers apart, rank 1 (stage 0) gone from memory: stage 0's
  // keeper is stage 1 (rank 2), so stage 0 goes there under its own slot.
  const auto p = rank_placement::first(1, 3, 3, true);
  const auto a = shrink_placement(p, {1}, false);
  EXPECT_EQ(a.kept, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(describe_placement(a.places), "- | 0 1 | 2");
  EXPECT_EQ(a.from, (std::map<int, int>{{0, 2}}));
  EXPECT_TRUE(a.sources.empty());
  // Rank 2 (stage 1) gone: kept by stage 0 (rank 1), as without a coordinator.
  const auto b = shrink_placement(p, {2}, false);
  EXPECT_EQ(describe_placement(b.places), "- | 0 1 | 2");
  EXPECT_EQ(b.from, (std::map<int, int>{{1, 1}}));
}

TEST(HealPlan, ACoordinatorApartsStageZeroIsDonatedByItsLaterKeeper) {
  const auto p = rank_placement::first(1, 3, 3, true);  // stage s on rank s + 1
  expect_donor(donor_of(p, replacing({1}), 0, 0), 2, 0);
  expect_donor(donor_of(p, replacing({2}), 0, 1), 1, 1);
  // Stage 0's keeper (stage 1, rank 2) went with it: nothing in memory.
  expect_donor(donor_of(p, replacing({1, 2}), 0, 0), -1, -1);
}

TEST(DescribePlacement, AProcessWithNoStageShowsADash) {
  EXPECT_EQ(describe_placement(rank_placement::first(1, 3, 3, true)), "- | 0 | 1 | 2");
  EXPECT_EQ(describe_placement(rank_placement::first(2, 2, 4, true)), "- | 0.0 | 0.1 | 1.0 | 1.1");
  EXPECT_EQ(describe_placement(rank_placement::first(1, 3, 3, false)), "0 | 1 | 2");
  // A stageless process anywhere, not only rank 0.
  EXPECT_EQ(describe_placement(rank_placement::of_owners(1, 2, 3, {0, 2})), "0 | - | 1");
}

TEST(GrowPlacement, AJoinerTakesTheHighestSlotOfTheMostCrowdedProcessFromItsOwnMemory) {
  // After pp 4 lost rank 2 (0 | 1 2 | 3): the joiner, rank 3 now, takes
  // stage 2 from rank 1, which holds it under its own slot.
  const auto shrunk = shrink_placement(rank_placement(1, 4, 4), {2}, false).places;
  const auto a = grow_placement(shrunk, 1);
  EXPECT_EQ(a.taken, 1);
  EXPECT_EQ(describe_placement(a.places), "0 | 1 | 3 | 2");
  ASSERT_EQ(a.donors.size(), 1u);
  EXPECT_EQ(a.donors.at(2).rank, 1);
  EXPECT_EQ(a.donors.at(2).index, 2);
  EXPECT_EQ(a.from, (std::map<int, int>{{2, 1}}));
  EXPECT_EQ(a.places.keeper(0, 3), 2);  // stage 3's copies go to the joiner now
  // Two joiners, one crowded process: the second gets nothing.
  EXPECT_EQ(grow_placement(shrunk, 2).taken, 1);
  EXPECT_EQ(grow_placement(shrunk, 2).places.world(), 4);
  // Nobody holds two: nothing moves.
  const auto none = grow_placement(rank_placement(1, 4, 4), 1);
  EXPECT_EQ(none.taken, 0);
  EXPECT_EQ(describe_placement(none.places), "0 | 1 | 2 | 3");
  // Down to one process (0 1 2 3), three joiners: the highest stage first,
  // each from rank 0's memory.
  const auto alone = grow_placement(shrink_placement(rank_placement(1, 4, 4), {1, 2, 3}, false).places, 3);
  EXPECT_EQ(alone.taken, 3);
  EXPECT_EQ(describe_placement(alone.places), "0 | 3 | 2 | 1");
  for (int slot : {1, 2, 3}) EXPECT_EQ(alone.donors.at(slot).rank, 0);
  // dp 2 x pp 2 after losing replica 1's stage 1 (0.0 | 0.1 1.1 | 1.0):
  // back to one slot per process, that slot from its own process.
  const auto dp = grow_placement(shrink_placement(rank_placement(2, 2, 4), {3}, false).places, 1);
  EXPECT_EQ(describe_placement(dp.places), "0.0 | 0.1 | 1.0 | 1.1");
  EXPECT_EQ(dp.donors.at(3).rank, 1);
  EXPECT_EQ(dp.donors.at(3).index, 3);
}

TEST(HealPlan, AGrowsDonorsTravelWithThePlanAndOlderPlansStillRead) {
  heal_plan p;
  p.generation = 2;
  p.resume_after = 16;
  p.replaced = {3};
  p.members = {0, 1, 3, 4};
  p.donors[2] = {1, 2};
  const heal_plan q = heal_plan::decode(p.encode());
  EXPECT_EQ(q.members, p.members);
  EXPECT_EQ(q.replaced, p.replaced);
  ASSERT_EQ(q.donors.size(), 1u);
  EXPECT_EQ(q.donors.at(2).rank, 1);
  EXPECT_EQ(q.donors.at(2).index, 2);
  EXPECT_TRUE(heal_plan::decode("1 3 memory -1 ; 0 1 3 ; ").donors.empty());
  EXPECT_THROW(heal_plan::decode("2 16 memory -1 3 ; 0 1 3 4 ; ; 2:1"), rendezvous_error);
}

// A rebalance's partition travels as a fifth section; a plan with only a
// partition still writes the sections before it, and a range that does not
// parse is refused.
TEST(HealPlan, ARebalancesPartitionTravelsWithThePlan) {
  heal_plan p;
  p.generation = 3;
  p.resume_after = 8;
  p.parts = {{0, 5}, {6, 7}, {8, 13}};
  const heal_plan q = heal_plan::decode(p.encode());
  EXPECT_EQ(q.parts, p.parts);
  EXPECT_TRUE(q.members.empty());
  EXPECT_TRUE(q.donors.empty());
  EXPECT_EQ(q.resume_after, 8);
  p.donors[2] = {1, 2};
  EXPECT_EQ(heal_plan::decode(p.encode()).parts, p.parts);
  EXPECT_EQ(heal_plan::decode(p.encode()).donors.at(2).rank, 1);
  EXPECT_TRUE(heal_plan::decode("2 16 memory -1 ; 0 1 ; ; 2:1:2").parts.empty());
  EXPECT_THROW(heal_plan::decode("3 8 memory -1 ; ; ; ; 0-5 6"), rendezvous_error);
  EXPECT_THROW(heal_plan::decode("3 8 memory -1 ; ; ; ; 0-x"), rendezvous_error);
}

TEST(HealPlan, WithReplicasTheDonorIsTheSameStageOfALiveReplica) {
  const rank_placement p(2, 2, 4);  // rank = replica * 2 + stage
  expect_donor(donor_of(p, replacing({3}), 1, 1), 1, 1);
  expect_donor(donor_of(p, replacing({2}), 1, 0), 0, 0);
  expect_donor(donor_of(p, replacing({1}), 0, 1), 3, 3);
  // Both replicas of stage 1 gone: no live copy (and dp 2 has no keeper).
  expect_donor(donor_of(p, replacing({1, 3}), 1, 1), -1, -1);
}

TEST(HealPlan, AtDpOneTheDonorIsTheKeepersProcessHoldingTheSlotsOwnCopy) {
  const rank_placement p(1, 3, 3);
  expect_donor(donor_of(p, replacing({2}), 0, 2), 1, 2);
  expect_donor(donor_of(p, replacing({1}), 0, 1), 0, 1);
  // Stage 2's keeper (stage 1) went with it: nothing in memory.
  expect_donor(donor_of(p, replacing({1, 2}), 0, 2), -1, -1);
  expect_donor(donor_of(p, replacing({1, 2}), 0, 1), 0, 1);
  const rank_placement two_each(1, 4, 2);  // rank 1: stages 2 and 3, both kept by stage 1
  expect_donor(donor_of(two_each, replacing({1}), 0, 2), 0, 2);
  expect_donor(donor_of(two_each, replacing({1}), 0, 3), 0, 3);
}

// held(rank, slot) from a table; what is not in it is held nowhere.
held_steps table(std::map<std::pair<int, int>, std::vector<int64_t>> t) {
  return [t = std::move(t)](int rank, int slot) {
    auto it = t.find({rank, slot});
    return it == t.end() ? std::vector<int64_t>{} : it->second;
  };
}

TEST(HealPlan, EveryStageRollsBackToTheNewestBoundaryAllHold) {
  const rank_placement p(1, 3, 3);
  const heal_plan lost2 = replacing({2});
  // (rank, slot): rank 0 holds its own stage 0 and stage 1's copy, rank 1
  // its own stage 1 and stage 2's copy.
  EXPECT_EQ(newest_common_boundary(p, lost2, 5, table({{{0, 0}, {3, 4, 5}}, {{1, 1}, {3, 4, 5}}, {{1, 2}, {3, 4, 5}}})),
            5);
  // The keeper's copy of step 5 still on its way: one step back.
  EXPECT_EQ(newest_common_boundary(p, lost2, 5, table({{{0, 0}, {3, 4, 5}}, {{1, 1}, {3, 4, 5}}, {{1, 2}, {2, 3, 4}}})),
            4);
  // A stage that applied step 6 while the run failed holds it too; 5 is the
  // last step every stage finished.
  EXPECT_EQ(newest_common_boundary(p, lost2, 5, table({{{0, 0}, {4, 5, 6}}, {{1, 1}, {3, 4, 5}}, {{1, 2}, {3, 4, 5}}})),
            5);
  // Two steps behind (the dying sender's last copy lost, the one before
  // it still on its way under load): the third newest.
  EXPECT_EQ(newest_common_boundary(p, lost2, 5, table({{{0, 0}, {3, 4, 5}}, {{1, 1}, {3, 4, 5}}, {{1, 2}, {1, 2, 3}}})),
            3);
  // Three steps behind: not from memory (later arrivals could push it out).
  EXPECT_EQ(newest_common_boundary(p, lost2, 5,
                                   table({{{0, 0}, {2, 3, 4, 5}}, {{1, 1}, {2, 3, 4, 5}}, {{1, 2}, {0, 1, 2}}})),
            std::nullopt);
  // Before the first step: the copies sent when the stages were wired.
  EXPECT_EQ(newest_common_boundary(p, lost2, -1, table({{{0, 0}, {-1}}, {{1, 1}, {-1}}, {{1, 2}, {-1}}})), -1);
  // A keeper that went too.
  EXPECT_EQ(newest_common_boundary(p, replacing({1, 2}), 5,
                                   table({{{0, 0}, {3, 4, 5}}, {{0, 1}, {3, 4, 5}}, {{1, 2}, {3, 4, 5}}})),
            std::nullopt);
  // A survivor that answered nothing.
  EXPECT_EQ(newest_common_boundary(p, lost2, 5, table({{{0, 0}, {3, 4, 5}}, {{1, 2}, {3, 4, 5}}})), std::nullopt);
}

TEST(HealPlan, TheLastingBoundariesAreEveryKthAndTheGenerationsStart) {
  const copy_rule every3{3, -1};  // lasting: -1, 2, 5, 8, ...
  EXPECT_TRUE(every3.lasting(-1));
  EXPECT_TRUE(every3.lasting(5));
  EXPECT_FALSE(every3.lasting(6));
  EXPECT_EQ(every3.newest_lasting(7), 5);
  EXPECT_EQ(every3.newest_lasting(8), 8);
  EXPECT_EQ(every3.newest_lasting(1), -1);
  const copy_rule from6{3, 6};  // a generation that started after step 6
  EXPECT_TRUE(from6.lasting(6));
  EXPECT_EQ(from6.newest_lasting(7), 6);
  EXPECT_EQ(from6.newest_lasting(9), 8);
  EXPECT_EQ(copy_rule{}.newest_lasting(4), 4);
}

TEST(HealPlan, WithCopiesEveryKStepsEveryStageRollsBackToTheKeepersNewestCopy) {
  const rank_placement p(1, 3, 3);
  const heal_plan lost2 = replacing({2});
  const copy_rule every3{3, -1};
  // Every stage keeps its boundaries after steps 2 and 5 only (and the
  // start); the keeper (rank 1) holds stage 2's copies of them.
  const auto held = [](std::vector<int64_t> kept) {
    return table({{{0, 0}, {-1, 2, 5}}, {{1, 1}, {-1, 2, 5}}, {{1, 2}, std::move(kept)}});
  };
  EXPECT_EQ(newest_common_boundary(p, lost2, 7, held({-1, 2, 5}), every3), 5);
  // The copy after step 5 never arrived: the one before it.
  EXPECT_EQ(newest_common_boundary(p, lost2, 7, held({-1, 2}), every3), 2);
  // With k = 1 (every step kept) a copy three steps back is not a candidate.
  EXPECT_EQ(newest_common_boundary(p, lost2, 7,
                                   table({{{0, 0}, {4, 5, 6, 7}}, {{1, 1}, {4, 5, 6, 7}}, {{1, 2}, {3, 4}}})),
            std::nullopt);
  // Upto a lasting step whose copy is in: no step lost.
  EXPECT_EQ(newest_common_boundary(p, lost2, 8,
                                   table({{{0, 0}, {2, 5, 8}}, {{1, 1}, {2, 5, 8}}, {{1, 2}, {2, 5, 8}}}), every3),
            8);
  // The third newest lasting, and older than that (later arrivals could
  // push it out).
  EXPECT_EQ(newest_common_boundary(p, lost2, 10,
                                   table({{{0, 0}, {-1, 2, 5, 8}}, {{1, 1}, {-1, 2, 5, 8}}, {{1, 2}, {-1, 2}}}), every3),
            2);
  EXPECT_EQ(newest_common_boundary(p, lost2, 10,
                                   table({{{0, 0}, {-1, 2, 5, 8}}, {{1, 1}, {-1, 2, 5, 8}}, {{1, 2}, {-1}}}), every3),
            std::nullopt);
  // A generation that started after step 6: its start is lasting, and the
  // lasting one before it (5, from the generation before) too.
  const copy_rule from6{3, 6};
  EXPECT_EQ(newest_common_boundary(p, lost2, 7, table({{{0, 0}, {2, 5, 6}}, {{1, 1}, {2, 5, 6}}, {{1, 2}, {2, 5, 6}}}),
                                   from6),
            6);
  EXPECT_EQ(newest_common_boundary(p, lost2, 7, table({{{0, 0}, {2, 5, 6}}, {{1, 1}, {2, 5, 6}}, {{1, 2}, {2, 5}}}),
                                   from6),
            5);
}

TEST(HealPlan, WithReplicasTheLostSlotsStepsAreItsDonorsOwn) {
  const rank_placement p(2, 2, 4);
  const heal_plan lost3 = replacing({3});
  // Slot 3 (replica 1, stage 1) comes from rank 1's slot 1; rank 3's own
  // memory is gone with it and never asked.
  EXPECT_EQ(newest_common_boundary(p, lost3, 2,
                                   table({{{0, 0}, {0, 1, 2}}, {{1, 1}, {0, 1, 2}}, {{2, 2}, {0, 1, 2}}})),
            2);
  EXPECT_EQ(newest_common_boundary(p, lost3, 2, table({{{0, 0}, {0, 1, 2}}, {{1, 1}, {0, 1}}, {{2, 2}, {0, 1, 2}}})),
            1);
}

}  // namespace
}  // namespace actorpipe
