#pragma once
// A discrete-event simulation of a pipeline step, driven by the same policy
// objects as the stage actors. Ops cost what the cost model says; a message
// sent when an op ends arrives `comm` later, and a stage sees every arrival
// of time t before it chooses at time t (the lock-step device's rule), so
// with uniform costs the simulated order is the real actors' order.
#include <string>
#include <vector>

#include "messages/ops.hpp"
#include "runtime/policy.hpp"

namespace actorpipe {

/// Op durations in arbitrary units. A full backward (policies that do not
/// split it) costs b + w; split-backward policies run b (input gradient)
/// and w (weight gradient) as two ops.
struct cost_model {
  double f = 1.0;     ///< forward
  double b = 1.0;     ///< backward, input-gradient part
  double w = 0.0;     ///< backward, weight-gradient part
  double comm = 0.0;  ///< latency of an activation or gradient hop
  /// Multiplies every op of stage r (uneven stages); empty = all 1.
  std::vector<double> stage_factor;
};

/// Parses "F=1,B=2,W=1,comm=0.05" (any subset). Throws std::invalid_argument.
cost_model parse_cost(const std::string& text);

struct sim_op {
  op_id op;
  double start = 0.0;
  double end = 0.0;
};

struct sim_result {
  int stages = 0;
  int microbatches = 0;
  std::string schedule;
  double makespan = 0.0;
  std::vector<std::vector<sim_op>> timeline;  ///< per stage, in firing order
  std::vector<double> busy;                   ///< per stage
  std::vector<int> peak_stash;                ///< most microbatch-chunks in flight per stage
  int chunks = 1;                             ///< virtual stages per stage
  placement_kind placement = placement_kind::round_robin;
  bool split_backward = false;                ///< B and W are separate ops
  bool deadlock = false;
  /// On deadlock: the per-stage op grid with the stuck ops marked.
  std::string diagnosis;

  /// Idle time / makespan of stage r, and over all stages.
  double stage_bubble(int r) const;
  double bubble() const;
  /// The fired op sequence of each stage.
  std::vector<std::vector<op_id>> order() const;
};

/// Simulates one step of `schedule` (a registered policy). Throws
/// std::invalid_argument for an unknown schedule or bad sizes.
sim_result simulate(const std::string& schedule, int stages, int microbatches,
                    const cost_model& cost = {}, int chunks = 1, int max_inflight = 0);
/// The same for a policy object (one instance serves every stage).
sim_result simulate(const policy& pol, int stages, int microbatches, const cost_model& cost = {});

}  // namespace actorpipe
