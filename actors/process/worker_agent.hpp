#pragma once
// The agent of a rank other than 0: it carries out, in its process, what
// rank 0's supervisor runs (actors/supervisor/multi_process_host.hpp). For each generation it
// joins the rendezvous, builds this process's stages from the plan's
// boundary (its own memory, a donor's, disk), forms the channel and groups
// and connects to every rank (actors/process/process_context.hpp); then it serves
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
#include "actors/process/process_context.hpp"

namespace actorpipe::rank_detail {

/// Runs a rank other than 0 under its agent until rank 0 says stop; the
/// agent publishes the rank's directory itself (`start`'s dir and port are
/// its to fill). Throws peer_stopped when rank 0 ended the run with a
/// failure, rendezvous_error when a step of a generation failed or rank 0
/// is gone.
void run_agent(process_runtime& rt, const process_start& start);

}  // namespace actorpipe::rank_detail
