#include "runtime/model/weight_versions.hpp"

#include <stdexcept>
#include <string>

namespace actorpipe {

std::vector<at::Tensor> weight_versions::copy(const std::vector<at::Tensor>& live) {
  std::vector<at::Tensor> out;
  for (const auto& p : live) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

weight_versions::weight_versions(const std::vector<at::Tensor>& live, int64_t steps) : steps_(steps) {
  for (int64_t t = 0; t < std::min<int64_t>(2, steps); ++t) versions_.emplace(t, copy(live));
  peak_ = static_cast<int>(versions_.size());
}

const std::vector<at::Tensor>& weight_versions::for_step(int64_t t, int rank) const {
  auto it = versions_.find(t);
  if (it == versions_.end())  // cannot happen with M >= S (config checks it)
    throw std::logic_error("async: step " + std::to_string(t) + " reached stage " + std::to_string(rank) +
                           " before its weight version existed");
  return it->second;
}

void weight_versions::step(int64_t t, torch::optim::Optimizer& opt, const std::vector<at::Tensor>& live, double lr) {
  {
    torch::NoGradGuard no_grad;
    auto& leaves = versions_.at(t);
    for (size_t i = 0; i < live.size(); ++i) live[i].mutable_grad() = leaves[i].grad();
    for (auto& group : opt.param_groups()) group.options().set_lr(lr);
    opt.step();
    for (const auto& p : live) p.mutable_grad() = at::Tensor();
  }
  versions_.erase(t);
  if (t + 2 < steps_) versions_.emplace(t + 2, copy(live));
  peak_ = std::max(peak_, static_cast<int>(versions_.size()));
}

}  // namespace actorpipe
