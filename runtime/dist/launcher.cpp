#include "runtime/dist/launcher.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>

#include "runtime/dist/transport/net_address.hpp"
#include "runtime/dist/transport/shared_segments.hpp"

extern char** environ;

namespace actorpipe {

namespace {

using clock = std::chrono::steady_clock;

// The handlers only write the signal's number into this pipe (write() is
// async-signal-safe); the wait loop reads it. One run_workers at a time.
std::atomic<int> g_wake_fd{-1};
std::atomic<bool> g_running{false};

extern "C" void on_signal(int signo) {
  const int saved = errno;
  const int fd = g_wake_fd.load();
  if (fd >= 0) {
    const unsigned char b = static_cast<unsigned char>(signo);
    [[maybe_unused]] ssize_t n = ::write(fd, &b, 1);  // full pipe: a wake-up is already pending
  }
  errno = saved;
}

// The self-pipe and SIGINT/SIGTERM/SIGCHLD handlers for one run, restored
// on every way out. SIGCHLD is caught (not left SIG_IGN, which would make
// the kernel reap the workers before waitpid sees their status) to wake
// the loop when a worker exits.
class signal_scope {
public:
  signal_scope() {
    if (g_running.exchange(true)) throw std::runtime_error("run_workers: already running in this process");
    if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
      g_running = false;
      throw std::runtime_error(std::string("run_workers: pipe2: ") + std::strerror(errno));
    }
    g_wake_fd = fds_[1];
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int i = 0; i < 3; ++i) sigaction(signals[i], &sa, &old_[i]);
  }
  ~signal_scope() {
    for (int i = 0; i < 3; ++i) sigaction(signals[i], &old_[i], nullptr);
    g_wake_fd = -1;
    ::close(fds_[0]);
    ::close(fds_[1]);
    g_running = false;
  }
  signal_scope(const signal_scope&) = delete;
  signal_scope& operator=(const signal_scope&) = delete;

  /// Waits up to `timeout` for a signal (or for `also` to be readable);
  /// returns the SIGINT/SIGTERM ones that arrived (SIGCHLD only wakes).
  std::vector<int> wait(std::chrono::milliseconds timeout, int also = -1) {
    pollfd p[2] = {{fds_[0], POLLIN, 0}, {also, POLLIN, 0}};
    ::poll(p, also >= 0 ? 2 : 1, static_cast<int>(timeout.count()));
    std::vector<int> got;
    unsigned char buf[64];
    for (ssize_t n; (n = ::read(fds_[0], buf, sizeof buf)) > 0;)
      for (ssize_t i = 0; i < n; ++i)
        if (buf[i] == SIGINT || buf[i] == SIGTERM) got.push_back(buf[i]);
    return got;
  }

  static constexpr int signals[3] = {SIGINT, SIGTERM, SIGCHLD};

private:
  int fds_[2] = {-1, -1};
  struct sigaction old_[3] {};
};


struct worker {
  int rank;
  pid_t pid;
  bool live = true;
  /// Dead, waiting for rank 0's "respawn" until this time (heal mode).
  bool awaiting = false;
  clock::time_point replace_by{};
};

// Rank 0's lines on the control pipe ("heal", "respawn R G"), as they
// come; a partial line waits for the rest.
class control_pipe {
public:
  control_pipe() {
    if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0)
      throw std::runtime_error(std::string("run_workers: pipe2: ") + std::strerror(errno));
  }
  ~control_pipe() {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  control_pipe(const control_pipe&) = delete;
  control_pipe& operator=(const control_pipe&) = delete;

  /// -1 once rank 0's end is closed (rank 0 exited): nothing more to poll.
  int read_fd() const { return eof_ ? -1 : fds_[0]; }
  int write_fd() const { return fds_[1]; }
  /// After rank 0 started: the launcher keeps no write end, so that rank
  /// 0's end is the only one.
  void close_write() {
    ::close(fds_[1]);
    fds_[1] = -1;
  }
  std::vector<std::string> lines() {
    char buf[256];
    ssize_t n = 0;
    while (!eof_ && (n = ::read(fds_[0], buf, sizeof buf)) > 0) partial_.append(buf, static_cast<size_t>(n));
    if (n == 0 && fds_[1] < 0) eof_ = true;
    std::vector<std::string> out;
    for (size_t nl; (nl = partial_.find('\n')) != std::string::npos;) {
      out.push_back(partial_.substr(0, nl));
      partial_.erase(0, nl + 1);
    }
    return out;
  }

private:
  int fds_[2] = {-1, -1};
  bool eof_ = false;
  std::string partial_;
};

// Signals go to the worker's process group: what it started itself (a
// shell's sleep, data loaders) gets them too, as from a terminal.
// A stopped worker (SIGSTOP) is continued after a SIGTERM, so that it
// acts on it rather than wait for the SIGKILL after the grace.
void signal_live(std::vector<worker>& ws, int signo) {
  for (const auto& w : ws) {
    if (!w.live) continue;
    const bool group = ::kill(-w.pid, signo) == 0;
    if (!group) ::kill(w.pid, signo);
    if (signo == SIGTERM) ::kill(group ? -w.pid : w.pid, SIGCONT);
  }
}

size_t count_live(const std::vector<worker>& ws) {
  size_t n = 0;
  for (const auto& w : ws) n += w.live;
  return n;
}

// The node whose launcher starts `rank` first.
int node_of(const launch_options& o, int rank) { return rank / o.nprocs; }

std::vector<std::string> worker_env(const launch_options& o, int rank, uint16_t port, const std::string& run_id,
                                    int control_fd, int generation) {
  const std::string world = std::to_string(o.nnodes * o.nprocs);
  // A rank of another node started here (node 0 replacing it) takes this
  // node's place in the group and the local slot of its number.
  const bool here = node_of(o, rank) == o.node_rank;
  std::map<std::string, std::string> ours = {
      {"RANK", std::to_string(rank)},        {"LOCAL_RANK", std::to_string(rank % o.nprocs)},
      {"ROLE_RANK", std::to_string(rank)},   {"WORLD_SIZE", world},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nprocs)}, {"ROLE_WORLD_SIZE", world},
      {"GROUP_RANK", std::to_string(here ? o.node_rank : 0)}, {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(port)}, {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"TORCHELASTIC_MAX_RESTARTS", "0"},    {"TORCHELASTIC_RUN_ID", run_id},
      // The worker dies with the launcher (apps/main.cpp), even by SIGKILL.
      {"ACTORPIPE_LAUNCHER_PID", std::to_string(::getpid())}};
  if (control_fd >= 0) ours["ACTORPIPE_LAUNCHER_FD"] = std::to_string(control_fd);
  if (generation > 0) ours["ACTORPIPE_GENERATION"] = std::to_string(generation);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    if (name == "TORCHELASTIC_USE_AGENT_STORE" || name == "ACTORPIPE_LAUNCHER_FD" || name == "ACTORPIPE_GENERATION" ||
        ours.count(name))
      continue;
    env.push_back(kv);
  }
  for (const auto& [k, v] : ours) env.push_back(k + "=" + v);
  return env;
}

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

// The threads of this process (1 on failure to tell: then no fork).
int thread_count() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

// A replacement forked from this process: what posix_spawn sets up for a
// worker (its own process group, default signals, an empty mask, none of
// the launcher's descriptors, the worker's environment), then
// in_process(argv). -1: not forked (more than one thread here); the
// caller spawns it instead.
pid_t fork_worker(const launch_options& o, std::vector<std::string> env) {
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
  g_wake_fd = -1;
  for (int signo : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE}) ::signal(signo, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::close_range(3, ~0U, 0);
  ::clearenv();
  for (auto& e : env) ::putenv(::strdup(e.c_str()));
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

}  // namespace

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

int run_workers(const launch_options& o) {
  if (o.nprocs < 1) throw std::invalid_argument("run_workers: nprocs must be >= 1");
  if (o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw std::invalid_argument("run_workers: node_rank must be in 0 .. nnodes-1");
  if (o.nnodes > 1 && o.master_port == 0)
    throw std::invalid_argument("run_workers: every node must name the same master_port");
  const int world = o.nnodes * o.nprocs, first = o.node_rank * o.nprocs;
  auto notice = [&](const std::string& line) {
    if (o.on_notice) o.on_notice("actorpipe launch: " + line);
  };
  const uint16_t port = o.master_port ? o.master_port : free_port(o.master_addr);
  const std::string run_id =
      "actorpipe-" + std::to_string(::getpid()) + "-" + std::to_string(clock::now().time_since_epoch().count());

  signal_scope sigs;  // before the first spawn: a signal from then on is not lost
  control_pipe control;
  bool heal = false;  // rank 0 said "heal"
  std::vector<worker> ws;
  try {
    for (int r = first; r < first + o.nprocs; ++r) {
      int fd = -1;
      if (r == first) {
        // This node's first worker (rank 0 on node 0) inherits a copy of
        // the write end (without O_CLOEXEC).
        fd = ::fcntl(control.write_fd(), F_DUPFD, 3);
        if (fd < 0) throw std::runtime_error(std::string("run_workers: fcntl: ") + std::strerror(errno));
      }
      const pid_t pid = spawn_worker(o, worker_env(o, r, port, run_id, fd, 0));
      if (fd >= 0) {
        ::close(fd);
        control.close_write();
      }
      ws.push_back({r, pid});
    }
  } catch (...) {
    signal_live(ws, SIGKILL);
    for (auto& w : ws) ::waitpid(w.pid, nullptr, 0);  // SIGKILLed: returns promptly
    remove_segments_of(run_id);
    throw;
  }

  int got_signal = 0;    // the first SIGINT/SIGTERM this process got
  int failed_code = -1;  // the first failing worker's exit code
  bool stopping = false, killed = false;
  clock::time_point deadline{};
  while (count_live(ws) > 0) {
    for (auto& w : ws) {
      if (!w.live) continue;
      int st = 0;
      const pid_t r = ::waitpid(w.pid, &st, WNOHANG);
      if (r == 0 || (r < 0 && errno == EINTR)) continue;
      w.live = false;
      if (r < 0) st = 1 << 8;  // not ours to wait for any more (ECHILD): count it as a failure
      const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      // After a forwarded signal, dying by it (or exiting 128+it) is the
      // expected ending, not a failure.
      const bool by_forwarded = got_signal && ((WIFSIGNALED(st) && WTERMSIG(st) == got_signal) ||
                                               (WIFEXITED(st) && WEXITSTATUS(st) == 128 + got_signal));
      if (ok || by_forwarded || stopping) continue;
      const std::string who = "worker rank " + std::to_string(w.rank) + " (pid " + std::to_string(w.pid) + ")";
      const std::string what = WIFSIGNALED(st) ? who + " was killed by " + signal_name(WTERMSIG(st))
                                               : who + " exited with " + std::to_string(WEXITSTATUS(st));
      if (heal && w.rank != 0 && !got_signal) {
        // Rank 0's supervisor replaces it (or gives up, and exits): here,
        // or on node 0 when this is another node.
        if (o.node_rank == 0) {
          w.awaiting = true;
          w.replace_by = clock::now() + o.replace_wait;
          notice(what + "; rank 0's supervisor replaces it");
        } else {
          if (failed_code < 0) failed_code = WIFSIGNALED(st) ? 1 : WEXITSTATUS(st);
          notice(what + "; rank 0's supervisor starts it again on node 0");
        }
        continue;
      }
      if (!got_signal) failed_code = WIFSIGNALED(st) ? 1 : WEXITSTATUS(st);
      const size_t others = count_live(ws);
      notice(what + (others ? "; stopping the other " + std::to_string(others) + " worker" + (others > 1 ? "s" : "")
                            : std::string()));
      stopping = true;
      deadline = clock::now() + o.grace;
      signal_live(ws, SIGTERM);
    }
    for (auto& w : ws)
      if (w.awaiting && !stopping && clock::now() >= w.replace_by) {
        w.awaiting = false;
        failed_code = 1;
        notice("worker rank " + std::to_string(w.rank) + " was not replaced within " +
               std::to_string(o.replace_wait.count()) + " ms; stopping the others");
        stopping = true;
        deadline = clock::now() + o.grace;
        signal_live(ws, SIGTERM);
      }
    for (const auto& line : control.lines()) {
      std::istringstream is(line);
      std::string verb;
      int rank = -1, generation = -1;
      is >> verb;
      if (verb == "heal") {
        heal = true;
        continue;
      }
      if (verb != "respawn" || !(is >> rank >> generation) || rank <= 0 || rank >= world || generation <= 0 ||
          o.node_rank != 0 || stopping) {
        if (!stopping) notice("ignored a line from rank 0: '" + line + "'");
        continue;
      }
      // A rank of another node has no worker here until node 0 starts it.
      size_t at = 0;
      while (at < ws.size() && ws[at].rank != rank) ++at;
      const bool remote = node_of(o, rank) != o.node_rank;
      if (at == ws.size()) ws.push_back({rank, -1, false});
      auto& w = ws[at];
      if (w.live) {  // stopped, or cut off: it goes for good first
        ::kill(-w.pid, SIGKILL);
        ::kill(w.pid, SIGKILL);
        ::waitpid(w.pid, nullptr, 0);
        notice("worker rank " + std::to_string(rank) + " (pid " + std::to_string(w.pid) +
               ") was taken for dead by rank 0; killed it");
      }
      bool forked = false;
      try {
        auto env = worker_env(o, rank, port, run_id, -1, generation);
        w.pid = fork_worker(o, env);
        forked = w.pid > 0;
        if (!forked) w.pid = spawn_worker(o, std::move(env));
      } catch (const std::exception& e) {
        notice(std::string("cannot start a replacement: ") + e.what());
        failed_code = 1;
        stopping = true;
        deadline = clock::now() + o.grace;
        signal_live(ws, SIGTERM);
        continue;
      }
      w.live = true;
      w.awaiting = false;
      notice("started worker rank " + std::to_string(rank) + " again" +
             (remote ? " on this node, in place of node " + std::to_string(node_of(o, rank)) + "'s" : std::string()) +
             " (pid " + std::to_string(w.pid) + ", generation " + std::to_string(generation) +
             (forked ? ", forked from the launcher)" : ")"));
    }
    if (count_live(ws) == 0) break;
    if (stopping && !killed && clock::now() >= deadline) {
      notice(std::to_string(count_live(ws)) + " worker(s) still running " + std::to_string(o.grace.count()) +
             " ms after SIGTERM; sending SIGKILL");
      signal_live(ws, SIGKILL);
      killed = true;
    }
    // Capped: a SIGCHLD that raced the waitpid loop costs at most this.
    auto timeout = std::chrono::milliseconds(200);
    if (stopping && !killed)
      timeout = std::min(timeout, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()) +
                                      std::chrono::milliseconds(1));
    for (int s : sigs.wait(std::max(timeout, std::chrono::milliseconds(0)), control.read_fd())) {
      if (!got_signal) got_signal = s;
      notice("got " + signal_name(s) + "; forwarding it to " + std::to_string(count_live(ws)) + " worker(s)");
      signal_live(ws, s);
    }
  }
  // Every worker is gone: the shared-memory copies they left (a killed
  // sender cannot remove its own) go too.
  if (const size_t left = remove_segments_of(run_id))
    notice("removed " + std::to_string(left) + " shared-memory boundary cop" + (left == 1 ? "y" : "ies") +
           " that killed workers left in " + shm_dir());
  if (failed_code >= 0) return failed_code;
  if (got_signal) return 128 + got_signal;
  return 0;
}

}  // namespace actorpipe
