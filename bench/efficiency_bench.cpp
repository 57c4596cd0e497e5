// Schedule efficiency: on the sim device every op takes a set time (F, B
// and W, as the simulator's cost model), so a step's wall time can be held
// against the simulator's makespan for the same schedule and costs. The
// ratio is what the runtime adds to the schedule: message hops, thread
// wake-ups, the step boundary, timer overshoot.
//
//   build/efficiency_bench                         # every schedule, S in {4,8,16}, M in {8,32,64}
//   build/efficiency_bench --benchmark_filter=zb-h1/S8
//   build/efficiency_bench --op_ms=2               # longer ops (default 1 ms each of F, B, W)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "bench/bench_pipeline.hpp"
#include "runtime/schedule/policy.hpp"
#include "runtime/schedule/simulator.hpp"

namespace {

using namespace actorpipe;

double g_op_ms = 1.0;

// The simulated time of one step in ms: the makespan, or for a schedule
// without a flush (async) the mean distance between step closes over the
// measured steps of one stream.
double simulated_step_ms(const config& cfg, int steps, int warmup) {
  const auto& p = cfg.pipeline;
  cost_model cost;
  cost.f = p.sim_f_ms;
  cost.b = p.sim_b_ms;
  cost.w = p.sim_w_ms;
  auto pol = make_policy(p.schedule, policy_options{p.virtual_stages, p.max_inflight});
  if (pol->flushes()) return simulate(p.schedule, p.stages, p.microbatches, cost, p.virtual_stages, p.max_inflight).makespan;
  const int m = p.microbatches;
  auto r = simulate(p.schedule, p.stages, m * steps, cost, p.virtual_stages, p.max_inflight);
  auto close = [&](int t) {  // every stage ran step t's last backward
    double at = 0.0;
    for (const auto& stage : r.timeline)
      for (const auto& op : stage)
        if (op.op.kind == op_kind::B && op.op.mb == (t + 1) * m - 1) at = std::max(at, op.end);
    return at;
  };
  return (close(steps - 1) - close(warmup - 1)) / (steps - warmup);
}

void BM_SimPipeline(benchmark::State& state, bench::pipeline_shape shape) {
  const int warmup = 1;
  config cfg;
  bench::run_figures f;
  if (!bench::run_shape(state, shape, warmup, true, &cfg, &f)) return;
  const double measured_ms = f.seconds / std::max(1, f.steps) * 1e3;
  const double sim_ms = simulated_step_ms(cfg, shape.steps, warmup);
  state.counters["step_ms"] = measured_ms;
  state.counters["makespan_ms"] = sim_ms;
  state.counters["ratio"] = measured_ms / sim_ms;
  std::sort(f.step_s.begin(), f.step_s.end());
  state.counters["worst_ratio"] = f.step_s.empty() ? 0.0 : f.step_s.back() * 1e3 / sim_ms;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0)
      std::printf("efficiency_bench [--op_ms=MS] [Google Benchmark flags]\n"
                  "  --op_ms=MS   what each sim op (F, B and W) takes, default 1\n"
                  "Every schedule at S in {4, 8, 16}, M in {8, 32, 64} on the sim device: step time against the\n"
                  "simulated makespan. Google Benchmark's own flags follow.\n\n");
  // Our own flag first; Google Benchmark rejects what it does not know.
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--op_ms=", 8) == 0) {
      g_op_ms = std::atof(argv[i] + 8);
      std::copy(argv + i + 1, argv + argc, argv + i);
      --argc;
      --i;
    }
  for (const char* schedule : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "greedy", "async"})
    for (int s : {4, 8, 16})
      for (int m : {8, 32, 64}) {
        bench::pipeline_shape shape;
        shape.schedule = schedule;
        shape.stages = s;
        shape.microbatches = m;
        shape.steps = 6;
        shape.device = "sim";
        shape.f_ms = shape.b_ms = shape.w_ms = g_op_ms;
        const std::string name = std::string("sim/") + schedule + "/S" + std::to_string(s) + "/M" + std::to_string(m);
        benchmark::RegisterBenchmark(name.c_str(), BM_SimPipeline, shape)
            ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);
      }
  return bench::run_registered(argc, argv);
}
