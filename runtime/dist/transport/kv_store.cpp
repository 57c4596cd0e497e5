#include "runtime/dist/transport/kv_store.hpp"

#include <thread>

#include "runtime/dist/transport/kv_store_impl.hpp"
#include "runtime/dist/transport/poll_backoff.hpp"

namespace actorpipe {

kv_store::kv_store(std::shared_ptr<impl> p) : impl_(std::move(p)) {}
kv_store::~kv_store() = default;

uint16_t kv_store::port() const { return impl_->port; }

void kv_store::set(const std::string& key, const std::string& value) const {
  impl_->store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

std::string kv_store::get(const std::string& key) const {
  auto v = impl_->store->get(key);
  return std::string(v.begin(), v.end());
}

bool kv_store::has(const std::string& key) const { return impl_->store->check({key}); }

int64_t kv_store::add(const std::string& key, int64_t n) const { return impl_->store->add(key, n); }

bool kv_store::wait_count(const std::string& key, int64_t target, std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  poll_backoff wait(std::chrono::milliseconds(5));
  while (impl_->store->add(key, 0) < target) {  // an armed store's read: called off too
    if (std::chrono::steady_clock::now() >= deadline) return false;
    wait.pause();
  }
  return true;
}

void kv_store::arm(const std::string& key) const {
  auto& sw = *impl_->switch_state;
  std::lock_guard<std::mutex> lock(sw.mutex);
  sw.key = key;
  sw.tripped.store(false);
}

bool kv_store::tripped() const { return impl_->switch_state->tripped.load(); }

void kv_store::check_armed() const {
  if (auto* s = dynamic_cast<abortable_store*>(impl_->store.get())) s->check_abort();
}

void abortable_store::wait_polling(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  poll_backoff wait(std::chrono::milliseconds(10));
  for (;;) {
    check_abort();
    if (inner_->check(keys)) return;
    if (std::chrono::steady_clock::now() >= deadline) break;
    wait.pause();
  }
  std::string names;
  for (const auto& k : keys) names += (names.empty() ? "" : ", ") + k;
  throw std::runtime_error("Socket Timeout: waited " + std::to_string(timeout.count()) + " ms for " + names);
}

}  // namespace actorpipe
