#include "runtime/policies/fixed_order.hpp"

#include <algorithm>

namespace actorpipe {

fixed_order_policy::fixed_order_policy(std::vector<std::vector<op_id>> order, placement_kind placement)
    : order_(std::move(order)), placement_(placement) {
  for (const auto& rank : order_)
    for (const auto& op : rank) {
      if (op.kind == op_kind::W) split_ = true;
      chunks_ = std::max(chunks_, op.chunk + 1);
    }
}

std::optional<op_id> fixed_order_policy::next(const stage_view& v) const {
  if (v.rank >= static_cast<int>(order_.size())) return std::nullopt;
  const auto& mine = order_[v.rank];
  const size_t pos = static_cast<size_t>(v.fwd_done + v.bwd_done + v.w_done);
  if (pos >= mine.size()) return std::nullopt;
  const auto& op = mine[pos];
  const auto* ready = op.kind == op_kind::F   ? v.fwd_ready
                      : op.kind == op_kind::B ? v.bwd_ready
                                              : v.w_ready;
  if (op.chunk >= v.chunks || !ready[op.chunk].contains(op.mb)) return std::nullopt;
  return op;
}

}  // namespace actorpipe
