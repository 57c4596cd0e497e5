#pragma once
// A c10d store whose waits can be called off (only for sources built with
// USE_C10D_GLOO; kv_store_impl.hpp wraps every store in one).
//
// While a generation forms, every rank waits in the store: for the others'
// records in the rendezvous, for their addresses while the Gloo groups
// connect, at the barriers. A member lost then (killed, stopped, cut off)
// would hold the others there until the timeout. Armed with a key, every
// read of this store (get, wait, check, a counter read with add(key, 0))
// first asks whether that key is set, and throws forming_aborted once it
// is: rank 0 sets it when it sees a member of the forming generation gone,
// and every rank's waits end at their next poll (actors/process/forming.cpp).
// Unarmed, it forwards every call as it is.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "runtime/dist/transport/kv_store.hpp"

namespace actorpipe {

/// What the wrappers of one store share (the store's extra connections
/// too): the key that calls the waits off, and whether it was seen set.
struct abort_switch {
  std::mutex mutex;
  std::string key;  // "": unarmed
  std::atomic<bool> tripped{false};

  std::string armed() {
    std::lock_guard<std::mutex> lock(mutex);
    return key;
  }
};

class abortable_store final : public c10d::Store {
public:
  abortable_store(c10::intrusive_ptr<c10d::Store> inner, std::shared_ptr<abort_switch> sw)
      : c10d::Store(inner->getTimeout()), inner_(std::move(inner)), switch_(std::move(sw)) {}

  const c10::intrusive_ptr<c10d::Store>& inner() const { return inner_; }
  const std::shared_ptr<abort_switch>& switch_state() const { return switch_; }

  void set(const std::string& key, const std::vector<uint8_t>& value) override { inner_->set(key, value); }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    return inner_->compareSet(key, expected, desired);
  }
  std::vector<uint8_t> get(const std::string& key) override {
    if (!switch_->armed().empty() && !inner_->check({key})) wait_polling({key}, inner_->getTimeout());
    return inner_->get(key);
  }
  int64_t add(const std::string& key, int64_t value) override {
    if (value == 0) check_abort();
    return inner_->add(key, value);
  }
  bool deleteKey(const std::string& key) override { return inner_->deleteKey(key); }
  bool check(const std::vector<std::string>& keys) override {
    if (inner_->check(keys)) return true;
    check_abort();  // only while the caller waits
    return false;
  }
  int64_t getNumKeys() override { return inner_->getNumKeys(); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, inner_->getTimeout()); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    if (switch_->armed().empty()) return inner_->wait(keys, timeout);
    if (!inner_->check(keys)) wait_polling(keys, timeout);
  }
  const std::chrono::milliseconds& getTimeout() const noexcept override { return inner_->getTimeout(); }
  void setTimeout(const std::chrono::milliseconds& timeout) override {
    c10d::Store::setTimeout(timeout);
    inner_->setTimeout(timeout);
  }

  /// Throws forming_aborted when armed and the key is set (asked of the
  /// store each time until it is).
  void check_abort() {
    if (switch_->tripped.load()) throw forming_aborted("called off: " + switch_->armed());
    const std::string key = switch_->armed();
    if (key.empty() || !inner_->check({key})) return;
    switch_->tripped.store(true);
    throw forming_aborted("called off: " + key);
  }

private:
  // The keys' wait as polls (0.5 ms at first, then up to every 10 ms), the
  // switch asked before each; c10d's own timeout message after `timeout`.
  void wait_polling(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  c10::intrusive_ptr<c10d::Store> inner_;
  std::shared_ptr<abort_switch> switch_;
};

}  // namespace actorpipe
