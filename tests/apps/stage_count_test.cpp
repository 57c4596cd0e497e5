// The stage count follows the processes (supervision.shrink: recut): a run
// that loses a process for good cuts the layers again into one stage per
// process left, each layer's state from the memory of a live process, and
// ends on the bytes of the fault-free run in one process. Real processes
// under `actorpipe launch` on ephemeral ports; the launcher is killed in
// every failure path (background_launch's destructor).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/apps/background_launch.hpp"
#include "tests/apps/child_process.hpp"
#include "tests/apps/deep_mlp.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using testing_util::child_result;
using testing_util::describe;
using testing_util::read_or_empty;

fs::path test_dir() { return testing_util::dir_per_test("actorpipe_stage_count_test"); }

// The deep MLP (11 layers, dropout and clipping: a stage that drew its
// masks or summed its norm differently after the re-cut would show in the
// weights) for `steps` steps at pp `stages` x dp `dp`, paced when
// `pace_ms` > 0 so that a kill from outside lands mid-run.
std::string config(int stages, int dp, int steps, int pace_ms, const std::string& supervision) {
  std::string text = testing_util::deep_mlp_model_and_data() +
                     "train:\n  steps: " + std::to_string(steps) +
                     "\n  batch_size: 48\n  optimizer: {type: adam, lr: 0.01}\n  clip_grad_norm: 1.0\n  seed: 7\n";
  if (dp > 1) text += "parallel: {dp: " + std::to_string(dp) + ", allreduce: gloo}\n";
  text += "pipeline:\n  stages: " + std::to_string(stages) +
          "\n  schedule: 1f1b\n  microbatches: 4\n  devices: auto\n  intra_op_threads: 1\n";
  if (pace_ms > 0) text += "  pace_ms: " + std::to_string(pace_ms) + "\n";
  if (!supervision.empty()) text += "supervision: " + supervision + "\n";
  return text;
}

const std::string kRecut = "{max_restarts: 3, heartbeat_timeout_s: 2, replace_timeout_s: 0, shrink: recut}";

std::string write_config(const std::string& name, const std::string& text) {
  return testing_util::write(test_dir() / (name + ".yaml"), text);
}

// The fault-free run in one process, saved: the bytes every re-cut run
// must end on (one stage or four save the same bytes).
std::string clean_run(int stages, int dp, int steps) {
  const std::string saved = (test_dir() / "clean.pt").string();
  testing_util::child_limits limits;
  limits.timeout_s = 180;
  auto r = testing_util::run_child(
      ACTORPIPE_BIN, {"train", write_config("clean", config(stages, dp, steps, 0, "")), "--quiet", "--save", saved},
      limits);
  EXPECT_EQ(r.code, 0) << describe(r);
  const std::string bytes = read_or_empty(saved);
  EXPECT_FALSE(bytes.empty());
  return bytes;
}

// A real `kill -9` of the worker with RANK `victim` once the run trains:
// the run goes on with the layers cut again over the others, and ends on
// the clean bytes with exit 0. The launcher's output.
std::string kill_nine_and_recut(int stages, int dp, int victim, const std::string& recut_line) {
  const std::string clean = clean_run(stages, dp, 40);
  const std::string saved = (test_dir() / "recut.pt").string();
  const std::string results = (test_dir() / "results.json").string();
  const int nprocs = stages * dp;
  testing_util::background_launch run(ACTORPIPE_BIN, (test_dir() / "launch.out").string(),
                                      {"--coordinator", "rank0", "--nprocs", std::to_string(nprocs),
                                       write_config("recut", config(stages, dp, 40, 4, kRecut)), "--save", saved,
                                       "--results", results});
  EXPECT_TRUE(run.started());
  if (!run.started()) return "";
  EXPECT_TRUE(run.wait_for_output("step     3/")) << run.output();
  const pid_t pid = run.worker(victim, std::chrono::milliseconds(0));
  EXPECT_GT(pid, 0) << run.output();
  if (pid <= 0) return run.output();
  ::kill(pid, SIGKILL);
  EXPECT_TRUE(run.wait_for_output(recut_line)) << run.output();
  EXPECT_EQ(run.wait(180), 0) << run.output();
  const std::string out = run.output();
  EXPECT_NE(out.find("restarts: 1,"), std::string::npos) << out;
  EXPECT_EQ(out.find("every stage from"), std::string::npos) << out;  // from memory, not disk
  EXPECT_EQ(out.find("not cut again"), std::string::npos) << out;
  EXPECT_TRUE(read_or_empty(saved) == clean) << out;
  return out;
}

// pp 4 on 4 processes, RANK 2 killed: 3 stages over 3 processes. Old stage
// 2's layers come from its keeper's memory (RANK 1's process, which holds
// the copy stage 2 sent after every step), the others from their own.
TEST(Recut, AKillNineAtPpFourGoesOnAsThreeStagesOverThreeProcessesBitwise) {
  const std::string out = kill_nine_and_recut(
      4, 1, 2,
      "re-placed: generation 1 goes on over 3 processes without rank 2 (supervision.replace_timeout_s 0: no "
      "replacement): 4 stages -> 3 (supervision.shrink recut): stages by process 0 | 1 | 2 | 3 -> 0 | 1 | 2 "
      "(ranks 0 1 3), layers by stage ");
  EXPECT_NE(read_or_empty(test_dir() / "results.json").find("\"stages\": 3,"), std::string::npos);
  EXPECT_NE(out.find("rank 1's memory"), std::string::npos) << out;
}

// dp 2 x pp 2 on 4 processes, RANK 3 (replica 1, stage 1) killed: the 3
// processes left hold one stage per replica (every replica keeps the same
// cut), the whole model each; replica 1's lost layers come from replica 0's
// stage 1, its live state. The third survivor holds no stage.
TEST(Recut, DataParallelTwoByTwoLosingOneGoesOnAsOneStagePerReplicaBitwise) {
  kill_nine_and_recut(2, 2, 3,
                      "re-placed: generation 1 goes on over 3 processes without rank 3 (supervision.replace_timeout_s "
                      "0: no replacement): 2 stages -> 1 (supervision.shrink recut): stages by process 0.0 | 0.1 | "
                      "1.0 | 1.1 -> 0.0 | 1.0 | - (ranks 0 1 2), layers by stage 0-");
  EXPECT_NE(read_or_empty(test_dir() / "results.json").find("\"stages\": 1,"), std::string::npos);
}

}  // namespace
}  // namespace actorpipe
