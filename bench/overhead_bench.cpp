// Runtime overhead: the wall time per fired op on the null device (ops do
// no work, activations are empty tensors), for every schedule, against the
// floor, a CAF message hop between two event-based actors, measured in the
// same run.
//
//   build/overhead_bench                 # every schedule, S in {2,4,8,16}, M in {8,64}
//   build/overhead_bench --benchmark_filter=shared/1f1b
#include <benchmark/benchmark.h>
#include <caf/all.hpp>

#include <chrono>
#include <cstdio>
#include <map>

#include "bench/bench_pipeline.hpp"

namespace {

using namespace actorpipe;
using ping_atom = caf::atom_constant<caf::atom("bping")>;
using pong_atom = caf::atom_constant<caf::atom("bpong")>;
using done_atom = caf::atom_constant<caf::atom("bdone")>;

caf::behavior ponger(caf::event_based_actor* self) {
  return {[=](ping_atom, int64_t i) { self->send(caf::actor_cast<caf::actor>(self->current_sender()), pong_atom::value, i); }};
}

caf::behavior pinger(caf::event_based_actor* self, caf::actor peer, int64_t rounds, caf::actor done) {
  self->send(peer, ping_atom::value, int64_t{0});
  return {[=](pong_atom, int64_t i) {
    if (i + 1 < rounds) {
      self->send(peer, ping_atom::value, i + 1);
    } else {
      self->send(done, done_atom::value);
      self->quit();
    }
  }};
}

double g_hop_ns = 0.0;  // the floor, for the pipelines' x_hop column

// Seconds for `rounds` round trips (2 hops each) between two actors.
template <caf::spawn_options Opts>
double ping_pong(int64_t rounds) {
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);  // as the trainer's system
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto b = sys.spawn<Opts>(ponger);
  const auto start = std::chrono::steady_clock::now();
  sys.spawn<Opts>(pinger, b, rounds, caf::actor{self});
  self->receive([](done_atom) {});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  self->send_exit(b, caf::exit_reason::user_shutdown);
  return s;
}

template <caf::spawn_options Opts>
void BM_PingPong(benchmark::State& state) {
  const int64_t rounds = 200000;
  double hop = 0.0;
  for (auto _ : state) {
    const double s = ping_pong<Opts>(rounds);
    state.SetIterationTime(s);
    hop = s / static_cast<double>(2 * rounds) * 1e9;
  }
  state.counters["ns_per_hop"] = hop;
  if (Opts == caf::no_spawn_options) g_hop_ns = hop;
}

void BM_NullPipeline(benchmark::State& state, bench::pipeline_shape shape) {
  config cfg;
  bench::run_figures f;
  if (!bench::run_shape(state, shape, 3, false, &cfg, &f)) return;
  const double ns_per_op = f.seconds / static_cast<double>(std::max<int64_t>(1, f.ops)) * 1e9;
  state.counters["ops_per_step"] = static_cast<double>(f.ops) / std::max(1, f.steps);
  state.counters["ns_per_op"] = ns_per_op;
  if (g_hop_ns > 0) state.counters["x_hop"] = ns_per_op / g_hop_ns;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::RegisterBenchmark("caf_ping_pong/event_based", BM_PingPong<caf::no_spawn_options>)
      ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);
  benchmark::RegisterBenchmark("caf_ping_pong/detached", BM_PingPong<caf::detached>)
      ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);
  // shared: the null device's default (the stages on CAF's scheduler);
  // dedicated: a thread per stage, as a computing stage has.
  for (const char* threads : {"shared", "dedicated"})
  for (const char* schedule : {"naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "greedy", "async"})
    for (int s : {2, 4, 8, 16})
      for (int m : {8, 64}) {
        bench::pipeline_shape shape;
        shape.schedule = schedule;
        shape.stages = s;
        shape.microbatches = m;
        shape.steps = 23;
        shape.threads = threads;
        const std::string name = std::string("null/") + threads + "/" + schedule + "/S" + std::to_string(s) + "/M" +
                                 std::to_string(m);
        benchmark::RegisterBenchmark(name.c_str(), BM_NullPipeline, shape)
            ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);
      }
  return bench::run_registered(argc, argv);
}
