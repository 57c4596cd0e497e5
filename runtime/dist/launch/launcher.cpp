#include "runtime/dist/launch/launcher.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <stdexcept>

#include "runtime/dist/launch/join.hpp"
#include "runtime/dist/launch/launcher_pipes.hpp"
#include "runtime/dist/launch/launcher_spawn.hpp"
#include "runtime/dist/launch/launcher_standby.hpp"
#include "runtime/dist/launch/rank_env.hpp"
#include "runtime/dist/transport/net_address.hpp"
#include "runtime/dist/transport/shared_segments.hpp"


namespace actorpipe {

namespace {

using clock = std::chrono::steady_clock;
using launcher_detail::control_pipe;
using launcher_detail::coordinator_standby;
using launcher_detail::signal_scope;
using launcher_detail::fork_worker;
using launcher_detail::node_of;
using launcher_detail::spawn_worker;
using launcher_detail::worker_env;

struct worker {
  int rank;
  pid_t pid;
  bool live = true;
  /// Dead, waiting for rank 0's "respawn" until this time (heal mode).
  bool awaiting = false;
  clock::time_point replace_by{};
  int generation = 0;  ///< started again for this generation (0: at the start)
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

// One run of the workers on this node: started, watched until every one
// is gone, signals forwarded, a failure stopping the others, and (heal
// mode, node 0) a dead rank started again when rank 0 says so.
class node_run {
public:
  node_run(const launch_options& o, uint16_t port, std::string run_id)
      : o_(o), port_(port), run_id_(std::move(run_id)), world_(o.nnodes * o.nprocs + (o.apart ? 1 : 0)),
        standby_(o) {}

  int run() {
    // Where a coordinator started here would listen: node 0's is the
    // master's address; another node's, its own toward it.
    self_addr_ = o_.master_addr;
    coordinating_ = o_.node_rank == 0;
    if (standby_.active() && o_.node_rank > 0) try {
        self_addr_ = local_address_toward(o_.master_addr, port_);
      } catch (const std::exception&) {
      }
    start();
    while (count_live(ws_) > 0) {
      reap();
      campaign();
      expire_replacements();
      for (const auto& line : control_.lines()) obey(line);
      if (count_live(ws_) == 0) break;
      escalate();
      wait();
    }
    // Every worker is gone: the shared-memory copies they left (a killed
    // sender cannot remove its own) go too.
    if (const size_t left = remove_segments_of(run_id_))
      notice("removed " + std::to_string(left) + " shared-memory boundary cop" + (left == 1 ? "y" : "ies") +
             " that killed workers left in " + shm_dir());
    if (standby_.standing_by()) return coordinator_lost_exit;  // nothing took over before every worker was gone
    if (failed_code_ >= 0) return failed_code_;
    if (got_signal_) return 128 + got_signal_;
    return 0;
  }

private:
  void notice(const std::string& line) const {
    if (o_.on_notice) o_.on_notice("actorpipe launch: " + line);
  }

  // "worker rank R" by the RANK it was started with, or the coordinator
  // apart (rank 0 inside the run).
  std::string name(int rank) const {
    if (o_.join) return "joining process " + std::to_string(rank);  // its RANK is the run's to give
    if (o_.apart && rank == 0) return "the coordinator";
    return "worker rank " + std::to_string(o_.apart ? rank - 1 : rank);
  }
  // "; stopping the other 3 workers" (and the coordinator apart, named
  // apart from them), or nothing when none is left.
  std::string stopping_the_others() const {
    size_t workers = 0;
    bool coordinator = false;
    for (const auto& w : ws_) {
      if (!w.live) continue;
      if (o_.apart && w.rank == 0) coordinator = true;
      else ++workers;
    }
    if (!workers) return coordinator ? "; stopping the coordinator" : "";
    return "; stopping the other " + std::to_string(workers) + " worker" + (workers > 1 ? "s" : "") +
           (coordinator ? " and the coordinator" : "");
  }
  // Who supervises: rank 0's supervisor, or the coordinator apart.
  std::string boss() const { return o_.apart ? "the coordinator" : "rank 0's supervisor"; }

  // This node's workers; a failed start kills the ones already started.
  void start() {
    // With a coordinator apart node 0 starts it (rank 0) first, and worker
    // RANK r is rank r + 1.
    const int first = o_.node_rank * o_.nprocs + (o_.apart && o_.node_rank > 0 ? 1 : 0);
    try {
      for (int r = first; r < first + o_.nprocs + (o_.apart && o_.node_rank == 0 ? 1 : 0); ++r) {
        int fd = -1;
        if (r == first && !o_.join) {
          // This node's first worker (rank 0 on node 0) inherits a copy of
          // the write end (without O_CLOEXEC).
          fd = ::fcntl(control_.write_fd(), F_DUPFD, 3);
          if (fd < 0) throw std::runtime_error(std::string("run_workers: fcntl: ") + std::strerror(errno));
        }
        // Forked, LibTorch already loaded (about 0.4 s of CPU less per
        // worker); spawned where the launcher has more than one thread.
        auto env = worker_env(o_, r, port_, run_id_, fd, 0);
        pid_t pid = fork_worker(o_, env, fd);
        if (pid < 0) pid = spawn_worker(o_, std::move(env));
        if (fd >= 0) {
          ::close(fd);
          if (!standby_.active()) control_.close_write();  // kept for a coordinator that takes over
        }
        ws_.push_back({r, pid});
      }
    } catch (...) {
      signal_live(ws_, SIGKILL);
      for (auto& w : ws_) ::waitpid(w.pid, nullptr, 0);  // SIGKILLed: returns promptly
      remove_segments_of(run_id_);
      throw;
    }
  }

  // Every worker that ended since the last look.
  void reap() {
    for (auto& w : ws_) {
      if (!w.live) continue;
      int st = 0;
      const pid_t r = ::waitpid(w.pid, &st, WNOHANG);
      if (r == 0 || (r < 0 && errno == EINTR)) continue;
      w.live = false;
      if (r < 0) st = 1 << 8;  // not ours to wait for any more (ECHILD): count it as a failure
      ended(w, st);
    }
  }

  void ended(worker& w, int st) {
    const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    // After a forwarded signal, dying by it (or exiting 128+it) is the
    // expected ending, not a failure.
    const bool by_forwarded = got_signal_ && ((WIFSIGNALED(st) && WTERMSIG(st) == got_signal_) ||
                                              (WIFEXITED(st) && WEXITSTATUS(st) == 128 + got_signal_));
    const std::string how = WIFSIGNALED(st) ? "was killed by " + signal_name(WTERMSIG(st))
                                            : "exited with " + std::to_string(WEXITSTATUS(st));
    const std::string what = name(w.rank) + " (pid " + std::to_string(w.pid) + ") " + how;
    if (lost_ && !by_forwarded) notice(what);
    if (ok || by_forwarded || stopping_) return;
    const int code = WIFSIGNALED(st) ? 1 : WEXITSTATUS(st);
    if (w.rank == 0 && stands_by(what, code, w.pid)) return;
    if (!got_signal_ && !o_.join && coordinator_gone(w, st, code)) {
      lose_coordinator(w, what);
      return;
    }
    if (heal_ && w.rank != 0 && !got_signal_) {
      // Rank 0's supervisor replaces it (or gives up, and exits): here,
      // or on the node whose launcher started the coordinator (node 0, or
      // the one whose standby took the run over).
      if (coordinating_) {
        if (w.generation > 0)  // its generation may still form: the coordinator sees it go at once
          tell_exited(self_addr_, port_, rank_env{}.store_prefix, w.rank, static_cast<uint32_t>(w.generation),
                      how + " (pid " + std::to_string(w.pid) + ")");
        w.awaiting = true;
        w.replace_by = clock::now() + o_.replace_wait;
        notice(what + "; " + boss() + " replaces it or goes on without it");
      } else {
        if (failed_code_ < 0) failed_code_ = code;
        notice(what + "; " + boss() + " starts it again on " +
               (taken_elsewhere_ ? "the node whose standby took the run over" : "node 0") +
               " or goes on without it");
      }
      return;
    }
    if (o_.join && !got_signal_) {
      if (failed_code_ < 0) failed_code_ = code;
      notice(what + "; the run it joined goes on without it");
      return;
    }
    if (!got_signal_) failed_code_ = code;
    stop(what + stopping_the_others());
  }

  // launch --coordinator etcd://: the coordinator here ended before the
  // run finished; the standby (launcher_standby.hpp) takes the loss on.
  bool stands_by(const std::string& what, int code, pid_t pid) {
    if (got_signal_ || stopping_) return false;
    std::string line;
    const bool handled = standby_.lost(what, code, pid, line);
    if (code == standby_lost_exit) coordinating_ = false, taken_elsewhere_ = true;  // another node's won
    if (!line.empty()) notice(line);
    return handled;
  }

  // Every loop turn under etcd: the standby watches the coordinator's
  // lease (killing the one here once it lost the run), and once its name
  // is free starts a coordinator that takes the run over on a fresh store
  // port.
  void campaign() {
    if (!standby_.active() || stopping_ || got_signal_) return;
    std::string line;
    if (!standby_.standing_by()) {
      worker* here = nullptr;
      for (auto& w : ws_)
        if (w.rank == 0 && w.live) here = &w;
      const auto seen = standby_.look(here != nullptr, line);
      if (seen == coordinator_standby::seen::kill_here) {
        const pid_t pid = here->pid;
        end_for_good(*here);
        notice("the coordinator (pid " + std::to_string(pid) + ") " + line);
      } else if (seen == coordinator_standby::seen::taking_over) {
        coordinating_ = false, taken_elsewhere_ = true;
        notice(line);
      }
      return;
    }
    switch (standby_.turn(line)) {
      case coordinator_standby::step::wait:
        return;
      case coordinator_standby::step::gave_up:
        lose_coordinator(worker{0, -1, false}, line);
        return;
      case coordinator_standby::step::taken:
        coordinating_ = false, taken_elsewhere_ = true;
        notice(line);
        return;
      case coordinator_standby::step::start:
        break;
    }
    port_ = free_port(self_addr_);
    const int fd = ::fcntl(control_.write_fd(), F_DUPFD, 3);
    const auto env = standby_.takeover_env(worker_env(o_, 0, port_, run_id_, fd, 0), self_addr_);
    pid_t pid = -1;
    bool forked = false;
    try {
      pid = fork_worker(o_, env, fd);
      forked = pid > 0;
      if (!forked) pid = spawn_worker(o_, env);
    } catch (const std::exception& e) {
      if (fd >= 0) ::close(fd);
      failed_code_ = 1;
      stop(std::string("cannot start a coordinator to take the run over: ") + e.what());
      return;
    }
    if (fd >= 0) ::close(fd);
    bool had = false;
    for (auto& w : ws_)
      if (w.rank == 0) w.pid = pid, w.live = true, had = true;
    if (!had) ws_.push_back({0, pid});  // another node's coordinator until now
    coordinating_ = true, taken_elsewhere_ = false;
    notice(standby_.started(pid, port_, forked));
  }

  // Rank 0 was killed; or `w` lost it (coordinator_lost_exit). With
  // healing, on node 0, that is taken for rank 0 stopped answering only
  // once no other worker here lives (each saw the same): one worker alone
  // may be the one cut off, and rank 0 heals it.
  bool coordinator_gone(const worker& w, int st, int code) const {
    if (w.rank == 0) return WIFSIGNALED(st);
    if (code != coordinator_lost_exit) return false;
    if (!heal_) return true;
    if (!coordinating_) return false;  // rank 0 may start it again on its own node
    for (const auto& x : ws_)
      if (x.live && x.rank != 0) return false;
    return true;
  }

  // Rank 0's process is gone (`w` is rank 0), or stopped answering (`w`
  // lost it): a rank 0 still alive here is killed (it must never command
  // again), and every other worker sees the loss and stops by itself
  // (exit coordinator_lost_exit); SIGKILL after the grace.
  void lose_coordinator(const worker& w, const std::string& what) {
    lost_ = true;
    failed_code_ = coordinator_lost_exit;
    std::string line = what + (w.rank == 0 ? ": the run lost its coordinator" : ": it lost the coordinator");
    for (auto& r0 : ws_)
      if (r0.rank == 0 && r0.live) {
        end_for_good(r0);
        line += "; killed " + std::string(o_.apart ? "the coordinator" : "rank 0") + " (pid " + std::to_string(r0.pid) +
                "), which stopped answering";
      }
    const size_t others = count_live(ws_);
    notice(line +
           (o_.apart ? " (its process holds the supervisor and the store)"
                     : " (rank 0's process holds the supervisor and the store)") +
           (others ? "; the other " + std::to_string(others) + " worker" + (others > 1 ? "s stop by themselves" : " stops by itself") +
                         ", exit " + std::to_string(coordinator_lost_exit)
                   : std::string()));
    stopping_ = true;
    deadline_ = clock::now() + o_.grace;
    // Under etcd a worker would wait for a takeover that never comes.
    if (standby_.active()) signal_live(ws_, SIGTERM);
  }

  // Stops the live workers: SIGTERM now, SIGKILL after the grace.
  void stop(const std::string& why) {
    notice(why);
    stopping_ = true;
    deadline_ = clock::now() + o_.grace;
    signal_live(ws_, SIGTERM);
  }

  void expire_replacements() {
    for (auto& w : ws_)
      if (w.awaiting && !stopping_ && clock::now() >= w.replace_by) {
        w.awaiting = false;
        failed_code_ = 1;
        stop(name(w.rank) + " was not replaced within " +
             std::to_string(o_.replace_wait.count()) + " ms; stopping the others");
      }
  }

  // A line from rank 0: "heal" (its supervisor heals from now on),
  // "respawn R G" (start rank R again for generation G; on the node whose
  // launcher started the coordinator only) or
  // "dropped R" (the run goes on without rank R).
  void obey(const std::string& line) {
    std::istringstream is(line);
    std::string verb;
    int rank = -1, generation = -1;
    is >> verb;
    if (verb == "heal") {
      heal_ = true;
      return;
    }
    if (verb == "dropped" && (is >> rank) && rank > 0 && rank < world_) {
      drop(rank);
      return;
    }
    if (verb != "respawn" || !(is >> rank >> generation) || rank <= 0 || rank >= world_ || generation <= 0 ||
        !coordinating_ || stopping_) {
      if (!stopping_) notice("ignored a line from rank 0: '" + line + "'");
      return;
    }
    respawn(rank, generation);
  }

  // A worker rank 0 took for dead (stopped, or cut off) that still lives.
  static void end_for_good(worker& w) {
    ::kill(-w.pid, SIGKILL);
    ::kill(w.pid, SIGKILL);
    ::waitpid(w.pid, nullptr, 0);
    w.live = false;
  }

  // Rank 0's supervisor went on without rank R: not waited for, and not a
  // failure (a stopped one, taken for dead, goes for good). Said once: a
  // plan after a generation called off names the earlier dead again.
  void drop(int rank) {
    if (!dropped_.insert(rank).second) return;
    for (auto& w : ws_) {
      if (w.rank != rank) continue;
      if (w.live) end_for_good(w);
      w.awaiting = false;
    }
    notice(boss() + " goes on without " + name(rank));
  }

  void respawn(int rank, int generation) {
    // A rank of another node has no worker here until node 0 starts it.
    size_t at = 0;
    while (at < ws_.size() && ws_[at].rank != rank) ++at;
    const bool remote = node_of(o_, rank) != o_.node_rank;
    if (at == ws_.size()) ws_.push_back({rank, -1, false});
    auto& w = ws_[at];
    if (w.live) {  // stopped, or cut off: it goes for good first
      end_for_good(w);
      notice(name(rank) + " (pid " + std::to_string(w.pid) +
             ") was taken for dead by " + (o_.apart ? "the coordinator" : "rank 0") + "; killed it");
    }
    bool forked = false;
    try {
      // The store is the coordinator's here: node 0's master, or this
      // node's own address once its standby took the run over.
      launch_options at = o_;
      at.master_addr = self_addr_;
      auto env = worker_env(at, rank, port_, run_id_, -1, generation);
      w.pid = fork_worker(o_, env);
      forked = w.pid > 0;
      if (!forked) w.pid = spawn_worker(o_, std::move(env));
    } catch (const std::exception& e) {
      failed_code_ = 1;
      stop(std::string("cannot start a replacement: ") + e.what());
      return;
    }
    w.live = true;
    w.awaiting = false;
    w.generation = generation;
    notice("started " + name(rank) + " again" +
           (remote ? " on this node, in place of node " + std::to_string(node_of(o_, rank)) + "'s" : std::string()) +
           " (pid " + std::to_string(w.pid) + ", generation " + std::to_string(generation) +
           (forked ? ", forked from the launcher)" : ")"));
  }

  void escalate() {
    if (!stopping_ || killed_ || clock::now() < deadline_) return;
    notice(std::to_string(count_live(ws_)) + " worker(s) still running " + std::to_string(o_.grace.count()) +
           (lost_ ? " ms after the coordinator was lost" : " ms after SIGTERM") + "; sending SIGKILL");
    signal_live(ws_, SIGKILL);
    killed_ = true;
  }

  // Until a worker may have ended, a signal came or rank 0 wrote. Capped:
  // a SIGCHLD that raced the waitpid loop costs at most this.
  void wait() {
    auto timeout = std::chrono::milliseconds(standby_.standing_by() ? 20 : 200);
    if (stopping_ && !killed_)
      timeout = std::min(timeout, std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - clock::now()) +
                                      std::chrono::milliseconds(1));
    for (int s : sigs_.wait(std::max(timeout, std::chrono::milliseconds(0)), control_.read_fd())) {
      if (!got_signal_) got_signal_ = s;
      notice("got " + signal_name(s) + "; forwarding it to " + std::to_string(count_live(ws_)) + " worker(s)");
      signal_live(ws_, s);
    }
  }

  const launch_options& o_;
  uint16_t port_;  // the store's (a coordinator that takes over gets a new one)
  const std::string run_id_;
  const int world_;
  signal_scope sigs_;  // before the first spawn: a signal from then on is not lost
  control_pipe control_;
  std::vector<worker> ws_;
  std::set<int> dropped_;  // the ranks rank 0 went on without
  bool heal_ = false;     // rank 0 said "heal"
  bool coordinating_ = false;  // this launcher started the coordinator that runs the run (node 0, or a takeover)
  bool taken_elsewhere_ = false;  // another node's standby took the run over
  int got_signal_ = 0;    // the first SIGINT/SIGTERM this process got
  int failed_code_ = -1;  // the first failing worker's exit code
  bool stopping_ = false, killed_ = false;
  bool lost_ = false;  // the coordinator (rank 0) was lost: the others stop by themselves
  clock::time_point deadline_{};
  coordinator_standby standby_;  // launch --coordinator etcd://: a standby for the coordinator
  std::string self_addr_;  // where a coordinator started here listens
};

}  // namespace

int run_workers(const launch_options& o) {
  if (o.nprocs < 1) throw std::invalid_argument("run_workers: nprocs must be >= 1");
  if (o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw std::invalid_argument("run_workers: node_rank must be in 0 .. nnodes-1");
  if (o.nnodes > 1 && o.master_port == 0)
    throw std::invalid_argument("run_workers: every node must name the same master_port");
  const uint16_t port = o.master_port ? o.master_port : free_port(o.master_addr);
  node_run run(o, port,
               "actorpipe-" + std::to_string(::getpid()) + "-" + std::to_string(clock::now().time_since_epoch().count()));
  return run.run();
}

}  // namespace actorpipe
