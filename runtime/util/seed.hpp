#pragma once
// Seeds derived from (seed, coordinates), never from execution order.
#include <cstdint>
#include <initializer_list>

namespace actorpipe {

/// splitmix64: inputs that differ in one bit give unrelated outputs.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// A seed for one place: mix64 folded over the seed and its coordinates,
/// e.g. derive_seed(seed, {step, mb, layer}).
inline uint64_t derive_seed(uint64_t seed, std::initializer_list<uint64_t> coords) {
  uint64_t s = mix64(seed);
  for (auto c : coords) s = mix64(s ^ c);
  return s;
}

}  // namespace actorpipe
