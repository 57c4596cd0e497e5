// run_workers with /bin/sh as the worker: the torchrun environment each
// worker sees, fail-fast on a failing or killed worker, and SIGTERM sent
// to the launcher reaching every worker. Workers write what they saw into
// files in a per-test directory; every pid a test learns is SIGKILLed
// (and, when it is our child, reaped) on the way out, whatever happened.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/dist/launch/launcher.hpp"
#include "runtime/dist/launch/launcher_spawn.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

fs::path test_dir() { return testing_util::test_dir("actorpipe_launcher_test"); }

bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }

// Pids read from the workers' files, SIGKILLed at the end of the test.
struct pid_guard {
  std::vector<pid_t> pids;
  pid_t child = -1;  // a forked launcher: killed and reaped
  ~pid_guard() {
    for (pid_t p : pids)
      if (p > 0) ::kill(p, SIGKILL);
    if (child > 0) {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
    }
  }
};

launch_options sh_workers(int n, const std::string& script, std::vector<std::string>* notices) {
  launch_options o;
  o.nprocs = n;
  o.exe = "/bin/sh";
  o.worker_args = {"-c", script};
  o.grace = 2000ms;
  if (notices) o.on_notice = [notices](const std::string& l) { notices->push_back(l); };
  return o;
}

std::map<std::string, std::string> read_env(const fs::path& file) {
  std::map<std::string, std::string> env;
  std::istringstream is(testing_util::slurp_file(file));
  for (std::string l; std::getline(is, l);)
    if (auto eq = l.find('='); eq != std::string::npos) env[l.substr(0, eq)] = l.substr(eq + 1);
  return env;
}

std::vector<pid_t> read_pids(const fs::path& dir, int n) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const std::string s = testing_util::slurp_file(dir / ("pid_" + std::to_string(r)));
    pids.push_back(s.empty() ? -1 : std::atoi(s.c_str()));
  }
  return pids;
}

// Waits (bounded) until every rank has written its pid: a failing rank
// must not stop the others before they said who they are.
std::string wait_for_pids(const fs::path& dir, int n) {
  return "i=0; while [ $(ls " + dir.string() + " | grep -c '^pid_') -lt " + std::to_string(n) +
         " ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; ";
}

TEST(Launcher, EveryWorkerSeesTorchrunsEnvironment) {
  const fs::path dir = test_dir();
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  auto o = sh_workers(3, "env > " + dir.string() + "/env_$RANK", nullptr);
  const int rc = run_workers(o);
  ::unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  ASSERT_EQ(rc, 0);
  std::string port;
  for (int r = 0; r < 3; ++r) {
    auto env = read_env(dir / ("env_" + std::to_string(r)));
    const std::string rank = std::to_string(r);
    EXPECT_EQ(env["RANK"], rank);
    EXPECT_EQ(env["LOCAL_RANK"], rank);
    EXPECT_EQ(env["ROLE_RANK"], rank);
    EXPECT_EQ(env["WORLD_SIZE"], "3");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["ROLE_WORLD_SIZE"], "3");
    EXPECT_EQ(env["GROUP_RANK"], "0");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "0");
    EXPECT_FALSE(env["TORCHELASTIC_RUN_ID"].empty());
    EXPECT_EQ(env.count("TORCHELASTIC_USE_AGENT_STORE"), 0u) << "rank " << r;
    EXPECT_EQ(env.count("PATH"), 1u) << "the inherited environment is kept";
    if (r == 0) port = env["MASTER_PORT"];
    EXPECT_EQ(env["MASTER_PORT"], port);
  }
  EXPECT_GT(std::atoi(port.c_str()), 0) << port;
}

TEST(Launcher, FirstFailingWorkersCodeStopsTheOthers) {
  const fs::path dir = test_dir();
  pid_guard guard;
  std::vector<std::string> notices;
  auto o = sh_workers(4,
                      "echo $$ > " + dir.string() + "/pid_$RANK; " + wait_for_pids(dir, 4) +
                          "if [ $RANK = 1 ]; then exit 3; fi; sleep 60",
                      &notices);
  const auto start = clock::now();
  const int rc = run_workers(o);
  const auto took = clock::now() - start;
  guard.pids = read_pids(dir, 4);
  EXPECT_EQ(rc, 3);
  EXPECT_LT(took, 8s);
  for (int r = 0; r < 4; ++r) {
    ASSERT_GT(guard.pids[r], 0) << "rank " << r << " wrote no pid";
    EXPECT_FALSE(alive(guard.pids[r])) << "rank " << r;
  }
  ASSERT_FALSE(notices.empty());
  EXPECT_EQ(notices[0], "actorpipe launch: worker rank 1 (pid " + std::to_string(guard.pids[1]) +
                            ") exited with 3; stopping the other 3 workers");
}

// The workers of a replacement: rank 0 says "heal" on
// ACTORPIPE_LAUNCHER_FD, waits for rank 1 to SIGKILL itself, asks for it
// again ("respawn 1 1") once rank 1 is gone, and exits 0 once the file
// `back` is there. Rank 1 of generation 0 does `first`, then dies; a later
// one does `again`. Each writes its pid into pid_<RANK>_<generation>.
std::string replacing_script(const std::string& d, const std::string& first, const std::string& again) {
  auto wait_file = [&](const std::string& f) {
    return "i=0; while [ ! -e " + d + "/" + f + " ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; ";
  };
  // Rank 0 asks for rank 1 again only once the launcher has reaped it (a
  // zombie still answers kill -0): asked while rank 1 still ran, between
  // `dead` and its kill, the launcher would kill it as taken for dead.
  const std::string gone = "p=$(cat " + d + "/pid_1_0); i=0; while kill -0 $p 2>/dev/null && [ $i -lt 200 ]; do "
                           "sleep 0.05; i=$((i+1)); done; ";
  return "echo $$ > " + d + "/pid_${RANK}_${ACTORPIPE_GENERATION:-0}; "
         "if [ $RANK = 0 ]; then eval \"echo heal >&$ACTORPIPE_LAUNCHER_FD\"; sleep 0.5; touch " + d + "/heal_on; " +
         wait_file("dead") + gone + "eval \"echo respawn 1 1 >&$ACTORPIPE_LAUNCHER_FD\"; " + wait_file("back") +
         "exit 0; "
         "elif [ -z \"$ACTORPIPE_GENERATION\" ]; then " + first + wait_file("heal_on") + "touch " + d +
         "/dead; kill -9 $$; "
         "else " + again + "; fi";
}

// Rank 0 says "heal" on ACTORPIPE_LAUNCHER_FD; rank 1 is SIGKILLed; rank 0
// asks for it again ("respawn 1 1"); the new rank 1 sees RANK 1 and
// ACTORPIPE_GENERATION 1, and the run ends 0. Only rank 0 gets the fd.
TEST(Launcher, RankZeroReplacesADeadWorkerWithTheSameRankAndANewGeneration) {
  const fs::path dir = test_dir();
  const std::string d = dir.string();
  pid_guard guard;
  std::vector<std::string> notices;
  auto o = sh_workers(2,
                      replacing_script(d, "[ -z \"$ACTORPIPE_LAUNCHER_FD\" ] || exit 9; ",
                                       "echo \"$RANK $ACTORPIPE_GENERATION\" > " + d + "/back; exit 0"),
                      &notices);
  const int rc = run_workers(o);
  for (const char* f : {"pid_0_0", "pid_1_0", "pid_1_1"}) {
    const std::string p = testing_util::slurp_file(dir / f);
    if (!p.empty()) guard.pids.push_back(std::atoi(p.c_str()));
  }
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(testing_util::slurp_file(dir / "back"), "1 1\n");
  std::string all;
  for (const auto& n : notices) all += n + "\n";
  EXPECT_NE(all.find("was killed by SIGKILL; rank 0's supervisor replaces it"), std::string::npos) << all;
  EXPECT_NE(all.find("started worker rank 1 again"), std::string::npos) << all;
}

// With in_process set, every worker is forked from the launcher (one
// thread here) rather than spawned: the first ones (which run the script
// from there, as the launcher's children) and the replacement, which runs
// in_process with the worker's arguments and environment (RANK 1,
// ACTORPIPE_GENERATION 1, no control fd), in its own process group, as the
// launcher's child, with none of the launcher's descriptors; its result is
// its exit code.
TEST(Launcher, EveryWorkerIsForkedFromTheLauncherWhenItCanRunInProcess) {
  const fs::path dir = test_dir();
  const std::string d = dir.string();
  pid_guard guard;
  std::vector<std::string> notices;
  // A spawned replacement (which this test must not see) would exit 9.
  auto o = sh_workers(2, replacing_script(d, "", "exit 9"), &notices);
  const pid_t launcher = ::getpid();
  o.in_process = [d, launcher](int argc, char** argv) {
    if (!std::getenv("ACTORPIPE_GENERATION")) {  // a first worker: the script, forked
      std::ofstream(d + "/forked_" + std::getenv("RANK")) << (::getppid() == launcher) << "\n";
      ::execv("/bin/sh", argv);
      return 127;
    }
    int fds = 0;  // open descriptors above stderr, the listing's own aside
    for (const auto& e : fs::directory_iterator("/proc/self/fd")) fds += std::atoi(e.path().filename().c_str()) > 3;
    std::ostringstream os;
    os << "argc=" << argc << "\nargv1=" << argv[1] << "\nRANK=" << std::getenv("RANK")
       << "\nACTORPIPE_GENERATION=" << std::getenv("ACTORPIPE_GENERATION")
       << "\nfd=" << (std::getenv("ACTORPIPE_LAUNCHER_FD") ? "set" : "unset") << "\nparent=" << (::getppid() == launcher)
       << "\ngroup=" << (::getpgrp() == ::getpid()) << "\nfds=" << fds << "\npid=" << ::getpid() << "\n";
    std::FILE* f = std::fopen((d + "/back.tmp").c_str(), "w");
    std::fputs(os.str().c_str(), f);
    std::fclose(f);
    fs::rename(d + "/back.tmp", d + "/back");
    return 0;
  };
  const int rc = run_workers(o);
  for (const char* f : {"pid_0_0", "pid_1_0"}) {
    const std::string p = testing_util::slurp_file(dir / f);
    if (!p.empty()) guard.pids.push_back(std::atoi(p.c_str()));
  }
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(testing_util::slurp_file(dir / "forked_0"), "1\n");
  EXPECT_EQ(testing_util::slurp_file(dir / "forked_1"), "1\n");
  auto seen = read_env(dir / "back");
  EXPECT_EQ(seen["argc"], "3");
  EXPECT_EQ(seen["argv1"], "-c");
  EXPECT_EQ(seen["RANK"], "1");
  EXPECT_EQ(seen["ACTORPIPE_GENERATION"], "1");
  EXPECT_EQ(seen["fd"], "unset");
  EXPECT_EQ(seen["parent"], "1");
  EXPECT_EQ(seen["group"], "1");
  EXPECT_EQ(seen["fds"], "0");
  std::string all;
  for (const auto& n : notices) all += n + "\n";
  EXPECT_NE(all.find("started worker rank 1 again (pid " + seen["pid"] + ", generation 1, forked from the launcher)"),
            std::string::npos)
      << all;
}

// worker_env's list ("NAME=value") as a map.
std::map<std::string, std::string> env_of(const std::vector<std::string>& list) {
  std::map<std::string, std::string> env;
  for (const auto& kv : list)
    if (auto eq = kv.find('='); eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  return env;
}

// --coordinator process on 3 workers: internal rank 0 is the coordinator
// (RANK 0, ACTORPIPE_COORDINATOR=self), internal rank k >= 1 is worker
// RANK k - 1 (LOCAL_RANK (k - 1) % 3, ACTORPIPE_COORDINATOR=apart);
// WORLD_SIZE stays 3 in all four.
TEST(Launcher, WithACoordinatorApartRankZeroIsTheCoordinatorAndEachWorkerKeepsItsRank) {
  launch_options o;
  o.nprocs = 3;
  o.apart = true;
  const auto coordinator = env_of(launcher_detail::worker_env(o, 0, 29400, "run", 7, 0));
  EXPECT_EQ(coordinator.at("RANK"), "0");
  EXPECT_EQ(coordinator.at("ROLE_RANK"), "0");
  EXPECT_EQ(coordinator.at("LOCAL_RANK"), "0");
  EXPECT_EQ(coordinator.at("WORLD_SIZE"), "3");
  EXPECT_EQ(coordinator.at("ROLE_WORLD_SIZE"), "3");
  EXPECT_EQ(coordinator.at("LOCAL_WORLD_SIZE"), "3");
  EXPECT_EQ(coordinator.at("ACTORPIPE_COORDINATOR"), "self");
  EXPECT_EQ(coordinator.at("ACTORPIPE_LAUNCHER_FD"), "7");
  EXPECT_EQ(coordinator.at("MASTER_PORT"), "29400");
  EXPECT_EQ(coordinator.at("GROUP_RANK"), "0");
  for (int k = 1; k <= 3; ++k) {
    const auto env = env_of(launcher_detail::worker_env(o, k, 29400, "run", -1, 0));
    EXPECT_EQ(env.at("RANK"), std::to_string(k - 1)) << k;
    EXPECT_EQ(env.at("ROLE_RANK"), std::to_string(k - 1)) << k;
    EXPECT_EQ(env.at("LOCAL_RANK"), std::to_string((k - 1) % 3)) << k;
    EXPECT_EQ(env.at("WORLD_SIZE"), "3") << k;
    EXPECT_EQ(env.at("ROLE_WORLD_SIZE"), "3") << k;
    EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "3") << k;
    EXPECT_EQ(env.at("ACTORPIPE_COORDINATOR"), "apart") << k;
    EXPECT_EQ(env.at("GROUP_RANK"), "0") << k;  // one node: every rank is node 0's
    EXPECT_EQ(env.count("ACTORPIPE_LAUNCHER_FD"), 0u) << k;
  }
  // A replacement (generation 2) of worker RANK 2 keeps its RANK.
  const auto again = env_of(launcher_detail::worker_env(o, 3, 29400, "run", -1, 2));
  EXPECT_EQ(again.at("RANK"), "2");
  EXPECT_EQ(again.at("ACTORPIPE_COORDINATOR"), "apart");
  EXPECT_EQ(again.at("ACTORPIPE_GENERATION"), "2");
  EXPECT_EQ(launcher_detail::node_of(o, 3), 0);
}

TEST(Launcher, WithACoordinatorApartOnTwoNodesEachWorkerIsOnItsRanksNode) {
  // 2 nodes of 2 workers: the coordinator is rank 0 on node 0; worker RANK
  // r is rank r + 1 on node r / 2.
  launch_options o;
  o.nprocs = 2;
  o.nnodes = 2;
  o.apart = true;
  EXPECT_EQ(launcher_detail::node_of(o, 0), 0);
  EXPECT_EQ(launcher_detail::node_of(o, 1), 0);
  EXPECT_EQ(launcher_detail::node_of(o, 2), 0);
  EXPECT_EQ(launcher_detail::node_of(o, 3), 1);
  EXPECT_EQ(launcher_detail::node_of(o, 4), 1);
  o.node_rank = 1;
  for (int k = 3; k <= 4; ++k) {
    const auto env = env_of(launcher_detail::worker_env(o, k, 29400, "run", -1, 0));
    EXPECT_EQ(env.at("RANK"), std::to_string(k - 1)) << k;
    EXPECT_EQ(env.at("LOCAL_RANK"), std::to_string((k - 1) % 2)) << k;
    EXPECT_EQ(env.at("WORLD_SIZE"), "4") << k;
    EXPECT_EQ(env.at("GROUP_RANK"), "1") << k;
    EXPECT_EQ(env.at("ACTORPIPE_COORDINATOR"), "apart") << k;
  }
  // Node 0 starting node 1's RANK 3 again: its local slot, node 0's group.
  o.node_rank = 0;
  const auto again = env_of(launcher_detail::worker_env(o, 4, 29400, "run", -1, 1));
  EXPECT_EQ(again.at("RANK"), "3");
  EXPECT_EQ(again.at("LOCAL_RANK"), "1");
  EXPECT_EQ(again.at("GROUP_RANK"), "0");
}

TEST(Launcher, WithoutACoordinatorApartNoWorkerSeesTheVariable) {
  // Set in the launcher's own environment (a launcher started by a worker
  // apart): never passed on when this run has no coordinator apart.
  ::setenv("ACTORPIPE_COORDINATOR", "apart", 1);
  launch_options o;
  o.nprocs = 2;
  const auto rank0 = env_of(launcher_detail::worker_env(o, 0, 29400, "run", -1, 0));
  const auto rank1 = env_of(launcher_detail::worker_env(o, 1, 29400, "run", -1, 0));
  o.apart = true;
  const auto coordinator = env_of(launcher_detail::worker_env(o, 0, 29400, "run", -1, 0));
  ::unsetenv("ACTORPIPE_COORDINATOR");
  EXPECT_EQ(rank0.count("ACTORPIPE_COORDINATOR"), 0u);
  EXPECT_EQ(rank1.count("ACTORPIPE_COORDINATOR"), 0u);
  EXPECT_EQ(rank0.at("RANK"), "0");
  EXPECT_EQ(rank1.at("RANK"), "1");
  EXPECT_EQ(rank1.at("WORLD_SIZE"), "2");
  EXPECT_EQ(coordinator.at("ACTORPIPE_COORDINATOR"), "self");  // ours, not the inherited one
}

// run_workers with a coordinator apart starts nprocs + 1 processes: the
// coordinator and the 2 workers, each named by ACTORPIPE_COORDINATOR and
// RANK; only the coordinator gets the launcher's line.
TEST(Launcher, WithACoordinatorApartTheLauncherStartsOneMoreProcess) {
  const fs::path dir = test_dir();
  const std::string d = dir.string();
  auto o = sh_workers(2,
                      "env > " + d + "/env_${ACTORPIPE_COORDINATOR}_$RANK; [ -z \"$ACTORPIPE_LAUNCHER_FD\" ] || touch " +
                          d + "/fd_${ACTORPIPE_COORDINATOR}_$RANK",
                      nullptr);
  o.apart = true;
  ASSERT_EQ(run_workers(o), 0);
  auto coordinator = read_env(dir / "env_self_0");
  EXPECT_EQ(coordinator["RANK"], "0");
  EXPECT_EQ(coordinator["WORLD_SIZE"], "2");
  for (int r : {0, 1}) {
    auto env = read_env(dir / ("env_apart_" + std::to_string(r)));
    EXPECT_EQ(env["RANK"], std::to_string(r));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(r));
    EXPECT_EQ(env["WORLD_SIZE"], "2");
    EXPECT_EQ(env["MASTER_PORT"], coordinator["MASTER_PORT"]);
  }
  EXPECT_TRUE(fs::exists(dir / "fd_self_0"));
  EXPECT_FALSE(fs::exists(dir / "fd_apart_0"));
  EXPECT_FALSE(fs::exists(dir / "fd_apart_1"));
  EXPECT_FALSE(fs::exists(dir / "env_apart_2")) << "only nprocs workers";
}

// One node of two (torchrun's --nnodes 2 --node-rank 1 --nproc-per-node
// 2): its workers are ranks 2 and 3 of 4, local ranks 0 and 1, group 1,
// and only its first worker gets the launcher's line.
TEST(Launcher, NodeOneOfTwoRunsRanksTwoAndThreeOfFour) {
  const fs::path dir = test_dir();
  auto o = sh_workers(2,
                      "env > " + dir.string() + "/env_$RANK; [ -z \"$ACTORPIPE_LAUNCHER_FD\" ] || touch " +
                          dir.string() + "/fd_$RANK",
                      nullptr);
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_port = 29555;  // only written into the environment: nothing listens
  ASSERT_EQ(run_workers(o), 0);
  for (int r : {2, 3}) {
    auto env = read_env(dir / ("env_" + std::to_string(r)));
    EXPECT_EQ(env["RANK"], std::to_string(r));
    EXPECT_EQ(env["ROLE_RANK"], std::to_string(r));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(r - 2));
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["ROLE_WORLD_SIZE"], "4");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["GROUP_RANK"], "1");
    EXPECT_EQ(env["MASTER_PORT"], "29555");
  }
  EXPECT_TRUE(fs::exists(dir / "fd_2"));
  EXPECT_FALSE(fs::exists(dir / "fd_3"));
  EXPECT_FALSE(fs::exists(dir / "env_0")) << "node 1 started rank 0";
  o.master_port = 0;
  EXPECT_THROW(run_workers(o), std::invalid_argument) << "with two nodes each must name the port";
}

// Node 0 of two, one worker each: rank 0 says "heal", then asks for rank 1
// (of node 1, cut off) with "respawn 1 1". Node 0 starts it here: RANK 1 of
// 2, LOCAL_RANK 0, GROUP_RANK 0, generation 1.
TEST(Launcher, NodeZeroStartsARankOfAnotherNodeWhenRankZeroAsks) {
  const fs::path dir = test_dir();
  const std::string d = dir.string();
  pid_guard guard;
  std::vector<std::string> notices;
  auto o = sh_workers(1,
                      "if [ -z \"$ACTORPIPE_GENERATION\" ]; then echo $$ > " + d +
                          "/pid_0; eval \"echo heal >&$ACTORPIPE_LAUNCHER_FD\"; "
                          "eval \"echo respawn 1 1 >&$ACTORPIPE_LAUNCHER_FD\"; i=0; while [ ! -e " + d +
                          "/back ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; exit 0; "
                          "else env > " + d + "/back.tmp; mv " + d + "/back.tmp " + d + "/back; fi",
                      &notices);
  o.nnodes = 2;
  o.master_port = 29555;
  const int rc = run_workers(o);
  guard.pids = read_pids(dir, 1);
  EXPECT_EQ(rc, 0);
  auto env = read_env(dir / "back");
  EXPECT_EQ(env["RANK"], "1");
  EXPECT_EQ(env["WORLD_SIZE"], "2");
  EXPECT_EQ(env["LOCAL_RANK"], "0");
  EXPECT_EQ(env["GROUP_RANK"], "0");
  EXPECT_EQ(env["ACTORPIPE_GENERATION"], "1");
  std::string all;
  for (const auto& n : notices) all += n + "\n";
  EXPECT_NE(all.find("started worker rank 1 again on this node, in place of node 1's (pid "), std::string::npos)
      << all;
}

// On a node other than 0, after "heal", a dead worker neither stops the
// others nor waits for a replacement here (node 0 starts it): the others
// run to their end, and the node's exit code is the dead worker's.
TEST(Launcher, OnAnotherNodeADeadWorkerIsLeftToNodeZero) {
  const fs::path dir = test_dir();
  const std::string d = dir.string();
  pid_guard guard;
  std::vector<std::string> notices;
  auto o = sh_workers(2,
                      "echo $$ > " + d + "/pid_$LOCAL_RANK; " + wait_for_pids(dir, 2) +
                          "if [ $LOCAL_RANK = 0 ]; then eval \"echo heal >&$ACTORPIPE_LAUNCHER_FD\"; sleep 0.3; "
                          "kill -9 $$; fi; sleep 1; touch " + d + "/survived",
                      &notices);
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_port = 29555;
  o.replace_wait = 300ms;
  const int rc = run_workers(o);
  guard.pids = read_pids(dir, 2);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(fs::exists(dir / "survived")) << "rank 3 was stopped";
  std::string all;
  for (const auto& n : notices) all += n + "\n";
  EXPECT_NE(all.find("worker rank 2 (pid " + std::to_string(guard.pids[0]) +
                     ") was killed by SIGKILL; rank 0's supervisor starts it again on node 0"),
            std::string::npos)
      << all;
  EXPECT_EQ(all.find("stopping"), std::string::npos) << all;
}

// After "heal", a dead worker that rank 0 does not replace in time ends
// the run as any failure does.
TEST(Launcher, ADeadWorkerNotReplacedInTimeEndsTheRun) {
  const fs::path dir = test_dir();
  pid_guard guard;
  std::vector<std::string> notices;
  auto o = sh_workers(2,
                      "echo $$ > " + dir.string() + "/pid_$RANK; " + wait_for_pids(dir, 2) +
                          "if [ $RANK = 0 ]; then eval \"echo heal >&$ACTORPIPE_LAUNCHER_FD\"; sleep 60; fi; "
                          "sleep 0.5; kill -9 $$",
                      &notices);
  o.replace_wait = 300ms;
  const int rc = run_workers(o);
  guard.pids = read_pids(dir, 2);
  EXPECT_EQ(rc, 1);
  std::string all;
  for (const auto& n : notices) all += n + "\n";
  EXPECT_NE(all.find("worker rank 1 was not replaced within 300 ms; stopping the others"), std::string::npos) << all;
  EXPECT_FALSE(alive(guard.pids[0]));
}

TEST(Launcher, AWorkerKilledBySignalCountsAsOneAndIsNamed) {
  const fs::path dir = test_dir();
  pid_guard guard;
  std::vector<std::string> notices;
  auto o = sh_workers(3,
                      "echo $$ > " + dir.string() + "/pid_$RANK; " + wait_for_pids(dir, 3) +
                          "if [ $RANK = 2 ]; then kill -9 $$; fi; sleep 60",
                      &notices);
  const int rc = run_workers(o);
  guard.pids = read_pids(dir, 3);
  EXPECT_EQ(rc, 1);
  for (pid_t p : guard.pids) EXPECT_FALSE(p > 0 && alive(p));
  ASSERT_FALSE(notices.empty());
  EXPECT_EQ(notices[0], "actorpipe launch: worker rank 2 (pid " + std::to_string(guard.pids[2]) +
                            ") was killed by SIGKILL; stopping the other 2 workers");
}

TEST(Launcher, WorkerIgnoringSigtermIsKilledAfterGrace) {
  const fs::path dir = test_dir();
  pid_guard guard;
  std::vector<std::string> notices;
  auto o = sh_workers(2,
                      "trap '' TERM; echo $$ > " + dir.string() + "/pid_$RANK; " + wait_for_pids(dir, 2) +
                          "if [ $RANK = 0 ]; then exit 5; fi; while :; do sleep 0.1; done",
                      &notices);
  o.grace = 300ms;
  EXPECT_EQ(run_workers(o), 5);
  guard.pids = read_pids(dir, 2);
  for (pid_t p : guard.pids) EXPECT_FALSE(p > 0 && alive(p));
  ASSERT_EQ(notices.size(), 2u);
  EXPECT_NE(notices[1].find("sending SIGKILL"), std::string::npos) << notices[1];
}

TEST(Launcher, AllZeroIsZeroAndAMissingExeThrows) {
  EXPECT_EQ(run_workers(sh_workers(2, "exit 0", nullptr)), 0);
  launch_options o;
  o.nprocs = 2;
  o.exe = "/nonexistent/actorpipe";
  EXPECT_THROW(run_workers(o), std::runtime_error);
}

TEST(Launcher, SigtermToTheLauncherReachesEveryWorker) {
  const fs::path dir = test_dir();
  const std::string d = dir.string();
  pid_guard guard;
  auto o = sh_workers(3,
                      "trap 'echo got > " + d + "/term_$RANK; exit 0' TERM; echo $$ > " + d +
                          "/pid_$RANK; sleep 60 & wait",
                      nullptr);
  guard.child = ::fork();
  ASSERT_GE(guard.child, 0);
  if (guard.child == 0) {  // the launcher; never back into GoogleTest
    int rc = 99;
    try {
      rc = run_workers(o);
    } catch (...) {
    }
    ::_exit(rc);
  }
  // The trap is set before the pid is written.
  const auto deadline = clock::now() + 10s;
  for (auto p = read_pids(dir, 3); clock::now() < deadline; p = read_pids(dir, 3)) {
    if (p[0] > 0 && p[1] > 0 && p[2] > 0) break;
    std::this_thread::sleep_for(20ms);
  }
  guard.pids = read_pids(dir, 3);
  for (pid_t p : guard.pids) ASSERT_GT(p, 0) << "a worker did not start";
  ASSERT_EQ(::kill(guard.child, SIGTERM), 0);
  int st = 0;
  pid_t r = 0;
  for (const auto until = clock::now() + 10s; r == 0 && clock::now() < until;) {
    r = ::waitpid(guard.child, &st, WNOHANG);
    if (r == 0) std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(r, guard.child) << "the launcher did not exit after SIGTERM";
  guard.child = -1;
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 143);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(testing_util::slurp_file(dir / ("term_" + std::to_string(k))), "got\n") << "rank " << k;
    EXPECT_FALSE(alive(guard.pids[k])) << "rank " << k;
  }
}

}  // namespace
}  // namespace actorpipe
