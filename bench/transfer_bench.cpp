// One hop of a tensor between two real processes: p2p_group (c10d Gloo
// send/recv over loopback TCP) against a raw loopback TCP socket moving the
// same bytes, measured in the same run. Each iteration is one delivered hop:
// the sender sends the tensor, the receiver takes all of it (into a reused
// buffer) and answers with a small ack, so every iteration ends with the
// bytes on the other side.
//
//   build/transfer_bench                # 4 MiB and 64 MiB, then a GiB/s table
//
// The benchmark process is rank 0 and hosts the store; it re-executes itself
// (/proc/self/exe, ACTORPIPE_TRANSFER_BENCH_CHILD set) as rank 1.
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "runtime/dist/transport/p2p_group.hpp"
#include "tests/child_process.hpp"

namespace {

using namespace actorpipe;
using clock_type = std::chrono::steady_clock;

constexpr uint32_t control_tag = 0, data_tag = 1, ack_tag = 2;
enum : int64_t { quit = 0, via_gloo = 1, via_socket = 2 };

void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}

void send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    check(w > 0, "send");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void recv_all(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    check(r > 0, "recv");
    p += r;
    n -= static_cast<size_t>(r);
  }
}

void no_delay(int fd) {
  int one = 1;
  check(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0, "TCP_NODELAY");
}

// ---- rank 1: the receiving side -----------------------------------------

int child_main() {
  try {
    p2p_options o;
    o.rank = 1;
    o.master_port = static_cast<uint16_t>(std::atoi(std::getenv("ACTORPIPE_P2P_PORT")));
    o.timeout = std::chrono::seconds(60);
    o.store_prefix = "transfer_bench";
    auto g = p2p_group::connect(o);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(std::atoi(std::getenv("ACTORPIPE_RAW_PORT"))));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    check(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0, "connect");
    no_delay(fd);
    at::Tensor control = at::empty({3}, at::kLong), ack = at::ones({1}, at::kLong);
    for (;;) {
      g.recv_into(control, 0, control_tag).wait();
      int64_t kind = control[0].item<int64_t>(), numel = control[1].item<int64_t>(), n = control[2].item<int64_t>();
      if (kind == quit) break;
      at::Tensor buffer = at::empty({numel}, at::kFloat);  // reused by every hop of this run
      char byte = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (kind == via_gloo) {
          g.recv_into(buffer, 0, data_tag).wait();
          g.send(ack, 0, ack_tag).wait();
        } else {
          recv_all(fd, static_cast<char*>(buffer.data_ptr()), static_cast<size_t>(buffer.nbytes()));
          send_all(fd, &byte, 1);
        }
      }
    }
    ::close(fd);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transfer_bench child: %s\n", e.what());
    return 3;
  }
}

const bool child_ran = [] {
  if (!std::getenv("ACTORPIPE_TRANSFER_BENCH_CHILD")) return false;
  int code = child_main();
  std::fflush(nullptr);
  std::_Exit(code);
}();

// ---- rank 0: the benchmarks ---------------------------------------------

std::unique_ptr<p2p_group> g_group;
std::unique_ptr<test_support::child_process> g_child;
int g_socket = -1;
std::map<std::string, std::map<int64_t, double>> g_gib_per_s;  // transport -> MiB -> GiB/s

void start_rank1() {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;  // any free port
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  check(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0, "bind");
  check(::listen(listener, 1) == 0, "listen");
  socklen_t len = sizeof addr;
  check(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0, "getsockname");
  std::string raw_port = std::to_string(ntohs(addr.sin_port));
  p2p_options o;
  o.rank = 0;
  o.is_master = true;
  o.timeout = std::chrono::seconds(60);
  o.store_prefix = "transfer_bench";
  o.on_store_listening = [&](uint16_t port) {
    g_child = std::make_unique<test_support::child_process>(std::map<std::string, std::string>{
        {"ACTORPIPE_TRANSFER_BENCH_CHILD", "1"},
        {"ACTORPIPE_P2P_PORT", std::to_string(port)},
        {"ACTORPIPE_RAW_PORT", raw_port}});
  };
  g_group = std::make_unique<p2p_group>(p2p_group::connect(o));
  pollfd p{listener, POLLIN, 0};
  check(::poll(&p, 1, 60000) == 1, "rank 1 did not connect its socket");
  g_socket = ::accept(listener, nullptr, nullptr);
  check(g_socket >= 0, "accept");
  no_delay(g_socket);
  ::close(listener);
}

void hop(benchmark::State& state, int64_t kind) {
  const int64_t mib = state.range(0);
  const int64_t numel = mib * 1024 * 1024 / 4;
  at::Tensor t = at::randn({numel});
  at::Tensor ack = at::empty({1}, at::kLong);
  at::Tensor control = at::tensor({kind, numel, static_cast<int64_t>(state.max_iterations)}, at::kLong);
  g_group->send(control, 1, control_tag).wait();
  char byte = 0;
  auto start = clock_type::now();
  for (auto _ : state) {
    if (kind == via_gloo) {
      g_group->send(t, 1, data_tag).wait();
      g_group->recv_into(ack, 1, ack_tag).wait();
    } else {
      send_all(g_socket, static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.nbytes()));
      recv_all(g_socket, &byte, 1);
    }
  }
  double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  double gib = static_cast<double>(t.nbytes()) * static_cast<double>(state.iterations()) / (1024.0 * 1024 * 1024);
  state.SetBytesProcessed(static_cast<int64_t>(t.nbytes()) * state.iterations());
  state.counters["GiB/s"] = gib / seconds;
  g_gib_per_s[kind == via_gloo ? "gloo" : "socket"][mib] = gib / seconds;
}

void BM_gloo_p2p_hop(benchmark::State& state) { hop(state, via_gloo); }
void BM_raw_socket_hop(benchmark::State& state) { hop(state, via_socket); }

// Fixed iteration counts: rank 1 is told how many hops to take.
BENCHMARK(BM_gloo_p2p_hop)->Arg(4)->Iterations(200)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_raw_socket_hop)->Arg(4)->Iterations(200)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gloo_p2p_hop)->Arg(64)->Iterations(20)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_raw_socket_hop)->Arg(64)->Iterations(20)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  int code = 0;
  try {
    start_rank1();
    benchmark::RunSpecifiedBenchmarks();
    at::Tensor control = at::tensor({int64_t{quit}, int64_t{0}, int64_t{0}}, at::kLong);
    g_group->send(control, 1, control_tag).wait();
    std::printf("\n| tensor | Gloo p2p GiB/s | raw socket GiB/s | Gloo / socket |\n| --- | --- | --- | --- |\n");
    for (const auto& [mib, gloo] : g_gib_per_s["gloo"]) {
      double raw = g_gib_per_s["socket"][mib];
      std::printf("| %lld MiB | %.2f | %.2f | %.2f |\n", static_cast<long long>(mib), gloo, raw,
                  raw > 0 ? gloo / raw : 0.0);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transfer_bench: %s\n", e.what());
    code = 1;
  }
  if (g_child) {
    int child_code = g_child->finish(clock_type::now() + std::chrono::seconds(60));
    if (child_code != 0) {
      std::fprintf(stderr, "transfer_bench: rank 1 exited with %d:\n%s\n", child_code, g_child->output().c_str());
      code = 1;
    }
  }
  if (g_socket >= 0) ::close(g_socket);
  g_group.reset();
  return code;
}
