#pragma once
// The supervisor: the one actor that runs a run's generations, whether its
// stages all live in this process or in several (rank 0's). A host builds
// each generation where its stages live (actors/attempt/generation_host.hpp); the
// supervisor wires and runs it, monitors this process's actors of it, and
// decides with the host what a failure leads to. It owns the generation
// number that every message of a generation carries (its epoch).
//
//                      run
//                       |
//                       v
//   +--------------> running ----- the driver's run, then replica 0's
//   |                   |   \      weights, came back
//   |                   |    \------------------------------> closing
//   |   the generation failed                                    |
//   |                   |                                         | every
//   |   the host decides (a restart within supervision's          | actor
//   |   max_restarts and window_steps, a heal from memory, a       | down
//   |   process started again), while the actors still run         v
//   |        yes /             \ no                         reply the output
//   |           v               v
//   |        healing         giving_up
//   |           |               |
//   +-----------+               +-- every actor down: reply the failure
//   every actor of the old
//   generation here is down: the host starts the next one from the
//   boundary it chose
//
// Every state waits for the down message of every actor of its generation
// in this process before it goes on, so no actor (and no message) of an
// old generation survives into the next one, and none is alive once the
// caller has the reply. The states it took are in the result
// (train_result::supervisor_states).
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/fwd.hpp>

#include <functional>
#include <memory>

#include "actors/attempt/generation_host.hpp"
#include "actors/attempt/run_options.hpp"

namespace actorpipe {

/// Runs a run's generations under a supervisor actor in `sys`, on the host
/// that `make_host` builds (on the supervisor's own thread). Rethrows what
/// set-up threw (config_error for bad input) and throws a run_error when
/// the run fails for good. The output's result lists the supervisor's
/// states in order.
train_output supervise(caf::actor_system& sys, std::function<std::unique_ptr<generation_host>()> make_host,
                       const train_options& opts);

}  // namespace actorpipe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::train_output)
