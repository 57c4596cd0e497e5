// Rebalance (pipeline.rebalance): a stage that runs slower than the others
// (a slow_stage fault, or its process throttled by the kernel's cgroup v1
// cpu controller) has layers taken off it at a step boundary, the layers'
// state moving between the processes' memories, and the run still ends on
// the bytes of the same run in one process. Real processes under
// `actorpipe launch` on ephemeral ports; the launcher is killed, and the
// cgroup removed, in every failure path (tests/apps/cgroup_v1.hpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/apps/background_launch.hpp"
#include "tests/apps/cgroup_v1.hpp"
#include "tests/apps/child_process.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using testing_util::child_result;
using testing_util::describe;
using testing_util::read_or_empty;

fs::path test_dir() { return testing_util::dir_per_test("actorpipe_rebalance_test"); }

child_result actorpipe(const std::vector<std::string>& args, double timeout_s = 180) {
  testing_util::child_limits limits;
  limits.timeout_s = timeout_s;
  return testing_util::run_child(ACTORPIPE_BIN, args, limits);
}

// Fourteen layers over 3 stages (0-5 | 6-9 | 10-13 by compute: two of the
// six wide linears each, the first and last narrow), wide enough that a
// stage's ops take milliseconds (a throttled process shows in its busy
// time), with dropout (seeded per layer: a layer that moved and drew its
// masks otherwise would show in the weights) and clipping (one global norm).
std::string config(int steps, const std::string& extra, int batch = 192) {
  return "model:\n"
         "  layers:\n"
         "    - {type: linear, in: 32, out: 512}\n"
         "    - {type: relu}\n"
         "    - {type: linear, in: 512, out: 512}\n"
         "    - {type: dropout, p: 0.1}\n"
         "    - {type: linear, in: 512, out: 512}\n"
         "    - {type: relu}\n"
         "    - {type: linear, in: 512, out: 512}\n"
         "    - {type: tanh}\n"
         "    - {type: linear, in: 512, out: 512}\n"
         "    - {type: relu}\n"
         "    - {type: linear, in: 512, out: 512}\n"
         "    - {type: relu}\n"
         "    - {type: linear, in: 512, out: 512}\n"
         "    - {type: linear, in: 512, out: 4}\n"
         "data:\n"
         "  kind: synthetic\n"
         "  synthetic: {samples: 1024, features: 32, classes: 4}\n"
         "  test_fraction: 0.25\n"
         "train:\n"
         "  steps: " + std::to_string(steps) + "\n"
         "  batch_size: " + std::to_string(batch) + "\n"
         "  optimizer: {type: adam, lr: 0.001}\n"
         "  clip_grad_norm: 1.0\n"
         "  seed: 11\n"
         "pipeline:\n"
         "  stages: 3\n"
         "  schedule: 1f1b\n"
         "  microbatches: 4\n"
         "  devices: auto\n"
         "  intra_op_threads: 1\n" + extra;
}

std::string write_config(const std::string& name, const std::string& text) {
  return testing_util::write(test_dir() / (name + ".yaml"), text);
}

// The same run in one process, without rebalance or faults, saved.
std::string clean_run(int steps, int batch = 192) {
  const std::string saved = (test_dir() / "clean.pt").string();
  auto r = actorpipe({"train", write_config("clean", config(steps, "", batch)), "--quiet", "--save", saved});
  EXPECT_EQ(r.code, 0) << describe(r);
  const std::string bytes = read_or_empty(saved);
  EXPECT_FALSE(bytes.empty());
  return bytes;
}

const std::string kRebalance = "  rebalance: {every: 3, threshold: 0.2}\n"
                               "supervision: {max_restarts: 3, heartbeat_timeout_s: 5}\n";

// "re-placed: generation G re-partitions ... after step K": K, or -1.
int64_t repartitioned_after(const std::string& out) {
  static const std::regex line("re-partitions the layers[^\n]*, after step ([0-9]+)");
  std::smatch m;
  return std::regex_search(out, m, line) ? std::stoll(m[1]) : -1;
}

// The highest "step N/" the run printed so far (1-based), or 0.
int64_t steps_printed(const std::string& out) {
  static const std::regex step("step +([0-9]+)/");
  int64_t most = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), step); it != std::sregex_iterator(); ++it)
    most = std::max<int64_t>(most, std::stoll((*it)[1]));
  return most;
}

// The layers of stage `stage` before and after, from the line's
// "layers by stage A | B | C -> D | E | F".
std::pair<std::string, std::string> stage_layers(const std::string& out, int stage) {
  static const std::regex parts("layers by stage ([0-9 |-]+) -> ([0-9 |-]+),");
  std::smatch m;
  if (!std::regex_search(out, m, parts)) return {};
  auto nth = [stage](std::string s) {
    for (int k = 0; k < stage; ++k) s = s.substr(s.find('|') + 2);
    return s.substr(0, s.find(' '));
  };
  return {nth(m[1]), nth(m[2])};
}

// Layers in "a-b" or "a".
int count_layers(const std::string& range) {
  const size_t dash = range.find('-');
  if (range.empty()) return -1;
  return dash == std::string::npos ? 1 : std::stoi(range.substr(dash + 1)) - std::stoi(range.substr(0, dash)) + 1;
}

// A slow_stage fault makes stage 1's ops take 4 times as long from the
// start: after the first measured window (steps 1-3) its layers go to the
// stages beside it, from their processes' memory, and the run ends on the
// clean bytes.
TEST(Rebalance, ASlowStageGivesUpLayersAndTheRunEndsBitwise) {
  const std::string clean = clean_run(12);
  const std::string saved = (test_dir() / "rebalanced.pt").string();
  const std::string fault = "faults:\n  inject:\n    - {kind: slow_stage, stage: 1, factor: 4}\n";
  auto r = actorpipe({"launch", "--nprocs", "3", write_config("slow", config(12, kRebalance + fault)), "--save", saved,
                      "--results", (test_dir() / "results.json").string()});
  ASSERT_EQ(r.code, 0) << describe(r);
  const std::string out = r.out + r.err;
  const int64_t after = repartitioned_after(out);
  EXPECT_GE(after, 3) << out;
  EXPECT_LE(after, 6) << out;  // within 2 windows of 3 steps
  const auto [before, now] = stage_layers(out, 1);
  EXPECT_EQ(before, "6-9") << out;
  EXPECT_LT(count_layers(now), count_layers(before)) << out;
  EXPECT_NE(out.find("'s memory"), std::string::npos) << out;  // the moved layers' state: memory, not disk
  EXPECT_EQ(out.find("from the newest checkpoint"), std::string::npos) << out;
  EXPECT_NE(read_or_empty(test_dir() / "results.json").find("re-partitions the layers"), std::string::npos);
  EXPECT_TRUE(read_or_empty(saved) == clean) << out;
}

// The same in one process (`actorpipe train`): the stage actors share the
// process, and every stage restarts from the boundary the supervisor keeps
// in memory, under the new split.
TEST(Rebalance, InOneProcessASlowStageGivesUpLayersBitwise) {
  const std::string clean = clean_run(12);
  const std::string saved = (test_dir() / "rebalanced.pt").string();
  const std::string fault = "faults:\n  inject:\n    - {kind: slow_stage, stage: 1, factor: 4}\n";
  auto r = actorpipe({"train", write_config("slow", config(12, kRebalance + fault)), "--save", saved});
  ASSERT_EQ(r.code, 0) << describe(r);
  const std::string out = r.out + r.err;
  const int64_t after = repartitioned_after(out);
  EXPECT_GE(after, 3) << out;
  EXPECT_LE(after, 6) << out;
  const auto [before, now] = stage_layers(out, 1);
  EXPECT_EQ(before, "6-9") << out;
  EXPECT_LT(count_layers(now), count_layers(before)) << out;
  EXPECT_NE(out.find("every stage from the boundary in memory"), std::string::npos) << out;
  EXPECT_EQ(out.find("restart"), std::string::npos) << out;  // planned: not a restart
  EXPECT_TRUE(read_or_empty(saved) == clean) << out;
}

// A process killed after a re-partition is started again with the new
// split (the plan carries it) and heals from its keeper's memory.
TEST(Rebalance, AKillAfterARebalanceHealsTheNewSplitFromMemoryBitwise) {
  const std::string clean = clean_run(12);
  const std::string saved = (test_dir() / "healed.pt").string();
  const std::string faults = "faults:\n  inject:\n    - {kind: slow_stage, stage: 1, factor: 4}\n"
                             "    - {kind: kill_process, stage: 2, step: 8, after_op: F1}\n";
  auto r = actorpipe({"launch", "--nprocs", "3", write_config("killed", config(12, kRebalance + faults)), "--save",
                      saved});
  ASSERT_EQ(r.code, 0) << describe(r);
  const std::string out = r.out + r.err;
  const int64_t after = repartitioned_after(out);
  ASSERT_GE(after, 0) << out;
  EXPECT_LT(after, 8) << out;
  EXPECT_NE(out.find("restarts: 1,"), std::string::npos) << out;
  EXPECT_NE(out.find("healed from memory"), std::string::npos) << out;
  EXPECT_TRUE(read_or_empty(saved) == clean) << out;
}

// dp 2 x pp 2 on 4 processes: both replicas' stage 1 slow; the split moves
// in both replicas alike, and the replicas' sums still combine bitwise.
TEST(Rebalance, AtDataParallelTwoBothReplicasMoveAlikeBitwise) {
  const auto two_by_two = [](int steps, const std::string& extra) {
    std::string text = config(steps, extra);
    text.replace(text.find("  stages: 3\n"), 12, "  stages: 2\n");
    return text.replace(text.find("train:\n"), 7, "parallel: {dp: 2, allreduce: gloo}\ntrain:\n");
  };
  const std::string clean = (test_dir() / "clean.pt").string();
  auto c = actorpipe({"train", write_config("clean", two_by_two(12, "")), "--quiet", "--save", clean});
  ASSERT_EQ(c.code, 0) << describe(c);
  const std::string saved = (test_dir() / "rebalanced.pt").string();
  const std::string fault = "faults:\n  inject:\n    - {kind: slow_stage, stage: 1, factor: 4}\n";
  auto r = actorpipe({"launch", "--nprocs", "4", write_config("dp2", two_by_two(12, kRebalance + fault)), "--save",
                      saved});
  ASSERT_EQ(r.code, 0) << describe(r);
  const std::string out = r.out + r.err;
  EXPECT_GE(repartitioned_after(out), 0) << out;
  const auto [before, now] = stage_layers(out, 1);
  EXPECT_LT(count_layers(now), count_layers(before)) << out;
  EXPECT_TRUE(read_or_empty(saved) == read_or_empty(clean)) << out;
}

// The straggler: RANK 1's process throttled by the kernel to a
// third of a core once the run trains. Within 2 windows of `every` steps
// the supervisor takes layers off stage 1, and the weights end on the
// bytes of the unthrottled run.
TEST(Rebalance, AProcessThrottledToAThirdOfACoreGivesUpLayersWithinTwoWindowsBitwise) {
  // A third of a core: 3333 us of every 10 ms.
  testing_util::cgroup_v1 slow("cpu");
  slow.set("cpu.cfs_period_us", "10000").set("cpu.cfs_quota_us", "3333");
  if (!slow.ok()) GTEST_SKIP() << "the cgroup v1 cpu controller is not writable here";
  const int steps = 30;
  // A batch that keeps each stage busy for about half of every step even
  // at full speed: a third of a core is then a straggler whenever the
  // throttle lands (at 192 rows a stage needed about 35 % of a core, close
  // to the quota, and a re-partition now and then waited for 5 windows).
  const int batch = 576;
  const std::string clean = clean_run(steps, batch);
  const std::string saved = (test_dir() / "rebalanced.pt").string();
  testing_util::background_launch run(
      ACTORPIPE_BIN, (test_dir() / "launch.out").string(),
      {"--nprocs", "3", write_config("throttled", config(steps, kRebalance, batch)), "--save", saved});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step     2/")) << run.output();
  const pid_t pid = run.worker(1, std::chrono::milliseconds(0));
  ASSERT_GT(pid, 0) << run.output();
  const int64_t at = steps_printed(run.output());
  ASSERT_TRUE(slow.hold(pid)) << "cannot move rank 1's process into the throttled group";
  ASSERT_EQ(run.wait(240), 0) << run.output();
  const std::string out = run.output();
  const int64_t after = repartitioned_after(out);
  ASSERT_GE(after, 0) << out;
  EXPECT_LE(after, at + 2 * 3) << "throttled after step " << at << "\n" << out;
  const auto [before, now] = stage_layers(out, 1);
  EXPECT_LT(count_layers(now), count_layers(before)) << out;
  EXPECT_EQ(out.find("from the newest checkpoint"), std::string::npos) << out;
  EXPECT_TRUE(read_or_empty(saved) == clean) << out;
}

}  // namespace
}  // namespace actorpipe
