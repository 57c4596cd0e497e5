#pragma once
// Inside runtime/dist/launcher (not a public header): starting one worker
// process, spawned (posix_spawn) or forked from the launcher itself, with
// torchrun's environment for its rank.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dist/launch/launcher.hpp"

namespace actorpipe::launcher_detail {

/// The node whose launcher starts `rank` first.
// With a coordinator apart, `rank` is the run's: 0 the coordinator (node
// 0), worker RANK r is r + 1.
inline int node_of(const launch_options& o, int rank) {
  return o.apart ? (rank == 0 ? 0 : (rank - 1) / o.nprocs) : rank / o.nprocs;
}

/// The inherited environment with RANK, WORLD_SIZE, MASTER_ADDR, ... of
/// `rank` put in (see run_workers); `control_fd` >= 0 is passed as
/// ACTORPIPE_LAUNCHER_FD, `generation` > 0 as ACTORPIPE_GENERATION.
std::vector<std::string> worker_env(const launch_options& o, int rank, uint16_t port, const std::string& run_id,
                                    int control_fd, int generation);

/// posix_spawn of o.exe o.worker_args in its own process group, default
/// signals and an empty mask. Throws std::runtime_error when it cannot.
pid_t spawn_worker(const launch_options& o, std::vector<std::string> env);

/// The same forked from this process, which then runs o.in_process under
/// the name "actorpipe r<RANK>" (launch_options::in_process); -1 when not
/// forked (no in_process, or more than one thread here).
pid_t fork_worker(const launch_options& o, std::vector<std::string> env, int keep_fd = -1);

}  // namespace actorpipe::launcher_detail
