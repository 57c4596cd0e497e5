#pragma once
// `actorpipe launch`: N local worker processes with torchrun's environment
// (standalone mode, one node), SIGINT/SIGTERM forwarded to them, and
// fail-fast: the first worker to fail stops the others. No torch, no CAF:
// plain POSIX processes.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace actorpipe {

struct launch_options {
  int nprocs = 1;
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
};

/// Starts `nprocs` workers, each in its own process group with stdin,
/// stdout and stderr inherited and this environment added to (or replacing
/// the same names in) the inherited one: RANK = LOCAL_RANK = ROLE_RANK = i,
/// WORLD_SIZE = LOCAL_WORLD_SIZE = ROLE_WORLD_SIZE = nprocs, GROUP_RANK=0,
/// MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT=0,
/// TORCHELASTIC_MAX_RESTARTS=0, TORCHELASTIC_RUN_ID. An inherited
/// TORCHELASTIC_USE_AGENT_STORE is removed: there is no agent store, the
/// workers must create the c10d store themselves.
///
/// SIGINT and SIGTERM sent to this process are forwarded (each time) to every
/// live worker's process group, and it keeps waiting for them. The first
/// worker to exit non-zero or die by a signal makes it SIGTERM the others,
/// wait up to `grace`, then SIGKILL what is left.
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
