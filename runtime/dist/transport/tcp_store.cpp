// c10d TCPStores with their watch-key listener quieted (tcp_store.hpp).
#include "runtime/dist/transport/tcp_store.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <torch/version.h>

#include <cstdint>
#include <memory>
#include <stdexcept>

namespace actorpipe {

namespace {

// Holds the far end of the listener's replacement socket. A base class
// listed before c10d::TCPStore is destroyed after it, so the far end
// closes only once the store's destructor has stopped and joined the
// listener thread (closed first, the near end would read as at its end and
// the thread would spin until then).
struct far_end {
  int fd = -1;
  ~far_end() {
    if (fd >= 0) ::close(fd);
  }
};

class quiet_tcp_store final : private far_end, public c10d::TCPStore {
public:
  quiet_tcp_store(const std::string& host, const c10d::TCPStoreOptions& opts) : c10d::TCPStore(host, opts) {}
#if TORCH_VERSION_MAJOR == 1  // later versions dropped watchKey
  void watchKey(const std::string& key, c10d::WatchKeyCallback) override {
    throw std::runtime_error("watchKey('" + key + "'): this store's watch-key listener is off (actorpipe watches no key)");
  }
#endif
  void quiet(int fd) { far_end::fd = fd; }
  bool quieted() const { return far_end::fd >= 0; }
};

#if TORCH_VERSION_MAJOR == 1
// TCPStore::callbackClient_ is private. Naming a private member in an
// explicit instantiation is allowed, and yields its pointer-to-member.
template <class Tag, typename Tag::type member>
struct member_access {
  friend typename Tag::type pointer_of(Tag) { return member; }
};
struct callback_client_tag {
  using type = std::unique_ptr<c10d::detail::TCPCallbackClient> c10d::TCPStore::*;
  friend type pointer_of(callback_client_tag);
};
template struct member_access<callback_client_tag, &c10d::TCPStore::callbackClient_>;

// The listening connection's descriptor: libtorch 1.13's
// TCPCallbackClient begins with it (int rawSocket_). Checked: a stream
// socket connected to the store's port; -1 otherwise.
int listener_fd(c10d::TCPStore& store) {
  const auto& client = store.*pointer_of(callback_client_tag{});
  if (!client) return -1;
  const int fd = *reinterpret_cast<const int*>(client.get());
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return -1;
  int type = 0;
  socklen_t len = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) return -1;
  sockaddr_storage peer{};
  len = sizeof peer;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return -1;
  uint16_t port = 0;
  if (peer.ss_family == AF_INET)
    port = ntohs(reinterpret_cast<const sockaddr_in*>(&peer)->sin_port);
  else if (peer.ss_family == AF_INET6)
    port = ntohs(reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_port);
  return port == store.getPort() ? fd : -1;
}

// The listener thread polls the descriptor's number, and on input peeks
// one byte and reads a watch answer. Its number now names one end of a
// socket pair whose other end stays open and never writes: nothing fires.
// One byte is left in it first: KEY_CALLBACK_REGISTERED (3), an answer
// read whole that the thread only notes. A thread already in poll on the
// old socket wakes when the server goes, peeks the new one, reads that
// byte and polls the new one from then on (the old socket closes as its
// poll returns). The old connection, once no poll holds it, closes: the
// server drops it.
void quiet(quiet_tcp_store& store) {
  const int fd = listener_fd(store);
  if (fd < 0) return;
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return;
  const unsigned char registered = 3;
  if (::write(pair[1], &registered, 1) != 1 || ::dup3(pair[0], fd, O_CLOEXEC) < 0) {
    ::close(pair[0]);
    ::close(pair[1]);
    return;
  }
  ::close(pair[0]);
  store.quiet(pair[1]);
}
#else
void quiet(quiet_tcp_store&) {}
#endif

}  // namespace

c10::intrusive_ptr<c10d::TCPStore> make_tcp_store(const std::string& host, const c10d::TCPStoreOptions& opts) {
  auto store = c10::make_intrusive<quiet_tcp_store>(host, opts);
  quiet(*store);
  return store;
}

bool listener_quieted(const c10d::TCPStore& store) {
  const auto* q = dynamic_cast<const quiet_tcp_store*>(&store);
  return q && q->quieted();
}

}  // namespace actorpipe
