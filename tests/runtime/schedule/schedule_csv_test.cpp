// PyTorch pipelining's full schedule CSV: torch's own exports (fixtures in
// tests/data/schedule_csv, see make_schedule_fixtures.py there) import to
// the orders actorpipe's policies fire, their communication and sharding
// actions are noted once per kind, the compute_comms export reads back,
// and bad cells are named by row and column.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "runtime/schedule/canonical.hpp"
#include "runtime/schedule/policies/fixed_order.hpp"
#include "runtime/schedule/schedule_csv.hpp"
#include "runtime/schedule/simulator.hpp"

namespace actorpipe {
namespace {

constexpr int S = 4, M = 8;

std::string fixture(const std::string& name) {
  std::ifstream f(std::string(ACTORPIPE_TEST_DATA) + "/schedule_csv/" + name, std::ios::binary);
  EXPECT_TRUE(f) << name;
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

imported_schedule import(const std::string& name) { return read_schedule_csv(fixture(name), S, M, name); }

std::string error_of(const std::string& text, int stages = 2, int microbatches = 1) {
  try {
    read_schedule_csv(text, stages, microbatches, "s.csv");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

// The message of a cell that is no action, after "file:row:col: 'cell': ".
std::string syntax() {
  const std::string e = error_of("0X0\n1F0,1B0\n");
  return e.substr(std::string("s.csv:1:1: '0X0': ").size());
}

// The cells of each kind in the text, counted apart from the parser: a
// cell is {stage}{NAME}{microbatch}, or a compound, between commas.
std::map<std::string, int> kinds_in(const std::string& text) {
  std::map<std::string, int> out;
  std::regex cell("(^|,|\n)[ \t]*(\\(|[0-9]+([A-Z_]+)[0-9]*)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), cell); it != std::sregex_iterator(); ++it)
    ++out[(*it)[2] == "(" ? std::string("OVERLAP_F_B") : (*it)[3].str()];
  return out;
}

// The compute cells of a V-placed split file as ops, read apart from the
// parser: a compound's two in turn, a full B as I then W.
std::vector<std::vector<op_id>> compute_ops_of_v(const std::string& text) {
  std::vector<std::vector<op_id>> out;
  std::istringstream lines(text);
  std::string line;
  std::regex op("([0-9]+)([FBIW])([0-9]+)");
  while (std::getline(lines, line)) {
    out.emplace_back();
    for (auto it = std::sregex_iterator(line.begin(), line.end(), op); it != std::sregex_iterator(); ++it) {
      const int stage = std::stoi((*it)[1]), mb = std::stoi((*it)[3]);
      const char kind = (*it)[2].str()[0];
      const int chunk = stage < S ? 0 : 1;
      if (kind == 'F') out.back().push_back({op_kind::F, mb, chunk});
      if (kind == 'I' || kind == 'B') out.back().push_back({op_kind::B, mb, chunk});
      if (kind == 'W' || kind == 'B') out.back().push_back({op_kind::W, mb, chunk});
    }
  }
  return out;
}

int overlapped_pairs(const imported_schedule& imp) {
  int n = 0;
  for (const auto& rank : imp.overlap)
    for (char f : rank) n += f != 0;
  return n;
}

std::vector<std::string> notice_kinds(const imported_schedule& imp) {
  std::vector<std::string> out;
  for (const auto& n : imp.notices) out.push_back(n.action);
  return out;
}

// -- torch's exports import to actorpipe's orders ------------------------------------

struct torch_fixture {
  std::string file;      // in tests/data/schedule_csv
  std::string schedule;  // actorpipe's policy for the same order
  int chunks;
  placement_kind placement;
  bool split;
};

class TorchScheduleCsv : public ::testing::TestWithParam<torch_fixture> {};

TEST_P(TorchScheduleCsv, ImportsToTheCanonicalOrder) {
  const auto& p = GetParam();
  auto imp = import(p.file);
  EXPECT_EQ(imp.order, canonical_order(p.schedule, S, M, p.chunks));
  EXPECT_EQ(imp.placement, p.placement);
  EXPECT_EQ(imp.chunks, p.chunks);
  EXPECT_EQ(imp.split_backward, p.split);
  EXPECT_EQ(overlapped_pairs(imp), 0);
  ASSERT_EQ(imp.overlap.size(), imp.order.size());
  for (int r = 0; r < S; ++r) EXPECT_EQ(imp.overlap[r].size(), imp.order[r].size()) << r;
}

TEST_P(TorchScheduleCsv, RunsAsTheCanonicalPolicyDoes) {
  const auto& p = GetParam();
  auto imp = import(p.file);
  auto replay = simulate(fixed_order_policy(imp.order, imp.placement, imp.overlap), S, M);
  ASSERT_FALSE(replay.deadlock) << replay.diagnosis;
  auto own = simulate(p.schedule, S, M, {}, p.chunks);
  ASSERT_FALSE(own.deadlock) << own.diagnosis;
  EXPECT_EQ(replay.order(), own.order());
  EXPECT_DOUBLE_EQ(replay.makespan, own.makespan);
}

// The compute_comms form of the same schedule (torch lowers the schedules
// with several stages per rank) is the same order; every action kind it
// adds is noted once, counting all its cells.
class TorchScheduleCsvComms : public TorchScheduleCsv {};

TEST_P(TorchScheduleCsvComms, ImportsToTheSameOrderWithOneNoticePerKind) {
  const auto& p = GetParam();
  const std::string comms = p.file.substr(0, p.file.size() - 4) + "_comms.csv";
  const std::string text = fixture(comms);
  auto imp = read_schedule_csv(text, S, M, comms);
  auto plain = import(p.file);
  EXPECT_EQ(imp.order, plain.order);
  EXPECT_EQ(imp.placement, plain.placement);
  auto counted = kinds_in(text);
  std::vector<std::string> kinds = notice_kinds(imp);
  std::sort(kinds.begin(), kinds.end());
  EXPECT_EQ(kinds, (std::vector<std::string>{"RECV_B", "RECV_F", "REDUCE_GRAD", "RESHARD", "SEND_B", "SEND_F",
                                             "UNSHARD"}));
  for (const auto& n : imp.notices) {
    EXPECT_EQ(n.count, counted[n.action]) << n.action;
    EXPECT_GT(n.count, 0) << n.action;
    EXPECT_EQ(n.message.rfind(n.first + ": " + std::to_string(n.count) + " " + n.action, 0), 0u) << n.message;
    EXPECT_EQ(n.first.rfind(comms + ":", 0), 0u) << n.first;
  }
  // Every stage's gradients are reduced once, on its rank.
  for (int r = 0; r < S; ++r) {
    auto chunks = imp.reduce_grad[r];
    std::sort(chunks.begin(), chunks.end());
    EXPECT_EQ(chunks, (std::vector<int>{0, 1})) << r;
  }
}

// What actorpipe exports in torch's compute_comms form reads back to the
// same order; so does the compute_only form.
TEST_P(TorchScheduleCsv, ExportsReadBack) {
  const auto& p = GetParam();
  auto imp = import(p.file);
  for (auto format : {schedule_csv_format::compute_only, schedule_csv_format::compute_comms}) {
    schedule_csv_options opt;
    opt.split_backward = imp.split_backward;
    opt.placement = imp.placement;
    opt.overlap = imp.overlap;
    opt.format = format;
    const auto text = to_schedule_csv(imp.order, S, opt);
    auto back = read_schedule_csv(text, S, M, "export.csv");
    EXPECT_EQ(back.order, imp.order);
    EXPECT_EQ(back.overlap, imp.overlap);
    EXPECT_EQ(back.placement, imp.placement);
    auto kinds = kinds_in(text);
    EXPECT_EQ(kinds.count("UNSHARD") + kinds.count("RESHARD"), 0u);
    if (format == schedule_csv_format::compute_only) {
      EXPECT_TRUE(back.notices.empty());
      EXPECT_EQ(kinds.count("SEND_F") + kinds.count("REDUCE_GRAD"), 0u);
    } else {
      EXPECT_EQ(kinds["REDUCE_GRAD"], S * p.chunks);
      EXPECT_GT(kinds["SEND_F"], 0);
      EXPECT_EQ(kinds["SEND_F"], kinds["RECV_F"]);
      EXPECT_EQ(kinds["SEND_B"], kinds["RECV_B"]);
      EXPECT_EQ(text.find(",,"), std::string::npos) << "compute_comms has no empty cells";
    }
  }
}

std::string fixture_name(const ::testing::TestParamInfo<torch_fixture>& info) {
  std::string n = info.param.file.substr(0, info.param.file.size() - 4);
  return n == "1f1b" ? "OneFOneB" : n;
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, TorchScheduleCsv,
    ::testing::Values(torch_fixture{"gpipe.csv", "gpipe", 1, placement_kind::round_robin, false},
                      torch_fixture{"1f1b.csv", "1f1b", 1, placement_kind::round_robin, false},
                      torch_fixture{"interleaved1f1b.csv", "interleaved", 2, placement_kind::round_robin, false},
                      torch_fixture{"zbv.csv", "zb-v", 2, placement_kind::v_shape, true}),
    fixture_name);

INSTANTIATE_TEST_SUITE_P(
    Fixtures, TorchScheduleCsvComms,
    ::testing::Values(torch_fixture{"interleaved1f1b.csv", "interleaved", 2, placement_kind::round_robin, false},
                      torch_fixture{"zbv.csv", "zb-v", 2, placement_kind::v_shape, true}),
    fixture_name);

// GPipe's and 1F1B's orders in torch carry REDUCE_GRAD after the last
// backward: it maps to the rank's allreduce, with one notice.
TEST(TorchScheduleCsvSingle, GPipeAndOneFOneBCarryReduceGrad) {
  for (const std::string name : {"gpipe.csv", "1f1b.csv"}) {
    auto imp = import(name);
    ASSERT_EQ(imp.notices.size(), 1u) << name;
    EXPECT_EQ(imp.notices[0].action, "REDUCE_GRAD");
    EXPECT_EQ(imp.notices[0].count, S);
    EXPECT_EQ(imp.notices[0].first, name + ":1:17");
    for (int r = 0; r < S; ++r) EXPECT_EQ(imp.reduce_grad[r], std::vector<int>{0}) << name << " " << r;
  }
}

// -- DualPipeV ----------------------------------------------------------------------

TEST(TorchScheduleCsvDualPipeV, OverlappedPairsImportAsFlaggedFThenB) {
  const std::string text = fixture("dualpipev.csv");
  auto imp = read_schedule_csv(text, S, M, "dualpipev.csv");
  EXPECT_EQ(imp.placement, placement_kind::v_shape);
  EXPECT_TRUE(imp.split_backward);
  EXPECT_EQ(imp.chunks, 2);
  EXPECT_EQ(imp.order, compute_ops_of_v(text));
  const auto kinds = kinds_in(text);
  ASSERT_GT(kinds.at("OVERLAP_F_B"), 0);
  EXPECT_EQ(overlapped_pairs(imp), kinds.at("OVERLAP_F_B"));
  for (int r = 0; r < S; ++r)
    for (size_t i = 0; i < imp.overlap[r].size(); ++i) {
      if (!imp.overlap[r][i]) continue;
      ASSERT_LT(i + 1, imp.order[r].size());
      EXPECT_EQ(imp.order[r][i].kind, op_kind::F) << r << " " << i;
      EXPECT_EQ(imp.order[r][i + 1].kind, op_kind::B) << r << " " << i;
      EXPECT_NE(imp.order[r][i].chunk, imp.order[r][i + 1].chunk) << r << " " << i;
    }
  // Its full backwards are I then W: one notice for them.
  EXPECT_EQ(notice_kinds(imp), std::vector<std::string>{"B"});
  const std::regex full_b("[0-9]+B[0-9]+");
  EXPECT_EQ(imp.notices[0].count,
            std::distance(std::sregex_iterator(text.begin(), text.end(), full_b), std::sregex_iterator()))
      << "alone or in a compound";
}

// torch's DualPipeV order (the fixture) is the one the dualpipev policy
// fires: the same ops, the same overlapped pairs, the same simulated step.
TEST(TorchScheduleCsvDualPipeV, IsTheOrderTheDualPipeVPolicyFires) {
  for (const char* name : {"dualpipev.csv", "dualpipev_comms.csv"}) {
    auto imp = import(name);
    ASSERT_EQ(imp.order.size(), static_cast<size_t>(S));
    for (int r = 0; r < S; ++r) {
      const auto own = canonical::dualpipev_program(S, r, M);
      EXPECT_EQ(to_string(imp.order[r]), to_string(own.ops)) << name << " rank " << r;
      EXPECT_EQ(imp.overlap[r], own.overlap) << name << " rank " << r;
    }
    cost_model c;
    c.w = 1.0;
    c.overlap = true;
    auto replay = simulate(fixed_order_policy(imp.order, imp.placement, imp.overlap), S, M, c);
    auto policy = simulate("dualpipev", S, M, c);
    EXPECT_EQ(replay.order(), policy.order()) << name;
    EXPECT_DOUBLE_EQ(replay.makespan, policy.makespan) << name;
  }
}

TEST(TorchScheduleCsvDualPipeV, RunsToTheEndOnBothDevices) {
  auto imp = import("dualpipev.csv");
  for (bool overlap : {false, true}) {
    cost_model c;
    c.overlap = overlap;
    auto r = simulate(fixed_order_policy(imp.order, imp.placement, imp.overlap), S, M, c);
    ASSERT_FALSE(r.deadlock) << r.diagnosis;
    EXPECT_EQ(r.order(), imp.order);
    EXPECT_EQ(r.overlapped, imp.overlap) << "each flagged pair fired as one action";
  }
  cost_model one, two;
  two.overlap = true;
  EXPECT_LT(simulate(fixed_order_policy(imp.order, imp.placement, imp.overlap), S, M, two).makespan,
            simulate(fixed_order_policy(imp.order, imp.placement, imp.overlap), S, M, one).makespan);
}

TEST(TorchScheduleCsvDualPipeV, CommsFormAndExportsKeepThePairs) {
  auto imp = import("dualpipev.csv");
  auto comms = import("dualpipev_comms.csv");
  EXPECT_EQ(comms.order, imp.order);
  EXPECT_EQ(comms.overlap, imp.overlap);
  std::vector<std::string> kinds = notice_kinds(comms);
  std::sort(kinds.begin(), kinds.end());
  EXPECT_EQ(kinds, (std::vector<std::string>{"B", "RECV_B", "RECV_F", "REDUCE_GRAD", "RESHARD", "SEND_B", "SEND_F",
                                             "UNSHARD"}));
  for (auto format : {schedule_csv_format::compute_only, schedule_csv_format::compute_comms}) {
    schedule_csv_options opt{true, imp.placement, imp.overlap, format};
    const auto text = to_schedule_csv(imp.order, S, opt);
    EXPECT_EQ(kinds_in(text)["OVERLAP_F_B"], overlapped_pairs(imp));
    EXPECT_NE(text.find("(0F7;7I3)OVERLAP_F_B"), std::string::npos) << text;
    auto back = read_schedule_csv(text, S, M, "export.csv");
    EXPECT_EQ(back.order, imp.order);
    EXPECT_EQ(back.overlap, imp.overlap);
  }
}

// -- the compute_comms lowering ------------------------------------------------------

// Two ranks, one microbatch, worked by hand from torch's _add_send_recv:
// ranks take turns; 0B0 waits for the RECV_B rank 1 places with its B.
TEST(ScheduleCsvExport, LowersSendsAndReceivesAsTorchDoes) {
  schedule_csv_options opt;
  opt.format = schedule_csv_format::compute_comms;
  EXPECT_EQ(to_schedule_csv(canonical_order("1f1b", 2, 1), 2, opt),
            "0F0,0SEND_F0,0RECV_B0,0B0,0REDUCE_GRAD\n"
            "1RECV_F0,1F0,1B0,1SEND_B0,1REDUCE_GRAD\n");
  // The V's turn (stages 1 and 2 on rank 1) needs no send.
  opt.split_backward = true;
  opt.placement = placement_kind::v_shape;
  const auto v = to_schedule_csv(canonical_order("zb-v", 2, 1), 2, opt);
  EXPECT_EQ(v.find("1SEND_F"), std::string::npos) << v;
  EXPECT_EQ(v.find("2RECV_F"), std::string::npos) << v;
  EXPECT_EQ(v.find("2SEND_B"), std::string::npos) << v;
  EXPECT_NE(v.find("0SEND_F0"), std::string::npos) << v;
  EXPECT_NE(v.find("2SEND_F0"), std::string::npos) << v;
  EXPECT_NE(v.find("3SEND_B0"), std::string::npos) << v;
  EXPECT_NE(v.find("1SEND_B0"), std::string::npos) << v;
}

// Every SEND has its RECV on the receiving stage's rank; a RECV comes
// before the op that uses it, a SEND after the op that made it.
TEST(ScheduleCsvExport, EveryReceiveComesBeforeItsUseAndAfterNothingItNeeds) {
  for (const auto& [schedule, chunks] : std::vector<std::pair<std::string, int>>{
           {"1f1b", 1}, {"gpipe", 1}, {"interleaved", 2}, {"zb-v", 2}, {"zb-h1", 1}}) {
    auto r = simulate(schedule, S, M, {}, chunks);
    schedule_csv_options opt{r.split_backward, r.placement, r.overlapped, schedule_csv_format::compute_comms};
    const auto text = to_schedule_csv(r.order(), S, opt);
    std::vector<std::vector<std::string>> rows;
    std::istringstream lines(text);
    std::string line, cell;
    while (std::getline(lines, line)) {
      rows.emplace_back();
      std::istringstream cells(line);
      while (std::getline(cells, cell, ',')) rows.back().push_back(cell);
    }
    ASSERT_EQ(rows.size(), static_cast<size_t>(S)) << schedule;
    const placement plc{r.placement, S, chunks};
    auto pos = [&](int rank, const std::string& c) {
      auto& row = rows[rank];
      return std::find(row.begin(), row.end(), c) - row.begin();
    };
    for (int rank = 0; rank < S; ++rank)
      for (const auto& c : rows[rank]) {
        std::smatch m;
        if (!std::regex_match(c, m, std::regex("([0-9]+)(SEND|RECV)_([FB])([0-9]+)"))) continue;
        const int stage = std::stoi(m[1]), mb = std::stoi(m[4]);
        const bool fwd = m[3] == "F";
        const std::string compute = r.split_backward ? "I" : "B";
        if (m[2] == "SEND") {
          const int to = fwd ? stage + 1 : stage - 1;
          const int peer = plc.rank_of(to);
          EXPECT_NE(peer, rank) << c;
          EXPECT_LT(pos(peer, std::to_string(to) + "RECV_" + m[3].str() + std::to_string(mb)),
                    static_cast<long>(rows[peer].size()))
              << schedule << " " << c;
          EXPECT_GT(pos(rank, c), pos(rank, std::to_string(stage) + (fwd ? "F" : compute) + std::to_string(mb)))
              << schedule << " " << c;
        } else {
          EXPECT_LT(pos(rank, c), pos(rank, std::to_string(stage) + (fwd ? "F" : compute) + std::to_string(mb)))
              << schedule << " " << c;
        }
      }
  }
}

// -- bad cells ------------------------------------------------------------------------

TEST(ScheduleCsvErrors, BadCompoundsNameRowAndColumn) {
  EXPECT_EQ(error_of("0F0,0B0\n1F0,(1B0;1F0\n"), "s.csv:2:2: '(1B0;1F0': no ')': " + syntax());
  EXPECT_EQ(error_of("0F0,0B0\n(1F0;1B0)OVERLAP\n"),
            "s.csv:2:1: '(1F0;1B0)OVERLAP': a compound action is (F;B)OVERLAP_F_B, e.g. (0F3;1B2)OVERLAP_F_B");
  EXPECT_EQ(error_of("0F0,0B0\n(1B0;1F0)OVERLAP_F_B\n"),
            "s.csv:2:1: '(1B0;1F0)OVERLAP_F_B': OVERLAP_F_B holds a forward then a backward, (F;B) or (F;I), e.g. "
            "(0F3;1B2)OVERLAP_F_B");
  EXPECT_EQ(error_of("0F0,0B0\n(1F0;)OVERLAP_F_B,1B0\n"),
            "s.csv:2:1: '(1F0;)OVERLAP_F_B': an empty action inside OVERLAP_F_B");
  EXPECT_EQ(error_of("0F0,0B0\n(1F0;1B0;1W0)OVERLAP_F_B\n"),
            "s.csv:2:1: '(1F0;1B0;1W0)OVERLAP_F_B': OVERLAP_F_B holds a forward then a backward, (F;B) or (F;I), "
            "e.g. (0F3;1B2)OVERLAP_F_B");
  // A sub-action's own error names the compound's cell.
  EXPECT_EQ(error_of("0F0,0B0\n(1F0;1Q0)OVERLAP_F_B\n"), "s.csv:2:1: '(1F0;1Q0)OVERLAP_F_B': " + syntax());
}

TEST(ScheduleCsvErrors, UnknownActionsAndMicrobatchesNameRowAndColumn) {
  EXPECT_EQ(syntax().rfind("expected {stage}{action}{microbatch}", 0), 0u) << syntax();
  EXPECT_EQ(error_of("0F0,0SEND_X0,0B0\n1F0,1B0\n"), "s.csv:1:2: '0SEND_X0': " + syntax());
  EXPECT_EQ(error_of("0F0,0B0,0REDUCE_GRAD3\n1F0,1B0\n"),
            "s.csv:1:3: '0REDUCE_GRAD3': REDUCE_GRAD takes no microbatch: 0REDUCE_GRAD");
  EXPECT_EQ(error_of("0F0,0SEND_F,0B0\n1F0,1B0\n"), "s.csv:1:2: '0SEND_F': SEND_F needs a microbatch, e.g. 0SEND_F0");
  EXPECT_EQ(error_of("0F0,0SEND_F1,0B0\n1F0,1B0\n"), "s.csv:1:2: '0SEND_F1': microbatch 1 out of range (1)");
  EXPECT_EQ(error_of("0F0,0B0\nF0,1B0\n"), "s.csv:2:1: 'F0': " + syntax());
}

TEST(ScheduleCsvErrors, StagesOutOfRangeOrOffTheRankOrWithoutAPeer) {
  EXPECT_EQ(error_of("0F0,0B0\n1F0,1B0,3SEND_B0\n"),
            "s.csv:2:3: '3SEND_B0': stage 3 out of range (2 ranks x 1 chunks = 2 stages)");
  EXPECT_EQ(error_of("0F0,0B0,1UNSHARD\n1F0,1B0\n"), "s.csv:1:3: '1UNSHARD': stage 1 does not live on rank 0");
  EXPECT_EQ(error_of("0F0,0B0\n1F0,1SEND_F0,1B0\n"),
            "s.csv:2:2: '1SEND_F0': stage 1 is the last: no next stage to send to");
  EXPECT_EQ(error_of("0F0,0B0\n1F0,1B0,1RECV_B0\n"),
            "s.csv:2:3: '1RECV_B0': stage 1 is the last: no next stage to receive from");
  EXPECT_EQ(error_of("0RECV_F0,0F0,0B0\n1F0,1B0\n"),
            "s.csv:1:1: '0RECV_F0': stage 0 is the first: no previous stage to receive from");
  EXPECT_EQ(error_of("0F0,0B0,0SEND_B0\n1F0,1B0\n"),
            "s.csv:1:3: '0SEND_B0': stage 0 is the first: no previous stage to send to");
}

TEST(ScheduleCsvErrors, ReduceGradBeforeTheLastBackwardIsAnError) {
  EXPECT_EQ(error_of("0F0,0REDUCE_GRAD,0B0\n1F0,1B0\n"),
            "s.csv:1:2: '0REDUCE_GRAD': REDUCE_GRAD of stage 0 before the stage's last backward (0B0 at s.csv:1:3); "
            "it reduces the gradients of every microbatch, so it comes after it");
  // Split: the last backward is the W, and a B's W counts.
  EXPECT_EQ(error_of("0F0,0I0,0REDUCE_GRAD,0W0\n1F0,1B0\n"),
            "s.csv:1:3: '0REDUCE_GRAD': REDUCE_GRAD of stage 0 before the stage's last backward (0W0 at s.csv:1:4); "
            "it reduces the gradients of every microbatch, so it comes after it");
  EXPECT_EQ(error_of("0F0,0B0,0REDUCE_GRAD,0REDUCE_GRAD\n1F0,1B0\n"),
            "s.csv:1:4: '0REDUCE_GRAD': a second REDUCE_GRAD of stage 0");
  // Anywhere after the last backward is the same point to actorpipe.
  EXPECT_EQ(error_of("0F0,0B0\n1F0,1B0,,,1REDUCE_GRAD\n"), "no error");
  // A full B inside a compound of a split schedule brings its W along.
  EXPECT_EQ(error_of("0F0,0I0,0W0\n(1F0;1B0)OVERLAP_F_B,1REDUCE_GRAD\n"), "no error");
  EXPECT_EQ(error_of("0F0,0I0,0W0,0REDUCE_GRAD\n1F0,1B0,1REDUCE_GRAD\n"), "no error");
}

// The old entry point still reads files, now with torch's other actions.
TEST(ScheduleCsvLegacy, ParseScheduleCsvKeepsItsShape) {
  placement_kind detected = placement_kind::round_robin;
  auto order = parse_schedule_csv(fixture("zbv_comms.csv"), S, M, "zbv_comms.csv", &detected);
  EXPECT_EQ(detected, placement_kind::v_shape);
  EXPECT_EQ(order, canonical_order("zb-v", S, M));
  EXPECT_EQ(to_schedule_csv(order, S, true, detected),
            to_schedule_csv(order, S, schedule_csv_options{true, detected, {}, schedule_csv_format::compute_only}));
  EXPECT_EQ(parse_schedule_csv_format("comms"), schedule_csv_format::compute_comms);
  EXPECT_EQ(parse_schedule_csv_format("compute_only"), schedule_csv_format::compute_only);
  EXPECT_THROW(parse_schedule_csv_format("all"), std::invalid_argument);
}

}  // namespace
}  // namespace actorpipe
