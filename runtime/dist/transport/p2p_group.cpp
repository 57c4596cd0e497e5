// p2p_group over c10d::ProcessGroupGloo send/recv: a 96-byte header on slot
// tag * 2, then the payload on slot tag * 2 + 1 (see p2p_group.hpp).
#include "runtime/dist/transport/p2p_group.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "runtime/dist/transport/kv_store_impl.hpp"
#include "runtime/dist/transport/tcp_store.hpp"

#include <exception>
#include <mutex>
#include <sstream>
#include <vector>

namespace actorpipe {

namespace {

constexpr int64_t header_magic = 0x61707032;  // "app2"
constexpr int64_t max_dims = 8;
// magic, dtype, ndim, nbytes, then up to max_dims sizes.
constexpr int64_t header_words = 4 + max_dims;
static_assert(header_words * 8 == 96, "the header is 96 bytes");

std::string dtype_name(int64_t dtype) {
  if (dtype < 0 || dtype >= static_cast<int64_t>(c10::ScalarType::NumOptions))
    return "unknown dtype " + std::to_string(dtype);
  return c10::toString(static_cast<c10::ScalarType>(dtype));
}

std::string describe(int64_t dtype, const std::vector<int64_t>& sizes, int64_t nbytes) {
  std::ostringstream out;
  out << dtype_name(dtype) << " [";
  for (size_t i = 0; i < sizes.size(); ++i) out << (i ? ", " : "") << sizes[i];
  out << "] (" << nbytes << " bytes)";
  return out.str();
}

// c10::Error's what() carries a C++ backtrace; the reason alone reads better.
std::string reason(const std::exception& e) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

int64_t byte_count(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

}  // namespace

// ---- the group ------------------------------------------------------------

class p2p_group::impl {
public:
  c10::intrusive_ptr<c10d::Store> store;
  kv_store_ptr shared;  // the caller's store, kept alive
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  int rank = 0;
  int size = 0;
  uint16_t port = 0;
  std::chrono::milliseconds timeout{0};
  std::mutex post_mutex;

  /// "p2p send from rank 0 to rank 1, tag 5" (or recv ... from).
  std::string where(bool sending, int peer, uint32_t tag) const {
    return sending ? "p2p send from rank " + std::to_string(rank) + " to rank " + std::to_string(peer) + ", tag " +
                         std::to_string(tag)
                   : "p2p recv on rank " + std::to_string(rank) + " from rank " + std::to_string(peer) + ", tag " +
                         std::to_string(tag);
  }

  void check_peer(const std::string& where, int peer) const {
    if (peer < 0 || peer >= size || peer == rank)
      throw transfer_error(where + ": peer rank must be another rank of 0 .. " + std::to_string(size - 1));
  }

  c10::intrusive_ptr<c10d::Work> post(bool sending, at::Tensor t, int peer, int slot, const std::string& where) {
    std::vector<at::Tensor> one{std::move(t)};
    std::lock_guard<std::mutex> lock(post_mutex);
    try {
      return sending ? pg->send(one, peer, slot) : pg->recv(one, peer, slot);
    } catch (const std::exception& e) {
      throw transfer_error(where + ": cannot start (the group may be broken by an earlier failure): " + reason(e));
    }
  }

  /// Waits for `work`; a Gloo failure becomes a transfer_error.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& where, const char* part) const {
    try {
      work->wait();
    } catch (const std::exception& e) {
      std::string why = reason(e);
      bool timed_out = why.find("Timed out") != std::string::npos;
      throw transfer_error(where + " (" + part + "): " +
                           (timed_out ? "timed out after " + std::to_string(timeout.count()) + " ms"
                                      : "the peer is gone or the connection broke") +
                           ": " + why);
    }
  }
};

// ---- handles --------------------------------------------------------------

class transfer_handle::impl {
public:
  virtual ~impl() = default;

  void wait() {
    if (!done_) {
      done_ = true;
      try {
        run();
      } catch (...) {
        error_ = std::current_exception();
      }
    }
    if (error_) std::rethrow_exception(error_);
  }

  bool done() const { return done_; }

protected:
  virtual void run() = 0;

private:
  bool done_ = false;
  std::exception_ptr error_;
};

namespace {

class send_impl : public transfer_handle::impl {
public:
  send_impl(std::shared_ptr<p2p_group::impl> g, std::string where, std::vector<c10::intrusive_ptr<c10d::Work>> works)
    : group_(std::move(g)), where_(std::move(where)), works_(std::move(works)) {}

protected:
  void run() override {
    // Both parts are waited for, even after one failed, so that Gloo no
    // longer reads the tensors once wait() returned or threw.
    std::exception_ptr first;
    const char* parts[] = {"header", "payload"};
    for (size_t i = 0; i < works_.size(); ++i) {
      try {
        group_->wait(works_[i], where_, parts[i]);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    works_.clear();
    if (first) std::rethrow_exception(first);
  }

private:
  std::shared_ptr<p2p_group::impl> group_;
  std::string where_;
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
};

class recv_impl : public transfer_handle::impl {
public:
  recv_impl(std::shared_ptr<p2p_group::impl> g, std::string where, at::Tensor buffer, at::Tensor header,
            c10::intrusive_ptr<c10d::Work> header_work, int src, uint32_t tag)
    : group_(std::move(g)), where_(std::move(where)), buffer_(std::move(buffer)), header_(std::move(header)),
      header_work_(std::move(header_work)), src_(src), tag_(tag) {}

protected:
  void run() override {
    group_->wait(header_work_, where_, "header");
    const int64_t* h = header_.data_ptr<int64_t>();
    if (h[0] != header_magic)
      throw transfer_error(where_ + ": rank " + std::to_string(src_) + " sent a header without the p2p mark");
    int64_t dtype = h[1], ndim = h[2], nbytes = h[3];
    if (ndim < 0 || ndim > max_dims || nbytes < 0)
      throw transfer_error(where_ + ": rank " + std::to_string(src_) + " sent a malformed header (ndim " +
                           std::to_string(ndim) + ", " + std::to_string(nbytes) + " bytes)");
    std::vector<int64_t> sent_sizes(h + 4, h + 4 + ndim);
    bool match = dtype == static_cast<int64_t>(buffer_.scalar_type()) && sent_sizes == buffer_.sizes().vec() &&
                 nbytes == byte_count(buffer_);
    if (nbytes > 0) {
      // On a mismatch the payload still has to be taken off the wire, or the
      // sender's wait would time out and break the group.
      at::Tensor target = match ? buffer_ : at::empty({nbytes}, at::kByte);
      auto work = group_->post(false, target, src_, static_cast<int>(tag_ * 2 + 1), where_);
      group_->wait(work, where_, match ? "payload" : "payload, drained after a mismatch");
    }
    if (!match)
      throw transfer_error(where_ + ": rank " + std::to_string(src_) + " sent " +
                           describe(dtype, sent_sizes, nbytes) + " but rank " + std::to_string(group_->rank) +
                           " expected " +
                           describe(static_cast<int64_t>(buffer_.scalar_type()), buffer_.sizes().vec(),
                                    byte_count(buffer_)));
  }

private:
  std::shared_ptr<p2p_group::impl> group_;
  std::string where_;
  at::Tensor buffer_;
  at::Tensor header_;
  c10::intrusive_ptr<c10d::Work> header_work_;
  int src_;
  uint32_t tag_;
};

}  // namespace

transfer_handle::transfer_handle(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
transfer_handle::transfer_handle(transfer_handle&&) noexcept = default;
transfer_handle& transfer_handle::operator=(transfer_handle&& other) noexcept {
  if (this != &other) {
    transfer_handle old(std::move(*this));  // waits for the old transfer, if any
    impl_ = std::move(other.impl_);
  }
  return *this;
}

transfer_handle::~transfer_handle() {
  if (impl_ && !impl_->done()) {
    try {
      impl_->wait();
    } catch (...) {
    }
  }
}

void transfer_handle::wait() {
  if (!impl_) throw transfer_error("p2p: wait() on a moved-from transfer_handle");
  impl_->wait();
}

// ---- p2p_group ------------------------------------------------------------

p2p_group p2p_group::connect(const p2p_options& o) {
  std::string where = "p2p rank " + std::to_string(o.rank) + "/" + std::to_string(o.world_size);
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
    throw transfer_error(where + ": rank must be in 0 .. world_size - 1, world_size >= 1");
  if (o.timeout.count() <= 0) throw transfer_error(where + ": timeout must be positive");
  if (!o.store && !o.is_master && o.master_port == 0)
    throw transfer_error(where + ": a rank that is not the master needs the master's port (0 given)");
  auto g = std::make_shared<impl>();
  g->rank = o.rank;
  g->size = o.world_size;
  g->timeout = o.timeout;
  if (o.store) {
    g->shared = o.store;
    g->store = o.store->get().store;
    g->port = o.store->port();
  } else {
    c10d::TCPStoreOptions so;
    so.port = o.master_port;
    so.isServer = o.is_master;
    so.numWorkers = static_cast<size_t>(o.world_size);
    so.waitWorkers = false;  // the Gloo rendezvous below waits for everybody
    so.timeout = o.timeout;
    try {
      auto tcp = make_tcp_store(o.master_addr, so);
      g->port = tcp->getPort();
      g->store = tcp;
    } catch (const std::exception& e) {
      throw transfer_error(where + ": cannot " + (o.is_master ? "start" : "reach") + " the store at " + o.master_addr +
                           ":" + std::to_string(o.master_port) + ": " + reason(e));
    }
  }
  if (o.is_master && o.on_store_listening) o.on_store_listening(g->port);
  try {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(o.store_prefix, g->store);
    auto options = c10d::ProcessGroupGloo::Options::create(o.timeout);
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(o.hostname));
    g->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, o.rank, o.world_size, options);
  } catch (const std::exception& e) {
    throw transfer_error(where + ": cannot connect to the other ranks within " + std::to_string(o.timeout.count()) +
                         " ms (store " + o.master_addr + ":" + std::to_string(g->port) + "): " + reason(e));
  }
  return p2p_group(std::move(g));
}

p2p_group::p2p_group(std::shared_ptr<impl> p) : impl_(std::move(p)) {}
p2p_group::p2p_group(p2p_group&&) noexcept = default;
p2p_group& p2p_group::operator=(p2p_group&&) noexcept = default;
p2p_group::~p2p_group() = default;

transfer_handle p2p_group::send(const at::Tensor& tensor, int dst, uint32_t tag) {
  std::string where = impl_->where(true, dst, tag);
  impl_->check_peer(where, dst);
  if (tag > max_transfer_tag)
    throw transfer_error(where + ": tag above max_transfer_tag " + std::to_string(max_transfer_tag));
  if (!tensor.defined()) throw transfer_error(where + ": the tensor is undefined");
  if (!tensor.device().is_cpu())
    throw transfer_error(where + ": the tensor is on " + tensor.device().str() + "; copy it to the CPU first");
  if (tensor.dim() > max_dims)
    throw transfer_error(where + ": " + std::to_string(tensor.dim()) + " dims, at most " + std::to_string(max_dims));
  at::Tensor payload = tensor.contiguous();
  at::Tensor header = at::zeros({header_words}, at::kLong);
  int64_t* h = header.data_ptr<int64_t>();
  h[0] = header_magic;
  h[1] = static_cast<int64_t>(payload.scalar_type());
  h[2] = payload.dim();
  h[3] = byte_count(payload);
  for (int64_t i = 0; i < payload.dim(); ++i) h[4 + i] = payload.size(i);
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.push_back(impl_->post(true, header, dst, static_cast<int>(tag * 2), where));
  if (h[3] > 0) {
    try {
      works.push_back(impl_->post(true, payload, dst, static_cast<int>(tag * 2 + 1), where));
    } catch (...) {
      send_impl started(impl_, where, std::move(works));
      try {
        started.wait();
      } catch (...) {
      }
      throw;
    }
  }
  return transfer_handle(std::make_unique<send_impl>(impl_, where, std::move(works)));
}

transfer_handle p2p_group::recv_into(at::Tensor& buffer, int src, uint32_t tag) {
  std::string where = impl_->where(false, src, tag);
  impl_->check_peer(where, src);
  if (tag > max_transfer_tag)
    throw transfer_error(where + ": tag above max_transfer_tag " + std::to_string(max_transfer_tag));
  if (!buffer.defined()) throw transfer_error(where + ": the buffer is undefined");
  if (!buffer.device().is_cpu())
    throw transfer_error(where + ": the buffer is on " + buffer.device().str() + "; receive into a CPU tensor");
  if (!buffer.is_contiguous()) throw transfer_error(where + ": the buffer must be contiguous to receive in place");
  at::Tensor header = at::empty({header_words}, at::kLong);
  auto work = impl_->post(false, header, src, static_cast<int>(tag * 2), where);
  return transfer_handle(std::make_unique<recv_impl>(impl_, where, buffer, header, std::move(work), src, tag));
}

int p2p_group::rank() const { return impl_->rank; }
int p2p_group::world_size() const { return impl_->size; }
uint16_t p2p_group::store_port() const { return impl_->port; }
std::chrono::milliseconds p2p_group::timeout() const { return impl_->timeout; }

}  // namespace actorpipe
