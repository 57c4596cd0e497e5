#pragma once
// The supervisor: the one actor that spawns a run's stage actors and its
// driver, monitors every one of them, decides a restart, and owns the
// generation number that every message of an attempt carries (its epoch).
//
//                      run
//                       |
//                       v
//   +--------------> running ----- the driver's run, then replica 0's
//   |                   |   \      weights, came back
//   |                   |    \------------------------------> closing
//   |   the attempt failed                                       |
//   |                   |                                         | every
//   |   restartable, and no more than supervision.max_restarts    | actor
//   |   within window_steps (restart_ledger)?                      | down
//   |        yes /             \ no                                 v
//   |           v               v                         reply the output
//   |        healing         giving_up
//   |           |               |
//   +-----------+               +-- every actor down: reply the failure
//   every actor of the old
//   generation is down: spawn the next one from the last step boundary
//
// Every state waits for the down message of every actor of its generation
// before it goes on, so no actor (and no message) of an old generation
// survives into the next one, and none is alive once the caller has the
// reply. A stage blocked in a collective of a failed generation is told to
// give up (its abandon flag), and the groups of that generation are kept
// for the life of the process (destroying one would wait on it).
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/fwd.hpp>

#include "actors/trainer.hpp"

namespace actorpipe {

/// Runs cfg in this process under a supervisor actor, in one actor system
/// that lives for the whole run: what run_training returns for a run whose
/// stages all live here. Rethrows what set-up threw (config_error for bad
/// input) and throws a run_error when the run fails for good.
train_output run_supervised(const config& cfg, const train_options& opts);

}  // namespace actorpipe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::train_output)
