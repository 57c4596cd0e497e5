#pragma once
// Schedules as PyTorch pipelining's CSV: one row per rank, one cell per op
// such as 0F0 or 1B3: {stage index}{F | B (full backward) | I (input
// gradient) | W (weight gradient)}{microbatch}. The stage index is the
// virtual stage (runtime/placement): rank r, chunk c -> r + c * S for
// round-robin chunks, and the V's order for zb-v.
#include <string>
#include <vector>

#include "messages/ops.hpp"
#include "runtime/placement.hpp"

namespace actorpipe {

/// Per-rank op lists to CSV text. With `split_backward`, B ops are written
/// as I (input gradient), as PyTorch does when W is a separate op.
std::string to_schedule_csv(const std::vector<std::vector<op_id>>& order, int stages,
                            bool split_backward = false,
                            placement_kind placement = placement_kind::round_robin);

/// Parses CSV text (from a file named `source`, for messages) for `stages`
/// ranks. Empty cells are skipped; I cells become B ops of a split backward
/// and then every row needs its W ops too. Throws std::invalid_argument
/// naming the source, row and column of a bad cell, or a row that does not
/// hold every op of `microbatches` exactly once (for every chunk). Stage
/// indices of S and above are chunks; whether they go round-robin or in a
/// V is read from the file and stored in `*detected` when given.
std::vector<std::vector<op_id>> parse_schedule_csv(const std::string& text, int stages,
                                                   int microbatches,
                                                   const std::string& source = "schedule.csv",
                                                   placement_kind* detected = nullptr);

}  // namespace actorpipe
