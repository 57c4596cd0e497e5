// 1F1B: a backward whenever one is ready; a forward only while fewer than
// S - rank microbatches are in flight. The bound is both the warm-up length
// and the activation memory bound (OneFlow's counted buffers).
#include "runtime/policies/builtin.hpp"

namespace actorpipe {

std::optional<op_id> one_f_one_b_policy::next(const stage_view& v) const {
  if (!v.bwd_ready->empty()) return op_id{op_kind::B, v.bwd_ready->lowest(), 0};
  if (!v.fwd_ready->empty() && v.in_flight() < v.stages - v.rank)
    return op_id{op_kind::F, v.fwd_ready->lowest(), 0};
  return std::nullopt;
}

}  // namespace actorpipe
