// PipeDream-2BW's firing rule is 1F1B's: a forward while fewer than S - rank
// microbatches are in flight, else a backward. What makes it
// asynchronous is not the rule but the stream it runs over: the stage
// sees every step's microbatches as one sequence and never waits for a
// flush (actors/stage_actor keeps the weight versions).
#include "runtime/schedule/policies/builtin.hpp"

namespace actorpipe {

std::optional<op_id> async_policy::next(const stage_view& v) const {
  if (!v.fwd_ready->empty() && v.in_flight() < v.stages - v.rank)
    return op_id{op_kind::F, v.fwd_ready->lowest(), 0};
  if (!v.bwd_ready->empty()) return op_id{op_kind::B, v.bwd_ready->lowest(), 0};
  return std::nullopt;
}

}  // namespace actorpipe
