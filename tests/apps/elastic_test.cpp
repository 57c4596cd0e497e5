// Elastic pipelines: a run that loses a process for good goes on over the
// processes that are left (supervision.replace_timeout_s: 0), each lost
// stage starting in the process that holds its copy (or, under
// supervision.shrink: recut, the layers cut again into one stage per process
// left, each piece from where it lives), and ends on the bytes of the
// fault-free run in one process. Real processes under
// `actorpipe launch` on ephemeral ports; the launcher is killed in every
// failure path.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/util/seed.hpp"
#include "tests/apps/background_launch.hpp"
#include "tests/apps/cgroup_v1.hpp"
#include "tests/apps/child_process.hpp"
#include "tests/apps/deep_mlp.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using testing_util::describe;
using testing_util::child_result;
using testing_util::read_or_empty;

fs::path test_dir() { return testing_util::dir_per_test("actorpipe_elastic_test"); }

child_result actorpipe(const std::vector<std::string>& args, double timeout_s = 180) {
  testing_util::child_limits limits;
  limits.timeout_s = timeout_s;
  return testing_util::run_child(ACTORPIPE_BIN, args, limits);
}

// A model deep enough for 4 stages, with dropout (masks seeded per layer
// and microbatch: a stage that moved and drew them differently would show
// in the weights) and clipping (a global norm over every stage). `steps`
// steps, paced when `pace_ms` > 0 so that a kill from outside lands
// mid-run; `supervision` goes in as it is.
std::string config(int stages, int dp, int steps, int pace_ms, const std::string& supervision,
                   const std::string& extra = "") {
  std::string text =
      testing_util::deep_mlp_model_and_data() +
      "train:\n"
      "  steps: " + std::to_string(steps) + "\n"
      "  batch_size: 48\n"
      "  optimizer: {type: adam, lr: 0.01}\n"
      "  clip_grad_norm: 1.0\n"
      "  seed: 7\n";
  if (dp > 1) text += "parallel: {dp: " + std::to_string(dp) + ", allreduce: gloo}\n";
  text += "pipeline:\n  stages: " + std::to_string(stages) +
          "\n  schedule: 1f1b\n  microbatches: 4\n  devices: auto\n  intra_op_threads: 1\n";
  if (pace_ms > 0) text += "  pace_ms: " + std::to_string(pace_ms) + "\n";
  if (!supervision.empty()) text += "supervision: " + supervision + "\n";
  return text + extra;
}

const std::string kShrink = "{max_restarts: 3, heartbeat_timeout_s: 2, replace_timeout_s: 0}";

std::string write_config(const std::string& name, const std::string& text) {
  return testing_util::write(test_dir() / (name + ".yaml"), text);
}

// The fault-free run in one process, saved: what every elastic run must
// end on.
std::string clean_run(int stages, int dp, int steps) {
  const std::string saved = (test_dir() / "clean.pt").string();
  auto r = actorpipe({"train", write_config("clean", config(stages, dp, steps, 0, "")), "--quiet", "--save", saved});
  EXPECT_EQ(r.code, 0) << describe(r);
  const std::string bytes = read_or_empty(saved);
  EXPECT_FALSE(bytes.empty());
  return bytes;
}

// supervision.shrink: recut (tests Recut.*): the layers cut again over the
// processes left.
const std::string kRecut = "{max_restarts: 3, heartbeat_timeout_s: 2, replace_timeout_s: 0, shrink: recut}";

// A real `kill -9` of the worker with RANK `victim` once the run trains:
// it goes on over the others (the launcher's workers drop to nprocs - 1
// while it still trains), and ends on the clean bytes with exit 0. Its
// output stays in launch.out, its --results in results.json.
void kill_nine_and_go_on(int stages, int dp, int victim, const std::string& supervision = kShrink) {
  const std::string clean = clean_run(stages, dp, 40);
  const std::string saved = (test_dir() / "elastic.pt").string();
  const int nprocs = stages * dp;
  testing_util::background_launch run(ACTORPIPE_BIN, (test_dir() / "launch.out").string(),
                                      {"--coordinator", "rank0", "--nprocs", std::to_string(nprocs),
                                       write_config("elastic", config(stages, dp, 40, 4, supervision)), "--save", saved,
                                       "--results", (test_dir() / "results.json").string()});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step     3/")) << run.output();
  const pid_t pid = run.worker(victim, std::chrono::milliseconds(0));
  ASSERT_GT(pid, 0) << run.output();
  ASSERT_EQ(run.workers().size(), static_cast<size_t>(nprocs)) << run.output();
  ::kill(pid, SIGKILL);
  const std::string line = "re-placed: generation 1 goes on over " + std::to_string(nprocs - 1) +
                           " processes without rank " + std::to_string(victim);
  ASSERT_TRUE(run.wait_for_output(line)) << run.output();
  // Still training: the paced run has most of its 40 steps to go.
  ASSERT_TRUE(run.wait_for_output("step    20/")) << run.output();
  EXPECT_EQ(run.workers().size(), static_cast<size_t>(nprocs - 1)) << run.output();
  ASSERT_EQ(run.wait(180), 0) << run.output();
  const std::string out = run.output();
  EXPECT_NE(out.find("goes on without worker rank " + std::to_string(victim)), std::string::npos) << out;
  EXPECT_NE(out.find("restarts: 1,"), std::string::npos) << out;
  EXPECT_EQ(out.find("started worker rank"), std::string::npos) << out;
  EXPECT_EQ(out.find("every stage from the"), std::string::npos) << out;  // from memory, not disk
  EXPECT_TRUE(read_or_empty(saved) == clean) << out;
}

// pp 4 on 4 processes, RANK 2 killed: its stage goes to its keeper's
// process (RANK 1, which holds the copy it sent after every step).
TEST(Shrink, AKillNineAtPpFourGoesOnOverThreeProcessesBitwise) {
  kill_nine_and_go_on(4, 1, 2);
  EXPECT_NE(read_or_empty(test_dir() / "launch.out")
                .find("stages by process 0 | 1 | 2 | 3 -> 0 | 1 2 | 3 (ranks 0 1 3)"),
            std::string::npos);
}

// dp 2 x pp 2 on 4 processes, RANK 3 (replica 1, stage 1) killed: that
// stage goes to the process of replica 0's stage 1 and starts from its
// live state; the one process then holds both members of the stage's
// allreduce group.
TEST(Shrink, DataParallelTwoByTwoLosesOneAndGoesOnOverThreeBitwise) {
  kill_nine_and_go_on(2, 2, 3);
  EXPECT_NE(read_or_empty(test_dir() / "launch.out")
                .find("stages by process 0.0 | 0.1 | 1.0 | 1.1 -> 0.0 | 0.1 1.1 | 1.0 (ranks 0 1 2)"),
            std::string::npos);
}

// supervision.shrink: recut, pp 4 on 4 processes, RANK 2 killed: 3 stages
// over 3 processes. Old stage 2's layers come from its keeper's memory
// (RANK 1's process, which holds the copy stage 2 sent after every step),
// the others from their own.
TEST(Recut, AKillNineAtPpFourGoesOnAsThreeStagesOverThreeProcessesBitwise) {
  kill_nine_and_go_on(4, 1, 2, kRecut);
  const std::string out = read_or_empty(test_dir() / "launch.out");
  EXPECT_NE(out.find("re-placed: generation 1 goes on over 3 processes without rank 2 (supervision.replace_timeout_s "
                     "0: no replacement): 4 stages -> 3 (supervision.shrink recut): stages by process 0 | 1 | 2 | 3 "
                     "-> 0 | 1 | 2 (ranks 0 1 3), layers by stage "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("rank 1's memory"), std::string::npos) << out;
  EXPECT_EQ(out.find("not cut again"), std::string::npos) << out;
  EXPECT_NE(read_or_empty(test_dir() / "results.json").find("\"stages\": 3,"), std::string::npos);
}

// recut, dp 2 x pp 2 on 4 processes, RANK 3 (replica 1, stage 1) killed:
// the 3 processes left hold one stage per replica (every replica keeps the
// same cut), the whole model each; replica 1's lost layers come from
// replica 0's stage 1, its live state. The third survivor holds no stage.
TEST(Recut, DataParallelTwoByTwoLosingOneGoesOnAsOneStagePerReplicaBitwise) {
  kill_nine_and_go_on(2, 2, 3, kRecut);
  const std::string out = read_or_empty(test_dir() / "launch.out");
  EXPECT_NE(out.find("re-placed: generation 1 goes on over 3 processes without rank 3 (supervision.replace_timeout_s "
                     "0: no replacement): 2 stages -> 1 (supervision.shrink recut): stages by process 0.0 | 0.1 | "
                     "1.0 | 1.1 -> 0.0 | 1.0 | - (ranks 0 1 2), layers by stage 0-"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("not cut again"), std::string::npos) << out;
  EXPECT_NE(read_or_empty(test_dir() / "results.json").find("\"stages\": 1,"), std::string::npos);
}

// A kill_process fault on each rank but 0 in turn, at a seeded step and
// op, and then two deaths in one run (down to 2 processes): every run ends
// on the clean bytes, each lost stage from the memory of the process that
// took it.
TEST(Shrink, EveryRankButZeroAndTwoDeathsInARowEndBitwise) {
  const std::string clean = clean_run(4, 1, 6);
  const std::string saved = (test_dir() / "elastic.pt").string();
  for (int rank = 1; rank <= 3; ++rank) {
    const uint64_t draw = derive_seed(38, {static_cast<uint64_t>(rank)});
    const std::string op = std::string((draw >> 8) % 2 ? "B" : "F") + std::to_string((draw >> 16) % 4);
    const std::string fault = "faults:\n  inject:\n    - {kind: kill_process, stage: " + std::to_string(rank) +
                              ", step: " + std::to_string(draw % 6) + ", after_op: " + op + "}\n";
    fs::remove(saved);
    auto r = actorpipe({"launch", "--coordinator", "rank0", "--nprocs", "4",
                        write_config("kill", config(4, 1, 6, 0, kShrink, fault)), "--quiet", "--save", saved});
    ASSERT_EQ(r.code, 0) << fault << describe(r);
    EXPECT_TRUE(read_or_empty(saved) == clean) << fault << describe(r);
    EXPECT_NE(r.err.find("goes on over 3 processes without rank " + std::to_string(rank)), std::string::npos)
        << fault << describe(r);
    EXPECT_NE(r.err.find("stage " + std::to_string(rank) + " from rank " + std::to_string(rank - 1) + "'s memory"),
              std::string::npos)
        << fault << describe(r);
  }
  const std::string twice =
      "faults:\n  inject:\n"
      "    - {kind: kill_process, stage: 1, step: 1, after_op: F2}\n"
      "    - {kind: kill_process, stage: 3, step: 4, after_op: B1}\n";
  fs::remove(saved);
  auto r = actorpipe({"launch", "--coordinator", "rank0", "--nprocs", "4",
                      write_config("twice", config(4, 1, 6, 0, kShrink, twice)), "--quiet", "--save", saved});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(read_or_empty(saved) == clean) << describe(r);
  EXPECT_NE(r.err.find("stages by process 0 | 1 | 2 | 3 -> 0 1 | 2 | 3 (ranks 0 2 3)"), std::string::npos)
      << describe(r);
  // The second death names the RANK the process started with (3), placed
  // third in generation 1.
  EXPECT_NE(r.err.find("generation 2 goes on over 2 processes without rank 3"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("stages by process 0 1 | 2 | 3 -> 0 1 | 2 3 (ranks 0 2)"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("restarts: 2,"), std::string::npos) << describe(r);
}

// Refusal: a shrink whose new placement needs more memory than the process
// that would take the lost stage can take. RANK 1 (the keeper of stage 2)
// is moved into a cgroup v1 memory group once its memory holds still (the
// group counts what it allocates from then on), and the group's limit is
// set 24 MiB above that.
// Stage 2 of this model holds two 1024 x 1024 linears: 8 MiB of weights,
// with gradients and Adam's two tensors 32 MiB. A kill -9 of RANK 2: rank 0
// asks rank 1 how much it can take, and the run stops with one line, exit 1.
TEST(Shrink, APlacementThatNeedsMoreMemoryThanAProcessHasIsRefused) {
  testing_util::cgroup_v1 small("memory");
  if (!small.ok()) GTEST_SKIP() << "the cgroup v1 memory controller is not writable here";
  std::string layers = "model:\n  layers:\n    - {type: linear, in: 16, out: 1024}\n";
  for (int i = 0; i < 7; ++i) layers += "    - {type: " + std::string(i % 2 ? "relu" : "tanh") + "}\n"
                                        "    - {type: linear, in: 1024, out: 1024}\n";
  layers += "    - {type: linear, in: 1024, out: 4}\n";
  std::string text = config(4, 1, 40, 4, kShrink);
  text = layers + text.substr(text.find("data:"));
  // Under ASan (scripts/test --sanitize sets ASAN_OPTIONS) freed memory
  // waits in a quarantine of up to 256 MiB, so the keeper's memory would
  // not hold still and the group's limit would kill it before the refusal.
  if (const char* asan = std::getenv("ASAN_OPTIONS"))
    ::setenv("ASAN_OPTIONS", (std::string(asan) + ":quarantine_size_mb=0:thread_local_quarantine_size_kb=0").c_str(), 1);
  testing_util::background_launch run(ACTORPIPE_BIN, (test_dir() / "launch.out").string(),
                                      {"--nprocs", "4", write_config("big", text)});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step     3/")) << run.output();
  const pid_t keeper = run.worker(1, std::chrono::milliseconds(0)), victim = run.worker(2, std::chrono::milliseconds(0));
  ASSERT_GT(keeper, 0) << run.output();
  ASSERT_GT(victim, 0) << run.output();
  // Its pools fill over the first steps (the copies it keeps of stage 2);
  // by step 14 its memory holds still. The group counts what it allocates
  // from then on.
  ASSERT_TRUE(run.wait_for_output("step    14/")) << run.output();
  ASSERT_TRUE(small.hold(keeper)) << "cannot move rank 1's process into a memory group";
  ASSERT_TRUE(run.wait_for_output("step    17/")) << run.output();
  const int64_t usage = std::stoll("0" + small.get("memory.usage_in_bytes"));
  ASSERT_GT(usage, 0) << "no memory.usage_in_bytes";
  small.set("memory.limit_in_bytes", std::to_string(usage + (24 << 20)));
  ASSERT_TRUE(small.ok()) << "cannot set the group's limit";
  ASSERT_TRUE(run.wait_for_output("step    19/")) << run.output();
  ::kill(victim, SIGKILL);
  EXPECT_EQ(run.wait(120), 1) << run.output();
  const std::string out = run.output();
  const std::regex refused(
      "going on over 3 processes needs at least ([0-9.]+) MiB more in rank 1's process \\(stage 2: weights, "
      "gradients and optimizer state\\), which can take ([0-9.]+) MiB");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, refused)) << out;
  EXPECT_GE(std::stod(m[1]), 32.0) << out;  // two 1024 x 1024 linears, four times
  EXPECT_LE(std::stod(m[2]), 24.0) << out;  // the group's limit bounds it
  EXPECT_NE(out.find("no placement fits, the run stops"), std::string::npos) << out;
  EXPECT_EQ(out.find("re-placed:"), std::string::npos) << out;
}

// The shipped scenario (docs/ELASTIC.md): a kill -9 and a SIGSTOP at pp 4,
// each lost stage to its keeper's process, down to 2 processes, and
// --verify-against-clean's own fault-free run agrees bit for bit.
TEST(Shrink, TheShippedScenarioLosesTwoOfFourAndVerifiesBitwise) {
  auto r = actorpipe({"launch", "--coordinator", "rank0", "--nprocs", "4",
                      std::string(ACTORPIPE_SOURCE_DIR) + "/configs/faults/shrink_pipeline.yaml", "--quiet",
                      "--verify-against-clean"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.out.find("verify: final weights bitwise equal to a fault-free run"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("generation 1 goes on over 3 processes without rank 2"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("stages by process 0 | 1 | 2 | 3 -> 0 | 1 2 | 3 (ranks 0 1 3)"), std::string::npos)
      << describe(r);
  EXPECT_NE(r.err.find("generation 2 goes on over 2 processes without rank 3"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("stages by process 0 | 1 2 | 3 -> 0 | 1 2 3 (ranks 0 1)"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("goes on without worker rank 3"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("restarts: 2,"), std::string::npos) << describe(r);
}

// The shipped re-cut (docs/ELASTIC.md, configs/faults/recut_pipeline.yaml):
// the same two faults with supervision.shrink: recut, 4 stages -> 3 -> 2,
// and --verify-against-clean's own fault-free run agrees bit for bit.
TEST(Recut, TheShippedScenarioGoesFromFourStagesToTwoAndVerifiesBitwise) {
  auto r = actorpipe({"launch", "--coordinator", "rank0", "--nprocs", "4",
                      std::string(ACTORPIPE_SOURCE_DIR) + "/configs/faults/recut_pipeline.yaml", "--quiet",
                      "--verify-against-clean"});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.out.find("verify: final weights bitwise equal to a fault-free run"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("4 stages -> 3 (supervision.shrink recut): stages by process 0 | 1 | 2 | 3 -> 0 | 1 | 2 "
                       "(ranks 0 1 3), layers by stage 0-2 | 3-4 | 5-6 | 7 -> 0-2 | 3-4 | 5-7"),
            std::string::npos)
      << describe(r);
  EXPECT_NE(r.err.find("3 stages -> 2 (supervision.shrink recut): stages by process 0 | 1 | 2 -> 0 | 1 (ranks 0 1), "
                       "layers by stage 0-2 | 3-4 | 5-7 -> 0-4 | 5-7"),
            std::string::npos)
      << describe(r);
  EXPECT_NE(r.out.find("restarts: 2,"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("| 1f1b     | 2 |"), std::string::npos) << describe(r);  // the final table: 2 stages
}

// The chaos run, short (bench/chaos.py): seed 2 draws a kill -9 of RANK 1,
// a process that joins 2 steps later, RANK 2 throttled and a SIGSTOP of
// RANK 3; the joiner is taken in, and the verdict is bitwise. The script kills its launcher in every path (a
// watchdog at 300 s, under this test's 400).
TEST(Shrink, AShortChaosRunEndsBitwise) {
  const std::string build = fs::path(ACTORPIPE_BIN).parent_path().string();
  auto r = testing_util::run_child("/usr/bin/python3",
                                   {std::string(ACTORPIPE_SOURCE_DIR) + "/bench/chaos.py", "--build", build, "--seed", "2",
                                    "--events", "2", "--joins", "1", "--throttles", "1", "--steps", "50"},
                                   [] {
                                     testing_util::child_limits l;
                                     l.timeout_s = 400;
                                     return l;
                                   }());
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.out.find("| kill rank 1 after step"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("| stop rank 3 after step"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("| a process joins after step"), std::string::npos) << describe(r);
  // RANK 2 held to a twentieth of a core, under pipeline.rebalance: whether
  // and when the layers move depends on the machine's load; the bits do not.
  EXPECT_NE(r.out.find("| throttle rank 2 after step"), std::string::npos) << describe(r);
  // The join lands before or after the stop is seen: either order ends bitwise.
  EXPECT_NE(r.out.find("goes on over 3 processes without rank 1"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find(" processes without rank 3 "), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("takes in rank 4 (joined)"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("joiner exit 0: joining the run at "), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("verdict: final weights bitwise equal to the fault-free run"), std::string::npos)
      << describe(r);
}

// Without the key the launcher starts a replacement, as before; with it
// but no restarts allowed, the config is refused (exit 2, naming the
// key); a negative timeout is refused too.
TEST(Shrink, TheKeyNeedsRestartsAndAtLeastZero) {
  auto r = actorpipe({"train", write_config("norestarts", config(2, 1, 2, 0, "{replace_timeout_s: 0}")), "--quiet"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_NE(r.err.find("supervision.replace_timeout_s"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("needs supervision.max_restarts > 0"), std::string::npos) << describe(r);
  r = actorpipe({"train", write_config("negative", config(2, 1, 2, 0, "{max_restarts: 1, replace_timeout_s: -1}")),
                 "--quiet"});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_NE(r.err.find("supervision.replace_timeout_s"), std::string::npos) << describe(r);
}

// The address rank 0 prints for processes that join, from its line
// "rank 0 takes processes that join at HOST:PORT: ...".
std::string join_address(const std::string& out) {
  const std::string head = "takes processes that join at ";
  const size_t at = out.find(head);
  if (at == std::string::npos) return "";
  const size_t from = at + head.size();
  return out.substr(from, out.find(':', out.find(':', from) + 1) - from);
}

// Grow after shrink: `nprocs` processes lose RANK `victim` to kill -9 and
// go on over the others (`shrunk`); then `launch --join` adds a process,
// which takes the moved slot back at the next step boundary, its state
// from the memory of the process that held it (`grown`, `from`). The run
// ends on the bytes of the fault-free run in one process.
void shrink_then_join(int stages, int dp, int victim, const std::string& shrunk, const std::string& grown,
                      const std::string& from, bool apart = false) {
  const std::string clean = clean_run(stages, dp, 60);
  const std::string saved = (test_dir() / "elastic.pt").string();
  const std::string cfg = write_config("elastic", config(stages, dp, 60, 8, kShrink));
  std::vector<std::string> args = {"--nprocs", std::to_string(stages * dp), cfg, "--save", saved};
  args.insert(args.begin(), {"--coordinator", apart ? "process" : "rank0"});
  testing_util::background_launch run(ACTORPIPE_BIN, (test_dir() / "launch.out").string(), args);
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step     3/")) << run.output();
  const std::string at = join_address(run.output());
  ASSERT_FALSE(at.empty()) << run.output();
  const pid_t pid = run.worker(victim, std::chrono::milliseconds(0));
  ASSERT_GT(pid, 0) << run.output();
  ::kill(pid, SIGKILL);
  ASSERT_TRUE(run.wait_for_output("stages by process " + shrunk)) << run.output();
  const auto joined = actorpipe({"launch", "--join", at, cfg});
  EXPECT_EQ(joined.code, 0) << describe(joined);
  const std::string rank = std::to_string(stages * dp);  // the first after the job's WORLD_SIZE
  EXPECT_NE(joined.err.find("joining the run at " + at + " as RANK " + rank), std::string::npos) << describe(joined);
  ASSERT_EQ(run.wait(180), 0) << run.output();
  const std::string out = run.output();
  EXPECT_NE(out.find(" takes in rank " + rank + " (joined): stages by process " + grown + ", after step "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("; " + from + " from rank 1's memory"), std::string::npos) << out;
  EXPECT_EQ(out.find("every stage from the"), std::string::npos) << out;  // from memory, not disk
  EXPECT_NE(out.find("restarts: 1,"), std::string::npos) << out;     // the join is no restart
  EXPECT_TRUE(read_or_empty(saved) == clean) << out;
}

TEST(Grow, AJoinAfterAShrinkGoesBackToFourProcessesBitwise) {
  shrink_then_join(4, 1, 2, "0 | 1 | 2 | 3 -> 0 | 1 2 | 3 (ranks 0 1 3)",
                   "0 | 1 2 | 3 -> 0 | 1 | 3 | 2 (ranks 0 1 3 4)", "stage 2");
}

// Under launch --coordinator process, the worker with RANK 0 (stage 0) is
// lost like any other: stage 0 goes on in the process of stage 1, its
// keeper, and the joiner then takes stage 1 from there. "-" is the
// coordinator, which holds no stage; "c" its rank.
TEST(Grow, UnderACoordinatorApartWorkerRankZeroIsLostAndAJoinerTakesItsPlaceBitwise) {
  shrink_then_join(4, 1, 0, "- | 0 | 1 | 2 | 3 -> - | 0 1 | 2 | 3 (ranks c 1 2 3)",
                   "- | 0 1 | 2 | 3 -> - | 0 | 2 | 3 | 1 (ranks c 1 2 3 4)", "stage 1", true);
}

// dp 2 x pp 2: the joiner takes replica 1's stage 1 back from the process
// of replica 0's stage 1, which ran both since the shrink.
TEST(Grow, AtDataParallelTwoTheJoinerTakesTheReplicasStageBackBitwise) {
  shrink_then_join(2, 2, 3, "0.0 | 0.1 | 1.0 | 1.1 -> 0.0 | 0.1 1.1 | 1.0 (ranks 0 1 2)",
                   "0.0 | 0.1 1.1 | 1.0 -> 0.0 | 0.1 | 1.0 | 1.1 (ranks 0 1 2 4)", "stage 1 of replica 1");
}

// pp 4 on 2 processes (fewer than stages) that take joiners
// (replace_timeout_s 5), running: the clean run's bytes, the config, and
// the address to join at.
struct on_two_processes {
  explicit on_two_processes(int steps)
      : clean(clean_run(4, 1, steps)),
        saved((test_dir() / "elastic.pt").string()),
        cfg(write_config("elastic",
                         config(4, 1, steps, 8, "{max_restarts: 3, heartbeat_timeout_s: 2, replace_timeout_s: 5}"))),
        run(ACTORPIPE_BIN, (test_dir() / "launch.out").string(),
            {"--coordinator", "rank0", "--nprocs", "2", cfg, "--save", saved}) {}
  // Empty once it trains and named its join address, else why not.
  std::string started() {
    if (!run.started() || !run.wait_for_output("step     3/")) return "no step 3\n" + run.output();
    at = join_address(run.output());
    return at.empty() ? "no join address\n" + run.output() : "";
  }
  const std::string clean, saved, cfg;
  testing_util::background_launch run;
  std::string at;
};

// A run that starts with fewer processes than stages (pp 4 on 2) takes a
// third in: it gets stage 1 from RANK 0's memory. With replace_timeout_s 5
// `launch` would start a lost worker again, but nothing can start a joiner
// again: when it is killed, its stage goes back to the process holding its
// copy and the run goes on. Both end on the clean bytes.
TEST(Grow, ARunOnFewerProcessesThanStagesTakesOneInAndGoesOnWithoutItWhenItDies) {
  on_two_processes scene(60);
  ASSERT_EQ(scene.started(), "");
  auto& [clean, saved, cfg, run, at] = scene;
  testing_util::background_launch joiner(ACTORPIPE_BIN, (test_dir() / "join.out").string(), {"--join", at, cfg});
  ASSERT_TRUE(joiner.started());
  ASSERT_TRUE(run.wait_for_output(" takes in rank 2 (joined): stages by process 0 1 | 2 3 -> 0 | 2 3 | 1 (ranks 0 1 2)"))
      << run.output();
  ASSERT_TRUE(joiner.wait_for_output("as RANK 2")) << joiner.output();
  // Killed once the generation with it runs (ELASTIC.md: not while it is
  // being taken in), and a step later.
  ASSERT_TRUE(run.wait_for_output("heal: generation 1 runs from after step")) << run.output();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto pids = joiner.workers();  // its launcher's only worker
  ASSERT_EQ(pids.size(), 1u) << joiner.output();
  ::kill(pids.front(), SIGKILL);
  ASSERT_TRUE(run.wait_for_output("without rank 2 (nothing can start a replacement): stages by process "
                                  "0 | 2 3 | 1 -> 0 1 | 2 3 (ranks 0 1)"))
      << run.output();
  EXPECT_EQ(joiner.wait(60), 1) << joiner.output();
  ASSERT_EQ(run.wait(180), 0) << run.output();
  EXPECT_EQ(run.output().find("ignored a line from rank 0"), std::string::npos) << run.output();
  EXPECT_TRUE(read_or_empty(saved) == clean) << run.output();
}

// pp 4 over 4 loses RANK 1 to kill -9; while the generation over the
// other three forms, RANK 3 is stopped. Rank 0 sees it (the heartbeat
// timeout, 2 s), calls that generation off and goes on over 2 processes,
// each lost stage from its keeper's memory (stage 1's in RANK 0, stage
// 3's in RANK 2). Before, the others waited in the rendezvous until its
// timeout and the run ended with exit 1.
TEST(Shrink, AProcessStoppedWhileTheNextGenerationFormsIsLeftBehindTooBitwise) {
  const std::string clean = clean_run(4, 1, 60);
  const std::string saved = (test_dir() / "elastic.pt").string();
  const std::string cfg = write_config("elastic", config(4, 1, 60, 8, kShrink));
  testing_util::forming_held hold(2500);
  testing_util::background_launch run(ACTORPIPE_BIN, (test_dir() / "launch.out").string(),
                                      {"--coordinator", "rank0", "--nprocs", "4", cfg, "--save", saved});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step     3/")) << run.output();
  pid_t stopped = -1;
  ASSERT_EQ(run.kill_then_stop(1, "re-placed: generation 1 goes on over 3 processes without rank 1", 3, 180, &stopped), 0)
      << run.output();
  const std::string out = run.output();
  EXPECT_NE(out.find("generation 1 was called off: rank 3's process went down or stopped answering"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("re-placed: generation 2 goes on over 2 processes without rank 1, 3 (supervision.replace_timeout_s 0: "
                     "no replacement): stages by process 0 | 1 | 2 | 3 -> 0 1 | 2 3 (ranks 0 2)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("; stage 1 from rank 0's memory; stage 3 from rank 2's memory"), std::string::npos) << out;
  const std::string dropped = "goes on without worker rank 1\n";  // said once, though the plan names it again
  EXPECT_EQ(out.find(dropped, out.find(dropped) + 1), std::string::npos) << out;
  EXPECT_EQ(out.find("every stage from the"), std::string::npos) << out;  // from memory, not disk
  EXPECT_TRUE(read_or_empty(saved) == clean) << out;
}

// Two processes join through one `launch --join --nprocs 2` a run of pp 4
// on 2 processes, and each takes a stage; one of them is killed. Its
// launcher leaves the other be (before, it stopped it too: a second loss
// for the run), the run goes on without the one killed, and the other
// stays to the end.
TEST(Grow, OneOfTwoJoinersOfOneLaunchKilledLeavesTheOtherInTheRunBitwise) {
  on_two_processes scene(80);
  ASSERT_EQ(scene.started(), "");
  auto& [clean, saved, cfg, run, at] = scene;
  testing_util::background_launch joiners(ACTORPIPE_BIN, (test_dir() / "join.out").string(),
                                          {"--join", at, "--nprocs", "2", cfg});
  ASSERT_TRUE(joiners.started());
  ASSERT_TRUE(run.wait_for_output("3 (joined): stages by process ")) << run.output();
  const size_t taken = run.output().rfind(" (joined): stages by process ");
  ASSERT_TRUE(run.wait_for_output(" -> 0 | 2 | 1 | 3 (ranks 0 1 2 3)")) << run.output();
  for (int i = 0; i < 3000 && run.output().find("heal: generation", taken) == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto pids = joiners.workers();
  ASSERT_EQ(pids.size(), 2u) << joiners.output();
  ::kill(pids.front(), SIGKILL);
  ASSERT_EQ(run.wait(180), 0) << run.output();
  EXPECT_EQ(joiners.wait(60), 1) << joiners.output();  // the first failing worker's code
  const std::string joined = joiners.output();
  EXPECT_NE(joined.find("actorpipe launch: joining process "), std::string::npos) << joined;
  EXPECT_NE(joined.find("was killed by SIGKILL; the run it joined goes on without it"), std::string::npos) << joined;
  EXPECT_EQ(joined.find("stopping the other"), std::string::npos) << joined;
  const std::string out = run.output();
  EXPECT_NE(out.find("goes on over 3 processes without rank "), std::string::npos) << out;
  EXPECT_TRUE(read_or_empty(saved) == clean) << out;
}

// Two processes that join at once (one `launch --join --nprocs 2` while a
// stopped worker holds the run still) are taken in by one generation, and
// one of them is killed while it forms (every rank but 0 held 2 s before
// each rendezvous). The generation is called off; the other joiner is
// taken in at a later boundary. Before, its ticket stayed used and it
// waited until the run ended. The heartbeat timeout is 5 s: both joiners
// must start (LibTorch loaded, on a loaded machine) before the stopped
// worker is seen lost and the step after it ends.
TEST(Grow, TheLiveOneOfTwoJoinersWhoseGenerationIsCalledOffIsTakenInLaterBitwise) {
  const std::string clean = clean_run(4, 1, 80);
  const std::string saved = (test_dir() / "elastic.pt").string();
  const std::string cfg =
      write_config("elastic", config(4, 1, 80, 8, "{max_restarts: 3, heartbeat_timeout_s: 5, replace_timeout_s: 0}"));
  testing_util::forming_held hold(2000);
  testing_util::background_launch run(ACTORPIPE_BIN, (test_dir() / "launch.out").string(),
                                      {"--coordinator", "process", "--nprocs", "4", cfg, "--save", saved});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step     3/")) << run.output();
  const std::string at = join_address(run.output());
  const pid_t killed = run.worker(2, std::chrono::milliseconds(0)), stopped = run.worker(3, std::chrono::milliseconds(0));
  ASSERT_FALSE(at.empty()) << run.output();
  ASSERT_GT(killed, 0) << run.output();
  ASSERT_GT(stopped, 0) << run.output();
  ::kill(killed, SIGKILL);
  const bool healed = run.wait_for_output("heal: generation 1 runs from after step");
  ::kill(stopped, SIGSTOP);
  testing_util::background_launch joiners(ACTORPIPE_BIN, (test_dir() / "join.out").string(),
                                          {"--join", at, "--nprocs", "2", cfg});
  const bool both = healed && run.wait_for_output(" takes in rank 4, 5 (joined)");
  const auto pids = joiners.workers();
  if (both && pids.size() == 2) ::kill(pids.front(), SIGKILL);
  const int code = both && pids.size() == 2 ? run.wait(180) : -2;
  ::kill(stopped, SIGKILL);  // the launcher's already, unless the run failed
  ASSERT_TRUE(both) << run.output();
  ASSERT_EQ(pids.size(), 2u) << joiners.output();
  ASSERT_EQ(code, 0) << run.output();
  EXPECT_EQ(joiners.wait(60), 1) << joiners.output();  // the killed one's code; the other ended well
  const std::string out = run.output();
  const size_t off = out.find(" goes on as before, generation 3 was called off: rank ");
  ASSERT_NE(off, std::string::npos) << out;
  EXPECT_NE(out.find(" (joined) gave no sign of life for 6 s while generation 3 formed", off), std::string::npos)
      << out;
  EXPECT_NE(out.find(" (joined): stages by process ", off), std::string::npos) << out;  // taken in later
  EXPECT_EQ(joiners.output().find("before it re-placed its stages"), std::string::npos) << joiners.output();
  EXPECT_TRUE(read_or_empty(saved) == clean) << out;
}

// pp 4 over 4 with every rank but 0 held 2 s before each rendezvous: RANK 2
// killed after step 3; once generation 1 runs, a process joins, and the
// scene ends when rank 0 takes it in (generation 2, forming).
struct join_after_a_kill {
  explicit join_after_a_kill(int steps)
      : clean(clean_run(4, 1, steps)),
        saved((test_dir() / "elastic.pt").string()),
        cfg(write_config("elastic", config(4, 1, steps, 8, kShrink))),
        hold(2000),
        run(ACTORPIPE_BIN, (test_dir() / "launch.out").string(),
            {"--coordinator", "rank0", "--nprocs", "4", cfg, "--save", saved}) {}

  // The kill and the join; empty when they went as planned, else why not.
  std::string play() {
    if (!run.started() || !run.wait_for_output("step     3/")) return "no step 3\n" + run.output();
    const std::string at = join_address(run.output());
    const pid_t victim = run.worker(2, std::chrono::milliseconds(0));
    if (at.empty() || victim <= 0) return "no join address or RANK 2\n" + run.output();
    ::kill(victim, SIGKILL);
    if (!run.wait_for_output("heal: generation 1 runs from after step")) return "no heal\n" + run.output();
    joiner = std::make_unique<testing_util::background_launch>(ACTORPIPE_BIN, (test_dir() / "join.out").string(),
                                                                std::vector<std::string>{"--join", at, cfg});
    if (!joiner->started() || !run.wait_for_output(" takes in rank 4 (joined)")) return "not taken in\n" + run.output();
    return "";
  }

  const std::string clean, saved, cfg;
  testing_util::forming_held hold;
  testing_util::background_launch run;
  std::unique_ptr<testing_util::background_launch> joiner;
};

// A joiner killed while the generation that takes it in forms: rank 0
// sees its alive/<RANK> count stand still, calls the generation off, and
// the others go on as they were, bitwise. Before, they waited in the
// Gloo connect until its timeout and the run ended with exit 1.
TEST(Grow, AJoinerKilledWhileItIsTakenInIsLeftOutAndTheRunGoesOnBitwise) {
  join_after_a_kill scene(60);
  const std::string played = scene.play();
  ASSERT_EQ(played, "");
  const auto pids = scene.joiner->workers();  // its launcher's only worker
  ASSERT_EQ(pids.size(), 1u) << scene.joiner->output();
  ::kill(pids.front(), SIGKILL);
  ASSERT_EQ(scene.run.wait(180), 0) << scene.run.output();
  EXPECT_NE(scene.joiner->wait(60), 0) << scene.joiner->output();
  const std::string out = scene.run.output();
  EXPECT_NE(out.find("re-placed: generation 3 goes on as before, generation 2 was called off: rank 4 (joined) gave "
                     "no sign of life for 3 s while generation 2 formed: stages by process 0 | 1 2 | 3 (ranks 0 1 3), "
                     "after step "),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("restarts: 1,"), std::string::npos) << out;  // the joiner's loss is no restart
  EXPECT_TRUE(read_or_empty(scene.saved) == scene.clean) << out;
}

// A joiner whose generation is called off for another process's loss: RANK
// 3 is stopped while the generation that takes the joiner in forms. Rank 0
// calls it off (the heartbeat timeout) and goes on without RANK 3; the
// joiner, alive, waits and is taken in at a later boundary, and the run
// ends bitwise. Before, the joiner stopped with exit 1 ("join again").
TEST(Grow, AJoinerWhoseGenerationIsCalledOffForAnothersLossIsTakenInLaterBitwise) {
  join_after_a_kill scene(80);
  const pid_t stopped = scene.run.worker(3, std::chrono::milliseconds(0));
  ASSERT_GT(stopped, 0) << scene.run.output();
  const std::string played = scene.play();
  if (played.empty()) ::kill(stopped, SIGSTOP);
  const int code = played.empty() ? scene.run.wait(180) : -2;
  ::kill(stopped, SIGKILL);  // the launcher's already, unless the run failed
  ASSERT_EQ(played, "");
  ASSERT_EQ(code, 0) << scene.run.output();
  EXPECT_EQ(scene.joiner->wait(60), 0) << scene.joiner->output();
  const std::string out = scene.run.output();
  EXPECT_NE(out.find("generation 2 was called off: rank 3's process went down or stopped answering"), std::string::npos)
      << out;
  const std::string take = " takes in rank 4 (joined)";
  EXPECT_NE(out.find(take, out.find(take) + 1), std::string::npos) << "taken in once only\n" << out;
  EXPECT_NE(scene.joiner->output().find("RANK 4: generation 2 was called off while it formed (a process was lost); "
                                        "waiting to be taken in again"),
            std::string::npos)
      << scene.joiner->output();
  EXPECT_EQ(out.find("every stage from the"), std::string::npos) << out;  // from memory, not disk
  EXPECT_TRUE(read_or_empty(scene.saved) == scene.clean) << out;
}

// What is refused, each in one line: a process with another config (exit
// 2, at once); a process the run has no stage for (it waits, and is told
// why once the run ends: exit 1; the run itself ends bitwise); a run whose
// config takes no joiners (exit 2).
TEST(Grow, JoinersWithAnotherConfigOrNothingToTakeAreRefused) {
  // 120 steps: the idle joiner, started beside the refused one, must find
  // the run still going on a loaded machine (a joiner that finds no store
  // retries for a minute, then exits 1 with another line).
  const std::string clean = clean_run(2, 1, 120);
  const std::string saved = (test_dir() / "elastic.pt").string();
  const std::string cfg = write_config("elastic", config(2, 1, 120, 8, kShrink));
  {
    testing_util::background_launch run(ACTORPIPE_BIN, (test_dir() / "launch.out").string(),
                                        {"--nprocs", "2", cfg, "--save", saved});
    ASSERT_TRUE(run.started());
    ASSERT_TRUE(run.wait_for_output("step     2/")) << run.output();
    const std::string at = join_address(run.output());
    ASSERT_FALSE(at.empty()) << run.output();
    const std::string other = write_config(
        "other", config(2, 1, 120, 8, "{max_restarts: 3, heartbeat_timeout_s: 2, replace_timeout_s: 1}"));
    testing_util::background_launch idle(ACTORPIPE_BIN, (test_dir() / "idle.out").string(), {"--join", at, cfg});
    ASSERT_TRUE(idle.started());
    const auto refused = actorpipe({"launch", "--join", at, other});
    EXPECT_EQ(refused.code, 2) << describe(refused);
    EXPECT_NE(refused.err.find("this process's config differs from the running job's at " + at), std::string::npos)
        << describe(refused);
    ASSERT_EQ(run.wait(180), 0) << run.output();
    EXPECT_EQ(idle.wait(60), 1) << idle.output();
    EXPECT_NE(idle.output().find("was not taken in: the run ended (exit code 0) before it re-placed its stages"),
              std::string::npos)
        << idle.output();
    EXPECT_EQ(run.output().find("takes in rank"), std::string::npos) << run.output();
    EXPECT_TRUE(read_or_empty(saved) == clean) << run.output();
  }
  // Long enough (about 7 s) that a joiner started under load still finds
  // it running: one that finds no store retries for a minute.
  const std::string closed = write_config("closed", config(2, 1, 80, 8, "{max_restarts: 3, heartbeat_timeout_s: 2}"));
  testing_util::background_launch run(ACTORPIPE_BIN, (test_dir() / "closed.out").string(), {"--nprocs", "2", closed});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step     2/")) << run.output();
  const std::string out = run.output();
  const size_t m = out.find("master ");
  ASSERT_NE(m, std::string::npos) << out;
  const std::string at = out.substr(m + 7, out.find_first_of(" \n", m + 7) - m - 7);
  const auto none = actorpipe({"launch", "--join", at, closed});
  EXPECT_EQ(none.code, 2) << describe(none);
  EXPECT_NE(none.err.find("takes no processes that join"), std::string::npos) << describe(none);
  EXPECT_EQ(run.wait(180), 0) << run.output();
  EXPECT_EQ(actorpipe({"launch", "--join", "nowhere", closed}).code, 2);
  EXPECT_EQ(actorpipe({"launch", "--join", at, "--master-port", "1", closed}).code, 2);
}

}  // namespace
}  // namespace actorpipe
