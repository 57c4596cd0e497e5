// apps/actorpipe: the real binary as a child process. Exit codes, help
// texts, the bubble table, and a small training run whose --save and
// --trace files Python's torch/json read back. (The bad-config table's
// exact lines on stderr: bad_config_cli_test.cpp.)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "tests/cpu_only.hpp"
#include "runtime/config/config.hpp"
#include "runtime/config/schema.hpp"
#include "runtime/schedule/policies/registry.hpp"
#include "runtime/files/state_dict.hpp"
#include "tests/apps/child_process.hpp"
#include "tests/test_util.hpp"

extern char** environ;

namespace actorpipe {
namespace {

namespace fs = std::filesystem;

using testing_util::write;
using testing_util::param_name;

fs::path test_dir() { return testing_util::test_dir("actorpipe_cli_test"); }

std::string slurp(const fs::path& file) { return testing_util::slurp_file(file); }

using run_result = testing_util::child_result;

run_result run_program(const std::string& program, const std::vector<std::string>& args) {
  return testing_util::run_child(program, args);
}

run_result actorpipe(const std::vector<std::string>& args) { return run_program(ACTORPIPE_BIN, args); }

using testing_util::first_line;

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string l; std::getline(is, l);) out.push_back(l);
  return out;
}

/// The cells of a box-table row "| a | b |", trimmed; empty if not a row.
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  if (line.size() < 2 || line[0] != '|') return out;
  std::string cell;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '|') {
      auto b = cell.find_first_not_of(' '), e = cell.find_last_not_of(' ');
      out.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return out;
}

/// Table rows (header included) of the first box table in `text`.
std::vector<std::vector<std::string>> table_rows(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& l : lines(text))
    if (auto c = cells(l); !c.empty()) rows.push_back(c);
  return rows;
}

using testing_util::describe;

/// Two saved state dicts hold the same names and the same bits.
void expect_bitwise(const std::string& a, const std::string& b) {
  auto wa = load_tensors(a), wb = load_tensors(b);
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i) {
    EXPECT_EQ(wa[i].first, wb[i].first);
    EXPECT_TRUE(wa[i].second.equal(wb[i].second)) << wa[i].first;
  }
}

// -- usage ----------------------------------------------------------------------

TEST(CliUsage, HelpForEveryCommandExitsZeroAndPrintsUsage) {
  // Each help names what only that command has.
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--help"}, "train CONFIG"},
      {{"-h"}, "train CONFIG"},
      {{"train", "--help"}, "--schedule"},
      {{"train", "-h"}, "--schedule"},
      {{"compare", "--help"}, "--schedules"},
      {{"bubble", "--help"}, "--stages"},
      {{"simulate", "--help"}, "--cost"},
      {{"keys", "--help"}, "--markdown"}};
  for (const auto& [args, mention] : cases) {
    auto r = actorpipe(args);
    std::string what = args[0] + (args.size() > 1 ? " " + args[1] : "");
    EXPECT_EQ(r.code, 0) << what << "\n" << describe(r);
    EXPECT_EQ(r.out.rfind("usage: actorpipe", 0), 0u) << what << "\n" << describe(r);
    EXPECT_NE(r.out.find(mention), std::string::npos) << what << "\n" << describe(r);
    EXPECT_EQ(r.err, "") << what;
  }
}

/// The words of a help text, the line breaks and the column gone.
std::string flattened(const std::string& help) {
  std::istringstream words(help);
  std::string out, w;
  while (words >> w) out += (out.empty() ? "" : " ") + w;
  return out;
}

TEST(CliUsage, ScheduleListsInHelpTextsAreTheRegistrys) {
  std::string trainable, every;
  for (const auto& name : known_schedules()) trainable += (trainable.empty() ? "" : " | ") + name;
  for (const auto& s : schedules()) every += (every.empty() ? "" : " | ") + s.name;
  EXPECT_NE(trainable.find("dualpipev"), std::string::npos);
  for (const auto& cmd : {"train", "compare"})
    EXPECT_NE(flattened(actorpipe({cmd, "--help"}).out).find(trainable), std::string::npos) << cmd << ": " << trainable;
  EXPECT_NE(flattened(actorpipe({"simulate", "--help"}).out).find(every), std::string::npos) << every;
}

TEST(CliKeys, EveryConfigKeyOrThoseUnderAPrefix) {
  auto all = actorpipe({"keys"});
  ASSERT_EQ(all.code, 0) << describe(all);
  size_t listed = 0;
  for (const auto& k : config_schema::keys()) {
    EXPECT_NE(("\n" + all.out).find("\n" + std::string(k.path) + "  ("), std::string::npos) << k.path;
    ++listed;
  }
  EXPECT_GE(listed, 90u);
  auto some = actorpipe({"keys", "supervision"});
  ASSERT_EQ(some.code, 0) << describe(some);
  for (const auto& l : lines(some.out)) {
    if (!l.empty() && l[0] != ' ') {
      EXPECT_EQ(l.rfind("supervision", 0), 0u) << l;
    }
  }
  EXPECT_NE(some.out.find("supervision.heartbeat_timeout_s  (seconds in [1, 86400]; default 10)"), std::string::npos)
      << some.out;
  auto md = actorpipe({"keys", "--markdown"});
  EXPECT_EQ(md.code, 0);
  EXPECT_TRUE(md.out == config_schema::render_markdown());
  auto none = actorpipe({"keys", "superviion"});
  EXPECT_EQ(none.code, 2) << describe(none);
  EXPECT_EQ(none.err,
            "actorpipe: no config key starts with 'superviion' (the sections: model, data, train, eval, parallel, "
            "pipeline, compare, checkpoint, supervision, faults)\n");
}

TEST(CliUsage, NoArgumentsExitsTwoWithUsageOnStderr) {
  auto r = actorpipe({});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("usage: actorpipe"), std::string::npos) << describe(r);
}

TEST(CliUsage, UnknownCommandExitsTwoAndNamesIt) {
  auto r = actorpipe({"trian"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_NE(first_line(r.err).find("unknown command 'trian'"), std::string::npos) << describe(r);
  EXPECT_EQ(r.out, "");
}

TEST(CliUsage, UnknownOptionExitsTwoAndNamesIt) {
  for (const char* cmd : {"train", "compare", "bubble", "simulate"}) {
    auto r = actorpipe({cmd, "--frobnicate"});
    EXPECT_EQ(r.code, 2) << cmd << "\n" << describe(r);
    EXPECT_NE(first_line(r.err).find("unknown option --frobnicate"), std::string::npos)
        << cmd << "\n" << describe(r);
  }
}

TEST(CliUsage, AFlagWithoutItsValueExitsTwoAndNamesIt) {
  const std::vector<std::vector<std::string>> cases = {
      {"train", "x.yaml", "--steps"}, {"compare", "x.yaml", "--schedules"}, {"bubble", "--stages"},
      {"simulate", "--cost"}};
  for (const auto& args : cases) {
    auto r = actorpipe(args);
    EXPECT_EQ(r.code, 2) << args[0] << "\n" << describe(r);
    EXPECT_EQ(first_line(r.err), "actorpipe: " + args.back() + " needs a value") << args[0] << "\n" << describe(r);
    EXPECT_EQ(r.out, "");
  }
  // --name=value is the same flag as --name value.
  auto r = actorpipe({"bubble", "--stages=4", "--microbatches=0"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_NE(first_line(r.err).find("--microbatches expects a positive integer, got '0'"), std::string::npos)
      << describe(r);
}

TEST(CliUsage, MissingConfigFileExitsTwo) {
  const fs::path dir = test_dir();
  auto r = actorpipe({"train", (dir / "nope.yaml").string()});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_NE(first_line(r.err).find("nope.yaml"), std::string::npos) << describe(r);
}

// -- launch ---------------------------------------------------------------------

TEST(CliLaunch, HelpNamesItsOptionsAndRankZero) {
  auto r = actorpipe({"launch", "--help"});
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(r.out.rfind("usage: actorpipe launch", 0), 0u) << describe(r);
  for (const char* mention :
       {"--nprocs", "--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--master-port", "rank 0", "exit codes"})
    EXPECT_NE(r.out.find(mention), std::string::npos) << mention << "\n" << describe(r);
}

TEST(CliLaunch, BadArgumentsExitTwoBeforeAnyWorkerStarts) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "x.yaml", "not: read\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"launch", "--nprocs", "0", cfg}, "actorpipe: --nprocs expects a positive integer, got '0'"},
      {{"launch", "--nprocs", "2"}, "actorpipe: launch takes a CONFIG after its options (see --help)"},
      {{"launch", cfg}, "actorpipe: launch needs --nprocs N (see --help)"},
      {{"launch", "--nprocs", "2", (dir / "nope.yaml").string(), "--steps", "1"},
       "actorpipe: " + (dir / "nope.yaml").string() + ": no such file"},
      {{"launch", "--nprocs", "1", "--nnodes", "2", "--node-rank", "2", cfg},
       "actorpipe: --node-rank expects 0 .. 1 (--nnodes 2), got '2'"},
      {{"launch", "--nprocs", "1", "--nnodes", "2", "--node-rank", "1", "--master-port", "0", cfg},
       "actorpipe: --master-port 0 (a free port) works with one node only; with --nnodes 2 every node must name the "
       "same port"},
      {{"launch", "--nprocs", "1", "--nproc-per-node", "1", cfg},
       "actorpipe: --nprocs and --nproc-per-node are the same option; give one"},
      {{"launch", "--nnodes", "0", "--nprocs", "1", cfg}, "actorpipe: --nnodes expects a positive integer, got '0'"},
      // The address as rank 0's line ends it ("join at 127.0.0.1:47939:"),
      // its colon copied along; and a port that is not one.
      {{"launch", "--join", "127.0.0.1:47939:", cfg},
       "actorpipe: --join expects HOST:PORT (the address rank 0 prints), got '127.0.0.1:47939:'"},
      {{"launch", "--join", "127.0.0.1:4x", cfg}, "actorpipe: --join's PORT expects a port number 0..65535, got '4x'"},
      {{"launch", "--nprocs", "2", "--coordinator", "apart", cfg},
       "actorpipe: --coordinator expects rank0, process or etcd://HOST:PORT[,...], got 'apart'"},
      {{"launch", "--nprocs", "2", "--coordinator", "etcd://10.0.0.1", cfg},
       "actorpipe: --coordinator: '10.0.0.1' in 'etcd://10.0.0.1' is not HOST:PORT"},
      {{"launch", "--nprocs", "2", "--coordinator", "etcd://127.0.0.1:1", "--run-id", "a/b", cfg},
       "actorpipe: --run-id expects letters, digits, '-', '_' and '.', got 'a/b'"},
      {{"launch", "--nprocs", "2", "--run-id", "x", cfg},
       "actorpipe: --run-id names a run in etcd: give --coordinator etcd://... (or --join etcd://...)"},
      {{"launch", "--join", "etcd://10.0.0.1", cfg}, "actorpipe: --join: '10.0.0.1' in 'etcd://10.0.0.1' is not HOST:PORT"},
      {{"launch", "--join", "127.0.0.1:4000", "--coordinator", "process", cfg},
       "actorpipe: --join takes its coordinator from the running job; drop --coordinator"}};
  for (const auto& [args, line] : cases) {
    auto r = actorpipe(args);
    EXPECT_EQ(r.code, 2) << line << "\n" << describe(r);
    EXPECT_EQ(first_line(r.err), line) << describe(r);
    EXPECT_EQ(r.out, "");
  }
}

// -- simulate -------------------------------------------------------------------

TEST(CliSimulate, PrintsBubbleAndWritesSvgAndCsv) {
  const fs::path dir = test_dir();
  auto svg = (dir / "t.svg").string(), csv = (dir / "s.csv").string();
  auto r = actorpipe({"simulate", "--stages", "4", "--microbatches", "8", "--schedule", "gpipe",
                      "--svg", svg, "--export", csv});
  ASSERT_EQ(r.code, 0) << describe(r);
  // (S-1)/(M+S-1) = 3/11
  EXPECT_NE(r.out.find("bubble   simulated 0.2727   analytic 0.2727"), std::string::npos) << r.out;
  EXPECT_NE(slurp(svg).find("<svg"), std::string::npos);
  auto rows = slurp(csv);
  EXPECT_EQ(rows.substr(0, rows.find('\n')), "0F0,0F1,0F2,0F3,0F4,0F5,0F6,0F7,0B0,0B1,0B2,0B3,0B4,0B5,0B6,0B7");
  // The exported order replays as a fixed policy to the same makespan.
  auto replay = actorpipe({"simulate", "--stages", "4", "--microbatches", "8", "--import", csv});
  ASSERT_EQ(replay.code, 0) << describe(replay);
  EXPECT_NE(replay.out.find("makespan 22.000"), std::string::npos) << replay.out;
}

// torch's compute_comms form: imported with one note per action kind it
// does not run as an op, exported again (--export-format comms) with the
// sends and receives, and that reads back to the same makespan.
TEST(CliSimulate, TorchCommsCsvImportsWithOneNotePerKindAndExportsAgain) {
  const fs::path dir = test_dir();
  const std::string fixture = std::string(ACTORPIPE_TEST_DATA) + "/schedule_csv/dualpipev_comms.csv";
  auto csv = (dir / "comms.csv").string();
  auto r = actorpipe({"simulate", "--stages", "4", "--microbatches", "8", "--import", fixture, "--export", csv,
                      "--export-format", "comms"});
  ASSERT_EQ(r.code, 0) << describe(r);
  for (const std::string kind : {"SEND_F", "RECV_F", "SEND_B", "RECV_B", "UNSHARD", "RESHARD", "REDUCE_GRAD"}) {
    const auto at = r.err.find(" " + kind + " actions");
    EXPECT_NE(at, std::string::npos) << kind << "\n" << r.err;
    EXPECT_EQ(r.err.find(" " + kind + " actions", at + 1), std::string::npos) << kind << "\n" << r.err;
  }
  const auto text = slurp(csv);
  EXPECT_NE(text.find(")OVERLAP_F_B,"), std::string::npos) << text;
  EXPECT_NE(text.find("0SEND_F0"), std::string::npos) << text;
  auto replay = actorpipe({"simulate", "--stages", "4", "--microbatches", "8", "--import", csv});
  ASSERT_EQ(replay.code, 0) << describe(replay);
  auto makespan = [](const std::string& out) { return out.substr(out.find("makespan"), 16); };
  EXPECT_EQ(makespan(replay.out), makespan(r.out));
  EXPECT_EQ(replay.err.find("UNSHARD"), std::string::npos) << "actorpipe writes no FSDP actions";
  auto bad = actorpipe({"simulate", "--export", csv, "--export-format", "all"});
  EXPECT_EQ(bad.code, 2) << describe(bad);
}

TEST(CliSimulate, DeadlockingOrderExitsThreeWithTheOpGrid) {
  const fs::path dir = test_dir();
  // Rank 0 insists on B0 before F0: nothing can ever unblock it.
  auto csv = write(dir / "stuck.csv", "0B0,0F0\n1F0,1B0\n");
  auto r = actorpipe({"simulate", "--stages", "2", "--microbatches", "1", "--import", csv});
  EXPECT_EQ(r.code, 3) << describe(r);
  EXPECT_NE(r.err.find(">> stage 0: fired []"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(">> stage 1: fired []"), std::string::npos) << r.err;
}

TEST(CliSimulate, BadCostExitsTwo) {
  auto r = actorpipe({"simulate", "--cost", "F=x"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_NE(first_line(r.err).find("--cost: F needs a non-negative number, got 'x'"), std::string::npos)
      << describe(r);
}

TEST(CliSimulate, AGridTooLargeExitsTwoWithItsSize) {
  // It used to allocate until std::bad_alloc.
  auto r = actorpipe({"simulate", "--stages", "100000", "--microbatches", "100000"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_EQ(first_line(r.err),
            "actorpipe: simulate: 100000 stages x 100000 microbatches would simulate 2.0e+10 ops (about 1010 GB); "
            "the limit is 5.0e+07 ops (about 2.5 GB)")
      << describe(r);
  EXPECT_EQ(r.out, "");
  // async streams --steps x M microbatches: more than an int holds.
  r = actorpipe({"simulate", "--schedule", "async", "--stages", "4", "--microbatches", "2000000000", "--steps",
                 "2000000000"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_NE(first_line(r.err).find("4 stages x 4000000000000000000 microbatches would simulate 3.2e+19 ops"),
            std::string::npos)
      << describe(r);
  // The documented scale target still runs, zb-v's 2 chunks and 3 op kinds included.
  r = actorpipe({"simulate", "--stages", "128", "--microbatches", "1024", "--schedule", "zb-v"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("simulated 786432 ops in "), std::string::npos) << r.out.substr(r.out.size() - 200);
}

TEST(CliSimulate, HugeCostOrStageFactorExitsTwo) {
  // Sums of 1e300 over a step's ops would be infinite.
  auto r = actorpipe({"simulate", "--cost", "F=1,B=1e300"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_EQ(first_line(r.err), "actorpipe: --cost: B is at most 1e+09, got '1e300'") << describe(r);
  r = actorpipe({"simulate", "--stages", "4", "--stage-factors", "1,1e300,1,1"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_EQ(first_line(r.err), "actorpipe: --stage-factors: a factor is at most 1e+06, got '1e300'") << describe(r);
  r = actorpipe({"simulate", "--stages", "4", "--stage-factors", "1,inf,1,1"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_EQ(first_line(r.err), "actorpipe: --stage-factors: a factor is at most 1e+06, got 'inf'") << describe(r);
}

// -- bubble ---------------------------------------------------------------------

std::string three_decimals(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

TEST(CliBubble, GPipeColumnIsStagesMinusOneOverMicrobatchesPlusStagesMinusOne) {
  auto r = actorpipe({"bubble"});
  ASSERT_EQ(r.code, 0) << describe(r);
  auto rows = table_rows(r.out);
  ASSERT_FALSE(rows.empty()) << r.out;
  const auto& header = rows[0];
  auto col = [&](const std::string& name) {
    auto it = std::find(header.begin(), header.end(), name);
    EXPECT_NE(it, header.end()) << "no column " << name;
    return static_cast<size_t>(it - header.begin());
  };
  const size_t s_col = col("S"), m_col = col("M"), gpipe_col = col("gpipe"),
               one_col = col("1f1b"), naive_col = col("naive"),
               useful_col = col("1f1b idle/useful"), inter_col = col("interleaved v=2"),
               inter_useful_col = col("interleaved v=2 idle/useful"), zb_col = col("zb-h1"),
               zb_useful_col = col("zb-h1 idle/useful");
  std::map<std::pair<int, int>, std::vector<std::string>> by_case;
  for (size_t i = 1; i < rows.size(); ++i)
    by_case[{std::stoi(rows[i][s_col]), std::stoi(rows[i][m_col])}] = rows[i];

  // The reference notebook's table.
  const std::vector<std::tuple<int, int, const char*>> reference = {
      {4, 4, "0.429"},  {4, 8, "0.273"},   {4, 16, "0.158"},  {4, 32, "0.086"},
      {4, 64, "0.045"}, {4, 100, "0.029"}, {8, 16, "0.304"},  {16, 32, "0.319"},
      {32, 64, "0.326"}, {8, 32, "0.179"}, {16, 64, "0.190"}};
  EXPECT_EQ(by_case.size(), reference.size());
  for (auto [s, m, text] : reference) {
    const std::string formula = three_decimals(static_cast<double>(s - 1) / (m + s - 1));
    EXPECT_EQ(formula, text) << "S=" << s << " M=" << m;
    auto it = by_case.find({s, m});
    ASSERT_NE(it, by_case.end()) << "no row for S=" << s << " M=" << m << "\n" << r.out;
    EXPECT_EQ(it->second[gpipe_col], formula) << "S=" << s << " M=" << m;
    EXPECT_EQ(it->second[one_col], formula) << "S=" << s << " M=" << m;
    EXPECT_EQ(it->second[naive_col], three_decimals(static_cast<double>(s - 1) / s));
    // The other convention: idle over useful time, the notebook's 1F1B
    // (S-1)/M and interleaved (S-1)/(vM), beside idle over total.
    EXPECT_EQ(it->second[useful_col], three_decimals(static_cast<double>(s - 1) / m));
    EXPECT_EQ(it->second[inter_useful_col], three_decimals(static_cast<double>(s - 1) / (2 * m)));
    EXPECT_EQ(it->second[inter_col], three_decimals(static_cast<double>(s - 1) / (2 * m + s - 1)));
    EXPECT_EQ(it->second[zb_col], three_decimals(static_cast<double>(s - 1) / (3 * m + s - 1)));
    EXPECT_EQ(it->second[zb_useful_col], three_decimals(static_cast<double>(s - 1) / (3 * m)));
  }
}

TEST(CliBubble, OneGivenPair) {
  auto r = actorpipe({"bubble", "--stages", "5", "--microbatches", "7"});
  ASSERT_EQ(r.code, 0) << describe(r);
  auto rows = table_rows(r.out);
  ASSERT_EQ(rows.size(), 2u) << r.out;
  EXPECT_EQ(rows[1][0], "5");
  EXPECT_EQ(rows[1][1], "7");
  EXPECT_EQ(rows[1][3], three_decimals(4.0 / 11.0));
  auto half = actorpipe({"bubble", "--stages", "5"});
  EXPECT_EQ(half.code, 2) << describe(half);
  auto bad = actorpipe({"bubble", "--stages", "0", "--microbatches", "4"});
  EXPECT_EQ(bad.code, 2) << describe(bad);
}

// -- training runs --------------------------------------------------------------

const char* const small_config = R"(model:
  layers:
    - {type: linear, in: 8, out: 16}
    - {type: relu}
    - {type: linear, in: 16, out: 4}
data:
  kind: synthetic
  synthetic: {samples: 256}
train:
  steps: 3
  batch_size: 32
pipeline:
  stages: 2
  microbatches: 4
)";

bool python_has_torch() {
  if (access("/usr/bin/python3", X_OK) != 0) return false;
  return run_program("/usr/bin/python3", {"-c", "import torch"}).code == 0;
}

TEST(CliTrain, RunsPrintsProgressAndTableAndWritesLoadableFiles) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "small.yaml", small_config);
  const std::string save = (dir / "out.pt").string(), trace = (dir / "trace.json").string();
  auto r = actorpipe({"train", cfg, "--save", save, "--trace", trace});
  ASSERT_EQ(r.code, 0) << describe(r);

  const int steps = 3, stages = 2, microbatches = 4;
  int progress = 0;
  std::regex step_line(R"(^step\s+(\d+)/3\s.*loss\s+[0-9.]+)");
  for (const auto& l : lines(r.out)) {
    std::smatch m;
    if (std::regex_search(l, m, step_line)) {
      EXPECT_EQ(std::stoi(m[1]), ++progress) << l;
    }
  }
  EXPECT_EQ(progress, steps) << r.out;
  bool has_row = false;
  for (const auto& row : table_rows(r.out))
    if (row[0] == "1f1b") {
      has_row = true;
      EXPECT_EQ(row[1], "2");
      EXPECT_EQ(row[2], "4");
    }
  EXPECT_TRUE(has_row) << r.out;
  ASSERT_TRUE(fs::exists(save));
  ASSERT_TRUE(fs::exists(trace));

  if (!python_has_torch())
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch; the saved files are not read back";
  const std::string script = write(dir / "check.py", R"(import json, sys
import torch
from torch import nn
sd = torch.load(sys.argv[1])
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
model.load_state_dict(sd, strict=True)
assert all(torch.isfinite(p).all() for p in model.parameters())
with open(sys.argv[2]) as f:
    trace = json.load(f)
print(sum(1 for e in trace["traceEvents"] if e.get("ph") == "X"))
)");
  auto py = run_program("/usr/bin/python3", {script, save, trace});
  ASSERT_EQ(py.code, 0) << describe(py);
  EXPECT_EQ(std::stoi(py.out), steps * stages * 2 * microbatches) << describe(py);
}

// A config path with a double quote, a tab and a non-ASCII letter reaches
// --results and --trace as the same string, and both files stay JSON that
// Python reads, the stage tracks named.
TEST(CliTrain, ResultsAndTraceAreJsonWhateverTheConfigPathHolds) {
  const fs::path base = test_dir(), dir = base / "a\"b\tc \xc3\xa9";
  const std::string cfg = write(dir / "small \"q\"\t\xc3\xa9.yaml", small_config);
  const std::string results = (dir / "results.json").string(), trace = (dir / "trace.json").string();
  auto r = actorpipe({"train", cfg, "--quiet", "--results", results, "--trace", trace});
  ASSERT_EQ(r.code, 0) << describe(r);
  auto parses = run_program("/usr/bin/python3", {"-c", "import json,sys; json.load(open(sys.argv[1]))", results});
  EXPECT_EQ(parses.code, 0) << describe(parses);
  const std::string script = write(base / "check.py", R"(import json, os, sys
want = os.fsencode(sys.argv[3])
with open(sys.argv[1], encoding="utf-8") as f:
    results = json.load(f)
with open(sys.argv[2], encoding="utf-8") as f:
    trace = json.load(f)
assert results["config"].encode("utf-8") == want, (results["config"], want)
assert trace["otherData"]["config"].encode("utf-8") == want, (trace["otherData"], want)
assert len(results["steps"]) == 3 and len(results["steps"][-1]["stages"]) == 2, results
names = sorted(e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name")
assert [n.split(" (")[0] for n in names] == ["stage 0", "stage 1"], names
print(sum(1 for e in trace["traceEvents"] if e.get("ph") == "X"))
)");
  auto py = run_program("/usr/bin/python3", {script, results, trace, cfg});
  ASSERT_EQ(py.code, 0) << describe(py);
  EXPECT_EQ(std::stoi(py.out), 3 * 2 * 2 * 4) << describe(py);
}

TEST(CliTrain, StartedAsOneRankOfSeveralABadEnvironmentIsNamedWithExit2BeforeAnythingRuns) {
  // torchrun's variables, set here by hand, each wrong in one way (the runs
  // that work are in multi_process_test).
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "small.yaml", small_config);  // dp 1 x 2 stages
  const std::string bin = ACTORPIPE_BIN;
  struct env_case {
    std::vector<std::string> env;
    std::string line;
  };
  const std::vector<env_case> cases = {
      {{"WORLD_SIZE=3", "RANK=0", "MASTER_ADDR=127.0.0.1"},
       "WORLD_SIZE 3 does not divide parallel.dp 1 x pipeline stages 2"},
      {{"WORLD_SIZE=2", "RANK=0"}, "MASTER_ADDR is not set (needed when WORLD_SIZE is 2)"},
      {{"WORLD_SIZE=2", "RANK=2", "MASTER_ADDR=h"}, "RANK 2 is out of range for WORLD_SIZE 2"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"-u", "SLURM_NTASKS", "-u", "OMPI_COMM_WORLD_SIZE"};
    args.insert(args.end(), c.env.begin(), c.env.end());
    args.insert(args.end(), {bin, "train", cfg, "--quiet", "--save", (dir / "w.pt").string()});
    auto r = run_program("/usr/bin/env", args);
    EXPECT_EQ(r.code, 2) << describe(r);
    EXPECT_EQ(first_line(r.err), c.line) << describe(r);
    EXPECT_EQ(r.out, "") << describe(r);
    EXPECT_FALSE(fs::exists(dir / "w.pt"));
  }
}

TEST(CliTrain, ImportedOneFOneBOrderTrainsTheSameWeightsAsTheSchedule) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "small.yaml", small_config);
  const std::string csv = (dir / "order.csv").string();
  auto sim = actorpipe({"simulate", cfg, "--export", csv});  // S=2, M=4 from the config
  ASSERT_EQ(sim.code, 0) << describe(sim);
  const std::string a = (dir / "a.pt").string(), b = (dir / "b.pt").string();
  auto plain = actorpipe({"train", cfg, "--quiet", "--save", a});
  auto replay = actorpipe({"train", cfg, "--quiet", "--import", csv, "--save", b});
  ASSERT_EQ(plain.code, 0) << describe(plain);
  ASSERT_EQ(replay.code, 0) << describe(replay);
  expect_bitwise(a, b);
}

// ZB-V's V travels through the CSV: rank 0 holds virtual stages 0 and 3.
TEST(CliTrain, ImportedZbVOrderKeepsTheVAndTrainsTheSameWeights) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "zbv.yaml", R"(model:
  layers:
    - {type: linear, in: 8, out: 16}
    - {type: relu}
    - {type: linear, in: 16, out: 16}
    - {type: tanh}
    - {type: linear, in: 16, out: 4}
data:
  kind: synthetic
  synthetic: {samples: 256}
train:
  steps: 3
  batch_size: 32
pipeline:
  stages: 2
  schedule: zb-v
  microbatches: 4
)");
  const std::string csv = (dir / "order.csv").string();
  auto sim = actorpipe({"simulate", cfg, "--export", csv});
  ASSERT_EQ(sim.code, 0) << describe(sim);
  auto rows = lines(slurp(csv));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].rfind("0F0,0F1,0F2,3F0,3I0,3W0", 0), 0u) << rows[0];
  EXPECT_EQ(rows[1].rfind("1F0,2F0,1F1,2F1,2I0,2W0", 0), 0u) << rows[1];
  const std::string a = (dir / "a.pt").string(), b = (dir / "b.pt").string();
  auto plain = actorpipe({"train", cfg, "--quiet", "--save", a});
  auto replay = actorpipe({"train", cfg, "--quiet", "--import", csv, "--save", b});
  ASSERT_EQ(plain.code, 0) << describe(plain);
  ASSERT_EQ(replay.code, 0) << describe(replay);
  expect_bitwise(a, b);
  // A one-chunk config cannot run it.
  const std::string one = write(dir / "one.yaml", slurp(cfg).replace(slurp(cfg).find("zb-v"), 4, "1f1b"));
  auto wrong = actorpipe({"train", one, "--import", csv});
  EXPECT_EQ(wrong.code, 2) << describe(wrong);
  EXPECT_NE(wrong.err.find("runs 2 chunks per stage; the config has pipeline.virtual_stages 1"), std::string::npos)
      << wrong.err;
}

// The Zero Bubble paper's notation (F, B, W; B the input gradient alone,
// as older torch dumps write it): zb-h1 at S = 2, M = 4, written by hand,
// trains the bytes of the built-in zb-h1.
TEST(CliTrain, ImportedZeroBubbleNotationTrainsTheSameWeightsAsZbH1) {
  const fs::path dir = test_dir();
  std::string text = small_config;
  text.replace(text.find("  stages: 2\n"), 0, "  schedule: zb-h1\n");
  const std::string cfg = write(dir / "zbh1.yaml", text);
  const std::string csv = write(dir / "zb.csv",
                                "0F0,0F1,0B0,0W0,0F2,0B1,0W1,0F3,0B2,0W2,0B3,0W3\n"
                                "1F0,1B0,1F1,1B1,1W0,1F2,1B2,1W1,1F3,1B3,1W2,1W3\n");
  const std::string a = (dir / "a.pt").string(), b = (dir / "b.pt").string();
  auto plain = actorpipe({"train", cfg, "--quiet", "--save", a});
  auto replay = actorpipe({"train", cfg, "--quiet", "--import", csv, "--save", b});
  ASSERT_EQ(plain.code, 0) << describe(plain);
  ASSERT_EQ(replay.code, 0) << describe(replay);
  EXPECT_EQ(replay.err, "") << "no full-backward notice: every B has its W";
  expect_bitwise(a, b);
  // A W with no backward of its microbatch is named by file, row and column.
  const std::string bad = write(dir / "bad.csv",
                                "0F0,0F1,0B0,0W0,0F2,0B1,0W1,0F3,0B2,0W2,0B3,0W3\n"
                                "1F0,1B0,1F1,1W1,1W0,1F2,1B2,1F3,1B3,1W2,1W3\n");
  auto wrong = actorpipe({"train", cfg, "--quiet", "--import", bad});
  EXPECT_EQ(wrong.code, 2) << describe(wrong);
  EXPECT_NE(wrong.err.find(bad + ":2:4: '1W1': a W (weight gradient) without a backward of microbatch 1 on stage 1"),
            std::string::npos)
      << wrong.err;
}

TEST(CliSimulate, AsyncStreamsStepsWithoutAFlush) {
  auto r = actorpipe({"simulate", "--stages", "4", "--microbatches", "8", "--schedule", "async", "--steps", "3"});
  ASSERT_EQ(r.code, 0) << describe(r);
  // 3 x 8 microbatches back to back: (24 + 3) x 2 units, 18 per step.
  EXPECT_NE(r.out.find("makespan 54.000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no flush: 3 steps streamed as 24 microbatches; makespan per step 18.000"),
            std::string::npos)
      << r.out;
  auto bad = actorpipe({"simulate", "--schedule", "1f1b", "--steps", "3"});
  EXPECT_EQ(bad.code, 2) << describe(bad);
}

TEST(CliTrain, HybridConfigPrintsTheDeviceMapAndVerifiesReplicas) {
  const std::string path = std::string(ACTORPIPE_SOURCE_DIR) + "/configs/hybrid_dp2_pp2.yaml";
  const std::string trace = (test_dir() / "hybrid.json").string();
  auto r = actorpipe({"train", path, "--steps", "3", "--quiet", "--verify-replicas", "--trace", trace});
  ASSERT_EQ(r.code, 0) << describe(r);
  // devices: auto takes the GPU where there is one.
  const std::string dev = torch::cuda::is_available() ? "cuda:0" : "cpu";
  // The allreduce is its own event: one per step, replica and stage.
  const std::string json = slurp(trace);
  size_t allreduces = 0;
  for (size_t at = json.find("\"name\":\"allreduce\""); at != std::string::npos;
       at = json.find("\"name\":\"allreduce\"", at + 1))
    ++allreduces;
  EXPECT_EQ(allreduces, 3u * 2 * 2);
  EXPECT_NE(json.find("\"name\":\"replica 1 stage 1 (" + dev + ")\""), std::string::npos);
  EXPECT_NE(r.out.find("parallel: data parallel dp=2 x pipeline stages pp=2 = 4 stage actors; allreduce auto"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  batch 64 per step: 32 per replica\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  pipeline stage 0, layers 0..1: replica 0 on " + dev + ", replica 1 on " + dev + "\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  pipeline stage 1, layers 2..4: replica 0 on " + dev + ", replica 1 on " + dev + "\n"),
            std::string::npos)
      << r.out;
  std::regex summary(R"(allreduce \(gloo, dp=2\): [0-9.]+ ms per stage per step, [0-9]+% of it during other stages' compute; replicas bitwise identical after every step \(checksums\))");
  EXPECT_TRUE(std::regex_search(r.out, summary)) << r.out;
}

TEST(CliTrain, DeadlockingImportedOrderExitsThreeBeforeTraining) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "small.yaml", small_config);
  // Rank 0 wants B0 first: nothing can ever make it ready.
  const std::string csv = write(dir / "stuck.csv",
                                "0B0,0F0,0F1,0F2,0F3,0B1,0B2,0B3\n1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\n");
  auto r = actorpipe({"train", cfg, "--import", csv});
  EXPECT_EQ(r.code, 3) << describe(r);
  EXPECT_NE(r.err.find(">> stage 0: fired []"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("step "), std::string::npos) << "no step may run: " << r.out;
}

TEST(CliTrain, MisspelledScheduleExitsTwoAndSuggestsGPipe) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "small.yaml", small_config);
  auto r = actorpipe({"train", cfg, "--schedule", "gpip"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_NE(first_line(r.err).find("did you mean 'gpipe'"), std::string::npos) << describe(r);
  EXPECT_EQ(r.out.find("step "), std::string::npos) << "no training may start";
}

TEST(CliTrain, BadStepsValueExitsTwo) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "small.yaml", small_config);
  for (const char* v : {"0", "-1", "two", "3x"}) {
    auto r = actorpipe({"train", cfg, "--steps", v});
    EXPECT_EQ(r.code, 2) << v << "\n" << describe(r);
    EXPECT_NE(r.err.find("--steps"), std::string::npos) << describe(r);
  }
}

TEST(CliTrain, AsyncStepsBeyondAnIntExitTwo) {
  // async runs the whole stream as one step: --steps x M microbatches.
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "small.yaml", small_config);
  auto r = actorpipe({"train", cfg, "--schedule", "async", "--steps", "2147483647"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_EQ(first_line(r.err),
            "actorpipe: --steps 2147483647: async streams every step's 4 microbatches as one, more than 2147483647 in "
            "all")
      << describe(r);
  EXPECT_EQ(r.out, "");
}

TEST(CliTrain, NonFiniteDataExitsTwoNamingFileRowAndColumn) {
  // One NaN with normalize: standard used to make every step skip.
  const fs::path dir = test_dir();
  std::string csv;
  for (int r = 0; r < 16; ++r) {
    for (int f = 0; f < 8; ++f) csv += (r == 2 && f == 4 ? std::string("nan") : std::to_string(r + f)) + ",";
    csv += std::to_string(r % 4) + "\n";
  }
  write(dir / "data.csv", csv);
  const std::string cfg = write(dir / "nan.yaml", R"(model:
  layers:
    - {type: linear, in: 8, out: 16}
    - {type: relu}
    - {type: linear, in: 16, out: 4}
data:
  kind: csv
  path: data.csv
  normalize: standard
train:
  steps: 2
  batch_size: 4
)");
  auto r = actorpipe({"train", cfg});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_EQ(first_line(r.err),
            cfg + ":8:9: data.path: " + (dir / "data.csv").string() + ":3: column 5: 'nan' is not a finite number")
      << describe(r);
  EXPECT_EQ(r.out.find("step "), std::string::npos) << "no training may start";
}

TEST(CliCompare, PrintsOneRowPerSchedule) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "small.yaml", small_config);
  auto r = actorpipe({"compare", cfg, "--steps", "2"});
  ASSERT_EQ(r.code, 0) << describe(r);
  std::vector<std::string> names;
  for (const auto& row : table_rows(r.out))
    if (row[0] != "schedule") names.push_back(row[0]);
  EXPECT_EQ(names, (std::vector<std::string>{"naive", "gpipe", "1f1b"})) << r.out;
}

TEST(CliCompare, SchedulesComeFromTheConfigsCompareSection) {
  const std::string path = std::string(ACTORPIPE_SOURCE_DIR) + "/configs/schedules_compare.yaml";
  const auto configured = load_config(path).compare_schedules;
  ASSERT_GE(configured.size(), 2u);
  auto r = actorpipe({"compare", path, "--steps", "2"});
  ASSERT_EQ(r.code, 0) << describe(r);
  auto rows = table_rows(r.out);
  std::vector<std::string> names;
  for (size_t i = 1; i < rows.size(); ++i) names.push_back(rows[i][0]);
  EXPECT_EQ(names, configured) << r.out;
  // The same training under every synchronous schedule: final losses agree
  // to the printed digit (bitwise except naive, whose single microbatch
  // rounds differently). async's second step computes on the first weights.
  for (size_t i = 2; i < rows.size(); ++i)
    if (rows[i][0] == "async")
      EXPECT_NE(rows[i][4], rows[1][4]) << r.out;
    else
      EXPECT_EQ(rows[i][4], rows[1][4]) << r.out;
}

TEST(CliCompare, UnknownScheduleInListExitsTwoBeforeAnyRun) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "small.yaml", small_config);
  auto r = actorpipe({"compare", cfg, "--schedules", "gpipe,1fb1"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_NE(first_line(r.err).find("'1fb1'"), std::string::npos) << describe(r);
  EXPECT_EQ(r.out, "");
}

// -- init_from ------------------------------------------------------------------

std::string init_config(const std::string& layers) {
  return "model:\n  layers:\n" + layers + "  init_from: " + std::string(ACTORPIPE_TEST_DATA) +
         "/state_dict_ordered.pt\n"
         "data:\n  kind: synthetic\n  synthetic: {samples: 64}\n"
         "train:\n  steps: 2\n  batch_size: 16\n"
         "pipeline:\n  stages: 2\n  microbatches: 2\n";
}

TEST(CliInitFrom, PythonStateDictTrains) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "init.yaml", init_config(R"(    - {type: linear, in: 4, out: 3}
    - {type: relu}
    - {type: layernorm, dim: 3}
    - {type: linear, in: 3, out: 2}
)"));
  const std::string save = (dir / "out.pt").string();
  auto r = actorpipe({"train", cfg, "--save", save});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(fs::exists(save));
}

TEST(CliInitFrom, ShapeMismatchExitsTwoNamingKeyAndShape) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "init.yaml", init_config(R"(    - {type: linear, in: 4, out: 5}
    - {type: relu}
    - {type: layernorm, dim: 5}
    - {type: linear, in: 5, out: 2}
)"));
  auto r = actorpipe({"train", cfg});
  EXPECT_EQ(r.code, 2) << describe(r);
  const std::string msg = first_line(r.err);
  EXPECT_EQ(msg.rfind(cfg + ":", 0), 0u) << describe(r);
  EXPECT_NE(msg.find("model.init_from: "), std::string::npos) << describe(r);
  EXPECT_NE(msg.find("'0.weight'"), std::string::npos) << describe(r);
  EXPECT_NE(msg.find("[3, 4]"), std::string::npos) << describe(r);
  EXPECT_NE(msg.find("[5, 4]"), std::string::npos) << describe(r);
}

}  // namespace
}  // namespace actorpipe

// -- the HTML report in a real browser ------------------------------------------

namespace actorpipe {
namespace {

const char* const chromium = "/usr/bin/chromium";

run_result headless(const std::vector<std::string>& extra, const std::string& page) {
  std::vector<std::string> args = {"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                                   "--enable-logging=stderr", "--v=0"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back("file://" + page);
  return run_program(chromium, args);
}

// Console messages Chromium logs for the page (errors, uncaught exceptions).
std::vector<std::string> console_lines(const std::string& err) {
  std::vector<std::string> out;
  for (const auto& l : lines(err))
    if (l.find(":CONSOLE") != std::string::npos) out.push_back(l);
  return out;
}

TEST(ReportInBrowser, LoadsWithoutConsoleErrorsHoldsTheRunsNumbersAndALanePerStage) {
  if (access(chromium, X_OK) != 0) GTEST_SKIP() << chromium << " is missing (scripts/test installs chromium)";
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "small.yaml", small_config);  // 2 stages, 4 microbatches, 3 steps
  const std::string page = (dir / "run.html").string(), results = (dir / "results.json").string();
  auto r = actorpipe({"train", cfg, "--quiet", "--report", page, "--results", results});
  ASSERT_EQ(r.code, 0) << describe(r);
  std::string final_loss;
  for (const auto& row : table_rows(r.out))
    if (row[0] == "1f1b") final_loss = row[4];
  ASSERT_FALSE(final_loss.empty()) << r.out;

  // The detector works: a page with a script error is caught.
  const std::string broken = write(dir / "broken.html", "<html><body><script>no_such_fn();</script></body></html>");
  auto bad = headless({"--dump-dom"}, broken);
  EXPECT_FALSE(console_lines(bad.err).empty()) << bad.err;

  auto dom = headless({"--dump-dom"}, page);
  ASSERT_EQ(dom.code, 0) << describe(dom);
  EXPECT_TRUE(console_lines(dom.err).empty()) << describe(dom);
  // The table holds the run's numbers, as the CLI printed them.
  const auto table = dom.out.substr(dom.out.find("<table id=\"results\""));
  EXPECT_NE(table.find("<td>1f1b</td><td>2</td><td>1</td><td>4</td>"), std::string::npos) << table.substr(0, 600);
  EXPECT_NE(table.find("<td>" + final_loss + "</td>"), std::string::npos) << final_loss;
  // One lane per stage in the timeline.
  const auto timeline = dom.out.substr(dom.out.find("<div class=\"timeline\">"));
  const auto end = timeline.find("</svg>");
  size_t lanes = 0;
  for (size_t at = timeline.find("class=\"lane\""); at != std::string::npos && at < end;
       at = timeline.find("class=\"lane\"", at + 1))
    ++lanes;
  EXPECT_EQ(lanes, 2u);
  // Two curves: loss and training accuracy.
  size_t curves = 0;
  for (size_t at = dom.out.find("class=\"curve\""); at != std::string::npos; at = dom.out.find("class=\"curve\"", at + 1))
    ++curves;
  EXPECT_EQ(curves, 2u);

  const std::string shot = (dir / "run.png").string();
  auto png = headless({"--window-size=1300,1800", "--screenshot=" + shot}, page);
  ASSERT_EQ(png.code, 0) << describe(png);
  const std::string bytes = slurp(shot);
  ASSERT_GT(bytes.size(), 10000u);
  EXPECT_EQ(bytes.substr(1, 3), "PNG");
  // The JSON has every step.
  EXPECT_NE(slurp(results).find("\"step\": 2,"), std::string::npos);
}

}  // namespace
}  // namespace actorpipe

namespace actorpipe {
namespace {

// On a terminal (a pty from script(1)) progress is one bar redrawn in place.
TEST(CliProgress, ATerminalGetsALiveBarWithAnEta) {
  if (access("/usr/bin/script", X_OK) != 0) GTEST_SKIP() << "/usr/bin/script (bsdutils) is missing";
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "small.yaml", small_config);
  auto r = run_program("/usr/bin/script", {"-qec", std::string(ACTORPIPE_BIN) + " train " + cfg, "/dev/null"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.out.find("\r[##############################] step 3/3  loss "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ETA 0.0 s"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\nstep "), std::string::npos) << "no plain lines on a terminal";
}

}  // namespace
}  // namespace actorpipe

// -- checkpoints and --resume ---------------------------------------------------

namespace actorpipe {
namespace {

const char* const checkpoint_config = R"(model:
  layers:
    - {type: linear, in: 8, out: 16}
    - {type: relu}
    - {type: dropout, p: 0.2}
    - {type: linear, in: 16, out: 4}
data:
  kind: synthetic
  synthetic: {samples: 256}
train:
  steps: 12
  batch_size: 32
  lr_schedule: {type: step, step_size: 3, gamma: 0.5}
  clip_grad_norm: 0.5
pipeline:
  stages: 2
  microbatches: 4
  pace_ms: 4
checkpoint:
  dir: ckpt
  every: 1
  keep_last: 0
)";

// The whole process is SIGKILLed mid-run; --resume continues from its last
// checkpoint and ends on the uninterrupted run's weights, bit for bit.
void sigkill_then_resume(const std::string& yaml) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "ck.yaml", yaml);
  const std::string clean = (dir / "clean.pt").string(), resumed = (dir / "resumed.pt").string();
  auto full = actorpipe({"train", cfg, "--quiet", "--save", clean});
  ASSERT_EQ(full.code, 0) << describe(full);
  fs::remove_all(dir / "ckpt");

  std::vector<std::string> args = {ACTORPIPE_BIN, "train", cfg, "--quiet"};
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, ACTORPIPE_BIN, nullptr, nullptr, argv.data(), environ), 0);
  // Kill it once a few checkpoints exist, somewhere inside a later step.
  const fs::path third = dir / "ckpt" / "step_00000004.pt";
  for (int i = 0; i < 3000 && !fs::exists(third); ++i) usleep(10000);
  usleep(15000);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the run finished before it could be killed";
  ASSERT_FALSE(fs::exists(dir / "ckpt" / "step_00000012.pt"));

  auto r = actorpipe({"train", cfg, "--quiet", "--resume", (dir / "ckpt").string(), "--save", resumed});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.err.find("note: resuming after step "), std::string::npos) << r.err;
  expect_bitwise(clean, resumed);
}

TEST(CliResume, SigkilledRunResumesToTheUninterruptedWeights) { sigkill_then_resume(checkpoint_config); }

TEST(CliResume, SigkilledMeshResumesToTheUninterruptedWeights) {
  sigkill_then_resume(std::string(checkpoint_config) + "parallel:\n  dp: 2\n");
}

// A torn newest checkpoint is named and skipped; the one before it is used.
TEST(CliResume, TruncatedCheckpointIsNamedAndTheOneBeforeIsUsed) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "ck.yaml", checkpoint_config);
  const std::string clean = (dir / "clean.pt").string(), resumed = (dir / "resumed.pt").string();
  auto full = actorpipe({"train", cfg, "--quiet", "--save", clean, "--steps", "6"});
  ASSERT_EQ(full.code, 0) << describe(full);
  // Keep steps 0..2 (step_00000001..3.pt), tear step 3's file (step_00000004.pt) in half, drop the
  // later ones.
  const fs::path ck = dir / "ckpt";
  for (int s = 5; s < 7; ++s) fs::remove(ck / ("step_0000000" + std::to_string(s) + ".pt"));
  const fs::path torn = ck / "step_00000004.pt";
  fs::resize_file(torn, fs::file_size(torn) / 2);
  auto r = actorpipe({"train", cfg, "--quiet", "--steps", "6", "--resume", ck.string(), "--save", resumed});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.err.find("note: skipped " + torn.string() + ": "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("note: resuming after step 2 "), std::string::npos) << r.err;
  expect_bitwise(clean, resumed);
  // A flipped byte inside a tensor fails the checksum, named too (the
  // resumed run wrote steps 3..5 again: drop them).
  for (int s = 4; s < 7; ++s) fs::remove(ck / ("step_0000000" + std::to_string(s) + ".pt"));
  const fs::path two = ck / "step_00000003.pt";
  auto bytes = slurp(two);
  at::Tensor weight;
  for (auto& [name, t] : load_tensors(two.string()))
    if (name == "model.0.weight") weight = t.contiguous();
  ASSERT_TRUE(weight.defined());
  const std::string raw(static_cast<const char*>(weight.data_ptr()), 32);
  const auto at = bytes.find(raw);  // the tensor's stored bytes
  ASSERT_NE(at, std::string::npos);
  bytes[at + 5] ^= 0x5a;
  write(two, bytes);
  auto again = actorpipe({"train", cfg, "--quiet", "--steps", "6", "--resume", ck.string()});
  EXPECT_EQ(again.code, 0) << describe(again);
  EXPECT_NE(again.err.find("note: skipped " + two.string() + ": checksum mismatch, the file is corrupted"),
            std::string::npos)
      << again.err;
  EXPECT_NE(again.err.find("note: resuming after step 1 "), std::string::npos) << again.err;
}

}  // namespace
}  // namespace actorpipe

namespace actorpipe {
namespace {

// Every shipped fault scenario survives its faults and ends bitwise equal
// to a fault-free run of the same config; run as its header says (`train`,
// or `launch --nprocs N` for the scenarios that kill processes).
class CliFaultScenario : public ::testing::TestWithParam<std::string> {};

TEST_P(CliFaultScenario, EndsBitwiseEqualToACleanRun) {
  const std::string path = std::string(ACTORPIPE_SOURCE_DIR) + "/configs/faults/" + GetParam() + ".yaml";
  std::vector<std::string> args = {"train", path, "--quiet", "--verify-against-clean"};
  const std::string text = slurp(path);
  const std::string launch = "#   actorpipe launch --nprocs ";
  if (const auto at = text.find(launch); at != std::string::npos)
    args = {"launch", "--nprocs", text.substr(at + launch.size(), text.find(' ', at + launch.size()) - at - launch.size()),
            path, "--quiet", "--verify-against-clean"};
  auto r = actorpipe(args);
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.out.find("verify: final weights bitwise equal to a fault-free run"), std::string::npos) << r.out;
}

std::vector<std::string> fault_scenarios() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(std::string(ACTORPIPE_SOURCE_DIR) + "/configs/faults"))
    if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Shipped, CliFaultScenario, ::testing::ValuesIn(fault_scenarios()),
                         [](const auto& info) { return param_name(info.param); });

// The same config and fault seed give the same trace hash, however the
// run was timed; another fault seed gives another.
TEST(CliFaults, TheChaosScenarioPrintsTheSameTraceRunAfterRun) {
  const std::string path = std::string(ACTORPIPE_SOURCE_DIR) + "/configs/faults/chaos.yaml";
  auto trace = [](const run_result& r) {
    std::smatch m;
    return std::regex_search(r.out, m, std::regex(R"(trace: ([0-9a-f]{16}))")) ? m[1].str() : std::string();
  };
  auto a = actorpipe({"train", path, "--quiet"});
  auto b = actorpipe({"train", path, "--quiet"});
  ASSERT_EQ(a.code, 0) << describe(a);
  ASSERT_EQ(b.code, 0) << describe(b);
  ASSERT_FALSE(trace(a).empty()) << a.out;
  EXPECT_EQ(trace(a), trace(b));
  const auto dir = std::filesystem::path(::testing::TempDir()) / "actorpipe_chaos_seed";
  std::filesystem::create_directories(dir);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  auto yaml = std::regex_replace(text.str(), std::regex("\n  seed: 7\n"), "\n  seed: 8\n");
  ASSERT_NE(yaml, text.str());
  std::ofstream(dir / "chaos.yaml") << yaml;
  auto c = actorpipe({"train", (dir / "chaos.yaml").string(), "--quiet"});
  ASSERT_EQ(c.code, 0) << describe(c);
  EXPECT_NE(trace(c), trace(a));
}

// The chaos scenario: duplicates, delays, a slow stage and a NaN at once;
// the report counts them and the weights equal a fault-free run's.
TEST(CliFaults, ChaosScenarioReportsItsFaultsAndVerifiesAgainstACleanRun) {
  const std::string path = std::string(ACTORPIPE_SOURCE_DIR) + "/configs/faults/chaos.yaml";
  auto r = actorpipe({"train", path, "--quiet", "--verify-against-clean"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.err.find("note: step 12: non-finite value first seen on stage 2, microbatch 6, in an activation"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("note: restart 1: stage 2 stopped at step 3: exit_reason(kill); rolled back to after step 2"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("injected fault: throw in B2 at step 7"), std::string::npos) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(restarts: 2, [0-9.]+ ms of work lost)"))) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.out, m,
      std::regex(R"(faults: (\d+) messages sent twice, (\d+) held back, (\d+) dropped \((\d+) asked for again, (\d+) resent\); (\d+) duplicate)")))
      << r.out;
  EXPECT_GT(std::stoi(m[1]), 0);
  EXPECT_GT(std::stoi(m[2]), 0);
  EXPECT_EQ(std::stoi(m[3]), 1);  // the dropped F3 of step 9
  EXPECT_GE(std::stoi(m[4]), 1);
  EXPECT_GE(std::stoi(m[5]), 1);
  EXPECT_LE(std::stoi(m[6]), std::stoi(m[1]) + std::stoi(m[5]));
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(straggler: stage 1 runs at 0\.[23]\d of the median stage's speed)")))
      << r.out;
  EXPECT_NE(r.out.find("verify: final weights bitwise equal to a fault-free run (8 tensors, the same steps skipped)"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace actorpipe

namespace actorpipe {
namespace {

const char* const hang_base = R"(model:
  layers:
    - {type: linear, in: 8, out: 16}
    - {type: relu}
    - {type: linear, in: 16, out: 16}
    - {type: relu}
    - {type: linear, in: 16, out: 4}
data:
  kind: synthetic
  synthetic: {samples: 256}
train:
  steps: 4
  batch_size: 32
pipeline:
  stages: 3
  microbatches: 4
)";

// A lost message nobody asks for again (op_timeout_ms: 0) hangs the run:
// the watchdog stops it with exit 3 and names the op that waits.
TEST(CliFaults, AHangExitsThreeWithTheOpGridWithinTheWatchdogTime) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "hang.yaml", std::string(hang_base) + R"(supervision:
  watchdog_s: 1
  op_timeout_ms: 0
faults:
  inject:
    - {kind: drop, from: 0, to: 1, step: 1, op: F2}
)");
  const auto begin = std::chrono::steady_clock::now();
  auto r = actorpipe({"train", cfg, "--quiet"});
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_EQ(r.code, 3) << describe(r);
  EXPECT_LT(took, 1.0 + 2.0 + 1.0) << "watchdog_s + 2 s, plus the process start";
  EXPECT_NE(r.err.find("actorpipe: watchdog: no op fired anywhere for 1 s; the op grid:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(">> stage 1 (step 1):"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("F2 waits for its input from stage 0"), std::string::npos) << r.err;
}

// More deaths than supervision allows within the window: exit 4.
TEST(CliFaults, TooManyRestartsExitFour) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "deaths.yaml", std::string(hang_base) + R"(supervision:
  max_restarts: 1
  window_steps: 10
faults:
  inject:
    - {kind: kill_stage, stage: 0, step: 1, after_op: F0}
    - {kind: throw, stage: 2, step: 2, op: B1}
)");
  auto r = actorpipe({"train", cfg, "--quiet"});
  EXPECT_EQ(r.code, 4) << describe(r);
  EXPECT_NE(r.err.find("actorpipe: gave up: stage 2 stopped at step 2:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("2 restarts within 10 steps exceed supervision.max_restarts 1"), std::string::npos) << r.err;
}

// A StepLR whose gamma grows the rate past float32's range (what LibTorch's
// optimizer takes) within train.steps is refused before any work, exit 2,
// naming the key, the step and the file; with --steps short of it, the
// same config trains.
TEST(CliUsage, AStepLrThatGrowsTheRatePastFloatIsRefusedNamingTheKey) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "growing.yaml", R"(model:
  layers:
    - {type: linear, in: 16, out: 4}
data: {kind: synthetic, synthetic: {samples: 512}}
train:
  steps: 60
  batch_size: 32
  optimizer: {type: sgd, lr: 0.1}
  lr_schedule: {type: step, step_size: 1, gamma: 10}
)");
  auto r = actorpipe({"train", cfg, "--quiet"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_EQ(r.err, cfg + ":9:50: train.lr_schedule.gamma: StepLR (gamma 10 every 1 steps) grows train.optimizer.lr "
                         "past float32's largest value (3.4e+38), which the optimizer computes in, at step 40 of "
                         "train.steps 60\n")
      << describe(r);
  EXPECT_TRUE(r.out.empty()) << "refused before the plan\n" << describe(r);
  auto shorter = actorpipe({"train", cfg, "--quiet", "--steps", "30"});
  EXPECT_EQ(shorter.code, 0) << describe(shorter);
}

// Under async a fault that names a step fires at the first op of a
// microbatch of that step (the stream's microbatch g is microbatch g mod M
// of step g / M), as in a synchronous run: a throw ends the run (exit 1)
// naming its op and step; a killed stage is restarted from the run's start
// (async keeps no boundary) and the weights end on the fault-free bytes.
TEST(CliFaults, UnderAsyncAFaultNamingAStepFiresAtThatStep) {
  const fs::path dir = test_dir();
  const std::string base = R"(model:
  layers:
    - {type: linear, in: 16, out: 32}
    - {type: relu}
    - {type: linear, in: 32, out: 32}
    - {type: relu}
    - {type: linear, in: 32, out: 4}
data: {kind: synthetic, synthetic: {samples: 512}}
train: {steps: 6, batch_size: 32}
pipeline: {stages: 3, microbatches: 4, schedule: async}
)";
  const std::string thrown = write(dir / "async_throw.yaml", base + R"(faults:
  inject:
    - {kind: throw, stage: 2, step: 4, op: B1}
)");
  auto t = actorpipe({"train", thrown, "--quiet"});
  EXPECT_EQ(t.code, 1) << describe(t);
  EXPECT_NE(t.err.find("injected fault: throw in B1 at step 4"), std::string::npos) << describe(t);
  const std::string killed = write(dir / "async_kill.yaml", base + R"(supervision: {max_restarts: 1}
faults:
  inject:
    - {kind: kill_stage, stage: 1, step: 3, after_op: F2}
)");
  auto k = actorpipe({"train", killed, "--quiet", "--verify-against-clean"});
  ASSERT_EQ(k.code, 0) << describe(k);
  EXPECT_NE(k.err.find("note: restart 1: stage 1 stopped at step 3: exit_reason(kill); rolled back to after step -1"),
            std::string::npos)
      << describe(k);
  EXPECT_NE(k.out.find("verify: final weights bitwise equal to a fault-free run"), std::string::npos) << describe(k);
  // No share of idle time is negative; async's is the stream's.
  EXPECT_NE(k.out.find("(stream idle)"), std::string::npos) << k.out;
  EXPECT_EQ(k.out.find("| -0."), std::string::npos) << k.out;
}

// Under the lock-step device the whole trace, ops in firing order too, is
// the same run after run, through duplicates, a death and a throw.
TEST(CliFaults, UnderLockstepTheOrderIsTheSameRunAfterRun) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "lockstep.yaml", std::string(hang_base) + R"(  lockstep: true
supervision:
  max_restarts: 3
faults:
  seed: 3
  inject:
    - {kind: duplicate, probability: 0.1}
    - {kind: kill_stage, stage: 1, step: 1, after_op: B2}
    - {kind: throw, stage: 2, step: 2, op: F1}
)");
  auto order = [](const run_result& r) {
    std::smatch m;
    return std::regex_search(r.out, m, std::regex(R"(order: ([0-9a-f]{16}))")) ? m[1].str() : std::string();
  };
  auto a = actorpipe({"train", cfg, "--quiet"});
  auto b = actorpipe({"train", cfg, "--quiet"});
  ASSERT_EQ(a.code, 0) << describe(a);
  ASSERT_EQ(b.code, 0) << describe(b);
  EXPECT_NE(a.out.find("restarts: 2,"), std::string::npos) << a.out;
  ASSERT_FALSE(order(a).empty()) << a.out;
  EXPECT_EQ(order(a), order(b));
}

// on_nonfinite: stop saves a checkpoint of the last good weights and stops,
// naming where the value appeared; the run resumes from that checkpoint.
TEST(CliFaults, OnNonfiniteStopSavesACheckpointAndStops) {
  const fs::path dir = test_dir();
  const std::string body = std::string(hang_base) + R"(checkpoint:
  dir: ckpt
  every: 100
supervision:
  on_nonfinite: stop
)";
  const std::string cfg = write(dir / "stop.yaml", body + R"(faults:
  inject:
    - {kind: nonfinite, stage: 1, step: 2, microbatch: 1, where: grad}
)");
  auto r = actorpipe({"train", cfg, "--quiet"});
  EXPECT_EQ(r.code, 1) << describe(r);
  const fs::path saved = dir / "ckpt" / "step_00000003.pt";
  EXPECT_NE(r.err.find("step 2: non-finite value first seen on stage 1, microbatch 1, in a gradient; stopping "
                       "(supervision.on_nonfinite: stop); checkpoint " + saved.string()),
            std::string::npos)
      << r.err;
  ASSERT_TRUE(fs::exists(saved));
  // Without the fault, the run goes on from there to the end.
  const std::string clean = write(dir / "clean.yaml", body);
  auto resumed = actorpipe({"train", clean, "--quiet", "--resume", (dir / "ckpt").string()});
  EXPECT_EQ(resumed.code, 0) << describe(resumed);
  EXPECT_NE(resumed.err.find("note: resuming after step 2 "), std::string::npos) << resumed.err;
}

// The same under the data x pipeline mesh (dp 2 x pp 3).
const char* const mesh_part = "parallel:\n  dp: 2\n";

TEST(CliFaults, UnderTheMeshAHangExitsThreeWithTheOpGrid) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "hang.yaml", std::string(hang_base) + mesh_part + R"(supervision:
  watchdog_s: 1
  op_timeout_ms: 0
faults:
  inject:
    - {kind: drop, from: 0, to: 1, step: 1, op: F2}
)");
  auto r = actorpipe({"train", cfg, "--quiet"});
  EXPECT_EQ(r.code, 3) << describe(r);
  EXPECT_NE(r.err.find(">> replica 0 stage 1 (step 1):"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(">> replica 1 stage 1 (step 1):"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("F2 waits for its input from stage 0"), std::string::npos) << r.err;
}

// Unsupervised, a death ends the run (exit 1), naming the stage; its peer,
// already waiting in the allreduce for it, is let go, so the process ends.
TEST(CliFaults, UnderTheMeshADeathEndsTheRunAndReleasesItsPeer) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "death.yaml", std::string(hang_base) + mesh_part + R"(faults:
  inject:
    - {kind: kill_stage, replica: 1, stage: 0, step: 1, after_op: B3}
)");
  auto r = actorpipe({"train", cfg, "--quiet"});
  EXPECT_EQ(r.code, 1) << describe(r);
  EXPECT_NE(r.err.find("replica 1 stage 0 stopped at step 1: exit_reason(kill)"), std::string::npos) << r.err;
}

TEST(CliFaults, UnderTheMeshTooManyRestartsExitFour) {
  const fs::path dir = test_dir();
  const std::string cfg = write(dir / "deaths.yaml", std::string(hang_base) + mesh_part + R"(supervision:
  max_restarts: 1
  window_steps: 10
faults:
  inject:
    - {kind: kill_stage, replica: 0, stage: 0, step: 1, after_op: F0}
    - {kind: throw, replica: 1, stage: 2, step: 2, op: B1}
)");
  auto r = actorpipe({"train", cfg, "--quiet"});
  EXPECT_EQ(r.code, 4) << describe(r);
  EXPECT_NE(r.err.find("actorpipe: gave up: replica 1 stage 2 stopped at step 2:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("2 restarts within 10 steps exceed supervision.max_restarts 1"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace actorpipe
