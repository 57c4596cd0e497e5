// GPipe: every forward of the step, then every backward (a flush).
#include "runtime/schedule/policies/builtin.hpp"

namespace actorpipe {

std::optional<op_id> gpipe_policy::next(const stage_view& v) const {
  if (!v.fwd_ready->empty()) return op_id{op_kind::F, v.fwd_ready->lowest(), 0};
  // Backwards wait for the flush, so the order does not depend on timing.
  if (v.fwd_done == v.microbatches && !v.bwd_ready->empty())
    return op_id{op_kind::B, v.bwd_ready->lowest(), 0};
  return std::nullopt;
}

}  // namespace actorpipe
