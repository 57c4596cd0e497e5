// apps/actorpipe as two "hosts": rank 0 and rank 1 each in a network
// namespace of its own, joined by a veth pair, each with its own working
// directory and TMPDIR. Nothing may go through loopback or a shared /tmp:
// the weights rank 0 saves must equal a one-process run's byte for byte.
// Needs CAP_NET_ADMIN (root); skipped with the reason where namespaces
// cannot be made. The commands match docs/TWO_HOSTS.md.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/cpu_only.hpp"
#include "tests/apps/child_process.hpp"
#include "runtime/dist/transport/net_address.hpp"
#include "tests/test_util.hpp"
#include "tests/apps/two_namespaces.hpp"
#include "tests/runtime/dist/coord/etcd_cluster.hpp"

extern char** environ;

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using testing_util::ip;
using testing_util::ip_binary;
using testing_util::two_namespaces;
using testing_util::bridged_namespaces;
using clock_type = std::chrono::steady_clock;

testing_util::child_limits limits(double timeout_s) {
  testing_util::child_limits l;
  l.timeout_s = timeout_s;
  return l;
}

/// One rank: `ip netns exec NS ACTORPIPE_BIN args...` with `env` (torchrun's
/// variables from the parent's environment dropped first), run in `dir`
/// with TMPDIR=dir/tmp, stdout and stderr to dir/out.txt and dir/err.txt.
struct rank_process {
  pid_t pid = -1;
  int code = -1;  ///< exit code, 128 + signal, or -1 while running
  fs::path dir;
  clock_type::time_point started;
  double wall_s = 0;

  std::string out() const { return testing_util::slurp_file(dir / "out.txt"); }
  std::string err() const { return testing_util::slurp_file(dir / "err.txt"); }
  std::string report(const std::string& name) const {
    return name + " exit " + std::to_string(code) + " after " + std::to_string(wall_s) + " s\n--- stdout\n" + out() +
           "--- stderr\n" + err();
  }
};

/// Kills (SIGKILL) and reaps every rank still running when it goes away.
class rank_group {
public:
  ~rank_group() {
    for (auto& r : ranks_)
      if (r.pid > 0 && r.code < 0) {
        ::kill(r.pid, SIGKILL);
        int status = 0;
        ::waitpid(r.pid, &status, 0);
      }
  }

  rank_process& start(const std::string& ns, const fs::path& dir, const std::map<std::string, std::string>& env,
                      const std::vector<std::string>& args) {
    fs::create_directories(dir / "tmp");
    static const std::set<std::string> dropped{"RANK",        "WORLD_SIZE",  "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                               "MASTER_ADDR", "MASTER_PORT", "TMPDIR",     "GROUP_RANK",
                                               "ROLE_RANK",   "ACTORPIPE_LAUNCHER_PID"};
    std::vector<std::string> strings;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      if (!dropped.count(kv.substr(0, kv.find('=')))) strings.push_back(kv);
    }
    for (const auto& [k, v] : env) strings.push_back(k + "=" + v);
    strings.push_back("TMPDIR=" + (dir / "tmp").string());
    std::vector<char*> envp;
    for (auto& s : strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> all = {"ip", "netns", "exec", ns, ACTORPIPE_BIN};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : all) argv.push_back(s.data());
    argv.push_back(nullptr);
    const std::string ip_path = ip_binary(), dir_s = dir.string(), out_s = (dir / "out.txt").string(),
                      err_s = (dir / "err.txt").string();
    const pid_t parent = getpid();

    rank_process r;
    r.dir = dir;
    r.started = clock_type::now();
    r.pid = fork();
    if (r.pid == 0) {  // async-signal-safe calls only until exec
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // ip netns exec execs the rank: it stays this process
      if (getppid() != parent) _exit(126);
      const int in = open("/dev/null", O_RDONLY);
      const int out = open(out_s.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = open(err_s.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (in < 0 || out < 0 || err < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(127);
      if (chdir(dir_s.c_str()) != 0) _exit(127);
      execve(ip_path.c_str(), argv.data(), envp.data());
      _exit(127);
    }
    EXPECT_GT(r.pid, 0) << "fork failed";
    ranks_.push_back(r);
    return ranks_.back();
  }

  /// Waits for every rank, at most `timeout_s` from now; past it, every rank
  /// still running is SIGKILLed. True if all exited by themselves.
  bool wait_all(double timeout_s) {
    const auto begin = clock_type::now();
    for (;;) {
      bool running = false;
      for (auto& r : ranks_) {
        if (r.pid <= 0 || r.code >= 0) continue;
        int status = 0;
        const pid_t done = ::waitpid(r.pid, &status, WNOHANG);
        if (done == r.pid) {
          r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          r.wall_s = std::chrono::duration<double>(clock_type::now() - r.started).count();
        } else {
          running = true;
        }
      }
      if (!running) return true;
      if (std::chrono::duration<double>(clock_type::now() - begin).count() > timeout_s) {
        for (auto& r : ranks_)
          if (r.pid > 0 && r.code < 0) {
            ::kill(r.pid, SIGKILL);
            int status = 0;
            ::waitpid(r.pid, &status, 0);
            r.code = 128 + SIGKILL;
            r.wall_s = std::chrono::duration<double>(clock_type::now() - r.started).count();
          }
        return false;
      }
      usleep(10000);
    }
  }

  std::vector<rank_process>& ranks() { return ranks_; }

private:
  std::vector<rank_process> ranks_;
};


constexpr int kSteps = 5;

/// Two pipeline stages, a dropout layer (so the stages' random streams must
/// match a one-process run), 1F1B over 4 microbatches, synthetic data.
std::string pp2_config(const std::string& extra = "") {
  return R"(model:
  layers:
    - {type: linear, in: 16, out: 32}
    - {type: relu}
    - {type: dropout, p: 0.1}
    - {type: linear, in: 32, out: 32}
    - {type: relu}
    - {type: linear, in: 32, out: 4}
data:
  kind: synthetic
  synthetic: {samples: 512, features: 16, classes: 4}
  test_fraction: 0.2
train:
  steps: 5
  batch_size: 32
  optimizer: {type: adam, lr: 0.01}
  seed: 42
pipeline:
  stages: 2
  schedule: 1f1b
  microbatches: 4
)" + extra;
}

#define SKIP_OR_FAIL_ON_SETUP(ns)                                                         \
  if (!(ns).why.empty()) GTEST_SKIP() << "cannot create a network namespace: " << (ns).why; \
  ASSERT_TRUE((ns).ok) << "namespace setup failed: " << (ns).setup_error

/// `config_text` trained in one process in `dir` (with `args` after the
/// config): the bytes its --save wrote; "" with a test failure when it
/// failed. `wall_s`, when given, gets its wall time.
std::string one_process_save(const fs::path& dir, const std::string& config_text,
                             const std::vector<std::string>& args = {}, double* wall_s = nullptr) {
  const std::string cfg = testing_util::write(dir / "pp2.yaml", config_text);
  fs::create_directories(dir / "tmp");
  std::vector<std::string> all = {"train", cfg, "--quiet", "--save", (dir / "one.pt").string()};
  all.insert(all.end(), args.begin(), args.end());
  const auto one = testing_util::run_child(ACTORPIPE_BIN, all, limits(120));
  if (wall_s) *wall_s = one.wall_s;
  if (one.code != 0) {
    ADD_FAILURE() << "the one-process run exited " << one.code << "\n" << one.out << one.err;
    return "";
  }
  std::string bytes = testing_util::slurp_file(dir / "one.pt");
  EXPECT_FALSE(bytes.empty()) << "the one-process run saved nothing";
  return bytes;
}

/// Host A's and host B's directories under `dir`, each with its own copy
/// of `config_text` (the same bytes: rank 0 checks the digest).
struct host_dirs {
  fs::path a, b;
  std::string cfg_a, cfg_b;
};
host_dirs write_host_configs(const fs::path& dir, const std::string& config_text) {
  host_dirs h{dir / "hostA", dir / "hostB", "", ""};
  h.cfg_a = testing_util::write(h.a / "pp2.yaml", config_text);
  h.cfg_b = testing_util::write(h.b / "pp2.yaml", config_text);
  return h;
}

/// torchrun's variables for `rank` of two, one process per host, with rank
/// 0's store at `master`:`port`.
std::map<std::string, std::string> rank_env(int rank, const std::string& master, int port) {
  return {{"RANK", std::to_string(rank)}, {"WORLD_SIZE", "2"},   {"LOCAL_RANK", "0"},
          {"LOCAL_WORLD_SIZE", "1"},      {"MASTER_ADDR", master}, {"MASTER_PORT", std::to_string(port)}};
}

TEST(TwoHosts, TwoRanksInTwoNamespacesSaveWhatOneProcessSaves) {
  const fs::path dir = testing_util::test_dir("actorpipe_two_hosts");
  two_namespaces ns("ap", 'v', "10.231");
  SKIP_OR_FAIL_ON_SETUP(ns);
  // Free on the host a moment ago; the namespaces are fresh and have ports
  // of their own, so it is free there.
  const int port = static_cast<int>(free_port("0.0.0.0"));
  ASSERT_GT(port, 0);

  // Every rank has its own directory and its own copy of the config (the
  // same bytes: rank 0 checks the digest).
  const auto [dir_a, dir_b, cfg_a, cfg_b] = write_host_configs(dir, pp2_config());
  const fs::path dir_one = dir / "one";
  const std::string master = ns.net + ".1";
  const auto env_a = rank_env(0, master, port), env_b = rank_env(1, master, port);
  const std::vector<std::string> args{"--steps", std::to_string(kSteps), "--quiet"};

  rank_group group;
  auto args_a = args;
  args_a.insert(args_a.begin(), {"train", cfg_a});
  args_a.insert(args_a.end(), {"--save", (dir_a / "w.pt").string()});
  auto args_b = args;
  args_b.insert(args_b.begin(), {"train", cfg_b});
  group.start(ns.a, dir_a, env_a, args_a);
  group.start(ns.b, dir_b, env_b, args_b);
  const bool in_time = group.wait_all(120);
  const auto& r0 = group.ranks()[0];
  const auto& r1 = group.ranks()[1];
  ASSERT_TRUE(in_time) << "killed after 120 s\n" << r0.report("rank 0") << r1.report("rank 1");
  ASSERT_EQ(r0.code, 0) << r0.report("rank 0") << r1.report("rank 1");
  ASSERT_EQ(r1.code, 0) << r0.report("rank 0") << r1.report("rank 1");
  EXPECT_EQ(r1.out(), "") << "ranks other than 0 print nothing";
  ASSERT_TRUE(fs::exists(dir_a / "w.pt"));
  EXPECT_FALSE(fs::exists(dir_b / "w.pt"));

  double one_wall_s = 0;
  const std::string one_process = one_process_save(dir_one, pp2_config(), {"--steps", std::to_string(kSteps)}, &one_wall_s);
  const std::string two_ranks = testing_util::slurp_file(dir_a / "w.pt");
  ASSERT_FALSE(one_process.empty());
  EXPECT_TRUE(two_ranks == one_process) << "rank 0's file (" << two_ranks.size()
                                        << " bytes) differs from the one-process run's (" << one_process.size()
                                        << " bytes)";
  std::printf("[ two hosts ] rank 0 %.2f s, rank 1 %.2f s, one process %.2f s\n", r0.wall_s, r1.wall_s,
              one_wall_s);
}

// -- partitions ------------------------------------------------------------------

/// Waits until `path` holds `text`, at most `timeout_s`; false if it never did.
bool wait_for_text(const fs::path& path, const std::string& text, double timeout_s) {
  const auto begin = clock_type::now();
  while (std::chrono::duration<double>(clock_type::now() - begin).count() < timeout_s) {
    if (testing_util::slurp_file(path).find(text) != std::string::npos) return true;
    usleep(20000);
  }
  return false;
}

std::string with_steps(std::string text, int steps) {
  text.replace(text.find("steps: 5"), 8, "steps: " + std::to_string(steps));
  return text;
}

// The veth link between the two hosts goes down for 1.5 s, well inside the
// 6 s heartbeat timeout: TCP carries both the actors' connection and Gloo's
// over the gap, nothing restarts, and rank 0 saves the bytes of one process.
TEST(TwoHosts, ALinkDownShorterThanTheHeartbeatTimeoutLosesNothing) {
  const fs::path dir = testing_util::test_dir("actorpipe_two_hosts");
  two_namespaces ns("ap", 'v', "10.231");
  SKIP_OR_FAIL_ON_SETUP(ns);
  const int port = static_cast<int>(free_port("0.0.0.0"));
  ASSERT_GT(port, 0);
  const int steps = 100;
  rank_group group;
  const std::string extra = "  pace_ms: 4\nsupervision: {heartbeat_timeout_s: 6}\n";
  const auto [dir_a, dir_b, cfg_a, cfg_b] = write_host_configs(dir, with_steps(pp2_config(extra), steps));
  const fs::path dir_one = dir / "one";
  group.start(ns.a, dir_a, rank_env(0, ns.net + ".1", port), {"train", cfg_a, "--save", (dir_a / "w.pt").string()});
  group.start(ns.b, dir_b, rank_env(1, ns.net + ".1", port), {"train", cfg_b, "--quiet"});

  ASSERT_TRUE(wait_for_text(dir_a / "out.txt", "step    10/", 60)) << group.ranks()[0].report("rank 0");
  ASSERT_EQ(ip({"-n", ns.a, "link", "set", ns.va, "down"}), "");
  const auto cut = clock_type::now();
  usleep(1500000);
  ASSERT_EQ(ip({"-n", ns.a, "link", "set", ns.va, "up"}), "");
  // The run was still going when the link came back.
  const std::string at_restore = testing_util::slurp_file(dir_a / "out.txt");
  EXPECT_EQ(at_restore.find("step   100/"), std::string::npos) << "the run ended before the link came back";

  const bool in_time = group.wait_all(120);
  const auto& r0 = group.ranks()[0];
  const auto& r1 = group.ranks()[1];
  ASSERT_TRUE(in_time) << r0.report("rank 0") << r1.report("rank 1");
  ASSERT_EQ(r0.code, 0) << r0.report("rank 0") << r1.report("rank 1");
  ASSERT_EQ(r1.code, 0) << r0.report("rank 0") << r1.report("rank 1");
  EXPECT_EQ(r0.out().find("heal:"), std::string::npos) << r0.report("rank 0");
  EXPECT_EQ(r0.err().find("restart"), std::string::npos) << r0.report("rank 0");

  const std::string one_process = one_process_save(dir_one, with_steps(pp2_config(extra), steps));
  ASSERT_FALSE(one_process.empty());
  EXPECT_TRUE(testing_util::slurp_file(dir_a / "w.pt") == one_process)
      << "rank 0's file differs from the one-process run's";
  std::printf("[ two hosts ] link down 1.5 s at %.2f s into rank 0's run; both ended in %.2f s and %.2f s, bitwise\n",
              std::chrono::duration<double>(cut - r0.started).count(), r0.wall_s, r1.wall_s);
}

// The link goes down for good. Past the 2 s heartbeat timeout rank 0 takes
// rank 1 for dead and, with no launcher to start it again, ends the run
// naming it; rank 1, cut off from rank 0, stops by itself instead of
// waiting on forever as a second brain.
TEST(TwoHosts, ALinkDownForGoodStopsBothSidesNamingTheOther) {
  const fs::path dir = testing_util::test_dir("actorpipe_two_hosts");
  two_namespaces ns("ap", 'v', "10.231");
  SKIP_OR_FAIL_ON_SETUP(ns);
  const int port = static_cast<int>(free_port("0.0.0.0"));
  ASSERT_GT(port, 0);
  rank_group group;
  const std::string extra = "  pace_ms: 4\nsupervision: {heartbeat_timeout_s: 2}\n";
  const auto [dir_a, dir_b, cfg_a, cfg_b] = write_host_configs(dir, with_steps(pp2_config(extra), 100000));
  group.start(ns.a, dir_a, rank_env(0, ns.net + ".1", port), {"train", cfg_a});
  group.start(ns.b, dir_b, rank_env(1, ns.net + ".1", port), {"train", cfg_b, "--quiet"});
  ASSERT_TRUE(wait_for_text(dir_a / "out.txt", "step     5/", 60)) << group.ranks()[0].report("rank 0");
  ASSERT_EQ(ip({"-n", ns.a, "link", "set", ns.va, "down"}), "");
  const auto cut = clock_type::now();

  const bool in_time = group.wait_all(60);
  const auto& r0 = group.ranks()[0];
  const auto& r1 = group.ranks()[1];
  ASSERT_TRUE(in_time) << "a side still ran 60 s after the cut\n" << r0.report("rank 0") << r1.report("rank 1");
  const double r0_after = std::chrono::duration<double>(r0.started - cut).count() + r0.wall_s;
  const double r1_after = std::chrono::duration<double>(r1.started - cut).count() + r1.wall_s;
  EXPECT_NE(r0.code, 0) << r0.report("rank 0");
  EXPECT_NE(r1.code, 0) << r1.report("rank 1");
  // Each side within the heartbeat timeout and its bounded 5 s teardown,
  // with room for a loaded machine; not the test's 60 s limit.
  EXPECT_LT(r0_after, 20.0) << r0.report("rank 0");
  EXPECT_LT(r1_after, 20.0) << r1.report("rank 1");
  EXPECT_NE(r0.err().find("rank 1"), std::string::npos) << r0.report("rank 0");
  EXPECT_NE(r1.err().find("rank 0"), std::string::npos) << r1.report("rank 1");
  std::printf("[ two hosts ] link down for good: rank 0 stopped %.2f s after the cut (exit %d), rank 1 %.2f s (exit %d)\n"
              "  rank 0: %s  rank 1: %s",
              r0_after, r0.code, r1_after, r1.code, r0.err().c_str(), r1.err().c_str());
}

/// `launch --nnodes 2` on both hosts, `nprocs` workers each, node 0 on
/// host A (rank 0's store at A's address, its weights saved to
/// hostA/w.pt), node 1 on host B, quiet.
void start_launch_nodes(rank_group& group, const two_namespaces& ns, int port, int nprocs,
                        const std::string& coordinator, const host_dirs& hosts) {
  auto node = [&](int k) {
    return std::vector<std::string>{"launch",        "--nnodes", "2", "--node-rank", std::to_string(k),
                                    "--nprocs",      std::to_string(nprocs), "--master-addr", ns.net + ".1",
                                    "--master-port", std::to_string(port),   "--coordinator", coordinator};
  };
  auto args_a = node(0), args_b = node(1);
  args_a.insert(args_a.end(), {hosts.cfg_a, "--save", (hosts.a / "w.pt").string()});
  args_b.insert(args_b.end(), {hosts.cfg_b, "--quiet"});
  group.start(ns.a, hosts.a, {}, args_a);
  group.start(ns.b, hosts.b, {}, args_b);
}

// The same lasting cut, with each host's ranks started by `launch
// --coordinator rank0` (one node each, torchrun's --nnodes/--node-rank)
// and restarts allowed. Past
// the heartbeat timeout rank 0 either asks node 0's launcher for rank 1,
// which starts it on host A and heals stage 1 from rank 0's copy (its
// keeper at dp 1), or, with supervision.replace_timeout_s 0, goes on alone
// with both stages, stage 1 from that same copy. Either way the run ends
// bitwise on one process's. Host B's rank, cut off, stops by itself, and
// its launcher with it, naming rank 0.
void cut_for_good_under_launch(bool go_on, bool apart = false) {
  const fs::path dir = testing_util::test_dir("actorpipe_two_hosts");
  two_namespaces ns("ap", 'v', "10.231");
  SKIP_OR_FAIL_ON_SETUP(ns);
  const int port = static_cast<int>(free_port("0.0.0.0"));
  ASSERT_GT(port, 0);
  const int steps = 100;
  const std::string extra = std::string("  pace_ms: 4\nsupervision: {heartbeat_timeout_s: 2, max_restarts: 2") +
                            (go_on ? ", replace_timeout_s: 0}\n" : "}\n");
  const host_dirs hosts = write_host_configs(dir, with_steps(pp2_config(extra), steps));
  const auto& [dir_a, dir_b, cfg_a, cfg_b] = hosts;
  const fs::path dir_one = dir / "one";
  rank_group group;
  start_launch_nodes(group, ns, port, 1, apart ? "process" : "rank0", hosts);
  ASSERT_TRUE(wait_for_text(dir_a / "out.txt", "step    10/", 60)) << group.ranks()[0].report("node 0");
  ASSERT_EQ(ip({"-n", ns.a, "link", "set", ns.va, "down"}), "");
  const auto cut = clock_type::now();
  EXPECT_EQ(testing_util::slurp_file(dir_a / "out.txt").find("step   100/"), std::string::npos)
      << "the run ended before the cut";

  const bool in_time = group.wait_all(120);
  const auto& a = group.ranks()[0];
  const auto& b = group.ranks()[1];
  ASSERT_TRUE(in_time) << a.report("node 0") << b.report("node 1");
  ASSERT_EQ(a.code, 0) << a.report("node 0") << b.report("node 1");
  EXPECT_EQ(b.code, 5) << b.report("node 1");  // its worker lost the coordinator
  if (go_on) {
    EXPECT_NE(a.err().find("re-placed: generation 1 goes on over 1 process without rank 1"), std::string::npos)
        << a.report("node 0");
    EXPECT_NE(a.err().find(apart ? "stages by process - | 0 | 1 -> - | 0 1 (ranks c 0), after step"
                                 : "stages by process 0 | 1 -> 0 1 (ranks 0), after step"),
              std::string::npos)
        << a.report("node 0");
    EXPECT_EQ(a.err().find("started worker rank"), std::string::npos) << a.report("node 0");
  } else {
    EXPECT_NE(a.err().find("started worker rank 1 again on this node, in place of node 1's"), std::string::npos)
        << a.report("node 0");
  }
  EXPECT_NE(a.out().find("restarts: 1,"), std::string::npos) << a.report("node 0");
  EXPECT_NE(a.err().find("healed from memory"), std::string::npos) << a.report("node 0");
  EXPECT_NE(b.err().find(apart ? "rank 1/2 lost the coordinator" : "rank 1/2 lost rank 0"), std::string::npos)
      << b.report("node 1");
  EXPECT_NE(b.err().find(apart ? "the coordinator starts it again on node 0" : "rank 0's supervisor starts it again on node 0"),
            std::string::npos)
      << b.report("node 1");
  const double b_after = std::chrono::duration<double>(b.started - cut).count() + b.wall_s;
  EXPECT_LT(b_after, 20.0) << "node 1 ran on as a second brain\n" << b.report("node 1");

  const std::string one_process = one_process_save(dir_one, with_steps(pp2_config(extra), steps));
  const std::string healed = testing_util::slurp_file(dir_a / "w.pt");
  ASSERT_FALSE(healed.empty()) << a.report("node 0");
  ASSERT_FALSE(one_process.empty());
  EXPECT_TRUE(healed == one_process) << "node 0's file differs from the one-process run's";
  std::printf("[ two hosts ] link down for good under launch%s%s: node 1 stopped %.2f s after the cut (exit %d); node 0 "
              "ended %.2f s after it, bitwise\n  node 0: %s  node 1: %s",
              go_on ? ", replace_timeout_s 0" : "", apart ? ", a coordinator apart" : "", b_after, b.code,
              std::chrono::duration<double>(a.started - cut).count() + a.wall_s, a.err().c_str(), b.err().c_str());
}

TEST(TwoHosts, ALinkDownForGoodUnderLaunchIsHealedOnRankZerosSide) { cut_for_good_under_launch(false); }

TEST(TwoHosts, ALinkDownForGoodWithoutReplacementsGoesOnAloneOnRankZerosSide) { cut_for_good_under_launch(true); }

// The same with a coordinator apart on host A (launch's default, named
// on both launchers): host A's worker, RANK 0, takes stage 1 too.
TEST(TwoHosts, ALinkDownForGoodUnderACoordinatorApartGoesOnOnItsSide) { cut_for_good_under_launch(true, true); }

// Two processes on each host, pp 4, and the link down for good. Each
// stage's copy is kept on the other host (rank_placement::keeper with the
// ranks' hosts): stages 2 and 3 on rank 1, so both heal from its memory.
// Kept by the nearest earlier stage in another process, stage 3's copy was
// on rank 2, on host B with it, and the run went back to its start.
TEST(TwoHosts, ALinkDownForGoodTakesNoCopyOfItsHostsStagesWithIt) {
  const fs::path dir = testing_util::test_dir("actorpipe_two_hosts_keepers");
  two_namespaces ns("ak", 'k', "10.237");
  SKIP_OR_FAIL_ON_SETUP(ns);
  const int port = static_cast<int>(free_port("0.0.0.0"));
  ASSERT_GT(port, 0);
  const int steps = 100;
  std::string text = with_steps(pp2_config("  pace_ms: 4\nsupervision: {heartbeat_timeout_s: 2, max_restarts: 2, "
                                           "replace_timeout_s: 0}\n"),
                                steps);
  text.replace(text.find("  stages: 2\n"), 12, "  stages: 4\n");
  const host_dirs hosts = write_host_configs(dir, text);
  const auto& dir_a = hosts.a;
  rank_group group;
  start_launch_nodes(group, ns, port, 2, "rank0", hosts);
  ASSERT_TRUE(wait_for_text(dir_a / "out.txt", "step    10/", 60)) << group.ranks()[0].report("node 0");
  ASSERT_EQ(ip({"-n", ns.a, "link", "set", ns.va, "down"}), "");
  const bool in_time = group.wait_all(120);
  const auto& a = group.ranks()[0];
  const auto& b = group.ranks()[1];
  ASSERT_TRUE(in_time) << a.report("node 0") << b.report("node 1");
  ASSERT_EQ(a.code, 0) << a.report("node 0") << b.report("node 1");
  EXPECT_NE(a.err().find("re-placed: generation 1 goes on over 2 processes without rank 2, 3"), std::string::npos)
      << a.report("node 0");
  EXPECT_NE(a.err().find("stages by process 0 | 1 | 2 | 3 -> 0 | 1 2 3 (ranks 0 1)"), std::string::npos)
      << a.report("node 0");
  EXPECT_NE(a.err().find("; stage 2 from rank 1's memory; stage 3 from rank 1's memory"), std::string::npos)
      << a.report("node 0");
  EXPECT_EQ(a.err().find("from disk"), std::string::npos) << a.report("node 0");
  const std::string one_process = one_process_save(dir / "one", text);
  const std::string healed = testing_util::slurp_file(dir_a / "w.pt");
  ASSERT_FALSE(healed.empty()) << a.report("node 0");
  ASSERT_FALSE(one_process.empty());
  EXPECT_TRUE(healed == one_process) << "node 0's file differs from the one-process run's";
}

// A host that becomes free joins a running job: host A runs dp 2 x pp 2
// on 2 processes (each holding two slots, rank 0 coordinating), host B
// runs `launch --join`
// with A's address. At a step boundary B's process takes replica 0's
// stage 1 from rank 0's process (the lowest of the most crowded), over the
// veth pair (the stage's allreduce group now spans both hosts), and the
// run ends on the bytes of one process.
TEST(TwoHosts, AProcessOnAnotherHostJoinsAndTakesAStageBitwise) {
  const fs::path dir = testing_util::test_dir("actorpipe_two_hosts");
  two_namespaces ns("ap", 'v', "10.231");
  SKIP_OR_FAIL_ON_SETUP(ns);
  const int port = static_cast<int>(free_port("0.0.0.0"));
  ASSERT_GT(port, 0);
  const std::string extra = "  pace_ms: 4\nparallel: {dp: 2, allreduce: gloo}\n"
                            "supervision: {heartbeat_timeout_s: 2, max_restarts: 2, replace_timeout_s: 0}\n";
  const std::string text = with_steps(pp2_config(extra), 100);
  const auto [dir_a, dir_b, cfg_a, cfg_b] = write_host_configs(dir, text);
  const std::string at = ns.net + ".1:" + std::to_string(port);
  rank_group group;
  group.start(ns.a, dir_a, {},
              {"launch", "--coordinator", "rank0", "--nprocs", "2", "--master-addr", ns.net + ".1", "--master-port",
               std::to_string(port), cfg_a, "--save", (dir_a / "w.pt").string()});
  ASSERT_TRUE(wait_for_text(dir_a / "out.txt", "step    10/", 60)) << group.ranks()[0].report("host A");
  group.start(ns.b, dir_b, {}, {"launch", "--join", at, cfg_b});
  const bool in_time = group.wait_all(120);
  const auto& a = group.ranks()[0];
  const auto& b = group.ranks()[1];
  ASSERT_TRUE(in_time) << a.report("host A") << b.report("host B");
  ASSERT_EQ(a.code, 0) << a.report("host A") << b.report("host B");
  EXPECT_EQ(b.code, 0) << b.report("host B");
  EXPECT_NE(a.err().find("takes processes that join at " + at), std::string::npos) << a.report("host A");
  EXPECT_NE(a.err().find("re-placed: generation 1 takes in rank 2 (joined): stages by process 0.0 0.1 | 1.0 1.1 -> "
                         "0.0 | 1.0 1.1 | 0.1 (ranks 0 1 2), after step "),
            std::string::npos)
      << a.report("host A");
  EXPECT_NE(a.err().find("; stage 1 of replica 0 from rank 0's memory"), std::string::npos) << a.report("host A");
  EXPECT_NE(b.err().find("joining the run at " + at + " as RANK 2"), std::string::npos) << b.report("host B");
  const std::string one_process = one_process_save(dir / "one", text);
  const std::string grown = testing_util::slurp_file(dir_a / "w.pt");
  ASSERT_FALSE(grown.empty()) << a.report("host A");
  EXPECT_TRUE(grown == one_process) << "host A's file differs from the one-process run's";
}

TEST(TwoHosts, ARankWhoseMasterIsNowhereExitsOneNamingTheAddress) {
  const fs::path dir = testing_util::test_dir("actorpipe_two_hosts");
  two_namespaces ns("ap", 'v', "10.231");
  SKIP_OR_FAIL_ON_SETUP(ns);
  // Free on the host a moment ago; the namespaces are fresh and have ports
  // of their own, so it is free there.
  const int port = static_cast<int>(free_port("0.0.0.0"));
  ASSERT_GT(port, 0);
  const fs::path dir_b = dir / "hostB";
  const std::string cfg = testing_util::write(dir_b / "pp2.yaml", pp2_config("supervision: {connect_timeout_s: 2}\n"));
  const std::string nobody = ns.net + ".9";  // on B's subnet, but no one answers for it

  rank_group group;
  auto& r1 = group.start(ns.b, dir_b, rank_env(1, nobody, port),
                         {"train", cfg, "--steps", std::to_string(kSteps), "--quiet"});
  const bool in_time = group.wait_all(30);
  ASSERT_TRUE(in_time) << "still running after 30 s\n" << r1.report("rank 1");
  EXPECT_EQ(r1.code, 1) << r1.report("rank 1");
  EXPECT_LT(r1.wall_s, 10.0) << r1.report("rank 1");
  EXPECT_NE(r1.err().find(nobody), std::string::npos) << r1.report("rank 1");
  std::printf("[ two hosts ] rank 1 gave up on %s after %.2f s: %s", nobody.c_str(), r1.wall_s, r1.err().c_str());
}

// launch --coordinator etcd:// over three hosts on a bridge, one etcd
// member on each, as users spread a cluster: node 0 (host 0) runs the
// coordinator and RANK 0 and 1 (replica 0), node 1 (host 1) RANK 2 and 3
// (replica 1); host 2 holds etcd's third member only. Host 0's link goes
// down for good: its coordinator can renew no lease and stops by itself
// (exit 5, its workers with it), and once the lease expired node 1's
// standby takes the run over on host 1. It reaches the workers there, goes
// on without host 0's (supervision.replace_timeout_s: 0: nothing can start
// them), replica 0's stages from replica 1's memory, and the run ends on
// the one-process bytes.
TEST(ThreeHosts, TheCoordinatorsHostCutOffIsTakenOverByAStandbyOnAnotherHostBitwise) {
  if (::access(testing_util::etcd_binary(), X_OK) != 0)
    GTEST_SKIP() << "etcd-server is not installed (scripts/setup.sh installs it): test skipped";
  const fs::path dir = testing_util::test_dir("actorpipe_three_hosts");
  bridged_namespaces ns("ae", 'w', "10.233", 3);
  SKIP_OR_FAIL_ON_SETUP(ns);
  std::vector<testing_util::etcd_cluster::host> members;
  for (int i = 0; i < 3; ++i) members.push_back({ns.hosts[static_cast<size_t>(i)], ns.addr(i), ip_binary()});
  testing_util::etcd_cluster cluster(dir / "etcd", members);
  ASSERT_TRUE(cluster.ok()) << cluster.why();
  const int port = static_cast<int>(free_port("0.0.0.0"));
  ASSERT_GT(port, 0);
  const std::string extra = "  pace_ms: 4\nparallel: {dp: 2, allreduce: gloo}\n"
                            "supervision: {heartbeat_timeout_s: 2, max_restarts: 2, replace_timeout_s: 0}\n";
  const int steps = 100;
  const auto [dir_a, dir_b, cfg_a, cfg_b] = write_host_configs(dir, with_steps(pp2_config(extra), steps));
  auto node = [&](int k, const std::string& cfg, const fs::path& d) {
    return std::vector<std::string>{"launch", "--nnodes", "2", "--node-rank", std::to_string(k), "--nprocs", "2",
                                    "--master-addr", ns.addr(0), "--master-port", std::to_string(port),
                                    "--coordinator", cluster.url(), "--run-id", "cut", cfg, "--save",
                                    (d / "w.pt").string()};
  };
  rank_group group;
  group.start(ns.hosts[0], dir_a, {}, node(0, cfg_a, dir_a));
  group.start(ns.hosts[1], dir_b, {}, node(1, cfg_b, dir_b));
  ASSERT_TRUE(wait_for_text(dir_a / "out.txt", "step    10/", 60)) << group.ranks()[0].report("node 0");
  ASSERT_EQ(ns.cut(0), "");
  const auto cut = clock_type::now();
  EXPECT_EQ(testing_util::slurp_file(dir_a / "out.txt").find("step   100/"), std::string::npos)
      << "the run ended before the cut";
  const bool in_time = group.wait_all(120);
  const auto& a = group.ranks()[0];
  const auto& b = group.ranks()[1];
  ASSERT_TRUE(in_time) << a.report("node 0") << b.report("node 1");
  EXPECT_EQ(a.code, 5) << a.report("node 0");
  ASSERT_EQ(b.code, 0) << a.report("node 0") << b.report("node 1");
  EXPECT_NE(a.err().find("the coordinator lost its lease in etcd at "), std::string::npos) << a.report("node 0");
  const double a_after = std::chrono::duration<double>(a.started - cut).count() + a.wall_s;
  EXPECT_LT(a_after, 20.0) << "host 0 ran on as a second brain\n" << a.report("node 0");
  const std::string berr = b.err();
  EXPECT_NE(berr.find("lost its lease in etcd (stopped, hung or cut off); the standby here takes the run over"),
            std::string::npos)
      << b.report("node 1");
  EXPECT_NE(berr.find("re-placed: generation 1 goes on over 2 processes without rank 0, 1"), std::string::npos)
      << b.report("node 1");
  const size_t line = berr.find("takeover 1: generation 1 runs from after step ");
  ASSERT_NE(line, std::string::npos) << b.report("node 1");
  EXPECT_NE(berr.find("healed from memory"), std::string::npos) << b.report("node 1");
  const std::string one_process = one_process_save(dir / "one", with_steps(pp2_config(extra), steps));
  const std::string taken = testing_util::slurp_file(dir_b / "w.pt");
  ASSERT_FALSE(taken.empty()) << b.report("node 1");
  EXPECT_TRUE(taken == one_process) << "node 1's file differs from the one-process run's";
  std::printf("[ three hosts ] host 0 cut off: node 0 stopped %.2f s after the cut (exit %d); node 1 ended %.2f s "
              "after it, bitwise\n  %s\n",
              a_after, a.code, std::chrono::duration<double>(b.started - cut).count() + b.wall_s,
              berr.substr(line, berr.find('\n', line) - line).c_str());
}

}  // namespace
}  // namespace actorpipe
