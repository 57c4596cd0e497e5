// One hop of a tensor's bytes between two processes of one machine through
// the shared-memory ring (runtime/dist/transport/shm_ring), against a
// memcpy of the same bytes in one process, measured in the same run. Each
// hop ends with the bytes in the receiver's buffer and a one-byte ack back
// (a second ring), as a transfer_bench hop does.
//
//   build/shm_ring_bench                # 4 MiB and 64 MiB, then a GiB/s table
//
// The receiver is a forked child; both sides reuse their buffers.
#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dist/transport/shared_segments.hpp"
#include "runtime/dist/transport/shm_ring.hpp"

namespace {

using namespace actorpipe;
using clock_type = shm_ring::clock;

std::map<std::string, std::map<int64_t, double>> g_gib_per_s;

clock_type::time_point later() { return clock_type::now() + std::chrono::seconds(60); }

void BM_memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) << 20;
  std::vector<char> from(bytes, 1), to(bytes, 0);
  const auto start = clock_type::now();
  for (auto _ : state) {
    std::memcpy(to.data(), from.data(), bytes);
    benchmark::DoNotOptimize(to.data());
  }
  const double s = std::chrono::duration<double>(clock_type::now() - start).count();
  const double gib = static_cast<double>(bytes) * static_cast<double>(state.iterations()) / (1 << 30);
  state.counters["GiB/s"] = gib / s;
  g_gib_per_s["memcpy"][state.range(0)] = gib / s;
}

/// The ring sizes a channel would take: the record, at most 8 MiB.
size_t ring_bytes(size_t record) { return std::min<size_t>(record, 8u << 20); }

/// The reader's end of a ring another process makes, once it is there.
std::unique_ptr<shm_ring> open_when_made(const std::string& path) {
  for (int i = 0; i < 5000; ++i) {
    if (auto r = shm_ring::open(path, nullptr)) return r;
    ::usleep(2000);
  }
  return nullptr;
}

void BM_shm_ring_hop(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) << 20;
  const int64_t hops = state.max_iterations;
  const std::string stem = shm_dir() + "/" + segment_run_id() + ".ringbench." + std::to_string(::getpid());
  std::string why;
  auto data = shm_ring::create(stem + ".data", ring_bytes(bytes), &why);
  if (!data) {
    state.SkipWithError(why.c_str());
    return;
  }
  const pid_t child = ::fork();
  if (child == 0) {
    // The receiver: takes every hop's bytes, then acks it through a ring of its own.
    auto in = shm_ring::open(stem + ".data", nullptr);
    auto acks = shm_ring::create(stem + ".ack", 4096, nullptr);
    if (!in || !acks) ::_exit(2);
    std::vector<char> into(bytes, 0);
    const char ack = 1;
    for (int64_t i = 0; i < hops; ++i) {
      in->read(into.data(), bytes, later());
      acks->write(&ack, 1, later());
    }
    ::_exit(0);
  }
  auto acks = open_when_made(stem + ".ack");
  if (!acks) {
    state.SkipWithError("the receiver did not make its ack ring");
    ::waitpid(child, nullptr, 0);
    return;
  }
  std::vector<char> from(bytes, 7);
  char ack = 0;
  const auto start = clock_type::now();
  for (auto _ : state) {
    data->write(from.data(), bytes, later());
    acks->read(&ack, 1, later());
  }
  const double s = std::chrono::duration<double>(clock_type::now() - start).count();
  ::waitpid(child, nullptr, 0);
  const double gib = static_cast<double>(bytes) * static_cast<double>(state.iterations()) / (1 << 30);
  state.counters["GiB/s"] = gib / s;
  g_gib_per_s["ring"][state.range(0)] = gib / s;
}

BENCHMARK(BM_memcpy)->Arg(4)->Iterations(200)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_shm_ring_hop)->Arg(4)->Iterations(200)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_memcpy)->Arg(64)->Iterations(20)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_shm_ring_hop)->Arg(64)->Iterations(20)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  std::printf("\n| tensor | memcpy GiB/s | shm ring hop GiB/s | ring / memcpy |\n| --- | --- | --- | --- |\n");
  for (const auto& [mib, copy] : g_gib_per_s["memcpy"]) {
    const double ring = g_gib_per_s["ring"][mib];
    std::printf("| %lld MiB | %.2f | %.2f | %.2f |\n", static_cast<long long>(mib), copy, ring, copy > 0 ? ring / copy : 0.0);
  }
  return 0;
}
