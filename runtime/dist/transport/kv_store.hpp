#pragma once
// The key-value store every rank of a multi-process run shares (a c10d
// TCPStore, hosted by rank 0 or by torchrun's agent): the rendezvous opens
// it, and what comes after it -- the tensor group, the replicas' allreduce
// groups, the barriers -- keeps using it, each under its own key prefix.
// Rank 0's server lives as long as a handle to it does.
//
// c10d headers stay out of this file (runtime/dist/transport/kv_store_impl.hpp
// has them, for the sources built with USE_C10D_GLOO).
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>

namespace actorpipe {

/// A wait of an armed store called off: its key was set (kv_store::arm).
class forming_aborted : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class kv_store {
public:
  class impl;
  explicit kv_store(std::shared_ptr<impl> p);
  ~kv_store();

  /// The port of the store's server.
  uint16_t port() const;
  void set(const std::string& key, const std::string& value) const;
  /// The value of `key`, waiting for it up to the store's timeout (throws
  /// after it).
  std::string get(const std::string& key) const;
  /// Whether `key` is set (no wait).
  bool has(const std::string& key) const;
  /// Adds n to the counter `key` (0 when absent) and returns the new value.
  int64_t add(const std::string& key, int64_t n) const;
  /// Waits until the counter `key` reaches `target`; false at the timeout.
  bool wait_count(const std::string& key, int64_t target, std::chrono::milliseconds timeout) const;

  /// While armed with `key`, every wait of this store (and of the groups
  /// formed through it) ends with forming_aborted
  /// (runtime/dist/transport/abortable_store.hpp) once `key` is set; ""
  /// disarms it.
  void arm(const std::string& key) const;
  /// Whether an armed wait saw its key set (until the next arm).
  bool tripped() const;
  /// For a wait outside the store (a connect retried): throws
  /// forming_aborted when armed and the key is set.
  void check_armed() const;

  impl& get() const { return *impl_; }

private:
  std::shared_ptr<impl> impl_;
};

using kv_store_ptr = std::shared_ptr<const kv_store>;

/// `f`'s value, waited for outside the store (a transfer over a channel of
/// its own) while `store` may be armed: its key set ends the wait with
/// forming_aborted (asked every 50 ms). A peer stopped mid-transfer would
/// otherwise hold the wait until the channel's own timeout.
template <class T>
T wait_unless_called_off(std::future<T>& f, const kv_store_ptr& store) {
  while (f.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready)
    if (store) store->check_armed();
  return f.get();
}

}  // namespace actorpipe
