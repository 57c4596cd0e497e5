#pragma once
// Every schedule's facts in one table: the policy it builds and what the
// config, the CLI, the trainer, the simulator and the report need to know
// about it. Adding a schedule is one entry in registry.cpp plus its policy
// file; no other file names a schedule.
#include <string>
#include <string_view>
#include <vector>

#include "runtime/schedule/policy.hpp"

namespace actorpipe {

struct schedule_traits {
  std::string name;          ///< registry name ("1f1b")
  std::string display;       ///< how errors name it ("async (PipeDream-2BW)")
  policy_factory make;
  /// Chunks per stage: exactly `fixed_chunks` when > 0, else any count from
  /// pipeline.virtual_stages, `default_chunks` when the config gives none.
  int fixed_chunks = 1;
  int default_chunks = 1;
  std::string chunks_why;    ///< why a fixed count (> 1), for errors
  bool one_microbatch = false;          ///< runs the whole batch as one microbatch (naive)
  bool microbatches_in_stage_groups = false;  ///< M a multiple of S (Megatron's interleaved)
  bool microbatches_at_least_stages = false;  ///< M >= S (two weight versions suffice)
  /// Further limits on stages and microbatches (DualPipeV's even ranks
  /// and M >= 2S): "" when the shape runs, else why not. Null: none.
  std::string (*shape_error)(int stages, int microbatches) = nullptr;
  bool takes_max_inflight = false;      ///< pipeline.max_inflight bounds its open microbatches
  bool trains = true;        ///< the config may pick it (false: simulate only)
  bool flushes = true;       ///< false: no step boundary (no checkpoint, dp, clipping)
  /// The paper's per-stage order of one step; null when it has none.
  std::vector<op_id> (*canonical)(int stages, int rank, int microbatches, int chunks) = nullptr;
  /// Idle fraction of a step at equal op costs (see canonical.hpp).
  double (*bubble)(int stages, int microbatches, int chunks) = nullptr;
  std::string formula;       ///< the bubble's formula, for labels

  bool any_chunks() const { return fixed_chunks == 0; }
};

/// Every registered schedule, in registry order.
const std::vector<schedule_traits>& schedules();
/// A schedule by name ("1f1b"; "1f1b+recompute" finds 1f1b); nullptr if unknown.
const schedule_traits* find_schedule(std::string_view name);
/// Names the config accepts: the synchronous schedules in registry order,
/// then those without a flush.
std::vector<std::string> trainable_schedule_names();
/// Names of the trainable schedules with a property, joined as prose
/// ("interleaved, zb-v and greedy").
std::string trainable_schedules_where(bool (*has)(const schedule_traits&));

}  // namespace actorpipe
