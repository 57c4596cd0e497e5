#pragma once
// An optimizer's state copied tensor by tensor: the in-memory snapshot a
// supervised run keeps at every step boundary, without the archive writer
// (which costs more than the copy itself). On-disk checkpoints still use
// torch::serialize archives.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace actorpipe {

struct optimizer_state_copy {
  /// Per parameter, in the optimizer's parameter order: Adam's step count
  /// (0 for SGD) and its state tensors (Adam: exp_avg, exp_avg_sq,
  /// max_exp_avg_sq; SGD: momentum_buffer), deep copies. No tensors: that
  /// parameter has no state yet.
  std::vector<int64_t> steps;
  std::vector<std::vector<at::Tensor>> tensors;
};

/// Copies the state of `opt` (Adam or SGD) for `params`, its parameters in
/// order. Throws std::invalid_argument for another optimizer type.
std::shared_ptr<const optimizer_state_copy> copy_optimizer_state(const torch::optim::Optimizer& opt,
                                                                 const std::vector<at::Tensor>& params);

/// Gives `opt` (the same type, over `params` of the same shapes and order)
/// a deep copy of `state`; the copy stays usable for another restore.
void restore_optimizer_state(torch::optim::Optimizer& opt, const std::vector<at::Tensor>& params,
                             const optimizer_state_copy& state);

}  // namespace actorpipe
