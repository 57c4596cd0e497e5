#pragma once
// Buffers used again once nothing else holds them. A boundary copy that is
// dropped after a few steps leaves its tensors here for the next one: new
// tensors every step made the allocator hand the memory back to the
// system and fault it in again (on two cores that doubled a healing run's
// system time). Thread-safe: a keeper's receiving thread takes buffers
// while its stage's thread drops old copies.
//
// A process's pool outlives its generations: the stages of the next one
// take the buffers the last one's updates and copies left (a re-placement
// or a heal otherwise faults in depth x the stages' state again, a step's
// time several times over on two cores). age() at each generation's start
// lets go of the free buffers no one took during the generation before.
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
  /// A new generation starts: the free buffers not taken since the last
  /// call are let go (the layers they served are held elsewhere now).
  void age();

private:
  struct entry {
    at::Tensor t;
    uint64_t taken_in;  // the age at its last take
  };
  mutable std::mutex mutex_;
  std::vector<entry> held_;
  uint64_t age_ = 0;
};

}  // namespace actorpipe
