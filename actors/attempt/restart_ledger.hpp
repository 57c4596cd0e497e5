#pragma once
// Supervision's decision after a failed attempt, from the error's code and
// fields alone: restart from the last good step boundary, or give up (the
// failure itself, or restart_limit when restarts come too often).
#include <cstdint>
#include <string>
#include <vector>

#include "messages/errors.hpp"
#include "runtime/config/config.hpp"
#include "runtime/observe/metrics.hpp"

namespace actorpipe {

struct restart_decision {
  bool retry = false;
  /// !retry: what ends the run (the failure as it came, or a restart_limit
  /// one that says what failed and how often).
  run_failure failure;
  /// retry: the step boundary the next attempt starts after (-1: the start).
  int64_t resume_after = -1;
  /// retry: the faults left for the re-run (those that ended a stage at or
  /// before the failed step have fired).
  std::vector<fault_spec> faults;
};

/// The restarts of one supervised run.
class restart_ledger {
public:
  /// After an attempt failed with `f`, its boundary at `last_good_step`:
  /// stage_died and op_threw are restarted unless more than
  /// supervision.max_restarts fall within supervision.window_steps (counting
  /// this one); every other code ends the run. A retry is counted.
  restart_decision decide(const run_failure& f, const config& cfg, int64_t last_good_step);

  /// Restarts so far.
  int count() const { return static_cast<int>(failed_steps_.size()); }

private:
  std::vector<int64_t> failed_steps_;  ///< the step each restart re-ran
};

/// The faults a re-run keeps: those that end a stage at or before step
/// `fired_through` have fired.
std::vector<fault_spec> faults_left(const std::vector<fault_spec>& faults, int64_t fired_through);

/// A supervised run's result over its generations: `steps` (every
/// generation's, up to the boundary the next one rolled back to) replace
/// the last generation's; steps skipped for a NaN (other than `skip_steps`,
/// dropped on purpose) are listed; what earlier generations noticed up to
/// `resumed_after` (where the last one started) and `notices` come first;
/// the restarts and the work they lost.
void merge_generations(train_result& r, std::vector<step_record> steps, std::vector<std::string> notices,
                       const std::vector<int64_t>& skip_steps, int64_t resumed_after, int restarts, double recovery_s);


/// The notice of restart number `n` after `f`: where it rolled back to and
/// how much work (`lost_s`, from the boundary to the failure) was lost.
std::string restart_notice(int n, const run_failure& f, int64_t resumed_after, double lost_s);

}  // namespace actorpipe
