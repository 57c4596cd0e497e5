#pragma once
// The driver's bookkeeping as plain functions: closing a step (the global
// norm, the non-finite verdict, the step's record), the watchdog's ledger
// and op grid, and the run errors the driver ends a run with. No actor in
// here: driver_actor.cpp sends and receives, these decide and compute.
#include <ATen/core/Tensor.h>
#include <caf/error.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/driver/driver_actor.hpp"
#include "messages/errors.hpp"
#include "messages/payloads.hpp"
#include "runtime/config/config.hpp"
#include "runtime/data/data.hpp"
#include "runtime/observe/metrics.hpp"
#include "runtime/schedule/placement.hpp"

namespace actorpipe {

using driver_clock = std::chrono::steady_clock;

// -- who --------------------------------------------------------------------

/// "stage 2", or with replicas "replica 1 stage 2": the stage at `index`
/// (replica d, rank r at d * per_replica + r).
std::string stage_label(int index, int per_replica, int dp);

/// The stage at `index` went down while the driver was at `step`, for
/// `reason` (`rendered` as the actor system renders it): stage_died when it
/// was killed (an exit reason), op_threw when an op threw inside it.
run_failure stage_down(int index, int per_replica, int dp, int64_t step, const caf::error& reason,
                       const std::string& rendered);

// -- closing a synchronous step -----------------------------------------------

/// The global gradient norm over every parameter in model order (virtual
/// stage by virtual stage), as torch.nn.utils.clip_grad_norm_ computes it.
/// With replicas, replica 0's reports (index = rank) hold the global ones.
at::Tensor global_grad_norm(const std::vector<grads_report>& reports, const placement& plc);

/// What a non-finite global norm means for the step.
struct nonfinite_verdict {
  std::string notice;       ///< one line: where it was first seen, and what is done
  std::string stop_reason;  ///< empty: the step is skipped and the run goes on
};

/// `skipped` counts the run's skipped steps, this one included.
nonfinite_verdict judge_nonfinite(const std::vector<grads_report>& reports, int dp, int64_t step,
                                  const config& cfg, size_t skipped);

/// supervision.on_nonfinite applied to a non-finite value (`seen`: "step
/// 7: non-finite value ...", where it was): skip, stop, or stop for too
/// many skipped steps (`skipped`, this one included).
nonfinite_verdict nonfinite_policy(const std::string& seen, const config& cfg, size_t skipped);

/// check_updates: `nonfinite` holds, by stage index, the tensor each
/// stage's update of `step` left with a NaN or an infinity ("" none).
nonfinite_verdict judge_nonfinite_update(const std::vector<std::string>& nonfinite, int dp, int64_t step,
                                         const config& cfg, size_t skipped);

/// Async: stage `rank`'s update of `step` left `tensor` non-finite.
std::string async_nonfinite_update(int rank, int64_t step, const std::string& tensor);

/// What the step's record needs besides the reports.
struct step_close {
  int64_t step = 0;
  double lr = 0.0;
  double grad_norm = 0.0;
  bool skipped = false;
  std::string notice;
  int64_t pipeline_ns = 0;
  int64_t start_ns = 0;  ///< the step's start, since the run's origin
};

/// The closed step's record. Moves every report's stats into it and adds
/// their duplicates to `duplicates`.
step_record close_step(std::vector<grads_report>& reports, const step_close& c, uint64_t& duplicates);

/// Allreduce time per stage and how much of it overlapped the step's
/// compute (the other stages' cool-down).
void allreduce_figures(step_record& rec);

/// Whether the step after `step` may start before the optimizer acks: not
/// where the boundary is also a snapshot, a check, a stop or the end.
bool may_overlap(const driver_setup& setup, int64_t step, bool stopping);

// -- evaluation ----------------------------------------------------------------

/// The messages of an evaluation after `after` updates: the held-out split
/// of `d` in batches of `batch_size` rows, the first `batches` of them (0:
/// all), in order.
std::vector<eval_msg> eval_batches(const dataset& d, int64_t batch_size, int64_t batches, int64_t after);

/// The record of an evaluation whose answers sum to `sum`.
eval_record close_eval(const eval_result& sum, int64_t after, double seconds);

/// After the step before `next` was applied: does a checkpoint go to disk?
bool checkpoint_due(const config& cfg, int64_t next, bool stopping);

/// verify_replicas: the first replica whose checksum differs from replica
/// 0's, as a replicas_diverged failure; code none when all agree.
run_failure replica_divergence(const std::vector<uint64_t>& checksums, int dp, int64_t step);

// -- closing an async step ----------------------------------------------------

/// Every stage stepped its weights for one step; `reps` holds their
/// reports. Steps overlap: a step's time runs from the previous close.
step_record close_async_step(std::vector<grads_report>& reps, const train_config& train,
                             driver_clock::time_point last_close, driver_clock::time_point now,
                             driver_clock::time_point origin, uint64_t& duplicates);

// -- the watchdog --------------------------------------------------------------

/// How often the watchdog asks (a quarter of the limit, at least 20 ms).
std::chrono::microseconds watchdog_period(double limit_s);

/// Ops fired over all stages at the last check, and when that count last
/// moved.
struct watchdog_ledger {
  int64_t fired_seen = -1;
  driver_clock::time_point progress_at;

  /// One round of answers (`answered[i]`: stage i answered with rows[i]).
  /// True when nothing moved for `limit_s`: a hang.
  bool hung(const std::vector<stage_status>& rows, const std::vector<char>& answered, driver_clock::time_point now,
            double limit_s);
};

/// The hang's text: every stage's row of the op grid, the stuck ones
/// (not done, or not answering) marked.
std::string op_grid(double limit_s, const std::vector<stage_status>& rows, const std::vector<char>& answered, int dp);

// -- the other ways a run stops -----------------------------------------------

run_failure hang_failure(int64_t step, std::string grid);

/// on_nonfinite: stop (or too many skipped) after `step`; names the last
/// checkpoint written, if any.
run_failure nonfinite_stop_failure(int64_t step, const std::string& reason, const std::vector<std::string>& checkpoints);

/// The checkpoint after `step` could not be written (`why`).
run_failure checkpoint_write_failure(int64_t step, const std::string& why, const std::vector<std::string>& checkpoints);

}  // namespace actorpipe
