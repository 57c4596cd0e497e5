// Stages in separate OS processes: `actorpipe launch` and ranks started by
// hand with torchrun's variables save the same state dict, byte for byte,
// as the same config trained in one process; a bad environment is named.
// Every process is a real one; the launcher and its workers are killed in
// every failure path, and no port is fixed (launch picks a free one; the
// tests that start ranks by hand pick one the kernel gave out).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "tests/cpu_only.hpp"
#include "tests/apps/background_launch.hpp"
#include "tests/apps/child_process.hpp"
#include "tests/apps/deep_mlp.hpp"
#include "runtime/util/seed.hpp"
#include "runtime/dist/transport/net_address.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using testing_util::describe;
using testing_util::child_result;
using testing_util::run_child;

fs::path test_dir() { return testing_util::dir_per_test("actorpipe_multi_process_test"); }

// A model deep enough for 4 stages x 2 chunks, with dropout (its masks come
// from the seed, per microbatch: a rank that drew them differently would
// show in the weights).
std::string config_text(int stages, int microbatches, const std::string& schedule, int dp = 1) {
  const int chunks = schedule == "interleaved" || schedule == "zb-v" || schedule == "dualpipev" ? 2 : 1;
  std::string text =
      testing_util::deep_mlp_model_and_data() +
      "train:\n"
      "  steps: 4\n"
      "  batch_size: 48\n"
      "  optimizer: {type: adam, lr: 0.01}\n"
      "  clip_grad_norm: 1.0\n"
      "  seed: 7\n";
  if (dp > 1) text += "parallel: {dp: " + std::to_string(dp) + ", allreduce: gloo}\n";
  text += "pipeline:\n  stages: " + std::to_string(stages) + "\n  schedule: " + schedule +
          "\n  microbatches: " + std::to_string(microbatches) + "\n  virtual_stages: " + std::to_string(chunks) +
          "\n  devices: auto\n  intra_op_threads: 1\n";
  return text;
}

std::string write_config(const std::string& name, const std::string& text) {
  return testing_util::write(test_dir() / (name + ".yaml"), text);
}

child_result actorpipe(const std::vector<std::string>& args, double timeout_s = 240) {
  testing_util::child_limits limits;
  limits.timeout_s = timeout_s;
  return run_child(ACTORPIPE_BIN, args, limits);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The lines of `text` that start with `prefix`.
std::string lines_with(const std::string& text, const std::string& prefix) {
  std::istringstream is(text);
  std::string out;
  for (std::string l; std::getline(is, l);)
    if (l.rfind(prefix, 0) == 0) out += l + "\n";
  return out;
}

// The bytes of a file ("" when it is missing).
std::string bytes_of(const fs::path& file) { return fs::exists(file) ? testing_util::slurp_file(file) : ""; }

// The config in one process, saved to `one`; `launch --nprocs n`, saved to
// `many`; the two files the same bytes.
void expect_launch_equals_one_process(const std::string& config, int nprocs, const std::string& tag) {
  const auto dir = test_dir();
  const std::string one = (dir / (tag + "_one.pt")).string(), many = (dir / (tag + "_many.pt")).string();
  auto a = actorpipe({"train", config, "--quiet", "--save", one});
  ASSERT_EQ(a.code, 0) << describe(a);
  auto b = actorpipe({"launch", "--nprocs", std::to_string(nprocs), config, "--quiet", "--save", many});
  ASSERT_EQ(b.code, 0) << describe(b);
  const std::string x = bytes_of(one), y = bytes_of(many);
  ASSERT_FALSE(x.empty());
  EXPECT_TRUE(x == y) << "launch --nprocs " << nprocs << " saved other bytes than one process";
  // Rank 0 alone speaks: one plan line, one table.
  EXPECT_EQ(count(b.out, "actorpipe: "), 1u) << b.out;
}

struct case_t {
  std::string schedule;
  int stages;
  int microbatches;
};

class LaunchEqualsOneProcess : public ::testing::TestWithParam<case_t> {};

TEST_P(LaunchEqualsOneProcess, SavesTheSameBytes) {
  const auto& c = GetParam();
  const std::string tag = testing_util::param_name(c.schedule) + "_s" + std::to_string(c.stages);
  const auto config = write_config(tag, config_text(c.stages, c.microbatches, c.schedule));
  expect_launch_equals_one_process(config, c.stages, tag);
}

std::vector<case_t> cases() {
  std::vector<case_t> out;
  for (const char* s : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"})
    for (auto [stages, mbs] : {std::pair{2, 4}, std::pair{3, 6}, std::pair{4, 8}}) out.push_back({s, stages, mbs});
  // DualPipeV: even stages only; its overlapped pairs span two chunks of a rank.
  for (auto [stages, mbs] : {std::pair{2, 4}, std::pair{4, 8}}) out.push_back({"dualpipev", stages, mbs});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Schedules, LaunchEqualsOneProcess, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           return testing_util::param_name(info.param.schedule) + "_S" +
                                  std::to_string(info.param.stages) + "_M" + std::to_string(info.param.microbatches);
                         });

TEST(LaunchEqualsOneProcessMore, DataParallelTwoByPipelineTwoOnFourProcesses) {
  expect_launch_equals_one_process(write_config("dp2pp2", config_text(2, 4, "1f1b", 2)), 4, "dp2pp2");
}

TEST(LaunchEqualsOneProcessMore, FourStagesOnTwoProcesses) {
  expect_launch_equals_one_process(write_config("s4p2", config_text(4, 8, "1f1b")), 2, "s4p2");
}

TEST(LaunchEqualsOneProcessMore, DataParallelTwoOnTwoProcessesWithWholePipelinesEach) {
  expect_launch_equals_one_process(write_config("dp2pp2w2", config_text(2, 4, "gpipe", 2)), 2, "dp2pp2w2");
}

// The data plane three ways, one set of bytes: shared rings (the two
// processes share the machine: no notice), TCP streams under
// ACTORPIPE_SHM_DISABLE=1 (silently), and TCP after a ring that could not
// be made (one notice per process), against one process.
TEST(LaunchEqualsOneProcessMore, OverSharedMemoryOverTcpAndInOneProcessTheSameBytes) {
  const auto dir = test_dir();
  const std::string config = write_config("ways", config_text(4, 8, "1f1b"));
  const std::string one = (dir / "ways_one.pt").string();
  auto a = actorpipe({"train", config, "--quiet", "--save", one});
  ASSERT_EQ(a.code, 0) << describe(a);
  const std::string notice = "; activations and gradients go over TCP instead";
  enum class way { shared, disabled, no_room };
  for (const way how : {way::shared, way::disabled, way::no_room}) {
    const std::string what = how == way::shared ? "shared memory" : how == way::disabled ? "tcp" : "no room";
    if (how == way::disabled) ::setenv("ACTORPIPE_SHM_DISABLE", "1", 1);
    if (how == way::no_room) ::setenv("ACTORPIPE_SHM_DIR", (dir / "ways_missing").c_str(), 1);
    const std::string many = (dir / "ways_many.pt").string();
    fs::remove(many);
    auto b = actorpipe({"launch", "--nprocs", "2", config, "--quiet", "--save", many});
    ::unsetenv("ACTORPIPE_SHM_DISABLE");
    ::unsetenv("ACTORPIPE_SHM_DIR");
    ASSERT_EQ(b.code, 0) << what << describe(b);
    EXPECT_TRUE(bytes_of(one) == bytes_of(many)) << what << ": other bytes than one process";
    EXPECT_EQ(count(b.err, notice), how == way::no_room ? 2u : 0u) << what << describe(b);
  }
}

// async (PipeDream-2BW) never flushes: one stream of microbatches, each
// stage stepping its own weights. Under launch it saves the one-process
// bytes, with supervision on too (its boundary memory kept, nothing healed).
TEST(LaunchEqualsOneProcessMore, AsyncOnThreeProcesses) {
  std::string text = config_text(3, 3, "async");
  text.replace(text.find("  clip_grad_norm: 1.0\n"), 22, "");  // async steps each stage alone: no global norm
  expect_launch_equals_one_process(write_config("async", text), 3, "async");
  expect_launch_equals_one_process(write_config("async_supervised", text + "supervision: {max_restarts: 2}\n"), 3,
                                   "async_supervised");
}

// Every double crosses processes as its bits: a learning rate divided by
// 256 every step passes through the subnormals (1.42e-308 at step 128 down
// to 4.94e-323 at step 134; CAF's own float serializer turned such a value
// into -inf) down to 0 from step 135, and the 3 processes end on the
// one-process bytes, every weight finite.
TEST(LaunchEqualsOneProcessMore, ALearningRateDecayedThroughTheSubnormalsToZero) {
  std::string text = config_text(3, 3, "1f1b");
  text.replace(text.find("steps: 4"), 8, "steps: 140");
  text.replace(text.find("optimizer: {type: adam, lr: 0.01}"), 33,
               "optimizer: {type: adam, lr: 0.01}\n  lr_schedule: {type: step, step_size: 1, gamma: 0.00390625}");
  text.replace(text.find("clip_grad_norm: 1.0"), 19, "clip_grad_norm: 0.5");
  text.replace(text.find("batch_size: 48"), 14, "batch_size: 24");
  const auto config = write_config("subnormal", text);
  const auto dir = test_dir();
  const std::string one = (dir / "subnormal_one.pt").string(), many = (dir / "subnormal_many.pt").string();
  auto a = actorpipe({"train", config, "--log-every", "1", "--save", one});
  ASSERT_EQ(a.code, 0) << describe(a);
  // Subnormal rates, then 0 (0.01 / 2^1080 is below the smallest double).
  EXPECT_NE(a.out.find("step   128/140  loss "), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("lr 1.42e-308\n"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("lr 4.94e-323\n"), std::string::npos) << a.out;
  const size_t last = a.out.find("step   140/140  loss ");
  ASSERT_NE(last, std::string::npos) << a.out;
  EXPECT_EQ(a.out.substr(a.out.find('\n', last) - 11, 12), "lr 0.00e+00\n") << a.out;
  auto b = actorpipe({"launch", "--nprocs", "3", config, "--quiet", "--save", many});
  ASSERT_EQ(b.code, 0) << describe(b);
  EXPECT_EQ(b.err.find("non-finite"), std::string::npos) << describe(b);
  const std::string x = bytes_of(one), y = bytes_of(many);
  ASSERT_FALSE(x.empty());
  EXPECT_TRUE(x == y) << "launch --nprocs 3 saved other bytes than one process";
}

// A NaN left by one stage's update (a fault, where: update) is undone on
// every stage of every process: the step is skipped as in one process, and
// the run ends on its bytes. Stage 1 is rank 1 (and at dp 2, replica 1's
// copy of it rank 3).
TEST(LaunchEqualsOneProcessMore, AnUpdateLeftNonFiniteIsUndoneInEveryProcess) {
  for (int dp : {1, 2}) {
    const int stages = dp > 1 ? 2 : 3;
    const std::string tag = "bad_update_dp" + std::to_string(dp);
    const std::string config =
        write_config(tag, config_text(stages, 2 * stages, "1f1b", dp) +
                              "faults:\n  inject:\n    - {kind: nonfinite, stage: 1, step: 2, where: update}\n");
    const auto dir = test_dir();
    const std::string one = (dir / (tag + "_one.pt")).string(), many = (dir / (tag + "_many.pt")).string();
    auto a = actorpipe({"train", config, "--quiet", "--save", one});
    ASSERT_EQ(a.code, 0) << describe(a);
    auto b = actorpipe({"launch", "--nprocs", std::to_string(stages * dp), config, "--quiet", "--save", many});
    ASSERT_EQ(b.code, 0) << describe(b);
    const std::string note = lines_with(a.err, "note: step 2: non-finite value: ");
    EXPECT_NE(note.find("stage 1's update left one in "), std::string::npos) << describe(a);
    EXPECT_NE(note.find("; step skipped, weights and optimizer state unchanged"), std::string::npos) << describe(a);
    EXPECT_EQ(lines_with(b.err, "note: step 2: non-finite value: "), note) << describe(b);
    const std::string x = bytes_of(one), y = bytes_of(many);
    ASSERT_FALSE(x.empty());
    EXPECT_TRUE(x == y) << tag << ": launch saved other bytes than one process";
  }
}

// Rank 0 reports every stage on the device its own rank registered (under
// auto on CUDA, that rank's cuda:LOCAL_RANK); without CUDA every rank's
// auto is cpu, and the plan, the stage lines, the results and the trace
// say so as one process does.
TEST(LaunchReportsDevices, EveryStageOnTheDeviceItsRankRegistered) {
  const auto dir = test_dir();
  // allreduce auto: across processes the plan says it is Gloo.
  std::string text = config_text(2, 4, "1f1b", 2);
  text.replace(text.find("allreduce: gloo"), 15, "allreduce: auto");
  const std::string config = write_config("dp2pp2", text);
  const std::string results = (dir / "results.json").string(), trace = (dir / "trace.json").string();
  auto r = actorpipe({"launch", "--nprocs", "4", config, "--quiet", "--results", results, "--trace", trace});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.out.find("= 4 stage actors; allreduce auto: gloo across processes\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(": replica 0 on cpu, replica 1 on cpu\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  stage 0 on cpu: layers"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  stage 1 on cpu: layers"), std::string::npos) << r.out;
  EXPECT_NE(bytes_of(results).find("\"devices\": [\n    \"cpu\",\n    \"cpu\"\n  ]"), std::string::npos)
      << bytes_of(results);
  const std::string json = bytes_of(trace);
  for (const char* lane : {"replica 0 stage 0", "replica 0 stage 1", "replica 1 stage 0", "replica 1 stage 1"})
    EXPECT_NE(json.find("\"name\":\"" + std::string(lane) + " (cpu)\""), std::string::npos) << lane;
}

// Control messages across processes held back, sent twice and dropped
// (then asked for again), drawn from faults.seed: every schedule still ends
// on the bytes of a clean run in one process. Each duplicate and resend is a
// transfer of its own on the channel, received and then dropped.
class LaunchUnderMessageFaults : public ::testing::TestWithParam<std::string> {};

TEST_P(LaunchUnderMessageFaults, EndsOnTheCleanOneProcessBytes) {
  const std::string schedule = GetParam();
  const std::string tag = "faults_" + testing_util::param_name(schedule);
  const std::string clean = write_config(tag + "_clean", config_text(3, 6, schedule));
  const std::string faulty = write_config(
      tag, config_text(3, 6, schedule) +
               "faults:\n  seed: 11\n  inject:\n"
               "    - {kind: delay, probability: 0.3, ms: 3}\n"
               "    - {kind: duplicate, probability: 0.2}\n"
               "    - {kind: drop, from: 0, to: 1, step: 2, op: F3}\n"
               "supervision: {op_timeout_ms: 50}\n");
  const std::string one = (test_dir() / "one.pt").string(), many = (test_dir() / "many.pt").string();
  auto a = actorpipe({"train", clean, "--quiet", "--save", one});
  ASSERT_EQ(a.code, 0) << describe(a);
  auto b = actorpipe({"launch", "--nprocs", "3", faulty, "--save", many});
  ASSERT_EQ(b.code, 0) << describe(b);
  EXPECT_NE(b.out.find("faults: "), std::string::npos) << "no fault took effect\n" << b.out;
  EXPECT_TRUE(bytes_of(one) == bytes_of(many)) << b.out;
}

INSTANTIATE_TEST_SUITE_P(Schedules, LaunchUnderMessageFaults,
                         ::testing::Values("gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"),
                         [](const auto& info) { return testing_util::param_name(info.param); });

// -- ranks started by hand ---------------------------------------------------------


// Processes started together, each with its own environment; all killed
// and reaped however the test ends.
class rank_processes {
public:
  ~rank_processes() {
    for (auto& p : procs_)
      if (p.pid > 0) {
        ::kill(p.pid, SIGKILL);
        ::waitpid(p.pid, nullptr, 0);
      }
  }

  void start(const std::map<std::string, std::string>& env, const std::vector<std::string>& args) {
    proc p;
    p.out = (test_dir() / ("rank_" + std::to_string(getpid()) + "_" + std::to_string(counter_++))).string();
    std::vector<std::string> all = {ACTORPIPE_BIN};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    p.pid = fork();
    ASSERT_GE(p.pid, 0);
    if (p.pid == 0) {
      const int fd = ::open(p.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                            "ACTORPIPE_LAUNCHER_PID", "TORCHELASTIC_USE_AGENT_STORE"})
        ::unsetenv(v);
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      ::execv(ACTORPIPE_BIN, argv.data());
      _exit(127);
    }
    procs_.push_back(p);
  }

  /// Waits for every process (killing them all past timeout_s); exit codes
  /// in start order (-1 for one killed at the timeout).
  std::vector<int> wait_all(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    std::vector<int> codes(procs_.size(), -1);
    for (size_t i = 0; i < procs_.size(); ++i) {
      int status = 0;
      for (;;) {
        const pid_t done = ::waitpid(procs_[i].pid, &status, WNOHANG);
        if (done == procs_[i].pid) {
          codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          procs_[i].pid = -1;
          break;
        }
        if (std::chrono::steady_clock::now() > deadline) return codes;  // the destructor kills the rest
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    return codes;
  }

  std::string output(size_t i) const { return bytes_of(procs_[i].out); }

private:
  struct proc {
    pid_t pid = -1;
    std::string out;
  };
  std::vector<proc> procs_;
  int counter_ = 0;
};

std::map<std::string, std::string> torchrun_env(int rank, int world, int port) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(world)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)}};
}

TEST(RanksByHand, TorchrunVariablesSetByTheTestGiveTheSameWeights) {
  const auto config = write_config("by_hand", config_text(3, 6, "1f1b"));
  const std::string one = (test_dir() / "by_hand_one.pt").string(), many = (test_dir() / "by_hand_many.pt").string();
  auto a = actorpipe({"train", config, "--quiet", "--save", one});
  ASSERT_EQ(a.code, 0) << describe(a);
  rank_processes ranks;
  const int port = static_cast<int>(free_port("127.0.0.1"));
  // Started in reverse: the others wait for rank 0's store.
  for (int r = 2; r >= 0; --r)
    ranks.start(torchrun_env(r, 3, port), {"train", config, "--quiet", "--save", r == 0 ? many : (test_dir() / "x.pt").string()});
  auto codes = ranks.wait_all(240);
  for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(codes[i], 0) << ranks.output(i);
  EXPECT_TRUE(bytes_of(one) == bytes_of(many));
  EXPECT_FALSE(fs::exists(test_dir() / "x.pt")) << "a rank other than 0 wrote --save";
}

// torchrun's agent hosts the store and every rank, rank 0 too, is a client
// under /worker/attempt_<restart count>: here the test plays the agent.
TEST(RanksByHand, UnderAnAgentStoreEveryRankIsAClientAndTheWeightsAreTheSame) {
  const auto config = write_config("agent", config_text(2, 4, "zb-h1"));
  const std::string one = (test_dir() / "agent_one.pt").string(), many = (test_dir() / "agent_many.pt").string();
  auto a = actorpipe({"train", config, "--quiet", "--save", one});
  ASSERT_EQ(a.code, 0) << describe(a);
  c10d::TCPStoreOptions so;
  so.port = 0;
  so.isServer = true;
  so.waitWorkers = false;
  auto agent = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  rank_processes ranks;
  for (int r = 1; r >= 0; --r) {
    auto env = torchrun_env(r, 2, agent->getPort());
    env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
    env["TORCHELASTIC_RESTART_COUNT"] = "2";
    ranks.start(env, {"train", config, "--quiet", "--save", many});
  }
  auto codes = ranks.wait_all(240);
  for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(codes[i], 0) << ranks.output(i);
  EXPECT_TRUE(bytes_of(one) == bytes_of(many));
  // The ranks met under the attempt's prefix.
  EXPECT_TRUE(agent->check({"/worker/attempt_2/actorpipe/spawned"}));
}

TEST(RanksByHand, AConfigThatDiffersBetweenRanksIsRefusedWithExit2OnEveryRank) {
  const auto a_cfg = write_config("mismatch_a", config_text(2, 4, "1f1b"));
  const auto b_cfg = write_config("mismatch_b", config_text(2, 4, "gpipe"));
  rank_processes ranks;
  const int port = static_cast<int>(free_port("127.0.0.1"));
  ranks.start(torchrun_env(0, 2, port), {"train", a_cfg, "--quiet"});
  ranks.start(torchrun_env(1, 2, port), {"train", b_cfg, "--quiet"});
  auto codes = ranks.wait_all(120);
  for (size_t i = 0; i < codes.size(); ++i) {
    EXPECT_EQ(codes[i], 2) << ranks.output(i);
    EXPECT_NE(ranks.output(i).find("rank 1"), std::string::npos) << ranks.output(i);
  }
}

TEST(RanksByHand, ARankThatCannotReachTheMasterExits1NamingTheAddress) {
  auto text = config_text(2, 4, "1f1b") + "supervision: {connect_timeout_s: 2}\n";
  const auto config = write_config("unreachable", text);
  rank_processes ranks;
  const int port = static_cast<int>(free_port("127.0.0.1"));  // nobody listens there
  ranks.start(torchrun_env(1, 2, port), {"train", config, "--quiet"});
  const auto start = std::chrono::steady_clock::now();
  auto codes = ranks.wait_all(60);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(codes[0], 1) << ranks.output(0);
  EXPECT_NE(ranks.output(0).find("127.0.0.1:" + std::to_string(port)), std::string::npos) << ranks.output(0);
  EXPECT_LT(took, 30.0);
}

TEST(RanksByHand, AWorldSizeThatDoesNotDivideTheStagesExits2NamingBoth) {
  const auto config = write_config("nodivide", config_text(2, 4, "1f1b"));
  rank_processes ranks;
  ranks.start(torchrun_env(0, 3, static_cast<int>(free_port("127.0.0.1"))), {"train", config, "--quiet"});
  auto codes = ranks.wait_all(60);
  EXPECT_EQ(codes[0], 2);
  EXPECT_NE(ranks.output(0).find("WORLD_SIZE 3 does not divide"), std::string::npos) << ranks.output(0);
}

// -- a worker that dies ------------------------------------------------------------

// `actorpipe launch ARGS...` in the background, its output to a file; the
// launcher is SIGKILLed (its workers die with it) however the test ends.
// The launcher in the background, its output in the test's directory.
struct background_launch : testing_util::background_launch {
  background_launch(const std::string& tag, std::vector<std::string> args)
      : testing_util::background_launch(ACTORPIPE_BIN, (test_dir() / (tag + ".out")).string(), std::move(args)) {}
};

std::string endless_config(const std::string& tag, const std::string& extra = "") {
  auto text = config_text(2, 4, "1f1b");
  text.replace(text.find("steps: 4"), 8, "steps: 100000");
  return write_config(tag, text + extra);
}

TEST(LaunchFailures, AWorkerKilledFromOutsideEndsTheRunWithExit1AndNoProcessLeft) {
  background_launch run("killed", {"--nprocs", "2", endless_config("killed")});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step     3/")) << run.output();
  const pid_t victim = run.worker(1, std::chrono::seconds(0));
  ASSERT_GT(victim, 0) << run.output();
  ::kill(victim, SIGKILL);
  ASSERT_EQ(run.wait(30), 1) << run.output();
  EXPECT_NE(run.output().find("SIGKILL"), std::string::npos) << run.output();
}

// faults kill_process: the stage's process raises SIGKILL on itself right
// after the op; the launcher names the worker and its signal.
TEST(LaunchFailures, AKillProcessFaultKillsTheStagesProcessAfterItsOp) {
  const auto config = write_config("kill_process", config_text(2, 4, "1f1b") +
                                                       "faults:\n  inject:\n"
                                                       "    - {kind: kill_process, stage: 1, step: 2, after_op: B1}\n");
  auto r = actorpipe({"launch", "--nprocs", "2", config, "--quiet"}, 120);
  EXPECT_EQ(r.code, 1) << describe(r);
  const std::string all = r.out + r.err;
  EXPECT_NE(all.find("worker rank 1"), std::string::npos) << describe(r);
  EXPECT_NE(all.find("killed by SIGKILL"), std::string::npos) << describe(r);
  EXPECT_EQ(all.find("step     4/4"), std::string::npos) << describe(r);
  // In one process it would kill everything: refused before the run, named.
  auto one = actorpipe({"train", config, "--quiet"}, 60);
  EXPECT_EQ(one.code, 2) << describe(one);
  EXPECT_NE(one.err.find("faults.inject[0].kind"), std::string::npos) << describe(one);
  EXPECT_NE(one.err.find("actorpipe launch"), std::string::npos) << describe(one);
}

// A worker that stops (SIGSTOP: a hung process, or a lost host) sends no
// heartbeat: after supervision.heartbeat_timeout_s rank 0 takes it for
// dead and the run ends (exit 1, naming the stage), instead of waiting on
// it for ever.
TEST(LaunchFailures, AStoppedWorkerIsTakenForDeadAfterTheHeartbeatTimeout) {
  background_launch run("stopped", {"--nprocs", "2",
                                    endless_config("stopped", "supervision: {heartbeat_timeout_s: 2, watchdog_s: 0}\n")});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step     3/")) << run.output();
  const pid_t victim = run.worker(1, std::chrono::seconds(0));
  ASSERT_GT(victim, 0) << run.output();
  const auto stopped_at = std::chrono::steady_clock::now();
  ::kill(victim, SIGSTOP);
  const int code = run.wait(40);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
  ASSERT_EQ(code, 1) << run.output();
  EXPECT_NE(run.output().find("stage 1"), std::string::npos) << run.output();
  std::printf("the run ended %.1f s after the SIGSTOP\n", took);
}

// Under torchrun with restarts, TORCHELASTIC_RESTART_COUNT > 0 means every
// worker was restarted: the run resumes from the newest checkpoint by
// itself and ends on the uninterrupted run's bytes.
TEST(RanksByHand, ATorchrunRestartResumesFromTheNewestCheckpointBitwise) {
  const auto ckpt = test_dir() / "ckpt";
  const auto config = write_config("restarted", config_text(2, 4, "1f1b") + "checkpoint: {every: 2, dir: " +
                                                    ckpt.string() + "}\n");
  const std::string clean = (test_dir() / "clean.pt").string(), healed = (test_dir() / "restarted.pt").string();
  auto a = actorpipe({"train", config, "--quiet", "--save", clean});
  ASSERT_EQ(a.code, 0) << describe(a);
  fs::remove_all(ckpt);
  {
    // The first attempt ends after step 1 (as if it failed then), its
    // checkpoint written.
    rank_processes ranks;
    const int port = static_cast<int>(free_port("127.0.0.1"));
    for (int r = 1; r >= 0; --r) ranks.start(torchrun_env(r, 2, port), {"train", config, "--quiet", "--steps", "2"});
    for (int c : ranks.wait_all(120)) ASSERT_EQ(c, 0);
  }
  ASSERT_TRUE(fs::exists(ckpt / "step_00000002.pt"));
  rank_processes ranks;
  const int port = static_cast<int>(free_port("127.0.0.1"));
  for (int r = 1; r >= 0; --r) {
    auto env = torchrun_env(r, 2, port);
    env["TORCHELASTIC_RESTART_COUNT"] = "1";
    ranks.start(env, {"train", config, "--quiet", "--save", healed});
  }
  auto codes = ranks.wait_all(120);
  for (size_t i = 0; i < codes.size(); ++i) ASSERT_EQ(codes[i], 0) << ranks.output(i);
  EXPECT_NE(ranks.output(1).find("torchrun restart 1 (TORCHELASTIC_RESTART_COUNT)"), std::string::npos)
      << ranks.output(1);
  EXPECT_NE(ranks.output(1).find("resuming from the newest checkpoint in " + ckpt.string()), std::string::npos)
      << ranks.output(1);
  EXPECT_TRUE(bytes_of(clean) == bytes_of(healed)) << "the restarted run saved other bytes than the clean one";
}

// -- healing a dead process ---------------------------------------------------------

// The seeded run that healing must end on: `stages` x `dp`, M 4, 6 steps,
// restarts allowed, checkpoints every 2 steps (the copy of last resort).
std::string healing_config(const std::string& tag, int stages, int dp, const std::string& extra = "") {
  auto text = config_text(stages, 4, "1f1b", dp);
  text.replace(text.find("steps: 4"), 8, "steps: 6");
  text += "supervision: {max_restarts: 2, heartbeat_timeout_s: 2}\n"
          "checkpoint: {every: 2, dir: " + (test_dir() / (tag + "_ckpt")).string() + "}\n" + extra;
  return write_config(tag, text);
}

struct healing_case {
  int stages, dp;
};

class HealAKilledProcess : public ::testing::TestWithParam<healing_case> {};

// A kill_process fault at a seeded stage (of any worker: under launch
// --coordinator process the supervisor and the store run apart, so RANK 0
// is drawn too), step and op: the coordinator has launch start that rank
// again, every rank rolls back to the last step boundary (the replacement
// gets its stage from another replica's memory; with no replica, from its
// keeper's: the process of the stage before -- for stage 0, of stage 1 --
// which holds a copy sent after every step), re-runs the
// step, and the run ends on the clean run's bytes after one restart. One
// seed kills a stage right after its last backward, while its replica
// peers wait for it in their allreduce.
TEST_P(HealAKilledProcess, TenSeedsEndBitwiseOnTheCleanRunAfterOneRestart) {
  const auto c = GetParam();
  const std::string tag = "heal_" + std::to_string(c.stages) + "x" + std::to_string(c.dp);
  const std::string clean = (test_dir() / (tag + "_clean.pt")).string();
  auto a = actorpipe({"train", healing_config(tag + "_clean", c.stages, c.dp), "--quiet", "--save", clean});
  ASSERT_EQ(a.code, 0) << describe(a);
  const int nprocs = c.stages * c.dp;
  std::string first_trace;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const uint64_t draw = derive_seed(seed, {static_cast<uint64_t>(c.stages), static_cast<uint64_t>(c.dp)});
    // Any worker, RANK 0 included: none holds the supervisor or the store.
    const int rank = static_cast<int>(draw % static_cast<uint64_t>(c.stages * c.dp));
    const int stage = rank % c.stages, replica = rank / c.stages;
    const int step = static_cast<int>((draw >> 16) % 6);
    const int mb = static_cast<int>((draw >> 24) % 4);
    const std::string op = seed == 1 ? "B3" : std::string((draw >> 32) % 2 ? "B" : "F") + std::to_string(mb);
    const std::string fault = "faults:\n  inject:\n    - {kind: kill_process, stage: " + std::to_string(stage) +
                              ", replica: " + std::to_string(replica) + ", step: " + std::to_string(step) +
                              ", after_op: " + op + "}\n";
    const std::string what = "seed " + std::to_string(seed) + ": " + fault;
    const std::string healed = (test_dir() / (tag + "_healed.pt")).string();
    fs::remove(healed);
    auto r = actorpipe({"launch", "--nprocs", std::to_string(nprocs), "--coordinator", "process",
                        healing_config(tag, c.stages, c.dp, fault), "--quiet", "--save", healed},
                       120);
    ASSERT_EQ(r.code, 0) << what << describe(r);
    EXPECT_TRUE(bytes_of(clean) == bytes_of(healed)) << what << describe(r);
    EXPECT_NE(r.out.find("restarts: 1,"), std::string::npos) << what << describe(r);
    EXPECT_NE(r.err.find("started worker rank " + std::to_string(replica * c.stages + stage) + " again"),
              std::string::npos)
        << what << describe(r);
    // From memory, never from disk: at dp 1 from the keeper, rank - 1
    // (stage 0's: rank 1).
    const int donor = c.dp > 1 ? (rank + c.stages) % (c.stages * c.dp) : rank == 0 ? 1 : rank - 1;
    EXPECT_NE(r.err.find("from rank " + std::to_string(donor) + "'s memory"), std::string::npos) << what << describe(r);
    EXPECT_EQ(r.err.find("every stage from the"), std::string::npos) << what << describe(r);
    // The same fault seed and config: the same trace line across processes.
    if (seed == 1) {
      first_trace = lines_with(r.out, "trace: ");
      fs::remove_all(test_dir() / (tag + "_ckpt"));
      auto again = actorpipe({"launch", "--nprocs", std::to_string(nprocs), "--coordinator", "process",
                              healing_config(tag, c.stages, c.dp, fault), "--quiet"},
                             120);
      ASSERT_EQ(again.code, 0) << describe(again);
      EXPECT_FALSE(first_trace.empty()) << r.out;
      EXPECT_EQ(lines_with(again.out, "trace: "), first_trace);
    }
    fs::remove_all(test_dir() / (tag + "_ckpt"));
  }
}

INSTANTIATE_TEST_SUITE_P(Meshes, HealAKilledProcess, ::testing::Values(healing_case{3, 1}, healing_case{2, 2}),
                         [](const auto& info) {
                           return "pp" + std::to_string(info.param.stages) + "_dp" + std::to_string(info.param.dp);
                         });

// supervision.copy_every 3 at dp 1: every stage keeps its boundary and
// sends it to its keeper after steps 2 and 5 only, and at the start. A
// kill in step 4 rolls every stage back to after step 2, the keeper's
// newest copy, re-runs steps 3 and 4, and the run still ends on the clean
// run's bytes. At dp 2 x pp 2 the boundary is the live state, free after
// every step whatever copy_every says: the same kill rolls back to after
// step 3 only (the other replica's memory), and ends on the same bytes.
TEST(HealWithSparseCopies, AKillRollsBackToTheNewestCopyAndEndsBitwise) {
  for (const healing_case c : {healing_case{3, 1}, healing_case{2, 2}}) {
    const std::string tag = "sparse_" + std::to_string(c.stages) + "x" + std::to_string(c.dp);
    const std::string clean = (test_dir() / (tag + "_clean.pt")).string();
    const std::string healed = (test_dir() / (tag + "_healed.pt")).string();
    auto a = actorpipe({"train", healing_config(tag + "_clean", c.stages, c.dp), "--quiet", "--save", clean});
    ASSERT_EQ(a.code, 0) << describe(a);
    // The last stage of the last replica; its copy is at rank - 1 (its
    // keeper) or at the same stage of replica 0.
    const int rank = c.stages * c.dp - 1, donor = c.dp > 1 ? c.stages - 1 : rank - 1;
    const std::string extra = "faults:\n  inject:\n    - {kind: kill_process, stage: " + std::to_string(c.stages - 1) +
                              ", replica: " + std::to_string(c.dp - 1) + ", step: 4, after_op: B1}\n";
    auto config = healing_config(tag, c.stages, c.dp, extra);
    {
      // copy_every goes into the supervision line healing_config wrote.
      std::ifstream in(config);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const std::string sv = "supervision: {";
      ASSERT_NE(text.find(sv), std::string::npos);
      text.replace(text.find(sv), sv.size(), sv + "copy_every: 3, ");
      std::ofstream(config, std::ios::trunc) << text;
    }
    auto r = actorpipe({"launch", "--nprocs", std::to_string(c.stages * c.dp), config, "--quiet", "--save", healed},
                       120);
    ASSERT_EQ(r.code, 0) << tag << describe(r);
    EXPECT_NE(r.err.find(c.dp > 1 ? "rolling back to after step 3" : "rolling back to after step 2"), std::string::npos)
        << tag << describe(r);
    EXPECT_NE(r.err.find("its stage " + std::to_string(c.stages - 1) + " of replica " + std::to_string(c.dp - 1) +
                         " from rank " + std::to_string(donor) + "'s memory"),
              std::string::npos)
        << tag << describe(r);
    EXPECT_EQ(r.err.find("every stage from the"), std::string::npos) << tag << describe(r);
    EXPECT_NE(r.out.find("restarts: 1,"), std::string::npos) << tag << describe(r);
    EXPECT_TRUE(bytes_of(clean) == bytes_of(healed)) << tag << describe(r);
    fs::remove_all(test_dir() / (tag + "_ckpt"));
  }
}

// A process killed right after its update of step 3 (`after_op: update`),
// once rank 0 has sent that step's applies. At dp 2 x pp 2 every live
// stage applies step 3 too (its gradients were all in), and the heal rolls
// forward to after step 3: the dead stage's replica holds it. At pp 3 the
// dead stage's copy of step 3 never reached its keeper, and every stage
// rolls back to after step 2, the copies it kept. Both end on the clean
// run's bytes.
TEST(HealAfterAnUpdate, AtDpTwoRollsForwardToTheDecidedStepAtDpOneBackAndEndsBitwise) {
  for (const healing_case c : {healing_case{2, 2}, healing_case{3, 1}}) {
    const std::string tag = "update_" + std::to_string(c.stages) + "x" + std::to_string(c.dp);
    const std::string clean = (test_dir() / (tag + "_clean.pt")).string();
    const std::string healed = (test_dir() / (tag + "_healed.pt")).string();
    auto a = actorpipe({"train", healing_config(tag + "_clean", c.stages, c.dp), "--quiet", "--save", clean});
    ASSERT_EQ(a.code, 0) << describe(a);
    // Stage 1 of the last replica (rank 1 at pp 3, rank 3 at dp 2 x pp 2).
    const int rank = (c.dp - 1) * c.stages + 1;
    const std::string extra = "faults:\n  inject:\n    - {kind: kill_process, stage: 1, replica: " +
                              std::to_string(c.dp - 1) + ", step: 3, after_op: update}\n";
    auto r = actorpipe({"launch", "--nprocs", std::to_string(c.stages * c.dp), healing_config(tag, c.stages, c.dp, extra),
                        "--quiet", "--save", healed},
                       120);
    ASSERT_EQ(r.code, 0) << tag << describe(r);
    EXPECT_NE(r.err.find("worker rank " + std::to_string(rank) + " (pid"), std::string::npos) << tag << describe(r);
    EXPECT_NE(r.err.find(c.dp > 1 ? "rolling back to after step 3" : "rolling back to after step 2"), std::string::npos)
        << tag << describe(r);
    EXPECT_NE(r.err.find("healed from memory"), std::string::npos) << tag << describe(r);
    EXPECT_NE(r.out.find("restarts: 1,"), std::string::npos) << tag << describe(r);
    EXPECT_TRUE(bytes_of(clean) == bytes_of(healed)) << tag << describe(r);
    fs::remove_all(test_dir() / (tag + "_ckpt"));
  }
}

// One supervisor for both: a stage actor killed in one process (restarted
// from the boundary in memory) and the same stage's process killed under
// launch (healed from its keeper's memory, the process started again) go
// through the same supervisor states, and both end on the clean run's bytes.
TEST(OneSupervisor, AKilledStageAndAKilledProcessTakeTheSameStates) {
  const std::string clean = (test_dir() / "states_clean.pt").string();
  auto a = actorpipe({"train", healing_config("states_clean", 3, 1), "--quiet", "--save", clean});
  ASSERT_EQ(a.code, 0) << describe(a);
  const auto states_of = [](const std::string& results) {
    const auto doc = nlohmann::json::parse(testing_util::slurp_file(results));
    return std::make_pair(doc.at("supervision").at("states").get<std::vector<std::string>>(),
                          doc.at("supervision").at("restarts").get<int>());
  };
  std::vector<std::pair<std::vector<std::string>, int>> seen;
  for (const std::string kind : {"kill_stage", "kill_process"}) {
    const std::string tag = "states_" + kind;
    const std::string config = healing_config(
        tag, 3, 1, "faults:\n  inject:\n    - {kind: " + kind + ", stage: 1, step: 3, after_op: F1}\n");
    const std::string saved = (test_dir() / (tag + ".pt")).string(), results = (test_dir() / (tag + ".json")).string();
    const bool processes = kind == "kill_process";
    auto r = processes ? actorpipe({"launch", "--nprocs", "3", config, "--quiet", "--save", saved, "--results", results},
                                   120)
                       : actorpipe({"train", config, "--quiet", "--save", saved, "--results", results});
    ASSERT_EQ(r.code, 0) << kind << describe(r);
    EXPECT_NE(r.out.find("restarts: 1,"), std::string::npos) << kind << describe(r);
    EXPECT_TRUE(bytes_of(clean) == bytes_of(saved)) << kind << ": other bytes than the clean run";
    seen.push_back(states_of(results));
    fs::remove_all(test_dir() / (tag + "_ckpt"));
  }
  const std::vector<std::string> expected{"running", "healing", "running", "closing"};
  EXPECT_EQ(seen[0].first, expected) << "one process";
  EXPECT_EQ(seen[1].first, expected) << "launch";
  EXPECT_EQ(seen[0].second, 1);
  EXPECT_EQ(seen[1].second, 1);
}

// At dp 1 a stage's keeper on the same machine holds its copies in shared
// memory (runtime/dist/transport/shared_segments), and through the socket with
// ACTORPIPE_SHM_DISABLE=1. A kill of stage 2 mid-step heals bitwise either
// way (from the newest copy that had landed). The killed process's
// segments outlive it until launch, at the end, removes them (and says
// so), which leaves ACTORPIPE_SHM_DIR empty. A directory that does not
// exist sends every copy through the socket, and says why once.
TEST(HealFromAKeeper, ThroughSharedMemoryOrTheSocketEndsBitwiseAndLeavesNoSegment) {
  const std::string tag = "keeper_3x1";
  const std::string clean = (test_dir() / (tag + "_clean.pt")).string();
  auto a = actorpipe({"train", healing_config(tag + "_clean", 3, 1), "--quiet", "--save", clean});
  ASSERT_EQ(a.code, 0) << describe(a);
  const fs::path dir = test_dir() / (tag + "_shm");
  enum class way { shared, disabled, no_dir };
  for (const way how : {way::shared, way::disabled, way::no_dir}) {
    const bool shared = how == way::shared;
    const std::string what = shared ? "shared memory" : how == way::disabled ? "socket" : "no directory";
    fs::remove_all(dir);
    fs::create_directories(dir);
    ::setenv("ACTORPIPE_SHM_DIR", (how == way::no_dir ? dir / "missing" : dir).c_str(), 1);
    if (how == way::disabled) ::setenv("ACTORPIPE_SHM_DISABLE", "1", 1);
    const std::string healed = (test_dir() / (tag + "_healed.pt")).string();
    fs::remove(healed);
    auto r = actorpipe({"launch", "--nprocs", "3",
                        healing_config(tag, 3, 1, "faults:\n  inject:\n    - {kind: kill_process, stage: 2, step: 4, "
                                                  "after_op: B1}\n"),
                        "--quiet", "--save", healed},
                       120);
    ::unsetenv("ACTORPIPE_SHM_DIR");
    ::unsetenv("ACTORPIPE_SHM_DISABLE");
    ASSERT_EQ(r.code, 0) << what << describe(r);
    // After step 3 where its copy had landed, or step 2 (a copy through the
    // socket may still be on its way when the sender dies).
    EXPECT_NE(r.err.find("rolling back to after step "), std::string::npos) << what << describe(r);
    EXPECT_NE(r.err.find("its stage 2 of replica 0 from rank 1's memory"), std::string::npos) << what << describe(r);
    EXPECT_NE(r.out.find("restarts: 1,"), std::string::npos) << what << describe(r);
    EXPECT_TRUE(bytes_of(clean) == bytes_of(healed)) << what << describe(r);
    EXPECT_EQ(r.err.find("sends a boundary copy through the socket") != std::string::npos, how == way::no_dir)
        << what << describe(r);
    if (how == way::no_dir) {
      EXPECT_NE(r.err.find("cannot create " + (dir / "missing").string()), std::string::npos) << describe(r);
    }
    EXPECT_EQ(r.err.find("shared-memory boundary cop") != std::string::npos, shared) << what << describe(r);
    EXPECT_TRUE(fs::is_empty(dir)) << what;
    fs::remove_all(test_dir() / (tag + "_ckpt"));
  }
  fs::remove_all(dir);
}

// Old generations: no message of one is applied. A stale_message fault
// makes stages 0 and 2 each send, in the healed generation, a copy of
// their first message under generation 0's epoch, naming the tensor
// transfer of the real one, as a late message of the dead generation
// would (tags count from 0 on every generation's channel). Stage 1's
// process drops both before fetching anything and counts them; the run
// ends on the clean bytes. One process, with a restart instead of a
// heal, drops its one the same way.
TEST(HealDropsOldGenerations, LateMessagesOfTheDeadGenerationAreCountedAndNoneIsApplied) {
  const std::string tag = "stale";
  const std::string clean = (test_dir() / (tag + "_clean.pt")).string();
  const std::string healed = (test_dir() / (tag + "_healed.pt")).string();
  auto a = actorpipe({"train", healing_config(tag + "_clean", 3, 1), "--quiet", "--save", clean});
  ASSERT_EQ(a.code, 0) << describe(a);
  const std::string extra = "faults:\n  inject:\n"
                            "    - {kind: kill_process, stage: 2, step: 3, after_op: B1}\n"
                            "    - {kind: stale_message, stage: 0}\n"
                            "    - {kind: stale_message, stage: 2, step: 4}\n";
  auto r = actorpipe({"launch", "--nprocs", "3", healing_config(tag, 3, 1, extra), "--quiet", "--save", healed}, 120);
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.out.find("restarts: 1,"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("started worker rank 2 again"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("stale: 2 messages of an earlier attempt or generation dropped on arrival"), std::string::npos)
      << describe(r);
  EXPECT_TRUE(bytes_of(clean) == bytes_of(healed)) << describe(r);
  fs::remove_all(test_dir() / (tag + "_ckpt"));

  const std::string one = (test_dir() / (tag + "_one.pt")).string();
  const std::string in_process = "faults:\n  inject:\n"
                                 "    - {kind: kill_stage, stage: 1, step: 2, after_op: F3}\n"
                                 "    - {kind: stale_message, stage: 1}\n";
  auto o = actorpipe({"train", healing_config(tag + "_one", 3, 1, in_process), "--quiet", "--save", one});
  ASSERT_EQ(o.code, 0) << describe(o);
  EXPECT_NE(o.out.find("restarts: 1,"), std::string::npos) << describe(o);
  EXPECT_NE(o.out.find("stale: 1 messages of an earlier attempt or generation dropped on arrival"), std::string::npos)
      << describe(o);
  EXPECT_TRUE(bytes_of(clean) == bytes_of(one)) << describe(o);
  fs::remove_all(test_dir() / (tag + "_one_ckpt"));
}

// A run long enough to be hit from outside: paced ops.
std::string long_healing_config(const std::string& tag, const std::string& extra = "") {
  auto text = config_text(2, 4, "1f1b", 2);
  text.replace(text.find("steps: 4"), 8, "steps: 40");
  text.replace(text.find("intra_op_threads: 1"), 19, "intra_op_threads: 1\n  pace_ms: 4");
  return write_config(tag, text + "supervision: {max_restarts: 2, heartbeat_timeout_s: 2}\n" + extra);
}

// A real `kill -9` of the worker with RANK 2, mid-run: healed from replica
// 0's memory, and the run ends on the clean run's bytes.
TEST(HealFromOutside, AKillNineOfAWorkerIsHealedBitwise) {
  const std::string clean = (test_dir() / "clean.pt").string(), healed = (test_dir() / "healed.pt").string();
  auto a = actorpipe({"train", long_healing_config("clean"), "--quiet", "--save", clean});
  ASSERT_EQ(a.code, 0) << describe(a);
  background_launch run("kill9", {"--nprocs", "4", long_healing_config("kill9"), "--save", healed});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step     3/")) << run.output();
  const pid_t victim = run.worker(2, std::chrono::milliseconds(0));
  ASSERT_GT(victim, 0) << run.output();
  ::kill(victim, SIGKILL);
  ASSERT_EQ(run.wait(120), 0) << run.output();
  EXPECT_NE(run.output().find("started worker rank 2 again"), std::string::npos) << run.output();
  EXPECT_NE(run.output().find("restarts: 1,"), std::string::npos) << run.output();
  EXPECT_TRUE(bytes_of(clean) == bytes_of(healed)) << run.output();
}

// A worker killed while the run sets up (before every rank has joined:
// nothing is kept to heal from yet) ends the run at once, as any death
// does without supervision, rather than leaving the others waiting in the
// rendezvous and the launcher waiting for a replacement nobody asks for.
TEST(HealFromOutside, AWorkerKilledDuringSetUpEndsTheRunAtOnce) {
  background_launch run("setup_kill", {"--nprocs", "4", long_healing_config("setup_kill")});
  ASSERT_TRUE(run.started());
  // Found within 50 ms of its start (still loading LibTorch) and stopped
  // there: the others cannot get past the rendezvous without it. It dies
  // once rank 0 is well into its own set-up (its plan printed, a second
  // more).
  const pid_t victim = run.worker(2, std::chrono::milliseconds(0));
  ASSERT_GT(victim, 0) << run.output();
  ::kill(victim, SIGSTOP);
  ASSERT_TRUE(run.wait_for_output("processes: 4")) << run.output();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  ::kill(victim, SIGKILL);
  EXPECT_EQ(run.wait(120), 1) << run.output();
  EXPECT_NE(run.output().find("worker rank 2 (pid " + std::to_string(victim) +
                              ") was killed by SIGKILL; stopping the other 3 workers"),
            std::string::npos)
      << run.output();
  EXPECT_EQ(run.output().find("supervisor replaces it"), std::string::npos) << run.output();
  EXPECT_EQ(run.output().find("step "), std::string::npos) << run.output();
}

// SIGSTOP of a worker: no heartbeat comes, it is taken for dead after
// supervision.heartbeat_timeout_s, killed for good and replaced, and the
// run ends on the clean bytes.
TEST(HealFromOutside, AStoppedWorkerIsReplacedAndTheRunEndsBitwise) {
  const std::string clean = (test_dir() / "clean.pt").string(), healed = (test_dir() / "healed.pt").string();
  auto a = actorpipe({"train", long_healing_config("clean"), "--quiet", "--save", clean});
  ASSERT_EQ(a.code, 0) << describe(a);
  background_launch run("stop",
                        {"--coordinator", "rank0", "--nprocs", "4", long_healing_config("stop"), "--save", healed});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step     3/")) << run.output();
  const pid_t victim = run.worker(3, std::chrono::milliseconds(0));
  ASSERT_GT(victim, 0) << run.output();
  const auto stopped_at = std::chrono::steady_clock::now();
  ::kill(victim, SIGSTOP);
  double replaced_after = -1;
  for (int i = 0; i < 1500 && replaced_after < 0; ++i) {
    if (run.output().find("started worker rank 3 again") != std::string::npos)
      replaced_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(run.wait(120), 0) << run.output();
  EXPECT_GT(replaced_after, 0) << run.output();
  std::printf("replaced %.2f s after the SIGSTOP (heartbeat_timeout_s 2)\n", replaced_after);
  EXPECT_NE(run.output().find("was taken for dead by rank 0; killed it"), std::string::npos) << run.output();
  EXPECT_TRUE(bytes_of(clean) == bytes_of(healed)) << run.output();
}

// RANK 2 killed, and while the generation that starts it again forms,
// RANK 3 stopped: rank 0 sees it after the heartbeat timeout, calls that
// generation off, and the launcher starts both again for the next one,
// each from its replica's memory. Before, the others waited in the
// rendezvous until its timeout and the run ended with exit 1.
TEST(HealFromOutside, AWorkerStoppedWhileAnotherIsStartedAgainIsReplacedTooBitwise) {
  const std::string clean = (test_dir() / "clean.pt").string(), healed = (test_dir() / "healed.pt").string();
  auto a = actorpipe({"train", long_healing_config("clean"), "--quiet", "--save", clean});
  ASSERT_EQ(a.code, 0) << describe(a);
  testing_util::forming_held hold(2500);
  background_launch run("stop_in_heal", {"--coordinator", "rank0", "--nprocs", "4", long_healing_config("stop_in_heal"),
                                         "--save", healed});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step     3/")) << run.output();
  pid_t stopped = -1;
  ASSERT_EQ(run.kill_then_stop(2, "started worker rank 2 again", 3, 120, &stopped), 0) << run.output();
  const std::string out = run.output();
  EXPECT_NE(out.find("generation 1 was called off: rank 3's process went down or stopped answering"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("2 process(es) started again"), std::string::npos) << out;
  EXPECT_NE(out.find("worker rank 3 (pid " + std::to_string(stopped) + ") was taken for dead by rank 0; killed it"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("started worker rank 3 again"), std::string::npos) << out;
  EXPECT_NE(out.find("restarts: 2,"), std::string::npos) << out;
  EXPECT_EQ(out.find("every stage from the"), std::string::npos) << out;  // from memory, not disk
  EXPECT_TRUE(bytes_of(clean) == bytes_of(healed)) << out;
}

// The scene of the two tests below: RANK 2 of a run held 2.5 s before
// each rendezvous (every rank but 0, beating meanwhile) is killed once it
// trains; `again` is the process its launcher starts in its place.
void kill_rank_2_for_a_restart(background_launch& run, pid_t& again) {
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step     3/")) << run.output();
  const pid_t victim = run.worker(2, std::chrono::milliseconds(0));
  ASSERT_GT(victim, 0) << run.output();
  ::kill(victim, SIGKILL);
  const std::string started = "started worker rank 2 again (pid ";
  ASSERT_TRUE(run.wait_for_output(started)) << run.output();
  const std::string before = run.output();
  again = std::atoi(before.c_str() + before.find(started) + started.size());
  ASSERT_GT(again, 0) << before;
}

// What both end with: RANK 2 started once more, two restarts, every stage
// from memory, and the clean run's weights.
void expect_started_once_more_bitwise(const std::string& out, const std::string& clean, const std::string& healed) {
  const std::string started = "started worker rank 2 again (pid ";
  EXPECT_NE(out.find(started, out.find(started) + 1), std::string::npos) << out;
  EXPECT_NE(out.find("restarts: 2,"), std::string::npos) << out;
  EXPECT_EQ(out.find("every stage from the"), std::string::npos) << out;  // from memory, not disk
  EXPECT_TRUE(bytes_of(clean) == bytes_of(healed)) << out;
}

// RANK 2 killed; the process the launcher starts again for it is stopped
// (SIGSTOP) while its generation forms. Rank 0 sees its count stand still
// for the heartbeat timeout and a second, calls that generation off, and
// the launcher kills it and starts RANK 2 once more. Before, the others
// waited in the rendezvous until supervision.connect_timeout_s and the
// run ended. (One that ends is seen at once: the next test.)
TEST(HealFromOutside, AProcessStartedAgainAndStoppedWhileItsGenerationFormsIsStartedOnceMoreBitwise) {
  const std::string clean = (test_dir() / "clean.pt").string(), healed = (test_dir() / "healed.pt").string();
  auto a = actorpipe({"train", long_healing_config("clean"), "--quiet", "--save", clean});
  ASSERT_EQ(a.code, 0) << describe(a);
  testing_util::forming_held hold(2500);
  background_launch run("kill_restarted", {"--coordinator", "rank0", "--nprocs", "4",
                                           long_healing_config("kill_restarted"), "--save", healed});
  pid_t again = -1;
  ASSERT_NO_FATAL_FAILURE(kill_rank_2_for_a_restart(run, again));
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // it beats, held before the rendezvous
  ::kill(again, SIGSTOP);
  const int code = run.wait(120);
  ::kill(again, SIGKILL);  // in every path
  ASSERT_EQ(code, 0) << run.output();
  const std::string out = run.output();
  EXPECT_NE(out.find("worker rank 2 (pid " + std::to_string(again) + ") was taken for dead by rank 0; killed it"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("generation 1 was called off: rank 2 (started again) gave no sign of life for 3 s while "
                     "generation 1 formed"),
            std::string::npos)
      << out;
  expect_started_once_more_bitwise(out, clean, healed);
}

// The process started again for RANK 2 stops before its first beat
// (ACTORPIPE_TEST_STOP_BEFORE_BEAT=1: the one started for generation 1
// stops itself first thing). Rank 0 takes it for lost as any silent peer,
// after the heartbeat timeout and a second, calls generation 1 off, and
// the launcher kills it and starts RANK 2 once more. Before, nothing was
// seen until supervision.connect_timeout_s (600 s here: the wait below
// runs out long before).
TEST(HealFromOutside, AProcessStartedAgainAndStoppedBeforeItsFirstBeatIsGivenUpAfterTheHeartbeatTimeoutBitwise) {
  const std::string clean = (test_dir() / "clean.pt").string(), healed = (test_dir() / "healed.pt").string();
  auto a = actorpipe({"train", long_healing_config("clean"), "--quiet", "--save", clean});
  ASSERT_EQ(a.code, 0) << describe(a);
  auto text = config_text(2, 4, "1f1b", 2);
  text.replace(text.find("steps: 4"), 8, "steps: 40");
  text.replace(text.find("intra_op_threads: 1"), 19, "intra_op_threads: 1\n  pace_ms: 4");
  const std::string cfg = write_config(
      "stop_before_beat", text + "supervision: {max_restarts: 2, heartbeat_timeout_s: 2, connect_timeout_s: 600}\n");
  struct stop_before_beat {
    stop_before_beat() { ::setenv("ACTORPIPE_TEST_STOP_BEFORE_BEAT", "1", 1); }
    ~stop_before_beat() { ::unsetenv("ACTORPIPE_TEST_STOP_BEFORE_BEAT"); }
  } hook;
  background_launch run("stop_before_beat", {"--nprocs", "4", cfg, "--save", healed});
  pid_t again = -1;
  ASSERT_NO_FATAL_FAILURE(kill_rank_2_for_a_restart(run, again));
  const int code = run.wait(120);
  ::kill(again, SIGKILL);  // in every path
  ASSERT_EQ(code, 0) << run.output();
  const std::string out = run.output();
  const size_t off = out.find("was called off");
  ASSERT_NE(off, std::string::npos) << out;
  std::printf("%s\n", out.substr(out.rfind('\n', off) + 1, out.find('\n', off) - out.rfind('\n', off) - 1).c_str());
  EXPECT_NE(out.find("generation 1 was called off: rank 2 (started again) gave no sign of life for 3 s while "
                     "generation 1 formed"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("worker rank 2 (pid " + std::to_string(again) +
                     ") was taken for dead by the coordinator; killed it"),
            std::string::npos)
      << out;
  expect_started_once_more_bitwise(out, clean, healed);
}

// The process started again for RANK 2 is killed at once, before its
// first beat: its launcher tells the store, rank 0's watch sees it go and
// calls the generation off, and the launcher starts RANK 2 once more.
// Before, nothing was seen until supervision.connect_timeout_s ran out.
TEST(HealFromOutside, AProcessStartedAgainThatDiesBeforeItsFirstBeatIsSeenAtOnceAndStartedOnceMoreBitwise) {
  const std::string clean = (test_dir() / "clean.pt").string(), healed = (test_dir() / "healed.pt").string();
  auto a = actorpipe({"train", long_healing_config("clean"), "--quiet", "--save", clean});
  ASSERT_EQ(a.code, 0) << describe(a);
  testing_util::forming_held hold(2500);
  background_launch run("die_at_once", {"--nprocs", "4", long_healing_config("die_at_once"), "--save", healed});
  pid_t again = -1;
  ASSERT_NO_FATAL_FAILURE(kill_rank_2_for_a_restart(run, again));
  ::kill(again, SIGKILL);
  ASSERT_EQ(run.wait(120), 0) << run.output();
  const std::string out = run.output();
  for (const char* line : {"was called off", "\nheal: generation 2 runs"})
    if (const size_t at = out.find(line); at != std::string::npos) {
      const size_t begin = out.rfind('\n', at) + 1;
      std::printf("%s\n", out.substr(begin, out.find('\n', at + 1) - begin).c_str());
    }
  EXPECT_NE(out.find("generation 1 was called off: rank 2 (started again) was killed by SIGKILL (pid " +
                     std::to_string(again) + ") while generation 1 formed"),
            std::string::npos)
      << out;
  expect_started_once_more_bitwise(out, clean, healed);
}

// Two deaths where supervision.max_restarts allows one: exit 4, and the
// message names both.
TEST(HealFromOutside, TwoKillsBeyondMaxRestartsExitFourNamingBoth) {
  const auto config = write_config("twice", [] {
    auto text = config_text(2, 4, "1f1b", 2);
    text.replace(text.find("steps: 4"), 8, "steps: 6");
    return text + "supervision: {max_restarts: 1, heartbeat_timeout_s: 2}\n"
                  "faults:\n  inject:\n"
                  "    - {kind: kill_process, stage: 1, replica: 0, step: 1, after_op: F2}\n"
                  "    - {kind: kill_process, stage: 0, replica: 1, step: 3, after_op: B1}\n";
  }());
  auto r = actorpipe({"launch", "--nprocs", "4", config, "--quiet"}, 120);
  EXPECT_EQ(r.code, 4) << describe(r);
  // A death may reach rank 0 first as a peer's failed transfer or
  // allreduce; either way the step and the process that went are named.
  EXPECT_NE(r.err.find("stopped at step 1"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("(the process of rank 1 is gone)"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("stopped at step 3"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("(the process of rank 2 is gone)"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("exceed supervision.max_restarts 1"), std::string::npos) << describe(r);
}

}  // namespace
}  // namespace actorpipe
