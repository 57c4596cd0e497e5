#include "runtime/dist/transport/net_address.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

namespace actorpipe {

std::string local_address_toward(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) throw std::runtime_error("cannot resolve " + host + ": " + ::gai_strerror(rc));
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  std::string why;
  std::string out;
  if (fd < 0) {
    why = std::strerror(errno);
  } else if (::connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    why = std::strerror(errno);
  } else {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char text[INET_ADDRSTRLEN] = {0};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)))
      out = text;
    else
      why = std::strerror(errno);
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  if (out.empty()) throw std::runtime_error("no route to " + host + ": " + why);
  return out;
}

namespace {

// A TCP socket bound to `addr`:`port` (0: one the kernel picks), as
// bind_any_port.
std::pair<int, uint16_t> bind_at(const std::string& addr, uint16_t port, bool listening, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    throw std::runtime_error(what + ": " + gai_strerror(rc));
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (s < 0) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::bind(s, a->ai_addr, a->ai_addrlen) == 0 && (!listening || ::listen(s, 64) == 0) &&
        ::getsockname(s, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      ::freeaddrinfo(res);
      return {s, ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                 : reinterpret_cast<sockaddr_in*>(&ss)->sin_port)};
    }
    const int err = errno;
    ::close(s);
    errno = err;
  }
  ::freeaddrinfo(res);
  return {-1, 0};
}

// The lowest port the kernel hands out for a bind to port 0 or a connect
// (net.ipv4.ip_local_port_range), 32768 when it cannot be read.
int ephemeral_low() {
  int low = 32768;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d", &low) != 1) low = 32768;
    std::fclose(f);
  }
  return low;
}

}  // namespace

std::pair<int, uint16_t> bind_any_port(const std::string& addr, bool listening, const std::string& what) {
  return bind_at(addr, 0, listening, what);
}

uint16_t free_port(const std::string& addr) {
  // Below the kernel's ephemeral range first: a port the kernel hands out
  // to any bind(0) or connect on this host (a test's, another run's) could
  // be taken between this check and rank 0's bind; one below it only by a
  // process that names it. torchrun's default (29500) and its neighbours
  // are left alone.
  const int low = ephemeral_low();
  if (low > 4096) {
    std::mt19937 rng(std::random_device{}());
    std::uniform_int_distribution<int> pick(low / 2, low - 1);
    for (int i = 0; i < 64; ++i) {
      const int p = pick(rng);
      if (p >= 29400 && p <= 29600) continue;
      const auto [s, port] = bind_at(addr, static_cast<uint16_t>(p), false, "master address " + addr);
      if (s < 0) continue;
      ::close(s);
      return port;
    }
  }
  const auto [s, port] = bind_any_port(addr, false, "master address " + addr);
  if (s < 0) throw std::runtime_error("no free port on master address " + addr);
  ::close(s);  // rank 0's store binds it again: the same small race torchrun has
  return port;
}

namespace {

// The IPv4 or IPv6 address of `a` as 16 bytes (IPv4 as ::ffff:a.b.c.d),
// and its port.
bool address_of(const sockaddr* a, unsigned char out[16], uint16_t* port) {
  if (a->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(a);
    std::memset(out, 0, 10);
    out[10] = out[11] = 0xff;
    std::memcpy(out + 12, &v4->sin_addr, 4);
    *port = ntohs(v4->sin_port);
    return true;
  }
  if (a->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(a);
    std::memcpy(out, &v6->sin6_addr, 16);
    *port = ntohs(v6->sin6_port);
    return true;
  }
  return false;
}

}  // namespace

int cut_connections_to(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return 0;
  std::vector<std::vector<unsigned char>> wanted;
  for (addrinfo* a = found; a; a = a->ai_next) {
    unsigned char bytes[16];
    uint16_t unused = 0;
    if (address_of(a->ai_addr, bytes, &unused)) wanted.emplace_back(bytes, bytes + 16);
  }
  ::freeaddrinfo(found);
  int cut = 0;
  DIR* fds = ::opendir("/proc/self/fd");
  if (!fds) return 0;
  while (dirent* e = ::readdir(fds)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) continue;
    unsigned char bytes[16];
    uint16_t at = 0;
    if (!address_of(reinterpret_cast<sockaddr*>(&peer), bytes, &at) || at != port) continue;
    for (const auto& w : wanted)
      if (std::memcmp(w.data(), bytes, 16) == 0) {
        if (::shutdown(fd, SHUT_RDWR) == 0) ++cut;
        break;
      }
  }
  ::closedir(fds);
  return cut;
}

}  // namespace actorpipe
