#pragma once
// What a run is asked (train_options), what it gives back (train_output)
// and how it fails (run_error and its kinds): the words every room of
// actors/ uses. The entry point that takes them is actors/trainer.hpp.
#include <functional>
#include <stdexcept>
#include <vector>

#include "messages/errors.hpp"
#include "messages/payloads.hpp"
#include "runtime/config/config.hpp"
#include "runtime/observe/metrics.hpp"
#include "runtime/schedule/placement.hpp"
#include "runtime/dist/launch/rank_env.hpp"

namespace actorpipe {

struct train_options {
  /// Called after every optimizer step, on the driver's thread.
  std::function<void(const step_record&)> on_step;
  /// Called after every evaluation during training (eval.every), on the
  /// driver's thread.
  std::function<void(const eval_record&)> on_eval;
  /// Called when the driver sends a step's applies (every stage's
  /// gradients are in: each will apply it), on the driver's thread.
  std::function<void(int64_t)> on_decided;
  /// Asked at each step boundary before the next step starts, on the
  /// driver's thread: true ends the generation there with run_errc::regroup
  /// (rank 0's supervisor re-places its stages: a process joined).
  std::function<bool()> regroup;
  /// A given per-rank op order (e.g. from `simulate --export`) to run as a
  /// fixed policy instead of cfg.pipeline.schedule; empty = the schedule.
  std::vector<std::vector<op_id>> fixed_order;
  placement_kind fixed_placement = placement_kind::round_robin;
  /// fixed_overlap[r][i] set: op i of rank r (an F) and the B after it
  /// run as one overlapped action (torch's OVERLAP_F_B). Empty: none.
  std::vector<std::vector<char>> fixed_overlap;
  /// Data parallel: compare the replicas' weight checksums after every step
  /// and fail the run on the first difference.
  bool verify_replicas = false;
  /// Test hook: this replica skips its allreduce (-1: none does).
  int skip_allreduce_replica = -1;
  /// The attempt's epoch, stamped on every message of its stages and its
  /// driver: a message of another attempt is dropped. Supervision counts
  /// the attempts from 0.
  uint32_t epoch = 0;
  /// Steps whose update is dropped on purpose (the clean twin of a run that
  /// skipped them for a NaN).
  std::vector<int64_t> skip_steps;
  /// Resume from the newest loadable checkpoint in this directory.
  std::string resume_dir;
  /// Where a one-line notice goes (e.g. NCCL falling back to Gloo).
  std::function<void(const std::string&)> on_notice;
  /// Where this process sits in a multi-process run (world_size 1: every
  /// stage in this process), and the digest of what it runs (the config and
  /// the options that change it), which every rank must share.
  rank_env ranks;
  std::string config_digest;
};

/// A rank other than 0 stopped because rank 0 ended the run with a failure
/// (rank 0 says what failed): code() is rank 0's exit code.
class peer_stopped : public std::runtime_error {
public:
  peer_stopped(const std::string& what, int code) : std::runtime_error(what), code_(code) {}
  int code() const noexcept { return code_; }

private:
  int code_;
};

/// A run that failed while training: what() is the text the user reads,
/// code() what happened (exit_code_for(code()) the process's exit code),
/// failure() also where (step, replica, stage).
class run_error : public std::runtime_error {
public:
  explicit run_error(run_failure f) : std::runtime_error(f.text), failure_(std::move(f)) {}
  run_errc code() const noexcept { return failure_.code; }
  const run_failure& failure() const noexcept { return failure_; }

private:
  run_failure failure_;
};

/// The run hung (run_errc::hang): no op fired for supervision.watchdog_s.
/// what() holds the per-stage op grid, the stuck stages marked.
struct stuck_error : run_error {
  using run_error::run_error;
};

/// Supervision gave up (run_errc::restart_limit): more restarts within
/// supervision.window_steps than supervision.max_restarts allows. what()
/// says what failed and where.
struct restart_limit_error : run_error {
  using run_error::run_error;
};

/// Throws `f` as the run_error its code calls for (stuck_error for a hang,
/// restart_limit_error for restart_limit, run_error otherwise).
[[noreturn]] void throw_run_error(run_failure f);

struct train_output {
  train_result result;
  named_params weights;  ///< final parameters, global names, CPU
};

}  // namespace actorpipe
