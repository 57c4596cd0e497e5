// The launchers users know, run for real: `actorpipe launch`, Debian's
// torchrun (python3-torch) and OpenMPI's mpirun (openmpi-bin) start
// `actorpipe train` as several ranks, on one host and (launch, torchrun,
// ranks by hand) on two hosts made of network namespaces, and the weights
// they save are byte for byte those of one process; torchrun with
// --max_restarts restarts every worker after a `kill -9` of one, and they
// resume from the newest checkpoint and end on the same bytes. These are
// the commands of docs/PROCESSES.md and docs/TWO_HOSTS.md, on
// configs/digits_mlp.yaml with fewer steps. Slurm is rehearsed by hand.
//
// No port is fixed: torchrun's own rendezvous listens on 127.0.0.1:0 (its
// --standalone would take port 29400), mpirun and the two hosts get a
// MASTER_PORT the kernel gave out. Each launcher runs in its own process
// group; that group, and any process whose command line names the test's
// directory, is killed however the test ends; namespaces are deleted.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/dist/transport/net_address.hpp"
#include "tests/apps/child_process.hpp"
#include "tests/cpu_only.hpp"
#include "tests/test_util.hpp"
#include "tests/apps/two_namespaces.hpp"

extern char** environ;

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using testing_util::describe;
using testing_util::ip;
using testing_util::ip_binary;
using testing_util::two_namespaces;

const std::string torchrun_bin = "/usr/bin/torchrun";  // python3-torch
const std::string digits_config = std::string(ACTORPIPE_SOURCE_DIR) + "/configs/digits_mlp.yaml";

fs::path test_dir() { return testing_util::dir_per_test("actorpipe_launchers_test"); }

std::string bytes_of(const fs::path& file) { return fs::exists(file) ? testing_util::slurp_file(file) : ""; }

// `program` found on PATH ("" when it is not there).
std::string on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t at = 0; at <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', at), dirs.size());
    const fs::path candidate = fs::path(dirs.substr(at, end - at)) / program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    at = end + 1;
  }
  return "";
}

// The launchers' own variables are dropped from the environment the test
// passes on, so that a test run under torchrun, mpirun or Slurm starts
// clean ranks.
bool launcher_variable(const std::string& entry) {
  for (const char* prefix : {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=",
                             "GROUP_RANK=", "ROLE_", "TORCHELASTIC_", "OMPI_", "PMIX_", "SLURM_",
                             "ACTORPIPE_LAUNCHER_PID="})
    if (entry.rfind(prefix, 0) == 0) return true;
  return false;
}

// SIGKILL to every process whose command line names `dir` (the ranks a
// launcher started, wherever they were reparented), this one excepted.
void kill_processes_naming(const fs::path& dir) {
  const std::string needle = dir.string();
  DIR* proc = ::opendir("/proc");
  if (!proc) return;
  while (dirent* e = ::readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0 || pid == ::getpid()) continue;
    const std::string cmdline = bytes_of("/proc/" + std::to_string(pid) + "/cmdline");
    if (cmdline.find(needle) != std::string::npos) ::kill(pid, SIGKILL);
  }
  ::closedir(proc);
}

// The pid of the `actorpipe` process whose command line names `config` and
// whose environment holds every one of `env` ("NAME=VALUE"); -1 if none.
// Whether the progress in `out` shows step `n` or a later one. The bar is
// drawn at most so often, so a given step may never be printed.
bool reached_step(const std::string& out, int n) {
  for (size_t at = out.find(" step "); at != std::string::npos; at = out.find(" step ", at + 1)) {
    size_t end = at + 6;
    int step = 0;
    while (end < out.size() && std::isdigit(static_cast<unsigned char>(out[end])))
      step = step * 10 + (out[end++] - '0');
    if (end > at + 6 && end < out.size() && out[end] == '/' && step >= n) return true;
  }
  return false;
}

pid_t find_rank(const std::string& config, const std::vector<std::string>& env) {
  DIR* proc = ::opendir("/proc");
  if (!proc) return -1;
  pid_t found = -1;
  while (dirent* e = ::readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    const std::string base = "/proc/" + std::to_string(pid);
    const std::string cmdline = bytes_of(base + "/cmdline");
    if (cmdline.rfind(std::string(ACTORPIPE_BIN) + '\0' + "train" + '\0' + config + '\0', 0) != 0) continue;
    const std::string environ_text = '\0' + bytes_of(base + "/environ");
    bool all = true;
    for (const auto& v : env) all = all && environ_text.find('\0' + v + '\0') != std::string::npos;
    if (all) {
      found = pid;
      break;
    }
  }
  ::closedir(proc);
  return found;
}

// A launcher in the background, in its own process group, its stdout and
// stderr to one file. The group and every process naming the test's
// directory are SIGKILLed however the test ends.
class launcher {
 public:
  launcher(const std::string& tag, const std::string& program, const std::vector<std::string>& args)
      : out_((test_dir() / (tag + ".out")).string()), dir_(test_dir()) {
    std::vector<std::string> all = {program};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e)
      if (!launcher_variable(*e)) env.emplace_back(*e);
    std::vector<char*> envp;
    for (auto& v : env) envp.push_back(v.data());
    envp.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {  // only async-signal-safe calls until exec
      ::setpgid(0, 0);
      const int in = ::open("/dev/null", O_RDONLY);
      const int fd = ::open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (in < 0 || fd < 0 || ::dup2(in, 0) < 0 || ::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0) _exit(127);
      ::execve(program.c_str(), argv.data(), envp.data());
      _exit(127);
    }
    if (pid_ > 0) ::setpgid(pid_, pid_);  // either side may get there first
  }
  ~launcher() {
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    kill_processes_naming(dir_);
  }
  launcher(const launcher&) = delete;
  launcher& operator=(const launcher&) = delete;

  bool started() const { return pid_ > 0; }
  std::string output() const { return bytes_of(out_); }

  /// The launcher's exit code once it ended; -1 (everything killed) when
  /// it did not within `timeout_s`.
  int wait(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  std::string out_;
  fs::path dir_;
};

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// `actorpipe train ARGS... --save FILE` in one process; FILE's bytes.
std::string one_process(const std::vector<std::string>& args, const std::string& file) {
  std::vector<std::string> all = {"train"};
  all.insert(all.end(), args.begin(), args.end());
  all.insert(all.end(), {"--quiet", "--save", file});
  testing_util::child_limits limits;
  limits.timeout_s = 120;
  const auto r = testing_util::run_child(ACTORPIPE_BIN, all, limits);
  EXPECT_EQ(r.code, 0) << describe(r);
  return bytes_of(file);
}

// torchrun's fixed flags: one node; its rendezvous store on a port the
// kernel picks (in place of --standalone's 29400); under Python 3.11,
// torchrun 1.13 needs --redirects and --tee given (it fails on their
// defaults); --no_python runs a binary.
std::vector<std::string> torchrun_args(int nprocs, const std::vector<std::string>& more) {
  std::vector<std::string> args = {"--rdzv_backend", "c10d",     "--rdzv_endpoint", "127.0.0.1:0",
                                   "--nnodes",       "1",        "--nproc_per_node", std::to_string(nprocs),
                                   "--redirects",    "1",        "--tee",            "1"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

#define REQUIRE_PROGRAM(path, package)                                                          \
  if ((path).empty() || ::access((path).c_str(), X_OK) != 0)                                    \
  GTEST_SKIP() << (package) << " is not installed (scripts/setup.sh installs it): test skipped"

// actorpipe's own launcher on one host: 4 processes on
// configs/digits_mlp.yaml save the one-process bytes. By default a
// coordinator apart, a fifth process, holds the supervisor and the store.
TEST(Launch, FourProcessesSaveTheOneProcessBytes) {
  const std::string one = (test_dir() / "one.pt").string(), many = (test_dir() / "many.pt").string();
  const std::string ref = one_process({digits_config, "--steps", "4"}, one);
  ASSERT_FALSE(ref.empty());
  launcher run("launch", ACTORPIPE_BIN,
               {"launch", "--nprocs", "4", digits_config, "--steps", "4", "--quiet", "--save", many});
  ASSERT_TRUE(run.started());
  ASSERT_EQ(run.wait(120), 0) << run.output();
  const std::string out = run.output();
  EXPECT_TRUE(ref == bytes_of(many)) << "launch --nprocs 4 saved other bytes than one process\n" << out;
  EXPECT_NE(out.find("processes: 4 (torchrun/env) and a coordinator apart that holds no stage, 1 stage actor(s) each"),
            std::string::npos)
      << out;
  EXPECT_EQ(count(out, "actorpipe: "), 1u) << "a rank other than 0 spoke\n" << out;
}

// The line docs/PROCESSES.md shows, on configs/digits_mlp.yaml (4 stages)
// with a shorter run: 4 ranks under torchrun save the one-process bytes,
// and rank 0 alone writes and speaks. torchrun hands the workers a
// MASTER_PORT of its own choosing (not the default 29500).
TEST(Torchrun, FourRanksSaveTheOneProcessBytes) {
  REQUIRE_PROGRAM(torchrun_bin, "python3-torch");
  const std::string one = (test_dir() / "one.pt").string(), many = (test_dir() / "many.pt").string();
  const std::string ref = one_process({digits_config, "--steps", "4"}, one);
  ASSERT_FALSE(ref.empty());
  launcher run("torchrun", torchrun_bin,
               torchrun_args(4, {"--no_python", ACTORPIPE_BIN, "train", digits_config, "--steps", "4", "--quiet",
                                 "--save", many}));
  ASSERT_TRUE(run.started());
  ASSERT_EQ(run.wait(120), 0) << run.output();
  const std::string out = run.output();
  EXPECT_TRUE(ref == bytes_of(many)) << "torchrun's 4 ranks saved other bytes than one process\n" << out;
  EXPECT_NE(out.find("[default0]:processes: 4 (torchrun/env)"), std::string::npos) << out;
  EXPECT_NE(out.find("[default0]:saved 8 tensors to " + many), std::string::npos) << out;
  EXPECT_EQ(out.find("[default1]:actorpipe: "), std::string::npos) << "a rank other than 0 spoke\n" << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("; master [^:\\s]+:([0-9]+)"))) << out;
  EXPECT_NE(m[1].str(), "29500") << out;
}

// What node k of two runs, inside its namespace: the args after
// `ip netns exec NS`. `save` is "" for node 1.
using node_command =
    std::function<std::vector<std::string>(int k, const std::string& master, const std::string& port,
                                           const std::string& save)>;

// configs/digits_mlp.yaml (4 stages) on two hosts (network namespaces),
// as docs/TWO_HOSTS.md runs it: node 0 and node 1 each run `node(k, ...)`,
// both exit 0, node 0's --save holds the one-process bytes and rank 0
// alone speaks. `plan` is how rank 0's processes line starts.
void expect_two_hosts_save_the_one_process_bytes(const node_command& node, const std::string& plan) {
  two_namespaces hosts("lp", 'l', "10.232");
  if (!hosts.why.empty()) GTEST_SKIP() << "cannot make network namespaces: " << hosts.why;
  ASSERT_TRUE(hosts.ok) << hosts.setup_error;
  const std::string one = (test_dir() / "one.pt").string(), many = (test_dir() / "many.pt").string();
  const std::string ref = one_process({digits_config, "--steps", "4"}, one);
  ASSERT_FALSE(ref.empty());
  // Node 0's namespace is new and empty, so any port would do there; one
  // the kernel gave out keeps to the rule anyway.
  const std::string master = hosts.net + ".1", port = std::to_string(free_port("127.0.0.1"));
  auto in = [](const std::string& ns, std::vector<std::string> args) {
    args.insert(args.begin(), {"netns", "exec", ns});
    return args;
  };
  launcher b("node1", ip_binary(), in(hosts.b, node(1, master, port, "")));
  launcher a("node0", ip_binary(), in(hosts.a, node(0, master, port, many)));
  ASSERT_TRUE(a.started() && b.started());
  const int code_a = a.wait(120), code_b = b.wait(120);
  ASSERT_EQ(code_a, 0) << a.output() << "--- node 1:\n" << b.output();
  ASSERT_EQ(code_b, 0) << b.output() << "--- node 0:\n" << a.output();
  const std::string out = a.output();
  EXPECT_TRUE(ref == bytes_of(many)) << "two hosts saved other bytes than one process\n" << out;
  EXPECT_NE(out.find(plan + ", consecutive (replica, stage) blocks; master " + master + ":" + port),
            std::string::npos)
      << out;
  EXPECT_EQ(count(out, "actorpipe: "), 1u) << "a rank other than 0 spoke\n" << out;
  EXPECT_EQ(b.output().find("actorpipe: "), std::string::npos) << "a rank other than 0 spoke\n" << b.output();
}

// By hand: one rank per host (2 stage actors each), torchrun's variables
// set with env.
TEST(TwoHosts, RanksStartedByHandSaveTheOneProcessBytes) {
  auto node = [](int k, const std::string& master, const std::string& port, const std::string& save) {
    std::vector<std::string> args = {"/usr/bin/env", "RANK=" + std::to_string(k), "WORLD_SIZE=2", "LOCAL_RANK=0",
                                     "LOCAL_WORLD_SIZE=1", "MASTER_ADDR=" + master, "MASTER_PORT=" + port,
                                     ACTORPIPE_BIN, "train", digits_config, "--steps", "4", "--quiet"};
    if (!save.empty()) args.insert(args.end(), {"--save", save});
    return args;
  };
  expect_two_hosts_save_the_one_process_bytes(node, "processes: 2 (torchrun/env), 2 stage actor(s) each");
}

// actorpipe's own launcher, torchrun's static rendezvous flags: 2 ranks
// per host, worker RANK 0 coordinating (--coordinator rank0 on both).
TEST(TwoHosts, LaunchOnEachHostWithRankZeroCoordinatingSavesTheOneProcessBytes) {
  auto node = [](int k, const std::string& master, const std::string& port, const std::string& save) {
    std::vector<std::string> args = {ACTORPIPE_BIN, "launch", "--nnodes", "2", "--node-rank", std::to_string(k),
                                     "--nprocs", "2", "--master-addr", master, "--master-port", port,
                                     "--coordinator", "rank0", digits_config, "--steps", "4", "--quiet"};
    if (!save.empty()) args.insert(args.end(), {"--save", save});
    return args;
  };
  expect_two_hosts_save_the_one_process_bytes(node, "processes: 4 (torchrun/env), 1 stage actor(s) each");
}

// The same as launch runs by default, with a coordinator apart: node 0
// starts it beside its 2 workers; it holds no stage.
TEST(TwoHosts, LaunchOnEachHostSavesTheOneProcessBytes) {
  auto node = [](int k, const std::string& master, const std::string& port, const std::string& save) {
    std::vector<std::string> args = {ACTORPIPE_BIN, "launch", "--nnodes", "2", "--node-rank", std::to_string(k),
                                     "--nprocs", "2", "--master-addr", master, "--master-port", port,
                                     digits_config, "--steps", "4", "--quiet"};
    if (!save.empty()) args.insert(args.end(), {"--save", save});
    return args;
  };
  expect_two_hosts_save_the_one_process_bytes(
      node, "processes: 4 (torchrun/env) and a coordinator apart that holds no stage, 1 stage actor(s) each");
}

// Debian's torchrun on each host, 2 ranks each, its static rendezvous at
// node 0's address (its agent hosts the store:
// TORCHELASTIC_USE_AGENT_STORE).
TEST(TwoHosts, TorchrunOnEachHostSavesTheOneProcessBytes) {
  REQUIRE_PROGRAM(torchrun_bin, "python3-torch");
  auto node = [](int k, const std::string& master, const std::string& port, const std::string& save) {
    std::vector<std::string> args = {torchrun_bin,     "--nnodes",   "2",         "--node_rank", std::to_string(k),
                                     "--nproc_per_node", "2",        "--master_addr", master,     "--master_port",
                                     port,             "--redirects", "1",        "--tee",       "1",
                                     "--no_python",    ACTORPIPE_BIN, "train",    digits_config, "--steps",
                                     "4",              "--quiet"};
    if (!save.empty()) args.insert(args.end(), {"--save", save});
    return args;
  };
  expect_two_hosts_save_the_one_process_bytes(node, "[default0]:processes: 4 (torchrun/env), 1 stage actor(s) each");
}

// mpirun's ranks read OMPI_COMM_WORLD_*; MASTER_ADDR and MASTER_PORT come
// from -x. 4 ranks save the one-process bytes.
TEST(Mpirun, FourRanksSaveTheOneProcessBytes) {
  const std::string mpirun = on_path("mpirun");
  REQUIRE_PROGRAM(mpirun, "openmpi-bin");
  const std::string one = (test_dir() / "one.pt").string(), many = (test_dir() / "many.pt").string();
  const std::string ref = one_process({digits_config, "--steps", "4"}, one);
  ASSERT_FALSE(ref.empty());
  const std::string port = std::to_string(free_port("127.0.0.1"));
  launcher run("mpirun", mpirun,
               {"--allow-run-as-root", "--oversubscribe", "-np", "4", "-x", "MASTER_ADDR=127.0.0.1", "-x",
                "MASTER_PORT=" + port, ACTORPIPE_BIN, "train", digits_config, "--steps", "4", "--quiet", "--save",
                many});
  ASSERT_TRUE(run.started());
  ASSERT_EQ(run.wait(120), 0) << run.output();
  const std::string out = run.output();
  EXPECT_TRUE(ref == bytes_of(many)) << "mpirun's 4 ranks saved other bytes than one process\n" << out;
  EXPECT_NE(out.find("processes: 4 (openmpi), 1 stage actor(s) each, consecutive (replica, stage) blocks; master "
                     "127.0.0.1:" + port),
            std::string::npos)
      << out;
  EXPECT_EQ(count(out, "actorpipe: "), 1u) << "a rank other than 0 spoke\n" << out;
}

// A 3-stage model (dropout: its masks come from the seed, so a resumed
// rank that drew them otherwise would show in the weights), paced so that
// the run is still going when a worker is killed, with a checkpoint after
// every other step in the test's directory.
std::string restart_config() {
  const std::string text =
      "model:\n"
      "  layers:\n"
      "    - {type: linear, in: 16, out: 32}\n"
      "    - {type: relu}\n"
      "    - {type: dropout, p: 0.1}\n"
      "    - {type: linear, in: 32, out: 32}\n"
      "    - {type: tanh}\n"
      "    - {type: linear, in: 32, out: 4}\n"
      "data:\n"
      "  kind: synthetic\n"
      "  synthetic: {samples: 512, features: 16, classes: 4}\n"
      "  test_fraction: 0.25\n"
      "train:\n"
      "  steps: 40\n"
      "  batch_size: 48\n"
      "  optimizer: {type: adam, lr: 0.01}\n"
      "  seed: 7\n"
      "pipeline:\n"
      "  stages: 3\n"
      "  schedule: 1f1b\n"
      "  microbatches: 6\n"
      "  devices: auto\n"
      "  intra_op_threads: 1\n"
      "  pace_ms: 4\n"
      "checkpoint: {every: 2, dir: " + (test_dir() / "ckpt").string() + "}\n";
  return testing_util::write(test_dir() / "restart.yaml", text);
}

bool any_checkpoint(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".pt") return true;
  return false;
}

// torchrun --max_restarts 2: a `kill -9` of rank 1 mid-run (once a
// checkpoint is written) makes torchrun stop and restart every worker;
// with TORCHELASTIC_RESTART_COUNT 1 they resume from the newest checkpoint
// by themselves and save the bytes of the run nobody killed.
TEST(Torchrun, AKillNineRestartsEveryWorkerAndTheyResumeFromTheNewestCheckpointBitwise) {
  REQUIRE_PROGRAM(torchrun_bin, "python3-torch");
  const std::string config = restart_config();
  const fs::path ckpt = test_dir() / "ckpt";
  const std::string clean = (test_dir() / "clean.pt").string(), restarted = (test_dir() / "restarted.pt").string();
  const std::string ref = one_process({config}, clean);
  ASSERT_FALSE(ref.empty());
  fs::remove_all(ckpt);
  launcher run("restart", torchrun_bin,
               torchrun_args(3, {"--max_restarts", "2", "--no_python", ACTORPIPE_BIN, "train", config, "--quiet",
                                 "--save", restarted}));
  ASSERT_TRUE(run.started());
  pid_t victim = -1;
  for (int i = 0; i < 6000 && victim < 0; ++i) {  // up to 60 s
    if (any_checkpoint(ckpt)) victim = find_rank(config, {"RANK=1", "TORCHELASTIC_RESTART_COUNT=0"});
    if (victim < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(victim, 0) << "no checkpoint, or no worker of rank 1\n" << run.output();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_EQ(run.wait(120), 0) << run.output();
  const std::string out = run.output();
  // The kill is what failed the group: torchrun names the victim, or, when
  // rank 0 (which saw rank 1's process gone and ended the run) exited
  // first, rank 0's line says so.
  EXPECT_TRUE(out.find("(pid: " + std::to_string(victim) + ")") != std::string::npos ||
              (out.find("stopped at step") != std::string::npos &&
               out.find("(the process of rank 1 is gone)") != std::string::npos))
      << out;
  EXPECT_NE(out.find("[default0]:torchrun restart 1 (TORCHELASTIC_RESTART_COUNT): every worker was restarted, so no "
                     "peer's memory is left to heal from; resuming from the newest checkpoint in " + ckpt.string()),
            std::string::npos)
      << out;
  EXPECT_EQ(count(out, "note: resuming after step "), 3u) << "not every rank resumed from a checkpoint\n" << out;
  EXPECT_TRUE(ref == bytes_of(restarted)) << "the restarted run saved other bytes than the clean one\n" << out;
}

// mpirun --enable-recovery keeps the other ranks running when one dies
// (without it, mpirun aborts the job). With replace_timeout_s: 0 rank 0's
// supervisor goes on over the ranks left, the lost stage from its keeper's
// memory; a process that joins takes it back; the run saves the bytes of
// the run nobody killed.
TEST(Mpirun, WithEnableRecoveryAKillNineGoesOnAndAJoinerTakesTheStageBackBitwise) {
  const std::string mpirun = on_path("mpirun");
  REQUIRE_PROGRAM(mpirun, "openmpi-bin");
  std::string text = bytes_of(restart_config());
  text = text.substr(0, text.find("checkpoint:")) +
         "supervision: {max_restarts: 3, heartbeat_timeout_s: 2, replace_timeout_s: 0}\n";
  text.replace(text.find("steps: 40"), 9, "steps: 80");
  const std::string config = testing_util::write(test_dir() / "shrink.yaml", text);
  const std::string clean = (test_dir() / "clean.pt").string(), shrunk = (test_dir() / "shrunk.pt").string();
  const std::string ref = one_process({config}, clean);
  ASSERT_FALSE(ref.empty());
  const std::string port = std::to_string(free_port("127.0.0.1"));
  launcher run("mpirun", mpirun,
               {"--allow-run-as-root", "--oversubscribe", "--enable-recovery", "-np", "3", "-x",
                "MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT=" + port, ACTORPIPE_BIN, "train", config, "--save",
                shrunk});
  ASSERT_TRUE(run.started());
  pid_t victim = -1;
  for (int i = 0; i < 6000 && victim < 0; ++i) {  // up to 60 s
    if (reached_step(run.output(), 3)) victim = find_rank(config, {"OMPI_COMM_WORLD_RANK=1"});
    if (victim < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(victim, 0) << "no step 3, or no rank 1\n" << run.output();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  // Then a process joins through actorpipe's own launcher, at the address
  // rank 0 names, and takes stage 1 back (a WORLD_SIZE of 3 that its
  // stand-in 2 does not divide).
  for (int i = 0; i < 3000 && run.output().find("re-placed: generation 1") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto joined = testing_util::run_child(
      ACTORPIPE_BIN, {"launch", "--join", "127.0.0.1:" + port, config}, [] {
        testing_util::child_limits l;
        l.timeout_s = 120;
        return l;
      }());
  EXPECT_EQ(joined.code, 0) << describe(joined);
  EXPECT_NE((joined.out + joined.err).find("joining the run at 127.0.0.1:" + port + " as RANK 3"), std::string::npos)
      << describe(joined);
  const int code = run.wait(120);
  const std::string out = run.output();
  EXPECT_NE(out.find("re-placed: generation 1 goes on over 2 processes without rank 1"), std::string::npos) << out;
  EXPECT_NE(out.find("stages by process 0 | 1 | 2 -> 0 1 | 2 (ranks 0 2)"), std::string::npos) << out;
  EXPECT_NE(out.find("re-placed: generation 2 takes in rank 3 (joined): stages by process 0 1 | 2 -> 0 | 2 | 1"),
            std::string::npos)
      << out;
  EXPECT_TRUE(ref == bytes_of(shrunk)) << "the shrunk run saved other bytes than the clean one\n" << out;
  // With recovery, mpirun (OpenMPI 4.1) exits with the ranks that ended:
  // 0, on rank 0's word.
  EXPECT_EQ(code, 0) << out;
}

}  // namespace
}  // namespace actorpipe
