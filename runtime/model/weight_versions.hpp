#pragma once
// Asynchronous schedules (PipeDream-2BW): a stage keeps step t's copy of
// weight version max(t-1, 0), whose .grad collects step t's gradient, and
// steps its live weights after each step's last backward. At most two
// copies exist at once. LibTorch only.
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <vector>

namespace actorpipe {

class weight_versions {
public:
  weight_versions() = default;
  /// Copies of the live weights for steps 0 and 1 (of `steps`).
  weight_versions(const std::vector<at::Tensor>& live, int64_t steps);

  /// Step t's weights (version t-1). Throws when they do not exist yet.
  const std::vector<at::Tensor>& for_step(int64_t t, int rank) const;
  /// Step t's backwards are done: step the live weights with its gradient
  /// at learning rate `lr`, drop its copy, and copy the new weights
  /// (version t+1) for step t+2.
  void step(int64_t t, torch::optim::Optimizer& opt, const std::vector<at::Tensor>& live, double lr);
  /// The most copies held at once.
  int peak() const { return peak_; }

  /// The version step t computes with.
  static int32_t version_of(int64_t t) { return static_cast<int32_t>(std::max<int64_t>(t - 1, 0)); }

private:
  static std::vector<at::Tensor> copy(const std::vector<at::Tensor>& live);
  std::map<int64_t, std::vector<at::Tensor>> versions_;
  int64_t steps_ = 0;
  int peak_ = 0;
};

}  // namespace actorpipe
