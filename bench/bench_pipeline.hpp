#pragma once
// What the pipeline benchmarks share: a config written for the null or sim
// device, and the figures read back from a run.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

#include "actors/trainer.hpp"
#include "runtime/config/config.hpp"

namespace actorpipe::bench {

struct pipeline_shape {
  std::string schedule;
  int stages = 2;
  int microbatches = 8;
  int steps = 10;
  std::string device = "null";  ///< null | sim
  std::string threads;          ///< dedicated | shared; empty = the device's default
  double f_ms = 1.0, b_ms = 1.0, w_ms = 0.0;  ///< sim only
};

/// The YAML of a run: one tiny linear layer per virtual stage (the null and
/// sim devices never run them), the batch one sample per microbatch.
inline std::string shape_yaml(const pipeline_shape& p) {
  const bool v2 = p.schedule == "interleaved" || p.schedule == "zb-v";
  const int layers = p.stages * (v2 ? 2 : 1);
  std::string y = "model:\n  layers:\n";
  for (int i = 0; i < layers; ++i) y += "    - {type: linear, in: 4, out: 4}\n";
  y += "data:\n  kind: synthetic\n  synthetic: {samples: " + std::to_string(2 * p.microbatches) +
       ", features: 4, classes: 4}\n  test_fraction: 0\n";
  y += "train:\n  steps: " + std::to_string(p.steps) + "\n  batch_size: " + std::to_string(p.microbatches) +
       "\n  optimizer: {type: sgd, lr: 0.01}\n";
  y += "pipeline:\n  stages: " + std::to_string(p.stages) + "\n  schedule: " + p.schedule +
       "\n  microbatches: " + std::to_string(p.microbatches) + "\n  intra_op_threads: 1\n  devices: [";
  for (int i = 0; i < p.stages; ++i) y += (i ? ", " : "") + p.device;
  y += "]\n";
  if (!p.threads.empty()) y += "  threads: " + p.threads + "\n";
  if (p.device == "sim")
    y += "  sim_ms: {F: " + std::to_string(p.f_ms) + ", B: " + std::to_string(p.b_ms) + ", W: " +
         std::to_string(p.w_ms) + "}\n";
  y += "supervision: {watchdog_s: 0}\n";
  return y;
}

/// Loads YAML text through the same reader a user's file goes through (its
/// checks included), from a temporary file: throws config_error where the
/// reader refuses it.
inline config config_from_yaml(const std::string& yaml, const load_env& env = {}) {
  char path[] = "/tmp/actorpipe_bench_XXXXXX.yaml";
  const int fd = mkstemps(path, 5);
  if (fd < 0) throw std::runtime_error("cannot create a temporary config");
  close(fd);
  { std::ofstream(path) << yaml; }
  try {
    auto cfg = load_config(path, env);
    std::remove(path);
    return cfg;
  } catch (...) {
    std::remove(path);
    throw;
  }
}

/// Google Benchmark's main, after the benchmarks are registered.
inline int run_registered(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

/// The shape's config (a schedule may refuse the shape: config_error).
inline config shape_config(const pipeline_shape& p) { return config_from_yaml(shape_yaml(p)); }

/// Steps after the first `warmup`: their wall time (from the first one's
/// start to the last one's end: steps may overlap at their boundary, and a
/// schedule without a flush has no gap between them) and the ops they fired.
struct run_figures {
  double seconds = 0.0;
  int64_t ops = 0;
  int steps = 0;
  std::vector<double> step_s;  ///< per step: start to the next one's start
};

inline run_figures figures(const train_result& r, int warmup) {
  run_figures f;
  const size_t first = static_cast<size_t>(warmup);
  if (r.steps.size() <= first) return f;
  for (size_t i = first; i < r.steps.size(); ++i) {
    const double end = i + 1 < r.steps.size() ? static_cast<double>(r.steps[i + 1].start_ns) * 1e-9
                                              : static_cast<double>(r.steps[i].start_ns) * 1e-9 + r.steps[i].step_s;
    f.step_s.push_back(end - static_cast<double>(r.steps[i].start_ns) * 1e-9);
    for (const auto& st : r.steps[i].stages) f.ops += static_cast<int64_t>(st.events.size());
    ++f.steps;
  }
  f.seconds = static_cast<double>(r.steps.back().start_ns - r.steps[first].start_ns) * 1e-9 + r.steps.back().step_s;
  return f;
}

/// One Google Benchmark iteration per training run of `shape`; the
/// iteration's time is the measured steps' wall time (per step when
/// `per_step`). A shape the config refuses is skipped with its error.
/// Returns false then.
inline bool run_shape(benchmark::State& state, const pipeline_shape& shape, int warmup, bool per_step, config* cfg,
                      run_figures* f) {
  try {
    *cfg = shape_config(shape);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return false;
  }
  for (auto _ : state) {
    *f = figures(run_training(*cfg).result, warmup);
    state.SetIterationTime(per_step ? f->seconds / std::max(1, f->steps) : f->seconds);
  }
  return true;
}

}  // namespace actorpipe::bench
