#pragma once
// AdamW as torch.optim.AdamW of PyTorch 1.13 computes it (the single-tensor
// path): each parameter with a gradient is first scaled by
// 1 - lr * weight_decay with the step's rate, then Adam's moments, bias
// corrections (in double) and addcdiv, with no L2 term. It is an Adam to
// everything else here: the same state (step, exp_avg, exp_avg_sq), so
// copies, checkpoints, heals and step_aside treat it as one.
#include <torch/torch.h>

#include <vector>

#include "runtime/config/config.hpp"

namespace actorpipe {

class adamw final : public torch::optim::Adam {
public:
  /// `decay[i]`: the weight decay of params[i] (0: none, a 1-D parameter
  /// under decay_1d false). `options` carries no weight decay of its own.
  adamw(const std::vector<at::Tensor>& params, const torch::optim::AdamOptions& options, std::vector<double> decay);

  at::Tensor step(LossClosure closure = nullptr) override;

  /// The decay of the group's i-th parameter.
  double decay(size_t i) const { return decay_.at(i); }

private:
  std::vector<double> decay_;
};

/// The decay of each of `params` under `o` (adamw): o.weight_decay, or 0
/// for a parameter of fewer than two dimensions when !o.decay_1d.
std::vector<double> adamw_decays(const optimizer_config& o, const std::vector<at::Tensor>& params);

}  // namespace actorpipe
