// forward-first: the worked example of docs/CUSTOM_SCHEDULE.md, which shows
// this file, its class in builtin.hpp and its entry in registry.cpp
// verbatim (tests/apps/custom_schedule_test checks that they match).
#include "runtime/schedule/policies/builtin.hpp"

namespace actorpipe {

std::optional<op_id> forward_first_policy::next(const stage_view& v) const {
  const int bound = 2 * (v.stages - v.rank);  // twice 1F1B's in-flight limit
  if (!v.fwd_ready->empty() && v.in_flight() < bound)
    return op_id{op_kind::F, v.fwd_ready->lowest(), 0};
  if (!v.bwd_ready->empty())  // lowest first: gradients accumulate in order
    return op_id{op_kind::B, v.bwd_ready->lowest(), 0};
  return std::nullopt;  // nothing it may run: wait for a message
}

}  // namespace actorpipe
