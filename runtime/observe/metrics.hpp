#pragma once
// What a training run measured, and the summary figures derived from it.
#include <cstdint>
#include <string>
#include <vector>

#include "messages/payloads.hpp"
#include "runtime/schedule/placement.hpp"

namespace actorpipe {

/// One optimizer step.
struct step_record {
  int64_t step = 0;
  double loss = 0.0;       ///< mean cross-entropy over the batch
  double lr = 0.0;         ///< learning rate this step used
  double step_s = 0.0;     ///< wall time: first microbatch in -> optimizer done
  double pipeline_s = 0.0; ///< first microbatch in -> last backward done
  double bubble = 0.0;     ///< 1 - sum(busy) / (S * pipeline_s)
  double grad_norm = 0.0;  ///< global norm before clipping
  bool skipped = false;    ///< a NaN or an infinity: no update this step
  double train_accuracy = -1.0;  ///< of this step's batch, as the forward saw it
  std::string notice;      ///< what went wrong in this step (a NaN), as in train_result::notices
  int64_t start_ns = 0;    ///< since the run started
  /// Data parallel: mean allreduce time of a stage, and the share of all
  /// allreduce time spent while some stage still computed the step.
  double allreduce_s = 0.0;
  double allreduce_hidden = 0.0;
  /// Per stage, replica after replica (replica d, stage r at d * S + r).
  std::vector<stage_stats> stages;
};

/// One evaluation of the held-out split during training (eval.every).
struct eval_record {
  int64_t step = 0;        ///< updates done before it
  double loss = 0.0;       ///< mean cross-entropy per position
  double accuracy = 0.0;   ///< share of positions whose argmax is the target
  int64_t positions = 0;   ///< positions (samples, or tokens) evaluated
  double seconds = 0.0;    ///< its wall time, outside every step's
};

/// A whole run.
struct train_result {
  std::string schedule;
  int stages = 0;
  int microbatches = 0;
  int chunks = 1;  ///< virtual stages per stage
  placement_kind placement = placement_kind::round_robin;
  int dp = 1;                  ///< data-parallel replicas
  std::string allreduce;       ///< their backend ("gloo", "nccl"); empty when dp = 1
  bool replicas_verified = false;  ///< every step's checksums compared equal
  bool split_backward = false;     ///< B is the input gradient, W separate (zb-*)
  std::vector<std::string> checkpoints;  ///< files written, in order
  double checkpoint_s = 0.0;             ///< time spent writing them
  int64_t resumed_from = -1;             ///< the checkpoint's step when resumed
  std::vector<std::string> notices;      ///< one line each: what went wrong and what was done
  std::vector<int64_t> skipped_steps;    ///< steps dropped for a NaN or an infinity
  int restarts = 0;                      ///< supervised restarts after a stage died
  /// The supervisor's states in the order it took them (running, healing,
  /// closing, ...): the same for a run in one process and over several.
  std::vector<std::string> supervisor_states;
  double recovery_s = 0.0;               ///< wall time of the attempts that failed
  std::vector<std::string> devices;  ///< per stage, replica 0's
  /// Every (replica, stage)'s device, [replica][stage], as the rank that
  /// runs it resolved it (a multi-process run); empty: `devices` for
  /// every replica.
  std::vector<std::vector<std::string>> replica_devices;
  std::vector<std::pair<int, int>> partition;  ///< per virtual stage
  std::vector<step_record> steps;
  double test_accuracy = -1.0;  ///< -1 when there is no test split
  double test_loss = 0.0;
  uint64_t duplicates = 0;
  /// eval.every: the held-out evaluations during training, in order of
  /// their step (one per step: a re-run step's evaluation replaces it).
  std::vector<eval_record> evals;
  /// Throughput (runtime/observe/throughput.hpp): what a step trains on,
  /// in `unit`s ("tokens" for token data, "samples" otherwise), the model
  /// FLOPs of a step (forward and backward), and the summed peak FLOP/s
  /// of the devices the run uses (0: unknown, no MFU).
  int64_t step_units = 0;
  std::string unit = "samples";
  double step_flops = 0.0;
  double peak_flops = 0.0;
};

/// 1 - sum(busy_ns) / (stages * span_ns).
double measured_bubble(const std::vector<stage_stats>& stages, int64_t span_ns);

/// Mean step time, skipping the first step (warm-up) when there are more.
double mean_step_seconds(const train_result& r);
/// Mean measured bubble, with the same warm-up rule.
double mean_bubble(const train_result& r);
/// Injected message faults and the recovery they caused, over every step
/// and stage of a run.
struct message_fault_counts {
  uint64_t sent_twice = 0;
  uint64_t held_back = 0;
  uint64_t dropped = 0;
  uint64_t asked_again = 0;
  uint64_t resent = 0;
  uint64_t stale = 0;  ///< messages of an earlier attempt or generation, dropped on arrival
};
message_fault_counts count_message_faults(const train_result& r);

/// A hash of the run's event trace without its times: per step, whether it
/// was skipped and, per stage, the faults it injected (which messages a
/// probability picks depends on faults.seed and the message's ids, never on
/// timing); then the restarts. Runs of one config and fault seed agree.
/// With `with_order`, every stage's ops in firing order too: runs agree
/// where that order does not depend on timing (pipeline.lockstep makes
/// sure of it), as in deterministic simulation testing.
uint64_t trace_hash(const train_result& r, bool with_order = false);

/// Per stage (replica-major), its speed against the median stage: the
/// median of the stages' typical op times over its own, where a stage's
/// typical op time is the median duration of each op kind, weighted by
/// the kind's count (an outlier op does not move it). A stage slowed 3x
/// scores about 0.33. Steps after the first; empty without ops.
std::vector<double> stage_speeds(const train_result& r);

/// Largest peak_stash_bytes (and count) per stage over all steps.
std::vector<int64_t> peak_stash_bytes(const train_result& r);
std::vector<int> peak_stash_count(const train_result& r);

/// Records `e` in `evals` (ordered by step), replacing an evaluation of the
/// same step (a generation that re-ran from a boundary evaluates it again).
void record_eval(std::vector<eval_record>& evals, const eval_record& e);

/// Drops the evaluations past a roll-back to after step `resume_after`
/// (those of more than resume_after + 1 updates).
void drop_evals_after(std::vector<eval_record>& evals, int64_t resume_after);

}  // namespace actorpipe
