#include "runtime/model/tensor_pool.hpp"

#include <ATen/ATen.h>

namespace actorpipe {

at::Tensor tensor_pool::take(at::IntArrayRef sizes, const at::TensorOptions& options) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Free: the pool's handle is the only one, and no other tensor (a view,
  // a parameter given the data) shares its storage.
  for (const auto& h : held_)
    if (h.use_count() == 1 && h.storage().use_count() == 1 && h.sizes().equals(sizes) &&
        h.scalar_type() == options.dtype().toScalarType() && h.device() == options.device())
      return h;
  held_.push_back(at::empty(sizes, options));
  return held_.back();
}

size_t tensor_pool::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return held_.size();
}

}  // namespace actorpipe
