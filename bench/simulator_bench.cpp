// Simulator scale: one step of every schedule at S=64, M=512 and at S=128,
// M=1024 (uniform costs F=B=W=1; interleaved and zb-v with 2 chunks).
//
//   build/simulator_bench
//   build/simulator_bench --benchmark_filter=S128
#include <benchmark/benchmark.h>

#include "bench/bench_pipeline.hpp"
#include "runtime/schedule/simulator.hpp"

namespace {

using namespace actorpipe;

void BM_Simulate(benchmark::State& state, std::string schedule, int stages, int microbatches) {
  const int chunks = schedule == "interleaved" || schedule == "zb-v" ? 2 : 1;
  cost_model cost;
  cost.w = 1.0;  // split-backward schedules run B and W as two unit ops; the others one op of 2
  sim_result r;
  for (auto _ : state) r = simulate(schedule, stages, microbatches, cost, chunks);
  int64_t ops = 0;
  for (const auto& t : r.timeline) ops += static_cast<int64_t>(t.size());
  state.counters["ops"] = static_cast<double>(ops);
  state.counters["ns_per_op"] = benchmark::Counter(static_cast<double>(ops), benchmark::Counter::kIsIterationInvariantRate |
                                                                                 benchmark::Counter::kInvert);
  state.counters["bubble"] = r.bubble();
  if (r.deadlock) state.SkipWithError("deadlock");
}

}  // namespace

int main(int argc, char** argv) {
  for (const char* schedule : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "greedy", "async"})
    for (auto [s, m] : {std::pair{64, 512}, std::pair{128, 1024}}) {
      const std::string name = std::string("simulate/") + schedule + "/S" + std::to_string(s) + "/M" + std::to_string(m);
      benchmark::RegisterBenchmark(name.c_str(), BM_Simulate, std::string(schedule), s, m)
          ->Unit(benchmark::kMillisecond)->MinTime(0.5);
    }
  return bench::run_registered(argc, argv);
}
