#pragma once
// Schedules as PyTorch pipelining's CSV: one row per rank, one cell per op
// such as 0F0 or 1B3: {stage index}{F | B (full backward) | I (input
// gradient) | W (weight gradient)}{microbatch}. The stage index is the
// virtual stage: rank r, chunk c -> r + c * S.
#include <string>
#include <vector>

#include "messages/ops.hpp"

namespace actorpipe {

/// Per-rank op lists to CSV text. With `split_backward`, B ops are written
/// as I (input gradient), as PyTorch does when W is a separate op.
std::string to_schedule_csv(const std::vector<std::vector<op_id>>& order, int stages,
                            bool split_backward = false);

/// Parses CSV text (from a file named `source`, for messages) for `stages`
/// ranks. Empty cells are skipped; I cells become B ops of a split backward
/// and then every row needs its W ops too. Throws std::invalid_argument
/// naming the source, row and column of a bad cell, or a row that does not
/// hold every op of `microbatches` exactly once.
std::vector<std::vector<op_id>> parse_schedule_csv(const std::string& text, int stages,
                                                   int microbatches,
                                                   const std::string& source = "schedule.csv");

}  // namespace actorpipe
