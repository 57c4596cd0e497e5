#pragma once
// kv_store's inside: the c10d store (only for sources built with
// USE_C10D_GLOO).
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "runtime/dist/transport/kv_store.hpp"

namespace actorpipe {

class kv_store::impl {
public:
  explicit impl(c10::intrusive_ptr<c10d::Store> s, uint16_t p) : store(std::move(s)), port(p) {}
  c10::intrusive_ptr<c10d::Store> store;
  uint16_t port = 0;
};

}  // namespace actorpipe
