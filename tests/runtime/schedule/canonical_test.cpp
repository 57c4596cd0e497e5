// runtime/schedule/canonical: the textbook per-stage orders of GPipe and 1F1B, the
// analytic bubble, and the compact op text form.
#include "runtime/schedule/canonical.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "messages/ops.hpp"

namespace actorpipe {
namespace {

const std::vector<std::pair<int, int>> shapes = {{1, 1}, {2, 4}, {4, 8}, {4, 3}, {3, 5},
                                                 {8, 2}, {5, 16}};

// -- GPipe ----------------------------------------------------------------------

TEST(GPipeCanonical, EveryStageIsAllForwardsThenAllBackwards) {
  for (auto [s, m] : shapes) {
    auto order = canonical_order("gpipe", s, m);
    ASSERT_EQ(static_cast<int>(order.size()), s);
    std::string want;
    for (int i = 0; i < m; ++i) want += (want.empty() ? "F" : " F") + std::to_string(i);
    for (int i = 0; i < m; ++i) want += " B" + std::to_string(i);
    for (int r = 0; r < s; ++r) EXPECT_EQ(to_string(order[r]), want) << "S=" << s << " M=" << m << " r=" << r;
  }
}

TEST(GPipeCanonical, FourStagesEightMicrobatchesByHand) {
  auto order = canonical_order("gpipe", 4, 8);
  EXPECT_EQ(to_string(order[0]), "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7");
  EXPECT_EQ(to_string(order[3]), "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7");
}

TEST(NaiveCanonical, IsOneForwardThenOneBackward) {
  auto order = canonical_order("naive", 3, 8);
  ASSERT_EQ(order.size(), 3u);
  for (const auto& stage : order) EXPECT_EQ(to_string(stage), "F0 B0");
}

// -- 1F1B -----------------------------------------------------------------------

TEST(OneFOneBCanonical, FourStagesEightMicrobatchesByHand) {
  auto order = canonical_order("1f1b", 4, 8);
  ASSERT_EQ(order.size(), 4u);
  // Stage 0: three warm-up forwards, five F/B pairs, three cool-down backwards.
  EXPECT_EQ(to_string(order[0]), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(to_string(order[1]), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  EXPECT_EQ(to_string(order[2]), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  // The last stage has no warm-up: it alternates from the start.
  EXPECT_EQ(to_string(order[3]), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
}

TEST(OneFOneBCanonical, FewerMicrobatchesThanStagesByHand) {
  auto order = canonical_order("1f1b", 4, 2);
  EXPECT_EQ(to_string(order[0]), "F0 F1 B0 B1");
  EXPECT_EQ(to_string(order[2]), "F0 F1 B0 B1");
  EXPECT_EQ(to_string(order[3]), "F0 B0 F1 B1");
}

TEST(OneFOneBCanonical, WarmupIsMinOfStagesMinusRankMinusOneAndMicrobatches) {
  for (auto [s, m] : shapes) {
    auto order = canonical_order("1f1b", s, m);
    ASSERT_EQ(static_cast<int>(order.size()), s);
    for (int r = 0; r < s; ++r) {
      const auto& ops = order[r];
      // Leading forwards before the first backward = warm-up + the first
      // steady-state forward (when there is a steady state).
      int warmup = std::min(s - r - 1, m);
      int leading = 0;
      while (leading < static_cast<int>(ops.size()) && ops[leading].kind == op_kind::F) ++leading;
      EXPECT_EQ(leading, warmup < m ? warmup + 1 : m) << "S=" << s << " M=" << m << " r=" << r;
      // Steady state: F then B alternate, B(i) with F(i + warmup).
      int pos = warmup;
      for (int i = 0; i < m - warmup; ++i) {
        ASSERT_LT(pos + 1, static_cast<int>(ops.size()));
        EXPECT_EQ(ops[pos], (op_id{op_kind::F, warmup + i, 0}));
        EXPECT_EQ(ops[pos + 1], (op_id{op_kind::B, i, 0}));
        pos += 2;
      }
      // Cool-down: only backwards, in order.
      for (int i = m - warmup; i < m; ++i, ++pos) EXPECT_EQ(ops[pos], (op_id{op_kind::B, i, 0}));
      EXPECT_EQ(pos, 2 * m);
    }
  }
}

// -- properties shared by both schedules ----------------------------------------

TEST(CanonicalOrder, EachForwardAndBackwardOnceAndBackwardAfterItsForward) {
  for (const char* sched : {"gpipe", "1f1b"})
    for (auto [s, m] : shapes)
      for (const auto& ops : canonical_order(sched, s, m)) {
        ASSERT_EQ(static_cast<int>(ops.size()), 2 * m) << sched;
        std::vector<int> f_at(m, -1), b_at(m, -1);
        for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
          const auto& op = ops[i];
          ASSERT_GE(op.mb, 0);
          ASSERT_LT(op.mb, m);
          EXPECT_EQ(op.chunk, 0);
          auto& at = op.kind == op_kind::F ? f_at : b_at;
          EXPECT_EQ(at[op.mb], -1) << sched << ": " << to_string(op) << " twice";
          at[op.mb] = i;
        }
        for (int i = 0; i < m; ++i) {
          EXPECT_GE(f_at[i], 0);
          EXPECT_GT(b_at[i], f_at[i]) << sched << " S=" << s << " M=" << m << " mb " << i;
        }
      }
}

TEST(CanonicalOrder, BackwardsRunInAscendingMicrobatchOrder) {
  // Deterministic accumulation needs B in ascending microbatch order.
  for (const char* sched : {"gpipe", "1f1b"})
    for (auto [s, m] : shapes)
      for (const auto& ops : canonical_order(sched, s, m)) {
        int next_b = 0, next_f = 0;
        for (const auto& op : ops) {
          if (op.kind == op_kind::B)
            EXPECT_EQ(op.mb, next_b++) << sched;
          else
            EXPECT_EQ(op.mb, next_f++) << sched;
        }
      }
}

TEST(CanonicalOrder, ZbH1ForFourStagesAndEightMicrobatchesByHand) {
  // Stage r keeps at most r weight gradients pending; the rest close the step.
  auto order = canonical_order("zb-h1", 4, 8);
  EXPECT_EQ(to_string(order[0]),
            "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7");
  EXPECT_EQ(to_string(order[3]),
            "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7");
}

TEST(CanonicalOrder, ZbVForTwoStagesAndFourMicrobatchesByHand) {
  // Rank 1 holds virtual stages 1 and 2 (the V's turn): a warm-up of one
  // chunk-0 forward, a (F1, F0) pair, then chunk 1's F I W.
  auto order = canonical_order("zb-v", 2, 4);
  EXPECT_EQ(to_string(order[1]),
            "F0 F0.1 F1 F1.1 B0.1 W0.1 F2 B0 W0 F2.1 B1.1 W1.1 F3 B1 W1 F3.1 B2.1 W2.1 B2 B3.1 B3 W2 "
            "W3.1 W3");
  EXPECT_EQ(to_string(order[0]),
            "F0 F1 F2 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F3 B0 W0 F2.1 B2.1 W2.1 B1 W1 F3.1 B3.1 W3.1 B2 "
            "W2 B3 W3");
}

// -- DualPipeV --------------------------------------------------------------

#ifndef ACTORPIPE_TEST_DATA
#define ACTORPIPE_TEST_DATA "tests/data"
#endif

// The reference file's form: an overlapped pair is "F<mb>+B<mb>.<c>".
std::string program_text(const canonical::stage_program& p) {
  std::string out;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    out += (out.empty() ? "" : " ") + to_string(p.ops[i]);
    if (p.overlap[i]) out += "+" + to_string(p.ops[++i]);
  }
  return out;
}

// tests/data/dualpipev_reference_orders.txt is traced from a mock of
// DeepSeek's dualpipev.py (tests/reference/dualpipev_reference_order.py):
// its calls, its microbatch counters and its FIFO of deferred W.
TEST(DualPipeVCanonical, EqualsTheOrderTracedFromDeepSeeksReference) {
  const std::string path = std::string(ACTORPIPE_TEST_DATA) + "/dualpipev_reference_orders.txt";
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << "missing " << path;
  std::string line;
  std::vector<std::pair<int, int>> seen;
  int lines = 0;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    int s = 0, m = 0, r = 0;
    char colon = 0;
    in >> s >> m >> r >> colon;
    ASSERT_EQ(colon, ':') << line;
    std::string want;
    std::getline(in >> std::ws, want);
    EXPECT_EQ(program_text(canonical::dualpipev_program(s, r, m)), want) << "S=" << s << " M=" << m << " rank " << r;
    if (seen.empty() || seen.back() != std::make_pair(s, m)) seen.emplace_back(s, m);
    ++lines;
  }
  // The three shapes are there, every rank of each.
  for (auto shape : std::vector<std::pair<int, int>>{{4, 8}, {4, 10}, {8, 16}})
    EXPECT_NE(std::find(seen.begin(), seen.end(), shape), seen.end()) << shape.first << "," << shape.second;
  EXPECT_EQ(lines, 4 + 4 + 8 + 2 + 2);
}

TEST(DualPipeVCanonical, EveryRankRunsEveryOpOnceWithWeightGradientsInMicrobatchOrder) {
  for (auto [s, m] : std::vector<std::pair<int, int>>{{2, 4}, {4, 8}, {4, 10}, {6, 12}, {8, 16}, {8, 40}}) {
    auto order = canonical_order("dualpipev", s, m);
    for (int r = 0; r < s; ++r) {
      ASSERT_EQ(order[r].size(), static_cast<size_t>(6 * m)) << s << " " << m << " " << r;
      // W per chunk in ascending microbatches: the weight gradients add up
      // in 1F1B's order, so the weights can match it bit for bit.
      int next_w[2] = {0, 0}, next_b[2] = {0, 0};
      for (const auto& op : order[r]) {
        if (op.kind == op_kind::W) EXPECT_EQ(op.mb, next_w[op.chunk]++);
        if (op.kind == op_kind::B) EXPECT_EQ(op.mb, next_b[op.chunk]++);
      }
      const auto prog = canonical::dualpipev_program(s, r, m);
      for (size_t i = 0; i < prog.ops.size(); ++i)
        if (prog.overlap[i]) {
          EXPECT_EQ(prog.ops[i].kind, op_kind::F);
          EXPECT_EQ(prog.ops[i + 1].kind, op_kind::B);
          EXPECT_NE(prog.ops[i].chunk, prog.ops[i + 1].chunk);
        }
    }
  }
}

TEST(DualPipeVCanonical, RefusesOddRanksAndTooFewMicrobatches) {
  EXPECT_THROW(canonical_order("dualpipev", 3, 8), std::invalid_argument);
  EXPECT_THROW(canonical_order("dualpipev", 4, 7), std::invalid_argument);
  EXPECT_THROW(canonical_order("dualpipev", 1, 8), std::invalid_argument);
  EXPECT_NO_THROW(canonical_order("dualpipev", 4, 8));
}

TEST(CanonicalOrder, UnknownScheduleThrows) {
  EXPECT_THROW(canonical_order("zb-h2", 4, 8), std::invalid_argument);
  EXPECT_THROW(canonical_order("", 4, 8), std::invalid_argument);
}

// -- analytic bubble ------------------------------------------------------------

TEST(AnalyticBubble, IsStagesMinusOneOverMicrobatchesPlusStagesMinusOne) {
  for (int s = 1; s <= 32; s *= 2)
    for (int m : {1, 3, 4, 8, 100}) {
      double want = static_cast<double>(s - 1) / (m + s - 1);
      EXPECT_DOUBLE_EQ(analytic_bubble("gpipe", s, m), want);
      EXPECT_DOUBLE_EQ(analytic_bubble("1f1b", s, m), want);
      EXPECT_DOUBLE_EQ(analytic_bubble("naive", s, m), static_cast<double>(s - 1) / s);
    }
}

TEST(AnalyticBubble, MatchesUniformCostMakespanOfTheCanonicalOrder) {
  // With unit F and B costs, a step lasts 2(M + S - 1) and each stage is busy
  // for 2M, so the idle share is (S-1)/(M+S-1).
  for (auto [s, m] : shapes) {
    double makespan = 2.0 * (m + s - 1), busy = 2.0 * m * s;
    EXPECT_NEAR(analytic_bubble("1f1b", s, m), 1.0 - busy / (s * makespan), 1e-12);
  }
  EXPECT_NEAR(analytic_bubble("gpipe", 4, 4), 3.0 / 7.0, 1e-12);
}

// -- op text form ---------------------------------------------------------------

TEST(OpText, ChunkZeroPrintsWithoutSuffix) {
  EXPECT_EQ(to_string(op_id{op_kind::F, 3, 0}), "F3");
  EXPECT_EQ(to_string(op_id{op_kind::B, 0, 1}), "B0.1");
  EXPECT_EQ(to_string(op_id{op_kind::W, 12, 2}), "W12.2");
  EXPECT_EQ(to_string(std::vector<op_id>{{op_kind::F, 0, 0}, {op_kind::B, 0, 0}}), "F0 B0");
  EXPECT_EQ(to_string(std::vector<op_id>{}), "");
}

TEST(OpText, ParseInvertsToString) {
  auto f3 = parse_op("F3");
  ASSERT_TRUE(f3);
  EXPECT_EQ(*f3, (op_id{op_kind::F, 3, 0}));
  auto b01 = parse_op("B0.1");
  ASSERT_TRUE(b01);
  EXPECT_EQ(*b01, (op_id{op_kind::B, 0, 1}));
  for (op_kind k : {op_kind::F, op_kind::B, op_kind::W})
    for (int mb : {0, 1, 9, 10, 511, 123456789})
      for (int chunk : {0, 1, 7, 42}) {
        op_id op{k, mb, chunk};
        auto back = parse_op(to_string(op));
        ASSERT_TRUE(back) << to_string(op);
        EXPECT_EQ(*back, op) << to_string(op);
      }
}

TEST(OpText, MalformedTextIsRejected) {
  for (const char* bad : {"", "F", "B", "3", "X3", "f3", "F-1", "F+1", "F 3", " F3", "F3 ", "F3.",
                          "F.1", "F3.1.2", "F3.-1", "Fx", "F3x", "FB3", "F1234567890"})
    EXPECT_FALSE(parse_op(bad).has_value()) << "'" << bad << "'";
}

}  // namespace
}  // namespace actorpipe
