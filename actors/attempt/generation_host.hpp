#pragma once
// Where a supervisor's generations run (actors/supervisor/supervisor_actor.hpp): this
// process alone (local_host.hpp), or the processes of a multi-process run
// as rank 0 sees them (multi_process_host.hpp). The supervisor's states and
// decisions' order are the same for both; a host builds a generation where
// its stages live, decides what a failure leaves to start the next one
// from, and stops its own part.
#include <caf/actor.hpp>
#include <caf/duration.hpp>
#include <caf/fwd.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/attempt/attempt_setup.hpp"
#include "actors/attempt/run_options.hpp"

namespace actorpipe {

/// What a supervisor keeps of a run over its generations. The driver's
/// thread appends a step's record as it closes; the supervisor and its
/// host read it once the driver has answered.
struct supervision_log {
  std::vector<step_record> steps;  ///< every generation's, up to the boundary the next rolled back to
  std::vector<eval_record> evals;  ///< the same for the evaluations during training
  std::chrono::steady_clock::time_point boundary_at = std::chrono::steady_clock::now();  ///< the last close
  std::vector<std::string> notices;  ///< one per restart or heal
  double recovery_s = 0.0;           ///< work lost to them
  int restarts = 0;
  /// The supervisor's states in the order it took them ("running",
  /// "healing", "running", "closing"): what a test reads to see that a run
  /// in one process and one over many went the same way.
  std::vector<std::string> states;
};

/// One generation, as its host built it.
struct generation {
  uint32_t number = 0;
  attempt_plan plan;
  std::vector<caf::actor> stages;  ///< every replica's (replica d, stage r at d S + r), here or elsewhere
  caf::actor driver;
  /// This process's actors that the supervisor monitors and waits for
  /// before the next state (what the host stops itself is not among them).
  std::vector<caf::actor> local;
  int64_t resumed_after = -1;  ///< the boundary in memory it started after (-1: none, the run's start)
  int64_t resumed_from = -1;   ///< the step its weights include at its start (a checkpoint's on disk too)
  std::string backend;         ///< the replicas' allreduce ("gloo", "nccl"; "" at dp 1)
};

/// After a generation failed: start the next one, or give up with `failure`.
struct host_decision {
  bool retry = false;
  run_failure failure;
};

class generation_host {
public:
  virtual ~generation_host() = default;

  /// Whether every step boundary is kept to restart from
  /// (supervision.max_restarts > 0): the log is then merged at the end.
  virtual bool supervised() const = 0;

  /// How long a stage may take to answer the supervisor's wire and weights
  /// requests (a stage in another process may be gone without a word).
  virtual caf::duration request_timeout() const { return caf::infinite; }

  /// Builds generation `number` (0 first, then one more per restart) and
  /// spawns its driver, which appends every closed step to `log` when
  /// supervised. Throws what set-up throws (config_error for bad input,
  /// rendezvous_error for a rank that cannot join).
  virtual generation start(caf::actor_system& sys, uint32_t number, supervision_log& log) = 0;

  /// The generation failed with `f` (which the host may annotate): restart
  /// (the notice is in `log`) or give up. Called while its actors still run.
  virtual host_decision decide(generation& g, run_failure& f, supervision_log& log) = 0;

  /// Tells this process's actors of `g` to go: those in g.local are then
  /// waited for; the host waits for any others itself.
  virtual void stop(generation& g) = 0;

  /// The run is over: `out` (after the last generation) completed, and the
  /// other processes told the exit code (0: done).
  virtual void complete(train_output& out) { (void)out; }
  virtual void finish(int code) { (void)code; }
};

}  // namespace actorpipe
