#pragma once
// FNV-1a, 64 bit: the one hash of the project (replica checksums,
// checkpoint checksums, trace hashes). Not cryptographic: it tells drift
// and corruption apart from equality, nothing more.
#include <cstddef>
#include <cstdint>

namespace actorpipe {

class fnv1a {
public:
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ b[i]) * 1099511628211ull;
  }
  /// The 8 bytes of v, least significant first (the same on every host).
  void value(uint64_t v) {
    for (int i = 0; i < 8; ++i) h_ = (h_ ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
  }
  uint64_t digest() const { return h_; }

private:
  uint64_t h_ = 1469598103934665603ull;
};

}  // namespace actorpipe
