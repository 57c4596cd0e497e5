#pragma once
// The driver feeds microbatches to stage 0 and closes each step: it waits
// for every stage's grads_report, reduces the global gradient norm in stage
// order, tells every stage to apply, and moves on. It never tells a stage
// which op to fire.
//
//   idle --(run)--> training --(last step applied)--> evaluating --> done
//   any state --(a stage went down, a hang, a stop)--> failed (the run's
//   promise gets the error, a run_errc of messages/errors.hpp)
//
// The bookkeeping (closing a step, the watchdog's ledger, the errors) is
// plain functions in actors/driver/driver_logic.hpp.
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/fwd.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/files/checkpoint.hpp"
#include "runtime/config/config.hpp"
#include "runtime/data/data.hpp"
#include "runtime/observe/metrics.hpp"

namespace actorpipe {

struct driver_setup {
  config cfg;
  std::shared_ptr<const dataset> data;
  /// Every stage actor, replica after replica: replica d, stage r at d S + r.
  std::vector<caf::actor> stages;
  int dp = 1;
  bool verify_replicas = false;  ///< compare weight checksums after every step
  int microbatches = 1;
  std::chrono::steady_clock::time_point origin;
  /// Called on the driver's thread after every step (progress output).
  std::function<void(const step_record&)> on_step;
  /// Called on the driver's thread after every evaluation during training.
  std::function<void(const eval_record&)> on_eval;
  std::function<void(int64_t)> on_decided;  // trainer.hpp's train_options
  std::function<bool()> regroup;            // the same
  /// Which chunk of which stage is which virtual stage (the norm's order).
  placement plc;
  /// Async schedule: no apply round; stages step themselves and report
  /// each step; the driver keeps two steps of microbatches in flight.
  bool async = false;
  /// Supervision: the weights and optimizer states at the last step
  /// boundary, kept in memory for a restart (null: none kept).
  std::shared_ptr<checkpoint> last_good;
  /// Steps to drop the update of, on purpose.
  std::vector<int64_t> skip_steps;
  /// Resuming: the first step to run (the checkpoint's step + 1).
  int64_t first_step = 0;
  uint32_t epoch = 0;  ///< stamped on the microbatches it sends (the stages check it)
};

/// Spawns the driver. Send it run_atom; it answers with a train_result.
caf::actor spawn_driver(caf::actor_system& sys, driver_setup setup);

}  // namespace actorpipe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::train_result)
