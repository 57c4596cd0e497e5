#include "runtime/faults/finite_watch.hpp"

namespace actorpipe {

void finite_watch::add(op_id op, const at::Tensor& t, int64_t at_ns) {
  // One reduction per op: a NaN or an infinity anywhere in t makes its sum
  // non-finite (a finite float32 tensor whose sum overflows would too: a
  // false alarm that skips one step, never a missed NaN). Half and bfloat16
  // sum in float32, where they cannot overflow.
  const auto type = t.scalar_type();
  sums_.emplace_back(op, type == at::kHalf || type == at::kBFloat16 ? t.detach().sum(at::kFloat) : t.detach().sum());
  at_ns_.push_back(at_ns);
}

std::optional<finite_watch::first_bad> finite_watch::first() const {
  if (sums_.empty()) return std::nullopt;
  std::vector<at::Tensor> flags;
  for (const auto& c : sums_) flags.push_back(c.second);
  auto bad = torch::isfinite(torch::stack(flags)).logical_not().to(torch::kCPU);
  if (!bad.any().item<bool>()) return std::nullopt;
  for (size_t i = 0; i < sums_.size(); ++i)
    if (bad[static_cast<int64_t>(i)].item<bool>()) return first_bad{sums_[i].first, at_ns_[i]};
  return std::nullopt;
}

}  // namespace actorpipe
