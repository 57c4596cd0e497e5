#include "runtime/model/adamw.hpp"

#include <stdexcept>
#include <string>

namespace actorpipe {

adamw::adamw(const std::vector<at::Tensor>& params, const torch::optim::AdamOptions& options,
             std::vector<double> decay)
    : torch::optim::Adam(params, torch::optim::AdamOptions(options).weight_decay(0)), decay_(std::move(decay)) {
  if (decay_.size() != params.size())
    throw std::invalid_argument("adamw: " + std::to_string(decay_.size()) + " decays for " +
                                std::to_string(params.size()) + " parameters");
}

at::Tensor adamw::step(LossClosure closure) {
  {
    torch::NoGradGuard no_grad;
    const auto& group = param_groups().front();
    const double lr = group.options().get_lr();
    const auto& params = group.params();
    // torch's param.mul_(1 - lr * weight_decay), before the moments; a
    // parameter without a gradient is left alone, as torch skips it.
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].grad().defined() && decay_[i] != 0) params[i].mul_(1 - lr * decay_[i]);
  }
  return torch::optim::Adam::step(std::move(closure));
}

std::vector<double> adamw_decays(const optimizer_config& o, const std::vector<at::Tensor>& params) {
  std::vector<double> out;
  out.reserve(params.size());
  for (const auto& p : params) out.push_back(o.decay_1d || p.dim() >= 2 ? o.weight_decay : 0.0);
  return out;
}

}  // namespace actorpipe
