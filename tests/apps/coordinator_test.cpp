// The coordinator's death without etcd. Under `actorpipe launch`, rank 0's
// process holds the supervisor and the store: a `kill -9` of it, or a
// SIGSTOP (a hung or cut-off host), leaves every other worker without a
// coordinator. Each sees it (at once for a kill, after
// supervision.heartbeat_timeout_s for a stop), stops by itself, and exits
// 5 naming it; the launcher kills a rank 0 that still lives (it never
// commands again) and exits 5. The newest checkpoint is whole, and
// `launch --resume` ends on the bytes of the run that was never hit.
// Real processes on ports the launcher picks; the launcher is SIGKILLed in
// every failure path (tests/apps/background_launch.hpp).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tests/apps/background_launch.hpp"
#include "tests/apps/child_process.hpp"
#include "tests/apps/deep_mlp.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using testing_util::describe;

fs::path test_dir() { return testing_util::dir_per_test("actorpipe_coordinator_test"); }

testing_util::child_result actorpipe(const std::vector<std::string>& args, double timeout_s = 180) {
  testing_util::child_limits limits;
  limits.timeout_s = timeout_s;
  return testing_util::run_child(ACTORPIPE_BIN, args, limits);
}

constexpr double heartbeat_s = 2;

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The deep MLP's healing run (tests/apps/deep_mlp.hpp), its checkpoints in `ckpt`.
std::string config(const std::string& tag, int stages, int dp, const fs::path& ckpt) {
  return testing_util::write(test_dir() / (tag + ".yaml"),
                             testing_util::deep_mlp_healing_config(stages, dp, static_cast<int>(heartbeat_s), ckpt.string()));
}

// How rank 0's process is hit.
enum class hit { kill, stop };

// The run hit mid-way: every worker stops by itself with exit 5 within the
// heartbeat timeout and 2 s; then `launch --resume` from the newest
// checkpoint ends on the clean run's bytes. `apart`: under launch
// --coordinator process, the process hit is the coordinator, and every
// worker (RANK 0 too) is one that stops.
void lose_the_coordinator_then_resume(const std::string& tag, int stages, int dp, hit how, bool apart = false) {
  const fs::path ckpt = test_dir() / (tag + "_ckpt");
  fs::remove_all(ckpt);
  const std::string cfg = config(tag, stages, dp, ckpt);
  const std::string clean = (test_dir() / (tag + "_clean.pt")).string(),
                    resumed = (test_dir() / (tag + "_resumed.pt")).string();
  fs::remove(resumed);
  auto a = actorpipe({"train", cfg, "--quiet", "--save", clean});
  ASSERT_EQ(a.code, 0) << describe(a);
  fs::remove_all(ckpt);  // the clean run's own checkpoints

  const int nprocs = stages * dp;
  std::vector<std::string> where = {"--nprocs", std::to_string(nprocs)};
  where.insert(where.end(), {"--coordinator", apart ? "process" : "rank0"});
  std::vector<std::string> args = where;
  args.push_back(cfg);
  testing_util::background_launch run(ACTORPIPE_BIN, (test_dir() / (tag + ".out")).string(), args);
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step    13/")) << run.output();
  const pid_t victim = apart ? run.coordinator() : run.worker(0, std::chrono::milliseconds(0));
  ASSERT_GT(victim, 0) << run.output();
  const auto hit_at = std::chrono::steady_clock::now();
  ::kill(victim, how == hit::kill ? SIGKILL : SIGSTOP);
  const int code = run.wait(60);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - hit_at).count();
  const std::string out = run.output();
  ASSERT_EQ(code, 5) << out;
  std::printf("%s: every worker gone %.2f s after the %s of %s (heartbeat_timeout_s %.0f)\n", tag.c_str(), took,
              how == hit::kill ? "SIGKILL" : "SIGSTOP", apart ? "the coordinator apart" : "rank 0", heartbeat_s);
  EXPECT_LT(took, heartbeat_s + 2) << out;
  // Each worker said why, and stopped by itself with exit 5.
  for (int r = apart ? 0 : 1; r < nprocs; ++r) {
    const std::string who = "rank " + std::to_string(r) + "/" + std::to_string(nprocs);
    EXPECT_NE(out.find(who + (apart ? " lost the coordinator (its process apart: the supervisor and the store)"
                                    : " lost rank 0 (the coordinator: the supervisor and the store)")),
              std::string::npos)
        << who << "\n" << out;
    EXPECT_NE(out.find("worker rank " + std::to_string(r) + " (pid "), std::string::npos) << out;
  }
  EXPECT_EQ(count(out, ") exited with 5"), static_cast<size_t>(apart ? nprocs : nprocs - 1)) << out;
  EXPECT_NE(out.find("If the run ended, the same command with --resume " + ckpt.string() +
                     " goes on from the newest checkpoint"),
            std::string::npos)
      << out;
  const std::string name = apart ? "the coordinator" : "worker rank 0";
  if (how == hit::kill) {
    EXPECT_NE(out.find(name + " (pid " + std::to_string(victim) + ") was killed by SIGKILL: the run lost its coordinator"),
              std::string::npos)
        << out;
  } else {
    EXPECT_NE(out.find(std::string(apart ? "killed the coordinator" : "killed rank 0") + " (pid " +
                       std::to_string(victim) + "), which stopped answering"),
              std::string::npos)
        << out;
  }
  // No worker trained on alone: no step after the hit reached the output
  // beyond the one in flight, and the run did not finish.
  EXPECT_EQ(out.find("step    40/40"), std::string::npos) << out;

  // The newest checkpoint loads, and the run goes on from it to the clean
  // run's bytes.
  args = {"launch"};
  args.insert(args.end(), where.begin(), where.end());
  args.insert(args.end(), {cfg, "--quiet", "--resume", ckpt.string(), "--save", resumed});
  auto r = actorpipe(args);
  ASSERT_EQ(r.code, 0) << describe(r);
  const std::string all = r.out + r.err;
  const size_t note = all.find("resuming after step ");
  ASSERT_NE(note, std::string::npos) << describe(r);
  std::printf("%s: %s\n", tag.c_str(), all.substr(note, all.find('\n', note) - note).c_str());
  EXPECT_TRUE(testing_util::read_or_empty(clean) == testing_util::read_or_empty(resumed))
      << "resumed after the coordinator's loss, the run saved other bytes than the clean one\n"
      << describe(r);
}

TEST(CoordinatorLost, AKillNineOfRankZeroStopsEveryWorkerWithExit5AndResumeEndsBitwise) {
  lose_the_coordinator_then_resume("kill_pp3", 3, 1, hit::kill);
}

TEST(CoordinatorLost, ARankZeroThatStopsAnsweringIsKilledAndEveryWorkerStopsWithExit5) {
  lose_the_coordinator_then_resume("stop_dp2_pp2", 2, 2, hit::stop);
}

TEST(CoordinatorApart, AKillNineOfTheCoordinatorStopsEveryWorkerWithExit5AndResumeEndsBitwise) {
  lose_the_coordinator_then_resume("apart_kill_pp3", 3, 1, hit::kill, true);
}

TEST(CoordinatorApart, ACoordinatorThatStopsAnsweringIsKilledAndEveryWorkerStopsWithExit5) {
  lose_the_coordinator_then_resume("apart_stop_dp2_pp2", 2, 2, hit::stop, true);
}

// Under --coordinator rank0, rank 0 hit while it heals another rank (20 to 40 ms after RANK 2's kill:
// during the heal's rendezvous, channel or groups, or as the replacement
// starts): the survivor and the replacement each stop by themselves with
// exit 5 (at once for a kill; a stopped rank 0's store accepts connections
// but answers nothing, which they see within the heartbeat timeout), none
// hangs until the launcher's SIGKILL, none aborts.
void hit_the_coordinator_mid_heal(hit how) {
  const std::string tag = how == hit::kill ? "mid_heal" : "mid_heal_stop";
  const fs::path ckpt = test_dir() / (tag + "_ckpt");
  const std::string cfg = config(tag, 3, 1, ckpt);
  for (int delay_ms : {20, 30, 40}) {
    const std::string what = std::string("rank 0 ") + (how == hit::kill ? "killed " : "stopped ") +
                             std::to_string(delay_ms) + " ms after rank 2's kill\n";
    testing_util::background_launch run(ACTORPIPE_BIN, (test_dir() / (tag + std::to_string(delay_ms) + ".out")).string(),
                                        {"--coordinator", "rank0", "--nprocs", "3", cfg});
    ASSERT_TRUE(run.started());
    ASSERT_TRUE(run.wait_for_output("step    13/")) << run.output();
    const pid_t rank0 = run.worker(0, std::chrono::milliseconds(0)), rank2 = run.worker(2, std::chrono::milliseconds(0));
    ASSERT_GT(rank0, 0) << run.output();
    ASSERT_GT(rank2, 0) << run.output();
    ::kill(rank2, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    const auto hit_at = std::chrono::steady_clock::now();
    ::kill(rank0, how == hit::kill ? SIGKILL : SIGSTOP);
    const int code = run.wait(60);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - hit_at).count();
    const std::string out = run.output();
    ASSERT_EQ(code, 5) << what << out;
    std::printf("mid-heal, %d ms: every worker gone %.2f s after rank 0's %s\n", delay_ms, took,
                how == hit::kill ? "kill" : "stop");
    EXPECT_LT(took, heartbeat_s + 2) << what << out;
    EXPECT_EQ(out.find("still running"), std::string::npos) << what << out;
    EXPECT_EQ(out.find("SIGABRT"), std::string::npos) << what << out;
    EXPECT_EQ(out.find("terminate called"), std::string::npos) << what << out;
    EXPECT_EQ(out.find(") exited with 1"), std::string::npos) << what << out;
    EXPECT_NE(out.find("rank 1/3 lost rank 0 (the coordinator"), std::string::npos) << what << out;
    if (how == hit::stop) {
      EXPECT_NE(out.find("killed rank 0 (pid " + std::to_string(rank0) + "), which stopped answering"),
                std::string::npos)
          << what << out;
    }
  }
}

TEST(CoordinatorLost, ARankZeroKilledWhileItHealsAnotherStopsEveryWorkerWithExit5) {
  hit_the_coordinator_mid_heal(hit::kill);
}

TEST(CoordinatorLost, ARankZeroStoppedWhileItHealsAnotherStopsEveryWorkerWithExit5) {
  hit_the_coordinator_mid_heal(hit::stop);
}

}  // namespace
}  // namespace actorpipe
