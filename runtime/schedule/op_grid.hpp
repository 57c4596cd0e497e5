#pragma once
// The op grid of a stuck step, one row per stage, printed the same way for
// the watchdog (a hang of the real stages) and the simulator (a deadlock
// of a policy): what the stage fired, what is ready but not chosen, what
// is here but waits for an earlier microbatch, and what the first missing
// input of each kind waits for.
#include <string>
#include <vector>

#include "messages/ops.hpp"
#include "runtime/schedule/placement.hpp"
#include "runtime/schedule/ready_board.hpp"

namespace actorpipe {

/// "LABEL: fired [F0 F1]", followed, when `pending` is given (the stage's
/// step is not done), by its ready, queued and waiting ops.
std::string op_grid_row(const std::string& label, const std::vector<op_id>& fired, const ready_board* pending,
                        const placement& plc, int rank);

}  // namespace actorpipe
