#pragma once
// pipeline.rebalance, as rank 0's supervisor runs it: every `every` steps
// it reads what the stages measured (each stage's busy time, the step's
// wall time) and says whether the layers move, and where to.
//
// The model (rebalance_partition) takes a stage's time as its speed times
// its layers' cost. That holds for a slower device. A process held to a CPU
// quota runs at full speed again once its work fits the quota, so its busy
// time misleads the model; its stages are measured by their CPU time over
// the quota instead (stage_busy_ms), which holds at any split. A process
// sharing cores with the others has no such measure, so a move may not
// pay. The measured step
// time of every split tried is kept: a split that ran faster than the
// current one by half the threshold is gone back to (and the one left for
// it never again); one tried before is never tried again, and the model is
// heard once from each split. Where the window after the model's move
// measures every stage's speed (busy per unit of cost, over the mean's)
// within the threshold of what the model moved on, or a step as fast as it
// predicted (within the threshold), its prediction holds and the layers
// settle there. Otherwise, once it has moved (it saw a straggler), when
// it has nothing untried to offer and a stage is still above the
// threshold, the splits one layer of cost away are tried in turn, and the
// measured step time decides (a local search).
// Every split is tried at most once, and after 2 x stages moves without a
// gain (a window faster than all before by half the threshold) the layers
// stay: they settle, and never move back and forth. Once settled, two
// windows in a row slower than the first settled one by the threshold (the
// speeds changed) clear what was measured, and the search starts again.
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/model/partition.hpp"

namespace actorpipe {

struct step_record;

/// What a stage is measured by, in ms: its busy time or, its process held
/// to a CPU quota of `quota` cores (0: none), `cpu_ns` over that quota where
/// that is longer: what the work takes at the quota's pace, whether or not
/// it fits this split's steps.
double stage_busy_ms(int64_t busy_ns, double cpu_ns, double quota);

/// stage_busy_ms of each slot of `r`, in its order, `cpu_ns` being the ops'
/// CPU time of every stage of its process (by pid), which share the quota.
/// (A process's other threads, the data plane's and the actor system's,
/// are left out: some of them wait by polling, which spends any quota.)
std::vector<double> stage_busy_ms(const step_record& r);

struct rebalance_move {
  partition_t parts;  ///< the new split
  std::string why;    ///< "stage 1 busy 150 % of the mean over steps 10-12 (...)"
};

class rebalancer {
public:
  /// `costs`: per layer (layer_compute_costs); `every` >= 1; `threshold` > 0.
  rebalancer(std::vector<int64_t> costs, int every, double threshold);

  /// A generation starts running `parts`: the measurements start again.
  void start(const partition_t& parts);

  /// One step done: its number, its wall time and each slot's busy time
  /// (ms; replica after replica, the stages of each in order: a stage
  /// counts as its slowest replica).
  void add(int64_t step, double step_ms, const std::vector<double>& busy_ms);

  /// After every `every` steps added: the move, if the layers should move.
  std::optional<rebalance_move> check();

  /// The mean step time (ms) measured under each split tried.
  const std::map<partition_t, double>& tried() const { return step_ms_; }

private:
  std::vector<int64_t> costs_;
  int every_;
  double threshold_;
  partition_t parts_;
  std::vector<double> busy_;
  double step_sum_ = 0.0;
  int measured_ = 0;
  int64_t from_ = 0, to_ = 0;
  std::map<partition_t, double> step_ms_;
  std::set<partition_t> explored_;  // the splits the model moved away from once
  std::set<partition_t> left_;      // the splits left to go back to a faster one
  size_t misses_ = 0;               // moves since the last gain
  double fastest_ms_ = 0;           // the fastest window yet
  partition_t calm_parts_;          // settled on, with its first window's time
  double calm_ms_ = 0;
  int slow_windows_ = 0;            // windows in a row slower than calm_ms_ by the threshold
  std::vector<double> moved_on_;    // the speeds the model's last move was made on (until measured)
  double promised_ms_ = 0;          // the step time it predicted (the step before x its prediction)
};

}  // namespace actorpipe
