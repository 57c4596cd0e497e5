#pragma once
// kv_store's inside: the c10d store (only for sources built with
// USE_C10D_GLOO).
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "runtime/dist/transport/abortable_store.hpp"
#include "runtime/dist/transport/kv_store.hpp"

namespace actorpipe {

class kv_store::impl {
public:
  // The store, wrapped so that its waits can be called off (kv_store::arm).
  explicit impl(c10::intrusive_ptr<c10d::Store> s, uint16_t p)
      : switch_state(std::make_shared<abort_switch>()),
        store(c10::make_intrusive<abortable_store>(std::move(s), switch_state)),
        port(p) {}
  std::shared_ptr<abort_switch> switch_state;
  c10::intrusive_ptr<c10d::Store> store;
  uint16_t port = 0;
};

}  // namespace actorpipe
