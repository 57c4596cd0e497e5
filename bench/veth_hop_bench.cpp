// One hop between two hosts, as far as the network goes: two network
// namespaces joined by a veth pair (root and `ip` needed). A tensor of
// 4 MiB or 64 MiB goes from a process in one namespace to a forked process
// in the other, which acks each with one byte: once as a record on the
// data plane's TCP stream (data_sender::send; the receiver's reader thread
// allocates the tensor from the head and reads the bytes into it, as the
// stages' data plane does), once as the same bytes over a raw socket into
// a reused buffer. Alternating rounds; medians; record / raw socket.
//
//   build/veth_hop_bench [rounds]        # default 3; then a GiB/s table
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/dist/transport/data_channel.hpp"

namespace {

using namespace actorpipe;
using clock_type = std::chrono::steady_clock;

// Namespaces vhopA_PID and vhopB_PID joined by a veth pair, 10.231.N.1
// and .2; deleted (with the veth) when this goes.
struct two_namespaces {
  std::string a, b, net;
  bool ok = false;
  two_namespaces() {
    const std::string id = std::to_string(::getpid());
    a = "vhopA_" + id;
    b = "vhopB_" + id;
    net = "10.231." + std::to_string(::getpid() % 250);
    const std::string va = "hA" + id, vb = "hB" + id;
    ok = run("ip netns add " + a) && run("ip netns add " + b) &&
         run("ip link add " + va + " type veth peer name " + vb) && run("ip link set " + va + " netns " + a) &&
         run("ip link set " + vb + " netns " + b) && run("ip -n " + a + " addr add " + net + ".1/24 dev " + va) &&
         run("ip -n " + b + " addr add " + net + ".2/24 dev " + vb) && run("ip -n " + a + " link set " + va + " up") &&
         run("ip -n " + b + " link set " + vb + " up");
  }
  ~two_namespaces() {
    run("ip netns del " + a + " 2>/dev/null");
    run("ip netns del " + b + " 2>/dev/null");
  }
  static bool run(const std::string& cmd) { return std::system(cmd.c_str()) == 0; }
};

const std::vector<int64_t> sizes = {4 << 20, 64 << 20};
int hops_of(int64_t bytes) { return bytes <= (4 << 20) ? 40 : 6; }

bool enter(const std::string& ns) {
  const int fd = ::open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  const bool ok = fd >= 0 && ::setns(fd, CLONE_NEWNET) == 0;
  if (fd >= 0) ::close(fd);
  return ok;
}

void no_delay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void read_all(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t got = ::recv(fd, c, n, 0);
    if (got <= 0) ::_exit(3);
    c += got;
    n -= static_cast<size_t>(got);
  }
}

void write_all(int fd, const void* p, size_t n) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t put = ::send(fd, c, n, MSG_NOSIGNAL);
    if (put <= 0) ::_exit(3);
    c += put;
    n -= static_cast<size_t>(put);
  }
}

// The far side: a raw connection reads `bytes` into one buffer and acks;
// a record connection hands each record to a reader thread that acks.
[[noreturn]] void serve(int listener, int rounds) {
  const int raw = ::accept(listener, nullptr, nullptr), rec = ::accept(listener, nullptr, nullptr);
  no_delay(raw);
  no_delay(rec);
  const int ack_fd = ::dup(rec);
  data_receiver receiver(
      socket_pipe(rec, "record stream"),
      [ack_fd](op_record) {
        const char a = 1;
        write_all(ack_fd, &a, 1);
      },
      [](const std::string& why) { std::fprintf(stderr, "record stream: %s\n", why.c_str()); });
  std::vector<char> buffer(static_cast<size_t>(sizes.back()));
  for (int r = 0; r < rounds; ++r)
    for (int64_t bytes : sizes)
      for (int i = 0; i < hops_of(bytes); ++i) {
        read_all(raw, buffer.data(), static_cast<size_t>(bytes));
        const char a = 1;
        write_all(raw, &a, 1);
      }
  char bye = 0;
  read_all(raw, &bye, 1);
  receiver.stop();
  ::_exit(0);
}

int connect_to(const std::string& host, uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return -1;
  no_delay(fd);
  return fd;
}

double gib_per_s(int64_t bytes, int hops, clock_type::duration d) {
  return static_cast<double>(bytes) * hops / (1 << 30) / std::chrono::duration<double>(d).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  two_namespaces ns;
  if (!ns.ok) {
    std::fprintf(stderr, "veth_hop_bench: cannot make two namespaces; needs root and ip\n");
    return 2;
  }
  const std::string far = ns.net + ".2";
  int port_pipe[2];
  if (::pipe(port_pipe) != 0) return 1;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(port_pipe[0]);
    if (!enter(ns.b)) {
      std::perror("veth_hop_bench: entering the far namespace");
      ::_exit(2);
    }
    const int l = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    ::inet_pton(AF_INET, far.c_str(), &a.sin_addr);
    socklen_t len = sizeof a;
    if (::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l, 4) != 0) {
      std::perror("veth_hop_bench: listening in the far namespace");
      ::_exit(2);
    }
    ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
    const uint16_t port = ntohs(a.sin_port);
    if (::write(port_pipe[1], &port, sizeof port) != sizeof port) ::_exit(2);
    serve(l, rounds);
  }
  ::close(port_pipe[1]);
  uint16_t port = 0;
  if (::read(port_pipe[0], &port, sizeof port) != sizeof port || !enter(ns.a)) {
    std::fprintf(stderr, "veth_hop_bench: the far side did not start\n");
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    return 1;
  }
  const int raw = connect_to(far, port), rec = connect_to(far, port);
  if (raw < 0 || rec < 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    return 1;
  }
  const int rec_ack = ::dup(rec);
  data_sender sender(socket_pipe(rec, "record stream"));
  std::vector<std::vector<double>> raw_gib(sizes.size()), rec_gib(sizes.size());
  const auto later = [] { return clock_type::now() + std::chrono::seconds(60); };
  for (int r = 0; r < rounds; ++r)
    for (size_t s = 0; s < sizes.size(); ++s) {
      const int64_t bytes = sizes[s];
      const int hops = hops_of(bytes);
      const at::Tensor t = at::ones({bytes / 4});
      char ack = 0;
      auto start = clock_type::now();
      for (int i = 0; i < hops; ++i) {
        write_all(raw, t.data_ptr(), static_cast<size_t>(bytes));
        read_all(raw, &ack, 1);
      }
      raw_gib[s].push_back(gib_per_s(bytes, hops, clock_type::now() - start));
      op_record record;
      record.tensors.push_back(t);
      start = clock_type::now();
      for (int i = 0; i < hops; ++i) {
        sender.send(record, later());
        read_all(rec_ack, &ack, 1);
      }
      rec_gib[s].push_back(gib_per_s(bytes, hops, clock_type::now() - start));
    }
  const char bye = 0;
  write_all(raw, &bye, 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  std::printf("\n%d rounds over a veth pair (%s -> %s), medians\n\n", rounds, (ns.net + ".1").c_str(), far.c_str());
  std::printf("| tensor | raw socket GiB/s | data-plane record GiB/s | record / raw |\n| --- | --- | --- | --- |\n");
  for (size_t s = 0; s < sizes.size(); ++s) {
    const double a = median(raw_gib[s]), b = median(rec_gib[s]);
    std::printf("| %lld MiB | %.2f | %.2f | %.2f |\n", static_cast<long long>(sizes[s] >> 20), a, b, b / a);
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
