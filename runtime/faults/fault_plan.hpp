#pragma once
// The faults one stage injects, as verdicts: the stage asks, at each point
// where a fault can strike, what the config wants done, and never looks at
// a fault's kind itself. Deterministic: a message is picked by faults.seed
// and its ids, never by timing.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "messages/ops.hpp"
#include "runtime/faults/fault_kind.hpp"

namespace actorpipe {

class fault_plan {
public:
  fault_plan() = default;
  /// `faults`: those that concern this stage (its own, and every message
  /// fault); `seed`: faults.seed; rank and replica pick the draws.
  fault_plan(std::vector<fault_spec> faults, uint64_t seed, int rank, int replica);

  /// What happens to the message that carries op `op`'s output (F: an
  /// activation, B: a gradient) of step `step` to stage `to_rank`.
  struct send_verdict {
    bool drop = false;     ///< never sent
    bool twice = false;    ///< sent twice (the receiver drops the copy)
    double delay_ms = 0;   ///< held back this long
  };
  send_verdict on_send(int64_t step, op_id op, int to_rank) const;
  /// An injected exception's text when op `op` of step `step` must throw.
  std::optional<std::string> throw_in(int64_t step, op_id op) const;
  /// kill_stage when the stage must die right after firing `op` of step
  /// `step`, kill_process (stop_process) when its whole process must die
  /// (stop); nothing otherwise.
  std::optional<fault_kind> kill_after(int64_t step, op_id op) const;
  /// kill_process or stop_process with `after_op: update` at `step`: right
  /// after the stage's optimizer update of that step.
  std::optional<fault_kind> kill_after_update(int64_t step) const;
  /// True when microbatch `mb` of step `step` must carry a NaN at `where`
  /// (update: the step's update, whatever `mb`).
  bool nan_at(int64_t step, int mb, nonfinite_site where) const;
  /// stale_message: the step from which on the first message sent (in an
  /// attempt after the first) goes out again under the attempt before's
  /// epoch; nothing when no such fault concerns this stage.
  std::optional<int64_t> stale_copy_from() const;
  /// How many times its own time every op takes (slow_stage; 1: no change).
  double slow_factor() const { return slow_factor_; }
  bool empty() const { return faults_.empty(); }

private:
  struct armed {
    fault_spec spec;
    std::optional<op_id> op;  ///< spec.op parsed
  };
  std::vector<armed> faults_;
  uint64_t seed_ = 0;
  int rank_ = 0, replica_ = 0;
  double slow_factor_ = 1.0;
};

}  // namespace actorpipe
