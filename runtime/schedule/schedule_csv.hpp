#pragma once
// Schedules as PyTorch pipelining's CSV (torch.distributed.pipelining,
// schedules.py: _Action, _dump_csv, _load_csv): one row per rank, one cell
// per action, empty cells for bubbles.
//
// Cells are {stage index}{action}{microbatch}. The stage index is the
// virtual stage (runtime/schedule/placement): rank r, chunk c -> r + c * S for
// round-robin chunks (looped / interleaved schedules), and r, 2S - 1 - r for
// a V (ZBVZeroBubble, DualPipeV); which one a file uses is read from it.
//
// Import (read_schedule_csv) accepts every action torch writes:
//   F, B, I, W       compute: F forward, B backward, I input gradient,
//                    W weight gradient. A schedule with any I or W splits
//                    the backward: its I cells are actorpipe's B ops. A B
//                    whose W (same stage, same microbatch) is also in the
//                    row is the input gradient alone, as an I (the Zero
//                    Bubble paper's notation: F, B, W); any other B is a
//                    full backward, which in a split schedule (as DualPipeV
//                    writes for some chunks) becomes its I immediately
//                    followed by its W. Without I or W, B is the full
//                    backward. A W needs a B or I of its stage and
//                    microbatch in the row.
//   (xF m;yB n)OVERLAP_F_B
//                    one overlapped action: the F, then the B (or I) of the
//                    other chunk, with the F's overlap flag set (a full B in
//                    a split schedule: F, I, W, the flag on the F).
//   REDUCE_GRAD      the stage's data-parallel gradient reduction
//                    ({stage}REDUCE_GRAD, no microbatch). Accepted anywhere
//                    after the stage's last backward (B, or W when split) in
//                    its row, where torch's _add_reduce_grad puts it; earlier
//                    is an error. actorpipe reduces a rank's gradients once,
//                    after its last op, for all of its chunks, which is at
//                    or after every such point.
//   SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD
//                    checked (well formed, stage index in range and on the
//                    row's rank, a neighbour to send to or receive from,
//                    microbatch in range) and ignored: actorpipe sends each
//                    activation and gradient when its op ends and does not
//                    shard parameters. One notice per kind.
// Errors are std::invalid_argument naming the source, row and column.
//
// Export (to_schedule_csv) writes what actorpipe runs: compute_only (F, I
// or B, W, and OVERLAP_F_B compounds for overlapped pairs), or
// compute_comms, which adds REDUCE_GRAD after each stage's last backward
// (as _add_reduce_grad) and lowers the sends and receives as torch's
// _add_send_recv does, so _load_csv(..., format="compute_comms") reads it.
// No UNSHARD / RESHARD is written (no FSDP here).
#include <string>
#include <vector>

#include "messages/ops.hpp"
#include "runtime/schedule/placement.hpp"

namespace actorpipe {

enum class schedule_csv_format { compute_only, compute_comms };

struct schedule_csv_options {
  /// B ops are written as I (input gradient), as PyTorch does when W is a
  /// separate op.
  bool split_backward = false;
  placement_kind placement = placement_kind::round_robin;
  /// overlap[r][i] set: op i of rank r (an F) and op i + 1 (a B) are one
  /// OVERLAP_F_B action. Empty: none.
  std::vector<std::vector<char>> overlap;
  schedule_csv_format format = schedule_csv_format::compute_only;
};

/// Per-rank op lists to CSV text. Throws std::invalid_argument for
/// compute_comms when the order cannot be lowered (an op that waits for a
/// receive no rank ever sends, as torch's lowering reports it).
std::string to_schedule_csv(const std::vector<std::vector<op_id>>& order, int stages,
                            const schedule_csv_options& options);
/// compute_only, as before.
std::string to_schedule_csv(const std::vector<std::vector<op_id>>& order, int stages,
                            bool split_backward = false,
                            placement_kind placement = placement_kind::round_robin);

/// "compute" or "comms" (the --export-format values); throws
/// std::invalid_argument naming the value otherwise.
schedule_csv_format parse_schedule_csv_format(const std::string& text);

/// An action kind the import accepted but does not run as an op.
struct schedule_csv_notice {
  std::string action;  ///< "SEND_F", "UNSHARD", "REDUCE_GRAD", ...
  int count = 0;       ///< cells of that kind
  std::string first;   ///< "source:row:col" of the first one
  std::string message; ///< one line: what the import did with them
};

struct imported_schedule {
  std::vector<std::vector<op_id>> order;       ///< per rank, in the file's order
  std::vector<std::vector<char>> overlap;      ///< per rank, parallel to order (1 on an overlapped F)
  placement_kind placement = placement_kind::round_robin;
  bool split_backward = false;                 ///< the file has I or W
  int chunks = 1;
  /// Per rank, the chunks whose REDUCE_GRAD the file names, in its order.
  std::vector<std::vector<int>> reduce_grad;
  /// One per action kind that was ignored or mapped (not a plain op), in
  /// the order the kinds first appear.
  std::vector<schedule_csv_notice> notices;
};

/// Parses CSV text (from a file named `source`, for messages) for `stages`
/// ranks and `microbatches`; see the top of this file. Empty cells and
/// blank lines are skipped. Throws std::invalid_argument naming the
/// source, row and column of a bad cell, or a row that does not hold every
/// op of every microbatch and chunk exactly once.
imported_schedule read_schedule_csv(const std::string& text, int stages, int microbatches,
                                    const std::string& source = "schedule.csv");

/// The ops of read_schedule_csv only (overlap flags and notices dropped);
/// the detected placement goes to `*detected` when given.
std::vector<std::vector<op_id>> parse_schedule_csv(const std::string& text, int stages,
                                                   int microbatches,
                                                   const std::string& source = "schedule.csv",
                                                   placement_kind* detected = nullptr);

}  // namespace actorpipe
