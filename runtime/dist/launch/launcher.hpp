#pragma once
// `actorpipe launch`: N local worker processes with torchrun's environment
// (its standalone mode, or one node of several with torchrun's static
// rendezvous flags), SIGINT/SIGTERM forwarded to them, and fail-fast: the
// first worker to fail stops the others. No torch, no CAF: plain POSIX
// processes.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace actorpipe {

/// A worker's exit code when it lost rank 0's process (the coordinator:
/// the supervisor and the store); exit_code_for(run_errc::coordinator_lost).
constexpr int coordinator_lost_exit = 5;
/// A standby coordinator that lost the election in etcd (another took the
/// run over) stands down with this code (launch --coordinator etcd://).
constexpr int standby_lost_exit = 6;

struct launch_options {
  int nprocs = 1;  ///< workers on this node (torchrun's --nproc-per-node)
  int nnodes = 1;  ///< nodes in the run, each with its own launcher and nprocs workers
  int node_rank = 0;  ///< this node: its workers are ranks node_rank*nprocs .. +nprocs-1
  std::string exe;                       ///< run as argv[0] = exe, then worker_args
  std::vector<std::string> worker_args;  ///< the same for every worker
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 0;  ///< 0: a free port, found by binding port 0 on master_addr
  /// After the first failure: how long the others get after SIGTERM before
  /// SIGKILL.
  std::chrono::milliseconds grace{5000};
  /// One line per event (a worker failed, a signal was forwarded, SIGKILL
  /// needed); nothing when null.
  std::function<void(const std::string&)> on_notice;
  /// How long a dead worker waits for rank 0's "respawn" (after "heal").
  std::chrono::milliseconds replace_wait{30000};
  /// Set: every worker (the first ones and each replacement) is forked
  /// from this process, which is the same program already loaded (a fork
  /// server: no exec, no dynamic linking, no static initialisation, about
  /// 0.4 s of CPU less each with LibTorch), and the child runs
  /// in_process(argv) with the worker's environment, then leaves with its
  /// result. Its name (/proc/PID/comm) is "actorpipe r<RANK>" ("actorpipe
  /// c": the coordinator apart; "actorpipe j": a joiner). Only while this
  /// process has one thread; otherwise, and when null, it is spawned.
  std::function<int(int argc, char** argv)> in_process;
  /// The workers join a running job whose store is at master_addr:
  /// master_port (ACTORPIPE_JOIN=1; RANK 1 of WORLD_SIZE 2 stands in until
  /// its rank 0 gives each its place: runtime/dist/launch/join.hpp).
  bool join = false;
  /// --coordinator process: a coordinator process that holds no stage runs
  /// the supervisor and the store on node 0, apart from the workers
  /// (ACTORPIPE_COORDINATOR: "self" there, "apart" in the workers, which
  /// keep RANK 0 .. nnodes * nprocs - 1 and WORLD_SIZE nnodes * nprocs;
  /// every node's launcher is given it). Inside the run,
  /// and in rank 0's lines to this launcher, it is rank 0 and worker RANK r
  /// is rank r + 1 (runtime/dist/launch/rank_env.hpp). A worker's death, RANK 0's
  /// included, is then healed like any other; the coordinator's ends the run
  /// as rank 0's does.
  bool apart = false;
  /// --coordinator etcd://...: the coordinator apart keeps the run's record
  /// there (ACTORPIPE_ETCD) under the name `run_id` (ACTORPIPE_RUN_ID);
  /// runtime/dist/coord/run_record.hpp. Empty: none.
  std::string etcd;
  std::string run_id;
};

/// Starts `nprocs` workers, each in its own process group with stdin,
/// stdout and stderr inherited and this environment added to (or replacing
/// the same names in) the inherited one: RANK = ROLE_RANK = node_rank *
/// nprocs + i, LOCAL_RANK = i, WORLD_SIZE = ROLE_WORLD_SIZE = nnodes *
/// nprocs, LOCAL_WORLD_SIZE = nprocs, GROUP_RANK = node_rank,
/// MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT=0,
/// TORCHELASTIC_MAX_RESTARTS=0, TORCHELASTIC_RUN_ID. An inherited
/// TORCHELASTIC_USE_AGENT_STORE is removed: there is no agent store, the
/// workers must create the c10d store themselves.
///
/// SIGINT and SIGTERM sent to this process are forwarded (each time) to every
/// live worker's process group, and it keeps waiting for them. The first
/// worker to exit non-zero or die by a signal makes it SIGTERM the others,
/// wait up to `grace`, then SIGKILL what is left. Except when the
/// coordinator is lost (rank 0 dies, or a worker exits
/// coordinator_lost_exit because rank 0 stopped answering): a rank 0 still
/// alive is SIGKILLed at once (it never commands again), and the others
/// stop by themselves (SIGKILL after `grace`); the launcher exits
/// coordinator_lost_exit.
///
/// Replacing a worker: each node's first worker (rank 0 on node 0) gets the
/// write end of a pipe in ACTORPIPE_LAUNCHER_FD, and writes lines to it.
/// "heal" says rank 0's supervisor replaces dead workers: from then on a
/// worker other than rank 0 that dies is not a failure at once. On node 0
/// the launcher waits up to `replace_wait` for rank 0's "respawn R G",
/// which SIGKILLs what is left of rank R's process here (a stopped one),
/// reaps it, and starts a new one with the same environment and
/// ACTORPIPE_GENERATION=G (forked, with `in_process`). R may be a rank of
/// another node (one cut off, or whose process died there): node 0 starts
/// it here, with LOCAL_RANK = R mod nprocs and GROUP_RANK 0, because the
/// side that holds the supervisor is the one that goes on. On the other
/// nodes a dead worker is only noted (node 0 starts it again) and the
/// others run on; that node's exit code is then the first dead worker's.
/// A dead worker that is not replaced in time, and rank 0 failing, end the
/// run as above.
///
/// Returns when every worker is reaped: 0 when all exited 0; else the first
/// failing worker's exit code (1 for one killed by a signal); but 130
/// (SIGINT) or 143 (SIGTERM), as shells do, when this process got that
/// signal before any worker failed. Waiting for healthy workers is
/// unbounded (they are training); every wait after a failure is bounded by
/// `grace`, then SIGKILL. Throws std::runtime_error when a worker cannot be
/// started (those already started are killed and reaped first), or when
/// called while another call is running (the signal handlers are
/// process-wide). The handlers it installs are restored before it returns.
int run_workers(const launch_options& opts);

/// "SIGTERM", "SIGKILL", ..., or "signal N".
std::string signal_name(int signo);

}  // namespace actorpipe
