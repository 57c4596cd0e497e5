#pragma once
// A discrete-event simulation of a pipeline step, driven by the same policy
// objects as the stage actors. Ops cost what the cost model says; a message
// sent when an op ends arrives `comm` later, and a stage sees every arrival
// of time t before it chooses at time t (the lock-step device's rule), so
// with uniform costs the simulated order is the real actors' order.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "messages/ops.hpp"
#include "runtime/schedule/policy.hpp"

namespace actorpipe {

/// Op durations in arbitrary units. A full backward (policies that do not
/// split it) costs b + w; split-backward policies run b (input gradient)
/// and w (weight gradient) as two ops.
struct cost_model {
  double f = 1.0;     ///< forward
  double b = 1.0;     ///< backward, input-gradient part
  double w = 0.0;     ///< backward, weight-gradient part
  double comm = 0.0;  ///< latency of an activation or gradient hop
  /// The device runs an overlapped F and B (OVERLAP_F_B) at once, as two
  /// CUDA streams can: the pair takes max(F, B). Otherwise (a CPU, the
  /// lock-step device) one runs after the other: F + B.
  bool overlap = false;
  /// Multiplies every op of stage r (uneven stages); empty = all 1.
  std::vector<double> stage_factor;
  /// Extra latency of one message: the input of `op` (F: an activation, B:
  /// a gradient) sent by stage `from` to stage `to`. Empty = none. A lock-
  /// step run's delay faults, in rounds, replay here as the same delays.
  std::function<double(int from, int to, op_id op)> message_delay;
};

/// The largest op cost and stage factor: a step's sums over its ops stay
/// finite, and far from where a double stops telling ticks apart.
constexpr double max_cost = 1e9;
constexpr double max_stage_factor = 1e6;

/// Parses "F=1,B=2,W=1,comm=0.05" (any subset), each in [0, max_cost].
/// Throws std::invalid_argument.
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
  /// Per stage, parallel to timeline: 1 on the F of an overlapped F and B
  /// (OVERLAP_F_B), which the next op of the stage is.
  std::vector<std::vector<char>> overlapped;
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

/// The most ops one simulation fires: about 2.4 GB of timeline, a few tens
/// of seconds. S=128, M=1024 with zb-v's 2 chunks is 786k ops.
constexpr double max_sim_ops = 5e7;

/// "" when S stages x M microbatches x `chunks` (each F, B and, split, W)
/// is within max_sim_ops; else why not, with the ops and the memory they
/// would take. Computed in double: no size overflows it.
std::string simulation_too_large(int64_t stages, int64_t microbatches, int chunks, bool split_backward);

/// Simulates one step of `schedule` (a registered policy). Throws
/// std::invalid_argument for an unknown schedule or bad sizes (a grid
/// beyond max_sim_ops included).
sim_result simulate(const std::string& schedule, int stages, int microbatches,
                    const cost_model& cost = {}, int chunks = 1, int max_inflight = 0);
/// The same for a policy object (one instance serves every stage).
sim_result simulate(const policy& pol, int stages, int microbatches, const cost_model& cost = {});

}  // namespace actorpipe
