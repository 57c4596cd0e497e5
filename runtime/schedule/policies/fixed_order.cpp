#include "runtime/schedule/policies/fixed_order.hpp"

#include <algorithm>
#include <stdexcept>

namespace actorpipe {

fixed_order_policy::fixed_order_policy(std::vector<std::vector<op_id>> order, placement_kind placement,
                                       std::vector<std::vector<char>> overlap)
    : order_(std::move(order)), placement_(placement), overlap_(std::move(overlap)) {
  for (const auto& rank : order_)
    for (const auto& op : rank) {
      if (op.kind == op_kind::W) split_ = true;
      chunks_ = std::max(chunks_, op.chunk + 1);
    }
  if (overlap_.size() > order_.size()) throw std::invalid_argument("fixed order: overlap flags for more ranks than ops");
  for (size_t r = 0; r < overlap_.size(); ++r) {
    if (overlap_[r].size() > order_[r].size())
      throw std::invalid_argument("fixed order: rank " + std::to_string(r) + " has more overlap flags than ops");
    for (size_t i = 0; i < overlap_[r].size(); ++i)
      if (overlap_[r][i] && (i + 1 >= order_[r].size() || order_[r][i].kind != op_kind::F ||
                             order_[r][i + 1].kind != op_kind::B))
        throw std::invalid_argument("fixed order: rank " + std::to_string(r) + " op " + std::to_string(i) + " (" +
                                    to_string(order_[r][i]) +
                                    ") is marked overlapped but is not an F followed by a B");
  }
}

namespace {

bool ready_in(const stage_view& v, const op_id& op) {
  const auto* ready = op.kind == op_kind::F   ? v.fwd_ready
                      : op.kind == op_kind::B ? v.bwd_ready
                                              : v.w_ready;
  return op.chunk < v.chunks && ready && ready[op.chunk].contains(op.mb);
}

size_t position(const stage_view& v) { return static_cast<size_t>(v.fwd_done + v.bwd_done + v.w_done); }

}  // namespace

bool program_overlaps(const stage_view& v, const std::vector<char>& overlap) {
  const size_t pos = position(v);
  return pos < overlap.size() && overlap[pos];
}

std::optional<op_id> program_next(const stage_view& v, const std::vector<op_id>& ops,
                                  const std::vector<char>* overlap) {
  const size_t pos = position(v);
  if (pos >= ops.size() || !ready_in(v, ops[pos])) return std::nullopt;
  // An overlapped F waits for its B: the two start as one action.
  if (overlap && program_overlaps(v, *overlap) && !ready_in(v, ops[pos + 1])) return std::nullopt;
  return ops[pos];
}

bool fixed_order_policy::overlaps_next(const stage_view& v) const {
  return v.rank < static_cast<int>(overlap_.size()) && program_overlaps(v, overlap_[v.rank]);
}

std::optional<op_id> fixed_order_policy::next(const stage_view& v) const {
  if (v.rank >= static_cast<int>(order_.size())) return std::nullopt;
  return program_next(v, order_[v.rank], v.rank < static_cast<int>(overlap_.size()) ? &overlap_[v.rank] : nullptr);
}

}  // namespace actorpipe
