#include "runtime/dist/launch/launcher_spawn.hpp"

#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>

#include "runtime/dist/launch/launcher_pipes.hpp"

extern char** environ;

namespace actorpipe::launcher_detail {

namespace {

// A worker's arguments, argv[0] = exe, and the argv that points into them.
struct worker_argv {
  explicit worker_argv(const launch_options& o) : args{o.exe} {
    args.insert(args.end(), o.worker_args.begin(), o.worker_args.end());
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
  }
  worker_argv(const worker_argv&) = delete;
  worker_argv& operator=(const worker_argv&) = delete;
  int argc() const { return static_cast<int>(args.size()); }
  std::vector<std::string> args;
  std::vector<char*> argv;
};

// The threads of this process (1 on failure to tell: then no fork).
int thread_count() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

// A forked worker's name (at most 15 characters): "actorpipe r" and its
// RANK, "actorpipe c" for a coordinator apart, "actorpipe j" for a process
// that joins (its RANK is a stand-in until it is taken in).
std::string process_name() {
  const char* rank = std::getenv("RANK");
  const char* coordinator = std::getenv("ACTORPIPE_COORDINATOR");
  const char* join = std::getenv("ACTORPIPE_JOIN");
  if (coordinator && std::string(coordinator) == "self") return "actorpipe c";
  if (join && *join) return "actorpipe j";
  return ("actorpipe r" + std::string(rank ? rank : "")).substr(0, 15);
}

}  // namespace

std::vector<std::string> worker_env(const launch_options& o, int rank, uint16_t port, const std::string& run_id,
                                    int control_fd, int generation) {
  const std::string world = std::to_string(o.nnodes * o.nprocs);
  // A rank of another node started here (node 0 replacing it) takes this
  // node's place in the group and the local slot of its number.
  const bool here = node_of(o, rank) == o.node_rank;
  // With a coordinator apart (rank 0 here), worker RANK r is rank r + 1.
  const int shown = o.apart ? std::max(rank - 1, 0) : rank;
  std::map<std::string, std::string> ours = {
      {"RANK", std::to_string(shown)},        {"LOCAL_RANK", std::to_string(shown % o.nprocs)},
      {"ROLE_RANK", std::to_string(shown)},   {"WORLD_SIZE", world},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nprocs)}, {"ROLE_WORLD_SIZE", world},
      {"GROUP_RANK", std::to_string(here ? o.node_rank : 0)}, {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(port)}, {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"TORCHELASTIC_MAX_RESTARTS", "0"},    {"TORCHELASTIC_RUN_ID", run_id},
      // The worker dies with the launcher (apps/main.cpp), even by SIGKILL.
      {"ACTORPIPE_LAUNCHER_PID", std::to_string(::getpid())}};
  if (control_fd >= 0) ours["ACTORPIPE_LAUNCHER_FD"] = std::to_string(control_fd);
  if (o.apart) ours["ACTORPIPE_COORDINATOR"] = rank == 0 ? "self" : "apart";
  // Every process of an etcd run, those that join (--join etcd://) too: a
  // worker waits for a standby to take over when the coordinator is lost
  // (actors/process/worker_agent.cpp).
  if ((o.apart || o.join) && !o.etcd.empty()) {
    ours["ACTORPIPE_ETCD"] = o.etcd;
    ours["ACTORPIPE_RUN_ID"] = o.run_id;
  }
  if (o.join) {
    for (const char* k : {"RANK", "ROLE_RANK"}) ours[k] = "1";
    for (const char* k : {"WORLD_SIZE", "ROLE_WORLD_SIZE"}) ours[k] = "2";
    ours["ACTORPIPE_JOIN"] = "1";
  }
  if (generation > 0) ours["ACTORPIPE_GENERATION"] = std::to_string(generation);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    if (name == "TORCHELASTIC_USE_AGENT_STORE" || name == "ACTORPIPE_LAUNCHER_FD" || name == "ACTORPIPE_GENERATION" ||
        name == "ACTORPIPE_JOIN" || name == "ACTORPIPE_COORDINATOR" || name == "ACTORPIPE_ETCD" ||
        name == "ACTORPIPE_RUN_ID" || ours.count(name))
      continue;
    env.push_back(kv);
  }
  for (const auto& [k, v] : ours) env.push_back(k + "=" + v);
  return env;
}

pid_t spawn_worker(const launch_options& o, std::vector<std::string> env) {
  worker_argv a(o);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Own process group: a terminal's Ctrl-C reaches the launcher only, which
  // forwards it once. Default SIGINT/SIGTERM and an empty mask, whatever
  // the launcher inherited (a background job starts with SIGINT ignored).
  sigset_t def, none;
  sigemptyset(&def);
  sigaddset(&def, SIGINT);
  sigaddset(&def, SIGTERM);
  sigaddset(&def, SIGCHLD);
  sigaddset(&def, SIGPIPE);
  sigemptyset(&none);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setsigdefault(&attr, &def);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, o.exe.c_str(), nullptr, &attr, a.argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("cannot start worker " + o.exe + ": " + std::strerror(rc));
  return pid;
}

// A worker forked from this process: what posix_spawn sets up for a
// worker (its own process group, default signals, an empty mask, none of
// the launcher's descriptors, the worker's environment), then
// in_process(argv). -1: not forked (more than one thread here); the
// caller spawns it instead.
pid_t fork_worker(const launch_options& o, std::vector<std::string> env, int keep_fd) {
  if (!o.in_process || thread_count() != 1) return -1;
  worker_argv a(o);
  std::fflush(nullptr);  // nothing buffered here is written twice
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("cannot fork a worker: ") + std::strerror(errno));
  if (pid > 0) return pid;
  // The child. Dies with the launcher, as a spawned worker does.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) std::_Exit(1);
  ::setpgid(0, 0);
  detach_signal_pipe();
  for (int signo : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE}) ::signal(signo, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (keep_fd >= 3) {  // the control pipe of a coordinator started again
    if (keep_fd > 3) ::close_range(3, static_cast<unsigned>(keep_fd) - 1, 0);
    ::close_range(static_cast<unsigned>(keep_fd) + 1, ~0U, 0);
  } else {
    ::close_range(3, ~0U, 0);
  }
  ::clearenv();
  for (auto& e : env) ::putenv(::strdup(e.c_str()));
  // /proc/PID/environ still shows the launcher's: the name says which
  // process this is (ps, top; the tests find a worker by it).
  ::prctl(PR_SET_NAME, process_name().c_str());
  int rc = 1;
  try {
    rc = o.in_process(a.argc(), a.argv.data());
  } catch (...) {
  }
  // The launcher's copy of this program's statics is not this worker's to
  // destroy; everything the worker wrote is closed.
  std::fflush(nullptr);
  std::_Exit(rc);
}

}  // namespace actorpipe::launcher_detail

namespace actorpipe {

std::string signal_name(int signo) {
  switch (signo) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return "signal " + std::to_string(signo);
  }
}

}  // namespace actorpipe
