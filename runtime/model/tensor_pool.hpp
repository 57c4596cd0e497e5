#pragma once
// Buffers used again once nothing else holds them. A boundary copy that is
// dropped after a few steps leaves its tensors here for the next one: new
// tensors every step made the allocator hand the memory back to the
// system and fault it in again (on two cores that doubled a healing run's
// system time). Thread-safe: a keeper's receiving thread takes buffers
// while its stage's thread drops old copies.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace actorpipe {

class tensor_pool {
public:
  /// A contiguous tensor of `sizes` and `options` (its contents
  /// unspecified) that nothing outside the pool holds, or a new one; the
  /// pool keeps it, to give it again once its holders have let it go.
  at::Tensor take(at::IntArrayRef sizes, const at::TensorOptions& options);
  at::Tensor like(const at::Tensor& t) { return take(t.sizes(), t.options()); }
  /// How many buffers the pool holds.
  size_t size() const;

private:
  mutable std::mutex mutex_;
  std::vector<at::Tensor> held_;
};

}  // namespace actorpipe
