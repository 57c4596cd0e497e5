#include "runtime/policies/fixed_order.hpp"

namespace actorpipe {

std::optional<op_id> fixed_order_policy::next(const stage_view& v) const {
  if (v.rank >= static_cast<int>(order_.size())) return std::nullopt;
  const auto& mine = order_[v.rank];
  const size_t pos = static_cast<size_t>(v.fwd_done + v.bwd_done);
  if (pos >= mine.size()) return std::nullopt;
  const auto& op = mine[pos];
  const auto* ready = op.kind == op_kind::F ? v.fwd_ready : v.bwd_ready;
  if (!ready->contains(op.mb)) return std::nullopt;
  return op;
}

}  // namespace actorpipe
