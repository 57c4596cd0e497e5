// The floor of an op's cost across processes on the new data plane: a
// record with a 0-element tensor (what the null device sends) goes to a
// forked echo process and comes back, through two shared-memory rings,
// through a UNIX socket pair, and through loopback TCP. Half the round
// trip is what one crossing would cost the runtime, against the 234 µs
// per op that CAF plus Gloo cost today (docs/BENCHMARKS.md, "Across
// processes").
//
//   build/data_channel_bench            # then a µs table
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "runtime/dist/transport/data_channel.hpp"
#include "runtime/dist/transport/shared_segments.hpp"
#include "runtime/dist/transport/shm_ring.hpp"

namespace {

using namespace actorpipe;
using clock_type = byte_pipe::clock;

std::map<std::string, double> g_us;

clock_type::time_point later() { return clock_type::now() + std::chrono::seconds(60); }

std::unique_ptr<shm_ring> open_when_made(const std::string& path) {
  for (int i = 0; i < 5000; ++i) {
    if (auto r = shm_ring::open(path, nullptr)) return r;
    ::usleep(2000);
  }
  return nullptr;
}

/// The record a null-device op sends.
op_record empty_op() {
  op_record r;
  r.tensors.push_back(at::empty({0}));
  return r;
}

/// Reads `n` records from `in` and sends each back on `out` (in the child).
void echo(byte_pipe& in, byte_pipe& out, int64_t n) {
  // A plain loop on this thread: a receiver thread would add a hand-over.
  for (int64_t i = 0; i < n; ++i) {
    unsigned char head[184];
    in.read(head, sizeof head, later());
    out.write(head, sizeof head, later());
  }
}

/// Times `state`'s round trips of one record over (to, back).
void time_round_trips(benchmark::State& state, std::unique_ptr<byte_pipe> to, byte_pipe& back, const char* name) {
  data_sender sender(std::move(to));
  const op_record r = empty_op();
  unsigned char head[184];
  const auto start = clock_type::now();
  for (auto _ : state) {
    sender.send(r, later());
    back.read(head, sizeof head, later());
  }
  const double us = std::chrono::duration<double, std::micro>(clock_type::now() - start).count() /
                    static_cast<double>(state.iterations());
  state.counters["us_per_round_trip"] = us;
  g_us[name] = us;
}

void BM_ring_round_trip(benchmark::State& state) {
  const int64_t n = state.max_iterations;
  const std::string stem = shm_dir() + "/" + segment_run_id() + ".chanbench." + std::to_string(::getpid());
  auto to = shm_ring::create(stem + ".to", 64 << 10, nullptr);
  const pid_t child = ::fork();
  if (child == 0) {
    auto in = shm_ring::open(stem + ".to", nullptr);
    auto out = shm_ring::create(stem + ".back", 64 << 10, nullptr);
    if (!in || !out) ::_exit(2);
    auto pin = ring_pipe(std::move(in)), pout = ring_pipe(std::move(out));
    echo(*pin, *pout, n);
    ::_exit(0);
  }
  auto back = open_when_made(stem + ".back");
  auto pto = ring_pipe(std::move(to));
  auto pback = ring_pipe(std::move(back));
  time_round_trips(state, std::move(pto), *pback, "shared-memory rings");
  ::waitpid(child, nullptr, 0);
}

void socket_round_trips(benchmark::State& state, int mine, int theirs, const char* name) {
  const int64_t n = state.max_iterations;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(mine);
    auto in = socket_pipe(::dup(theirs), "in"), out = socket_pipe(theirs, "out");
    echo(*in, *out, n);
    ::_exit(0);
  }
  ::close(theirs);
  auto back = socket_pipe(::dup(mine), "back");
  time_round_trips(state, socket_pipe(mine, "to"), *back, name);
  ::waitpid(child, nullptr, 0);
}

void BM_unix_socket_round_trip(benchmark::State& state) {
  int fds[2];
  ::socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
  socket_round_trips(state, fds[0], fds[1], "UNIX socket pair");
}

void BM_tcp_round_trip(benchmark::State& state) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  ::listen(listener, 1);
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  ::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a);
  const int server = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  const int one = 1;
  ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  socket_round_trips(state, client, server, "loopback TCP");
}

BENCHMARK(BM_ring_round_trip)->Iterations(20000)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_unix_socket_round_trip)->Iterations(20000)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_tcp_round_trip)->Iterations(20000)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  std::printf("\n| pipe | round trip µs | one crossing µs |\n| --- | --- | --- |\n");
  for (const auto& [name, us] : g_us) std::printf("| %s | %.1f | %.1f |\n", name.c_str(), us, us / 2);
  return 0;
}
