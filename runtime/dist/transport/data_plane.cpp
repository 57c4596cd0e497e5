#include "runtime/dist/transport/data_plane.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "runtime/dist/transport/net_address.hpp"
#include "runtime/dist/transport/shm_ring.hpp"

namespace actorpipe {

namespace {

using clock_type = data_plane::clock;

struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

std::runtime_error net_error(const std::string& what) {
  return std::runtime_error("data plane: " + what + ": " + std::strerror(errno));
}

void no_delay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// A stream to "host:port".
int connect_to(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("data plane: malformed endpoint '" + endpoint + "'");
  const std::string host = endpoint.substr(0, colon), port = endpoint.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
    throw std::runtime_error("data plane: cannot resolve " + host + ": " + ::gai_strerror(rc));
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd_guard s{::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol)};
    if (s.fd < 0 || ::connect(s.fd, a->ai_addr, a->ai_addrlen) != 0) continue;
    ::freeaddrinfo(res);
    no_delay(s.fd);
    return s.release();
  }
  ::freeaddrinfo(res);
  throw net_error("cannot connect to " + endpoint);
}

// Reads exactly n bytes from a blocking-or-not socket until `deadline`.
void read_fully(int fd, void* out, size_t n, clock_type::time_point deadline, const std::string& what) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
    if (left <= 0) throw std::runtime_error("data plane: " + what + ": timed out");
    pollfd pf{fd, POLLIN, 0};
    if (::poll(&pf, 1, static_cast<int>(std::min<long long>(left, 1000))) <= 0) continue;
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got == 0) throw std::runtime_error("data plane: " + what + ": the peer closed the stream");
    if (got < 0) {
      if (errno == EINTR) continue;
      throw net_error(what);
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
}

// The connection that process `from` made to `listener`; others that
// arrive first are kept in `early` for their own turn.
int accept_from(int listener, int from, std::map<int, int>& early, clock_type::time_point deadline) {
  while (early.find(from) == early.end()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
    if (left <= 0)
      throw std::runtime_error("data plane: rank " + std::to_string(from) + " never connected its stream");
    pollfd pf{listener, POLLIN, 0};
    if (::poll(&pf, 1, static_cast<int>(std::min<long long>(left, 1000))) <= 0) continue;
    fd_guard s{::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC)};
    if (s.fd < 0) continue;
    int32_t hello = -1;
    read_fully(s.fd, &hello, sizeof hello, deadline, "a stream's hello");
    no_delay(s.fd);
    early[hello] = s.release();
  }
  const int fd = early[from];
  early.erase(from);
  return fd;
}

std::string key(const data_plane_options& o, const std::string& what) { return o.prefix + "/actorpipe/data/" + what; }
std::string pair_name(int from, int to) { return std::to_string(from) + "to" + std::to_string(to); }

}  // namespace

std::shared_ptr<data_plane> data_plane::connect(const data_plane_options& o, std::string* notice) {
  std::shared_ptr<data_plane> plane(new data_plane());
  if (o.peers.empty()) return plane;
  const auto deadline = clock_type::now() + o.timeout;
  auto [listener_fd, port] = bind_any_port(o.host, true, "data plane: cannot resolve " + o.host);
  if (listener_fd < 0) throw net_error("cannot listen on " + o.host);
  fd_guard listener{listener_fd};
  o.store->set(key(o, "listen/" + std::to_string(o.rank)), o.host + ":" + std::to_string(port));
  o.store->set(key(o, "machine/" + std::to_string(o.rank)), o.machine.empty() ? "-" : o.machine);
  // Writers first: every end this process writes is made and named before
  // it waits for any peer's.
  for (int p : o.peers) {
    const std::string theirs = o.store->get(key(o, "machine/" + std::to_string(p)));
    std::unique_ptr<byte_pipe> pipe;
    if (!o.machine.empty() && theirs == o.machine) {
      const std::string path = o.ring_stem + "." + pair_name(o.rank, p);
      std::string why;
      if (auto ring = shm_ring::create(path, o.ring_bytes, &why)) {
        o.store->set(key(o, pair_name(o.rank, p)), "shm " + path);
        pipe = ring_pipe(std::move(ring));
        plane->ways_[p] = "shared memory";
      } else if (notice && notice->empty()) {
        *notice = why + "; activations and gradients go over TCP instead";
      }
    }
    if (!pipe) {
      fd_guard s{connect_to(o.store->get(key(o, "listen/" + std::to_string(p))))};
      const int32_t hello = o.rank;
      if (::send(s.fd, &hello, sizeof hello, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof hello))
        throw net_error("greeting rank " + std::to_string(p));
      o.store->set(key(o, pair_name(o.rank, p)), "tcp");
      pipe = socket_pipe(s.release(), "stream to rank " + std::to_string(p));
      plane->ways_[p] = "tcp";
    }
    plane->senders_[p] = std::make_unique<data_sender>(std::move(pipe));
  }
  // Streams accepted before their turn; whatever happens, none is left
  // open (and a plane that throws is closed by its destructor).
  std::map<int, int> early;
  struct closer {
    std::map<int, int>& fds;
    ~closer() {
      for (auto& e : fds) ::close(e.second);
    }
  } close_early{early};
  for (int p : o.peers) {
    const std::string way = o.store->get(key(o, pair_name(p, o.rank)));
    std::unique_ptr<byte_pipe> pipe;
    if (way.rfind("shm ", 0) == 0) {
      std::string why;
      auto ring = shm_ring::open(way.substr(4), &why);
      if (!ring) throw std::runtime_error("data plane: from rank " + std::to_string(p) + ": " + why);
      pipe = ring_pipe(std::move(ring));
    } else {
      pipe = socket_pipe(accept_from(listener.fd, p, early, deadline), "stream from rank " + std::to_string(p));
    }
    data_plane* self = plane.get();
    plane->receivers_.push_back(std::make_unique<data_receiver>(
        std::move(pipe), [self](op_record r) { self->deliver(std::move(r)); },
        [self, p](const std::string& why, bool gone) { self->failed(p, why, gone); }));
  }
  return plane;
}

data_plane::~data_plane() { close(); }

void data_plane::close() {
  std::map<int, std::unique_ptr<data_sender>> senders;
  std::vector<std::unique_ptr<data_receiver>> receivers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    senders.swap(senders_);
    receivers.swap(receivers_);
  }
  for (auto& r : receivers) r->stop();
  for (auto& s : senders) s.second->close();
}

void data_plane::post(int process, op_record r, clock::time_point not_before) {
  data_sender* s = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = senders_.find(process);
    if (it == senders_.end()) {
      if (closed_) return;
      throw std::logic_error("data plane: no channel to rank " + std::to_string(process));
    }
    s = it->second.get();
  }
  s->post(std::move(r), not_before);
}

void data_plane::attach(int slot, inbox in) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& mine = inboxes_[slot] = std::move(in);
  auto w = waiting_.find(slot);
  if (w == waiting_.end()) return;
  for (auto& r : w->second) mine.record(std::move(r));
  waiting_.erase(w);
}

void data_plane::deliver(op_record r) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  auto it = inboxes_.find(r.to);
  if (it == inboxes_.end())
    waiting_[r.to].push_back(std::move(r));
  else
    it->second.record(std::move(r));
}

void data_plane::failed(int peer, const std::string& why, bool peer_gone) {
  // A peer gone is supervision's to see (its node is down); a stream that
  // broke otherwise is told to every slot, which goes down with why.
  std::vector<std::function<void(const std::string&)>> tell;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (peer_gone) gone_.push_back(peer);
    if (peer_gone || closed_) return;
    for (auto& in : inboxes_)
      if (in.second.failed) tell.push_back(in.second.failed);
  }
  for (auto& f : tell) f("from rank " + std::to_string(peer) + ": " + why);
}

std::vector<int> data_plane::gone() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gone_;
}

std::string data_plane::way_to(int process) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ways_.find(process);
  return it == ways_.end() ? "" : it->second;
}

}  // namespace actorpipe
