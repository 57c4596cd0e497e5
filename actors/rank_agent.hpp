#pragma once
// The agent of a rank other than 0: it carries out, in its process, what
// rank 0's supervisor runs (actors/rank_host.hpp). For each generation it
// joins the rendezvous, builds this process's stages from the plan's
// boundary (its own memory, a donor's, disk), forms the channel and groups
// and connects to every rank (actors/rank_context.hpp); then it serves
// until rank 0 says heal (the next generation) or stop.
//
//                 run
//                  |
//                  v
//   +--------> joining ---- a step failed -----------> failed (its error)
//   |              |
//   |              v
//   |          serving ---- stop(code) --------------> closing: confirmed in
//   |              |   \                               the store; done (0) or
//   |   heal(g):   |    \                              peer_stopped (code)
//   |   the stages |     \-- rank 0's node gone -----> lost (naming it)
//   |   go         |
//   +--------------+
#include "actors/rank_host.hpp"

namespace actorpipe::rank_detail {

/// Runs a rank other than 0 under its agent until rank 0 says stop; the
/// agent publishes the rank's directory itself (`start`'s dir and port are
/// its to fill). Throws peer_stopped when rank 0 ended the run with a
/// failure, rendezvous_error when a step of a generation failed or rank 0
/// is gone.
void run_agent(rank_runtime& rt, const rank_start& start);

/// `e` as the coordinator's loss (run_errc::coordinator_lost, exit 5) when
/// it is not a verdict of the run's own (run_error, peer_stopped, a config
/// error) and rank 0's store, which is in rank 0's process, no longer
/// answers at env's master address; else `e`. Only for a rank other than
/// 0 that has reached the store (rt.store) or was started for a later
/// generation (a replacement, asked for while the store listened):
/// before, a refused store is a master not there yet.
std::exception_ptr as_coordinator_loss(const rank_runtime& rt, const rank_env& env, const std::string& where,
                                       const std::string& checkpoint_dir, std::exception_ptr e);

/// From now on, an exception that ends this process on a thread of its
/// own (LibTorch's store client throws std::system_error on a thread of its
/// own when the store's process dies: std::terminate) is taken for the
/// coordinator's loss when rank 0's store no longer answers: the line and
/// exit 5 instead of an abort. Any other goes on to the default handler.
void exit_5_on_a_lost_store(const rank_env& env, const std::string& where, const std::string& checkpoint_dir);

}  // namespace actorpipe::rank_detail
