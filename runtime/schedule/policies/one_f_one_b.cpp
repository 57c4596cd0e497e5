// 1F1B: a forward while fewer than S - rank microbatches are in flight,
// else a backward. The bound is both the warm-up length and the activation
// memory bound (OneFlow's counted buffers). Preferring the forward below the
// bound is Megatron's steady state, one forward after each backward: when a
// faster downstream stage returns a gradient early, taking that backward
// first would drain the stage's in-flight work and leave it idle later.
// Either op is taken when the other is not ready.
#include "runtime/schedule/policies/builtin.hpp"

namespace actorpipe {

std::optional<op_id> one_f_one_b_policy::next(const stage_view& v) const {
  if (!v.fwd_ready->empty() && v.in_flight() < v.stages - v.rank)
    return op_id{op_kind::F, v.fwd_ready->lowest(), 0};
  if (!v.bwd_ready->empty()) return op_id{op_kind::B, v.bwd_ready->lowest(), 0};
  return std::nullopt;
}

}  // namespace actorpipe
