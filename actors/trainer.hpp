#pragma once
// One training run: build the model, place the stages, spawn the actors,
// train, evaluate, collect the weights, shut everything down.
#include <functional>
#include <stdexcept>
#include <vector>

#include "messages/payloads.hpp"
#include "runtime/config.hpp"
#include "runtime/metrics.hpp"
#include "runtime/placement.hpp"

namespace actorpipe {

struct train_options {
  /// Called after every optimizer step, on the driver's thread.
  std::function<void(const step_record&)> on_step;
  /// A given per-rank op order (e.g. from `simulate --export`) to run as a
  /// fixed policy instead of cfg.pipeline.schedule; empty = the schedule.
  std::vector<std::vector<op_id>> fixed_order;
  placement_kind fixed_placement = placement_kind::round_robin;
  /// Data parallel: compare the replicas' weight checksums after every step
  /// and fail the run on the first difference.
  bool verify_replicas = false;
  /// Test hook: this replica skips its allreduce (-1: none does).
  int skip_allreduce_replica = -1;
  /// Steps whose update is dropped on purpose (the clean twin of a run that
  /// skipped them for a NaN).
  std::vector<int64_t> skip_steps;
  /// Resume from the newest loadable checkpoint in this directory.
  std::string resume_dir;
  /// Where a one-line notice goes (e.g. NCCL falling back to Gloo).
  std::function<void(const std::string&)> on_notice;
};

/// The run hung: no op fired for supervision.watchdog_s. what() holds the
/// per-stage op grid, the stuck stages marked.
struct stuck_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Supervision gave up: more restarts within supervision.window_steps than
/// supervision.max_restarts allows. what() says what failed and where.
struct restart_limit_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct train_output {
  train_result result;
  named_params weights;  ///< final parameters, global names, CPU
};

/// Runs cfg to completion. Throws config_error for bad input found while
/// loading (data, init_from) and std::runtime_error if a stage fails.
train_output run_training(const config& cfg, const train_options& opts = {});

}  // namespace actorpipe
