#include "runtime/model/tensor_pool.hpp"

#include <ATen/ATen.h>

#include <algorithm>

namespace actorpipe {

namespace {

// Free: the pool's handle is the only one, and no other tensor (a view, a
// parameter given the data) shares its storage.
bool unheld(const at::Tensor& h) { return h.use_count() == 1 && h.storage().use_count() == 1; }

}  // namespace

at::Tensor tensor_pool::take(at::IntArrayRef sizes, const at::TensorOptions& options) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [h, taken_in] : held_)
    if (unheld(h) && h.sizes().equals(sizes) && h.scalar_type() == options.dtype().toScalarType() &&
        h.device() == options.device()) {
      taken_in = age_;
      return h;
    }
  held_.push_back({at::empty(sizes, options), age_});
  return held_.back().t;
}

void tensor_pool::age() {
  std::lock_guard<std::mutex> lock(mutex_);
  held_.erase(std::remove_if(held_.begin(), held_.end(), [&](const entry& e) { return e.taken_in < age_ && unheld(e.t); }),
              held_.end());
  ++age_;
}

size_t tensor_pool::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return held_.size();
}

}  // namespace actorpipe
