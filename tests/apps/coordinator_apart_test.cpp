// Under `launch --coordinator process` no worker's death ends the run: a
// `kill -9` of the worker with RANK 0 (it holds stage 0) mid-step is
// healed from a peer's memory -- at dp 1 from its keeper, the process of
// stage 1; at dp 2 from replica 1's stage 0 -- and the run ends on the
// clean run's bytes. (The coordinator's own loss, whose timing bound wants
// the machine to itself, is in tests/apps/coordinator_test.cpp.) Real
// processes on ports the launcher picks; the launcher is SIGKILLed in
// every failure path (tests/apps/background_launch.hpp).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
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
using testing_util::describe;

fs::path test_dir() { return testing_util::dir_per_test("actorpipe_coordinator_apart_test"); }

testing_util::child_result actorpipe(const std::vector<std::string>& args, double timeout_s = 180) {
  testing_util::child_limits limits;
  limits.timeout_s = timeout_s;
  return testing_util::run_child(ACTORPIPE_BIN, args, limits);
}

std::string config(const std::string& tag, int stages, int dp, const fs::path& ckpt) {
  return testing_util::write(test_dir() / (tag + ".yaml"), testing_util::deep_mlp_healing_config(stages, dp, 2, ckpt.string()));
}

void kill_worker_rank_zero_under_a_coordinator_apart(const std::string& tag, int stages, int dp) {
  const fs::path ckpt = test_dir() / (tag + "_ckpt");
  fs::remove_all(ckpt);
  const std::string cfg = config(tag, stages, dp, ckpt);
  const std::string clean = (test_dir() / (tag + "_clean.pt")).string(),
                    healed = (test_dir() / (tag + "_healed.pt")).string();
  fs::remove(healed);
  auto a = actorpipe({"train", cfg, "--quiet", "--save", clean});
  ASSERT_EQ(a.code, 0) << describe(a);
  fs::remove_all(ckpt);
  const int nprocs = stages * dp;
  testing_util::background_launch run(
      ACTORPIPE_BIN, (test_dir() / (tag + ".out")).string(),
      {"--nprocs", std::to_string(nprocs), "--coordinator", "process", cfg, "--save", healed});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step    13/")) << run.output();
  const pid_t rank0 = run.worker(0, std::chrono::milliseconds(0));
  ASSERT_GT(rank0, 0) << run.output();
  ASSERT_NE(rank0, run.coordinator()) << run.output();
  ::kill(rank0, SIGKILL);
  const int code = run.wait(120);
  const std::string out = run.output();
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("worker rank 0 (pid " + std::to_string(rank0) + ") was killed by SIGKILL; the coordinator "
                     "replaces it"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("started worker rank 0 again"), std::string::npos) << out;
  const std::string donor = dp > 1 ? std::to_string(stages) : "1";
  EXPECT_NE(out.find("its stage 0 of replica 0 from rank " + donor + "'s memory"), std::string::npos) << out;
  EXPECT_EQ(out.find("every stage from the"), std::string::npos) << out;
  EXPECT_NE(out.find("restarts: 1,"), std::string::npos) << out;
  const size_t heal = out.find("heal: generation 1 runs");
  if (heal != std::string::npos) std::printf("%s: %s\n", tag.c_str(), out.substr(heal, out.find('\n', heal) - heal).c_str());
  EXPECT_TRUE(testing_util::read_or_empty(clean) == testing_util::read_or_empty(healed))
      << "healed after worker RANK 0's kill, the run saved other bytes than the clean one\n"
      << out;
}

TEST(CoordinatorApart, AKillNineOfWorkerRankZeroIsHealedFromMemoryBitwiseAtPp3) {
  kill_worker_rank_zero_under_a_coordinator_apart("apart_rank0_pp3", 3, 1);
}

TEST(CoordinatorApart, AKillNineOfWorkerRankZeroIsHealedFromMemoryBitwiseAtDp2Pp2) {
  kill_worker_rank_zero_under_a_coordinator_apart("apart_rank0_dp2_pp2", 2, 2);
}

}  // namespace
}  // namespace actorpipe
