// CPU throughput: the reference notebook's four-part MLP (configs/seed_mlp.yaml)
// as a 2-stage 1F1B pipeline with one intra-op thread per stage, against a
// plain single-module LibTorch loop with two intra-op threads: the same
// global batch (256), the same 32 microbatches (gradient accumulation),
// Adam, clipping at 1.0. Samples per second, and their ratio, from one run
// (the two alternate, three rounds each; the medians are compared).
//
//   build/throughput_bench [--steps N] [--rounds R] [--schedule NAME]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "bench/bench_pipeline.hpp"
#include "runtime/data/data.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/plain_module.hpp"

namespace {

using namespace actorpipe;
using clock_type = std::chrono::steady_clock;

// seed_mlp.yaml with its pipeline section replaced.
config mlp_config(int stages, const std::string& schedule, int steps) {
  std::ifstream in(ACTORPIPE_SOURCE_DIR "/configs/seed_mlp.yaml");
  if (!in) throw std::runtime_error(ACTORPIPE_SOURCE_DIR "/configs/seed_mlp.yaml: cannot read it");
  std::stringstream text;
  text << in.rdbuf();
  std::string y = text.str();
  y = y.substr(0, y.find("\npipeline:"));
  const auto at = y.find("  steps: 50");
  if (at != std::string::npos) y.replace(at, 11, "  steps: " + std::to_string(steps));
  y += "\npipeline:\n  stages: " + std::to_string(stages) + "\n  schedule: " + schedule +
       "\n  microbatches: 32\n  intra_op_threads: 1\n  devices: auto\nsupervision: {watchdog_s: 0}\n";
  return bench::config_from_yaml(y);
}

// The loop a LibTorch user writes: one Sequential, torch's dropout, the
// batch in microbatches with gradient accumulation, clip, Adam.
double plain_samples_per_s(const config& c, int warmup, int threads) {
  at::set_num_threads(threads);
  auto net = plain_sequential(build_layers(c));
  net->train();
  auto data = load_dataset(c);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(c.train.optimizer.lr));
  clock_type::time_point start;
  for (int64_t step = 0; step < c.train.steps; ++step) {
    if (step == warmup) start = clock_type::now();
    opt.zero_grad();
    auto b = batch_for_step(data, c, step);
    auto xs = b.x.chunk(c.pipeline.microbatches);
    auto ys = b.y.chunk(c.pipeline.microbatches);
    for (size_t i = 0; i < xs.size(); ++i) {
      auto loss = torch::nn::functional::cross_entropy(net->forward(xs[i]), ys[i]) *
                  (static_cast<double>(xs[i].size(0)) / static_cast<double>(b.x.size(0)));
      loss.backward();
    }
    torch::nn::utils::clip_grad_norm_(net->parameters(), c.train.clip_grad_norm);
    opt.step();
  }
  const double s = std::chrono::duration<double>(clock_type::now() - start).count();
  return static_cast<double>((c.train.steps - warmup) * c.train.batch_size) / s;
}

// Also the mean busy time per step of each stage (ms): the slowest stage
// bounds the pipeline.
double pipeline_samples_per_s(const config& c, int warmup, std::vector<double>* busy_ms) {
  auto out = run_training(c);
  auto f = bench::figures(out.result, warmup);
  busy_ms->assign(static_cast<size_t>(c.pipeline.stages), 0.0);
  for (size_t i = static_cast<size_t>(warmup); i < out.result.steps.size(); ++i)
    for (size_t r = 0; r < busy_ms->size(); ++r)
      (*busy_ms)[r] += static_cast<double>(out.result.steps[i].stages[r].busy_ns) * 1e-6 / f.steps;
  return static_cast<double>(f.steps * c.train.batch_size) / f.seconds;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 12, rounds = 3;
  std::string schedule = "1f1b";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("usage: throughput_bench [--steps N] [--rounds R] [--schedule NAME]\n"
                  "The seed MLP as a 2-stage pipeline (1 intra-op thread per stage) against a plain\n"
                  "LibTorch loop (2 intra-op threads), samples/s and their ratio. Defaults: 12 steps\n"
                  "(2 warm-up), 3 rounds, 1f1b.\n");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "throughput_bench: %s needs a value (see --help)\n", a.c_str());
      return 2;
    }
    if (a == "--steps") steps = std::atoi(argv[++i]);
    else if (a == "--rounds") rounds = std::atoi(argv[++i]);
    else if (a == "--schedule") schedule = argv[++i];
    else {
      std::fprintf(stderr, "throughput_bench: unknown option %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (steps < 3 || rounds < 1) {
    std::fprintf(stderr, "throughput_bench: --steps must be at least 3 and --rounds at least 1\n");
    return 2;
  }
  const int warmup = 2;
  const auto pipe_cfg = mlp_config(2, schedule, steps);
  const auto plain_cfg = mlp_config(1, "gpipe", steps);
  std::vector<double> pipe, plain, plain1;
  std::vector<double> busy;
  for (int r = 0; r < rounds; ++r) {
    plain.push_back(plain_samples_per_s(plain_cfg, warmup, 2));
    pipe.push_back(pipeline_samples_per_s(pipe_cfg, warmup, &busy));
    plain1.push_back(plain_samples_per_s(plain_cfg, warmup, 1));
    std::printf("round %d: plain loop (2 threads) %.0f samples/s, 2-stage %s (1 thread each) %.0f samples/s "
                "(stages busy %.0f / %.0f ms a step); plain loop (1 thread) %.0f samples/s\n",
                r + 1, plain.back(), schedule.c_str(), pipe.back(), busy[0], busy[1], plain1.back());
    std::fflush(stdout);
  }
  const double a = median(pipe), b = median(plain), c1 = median(plain1);
  std::printf("median: plain %.0f samples/s, pipeline %.0f samples/s, pipeline / plain = %.3f\n", b, a, a / b);
  // What the split allows: with stage r doing a share w_r of the work at
  // one thread's speed, the pipeline runs at most at 1 / max(w_r) times the
  // one-thread loop.
  const double heavy = std::max(busy[0], busy[1]) / (busy[0] + busy[1]);
  std::printf("bound by the split: the heavier stage does %.0f%% of the work, so at most %.2f x the 1-thread loop "
              "= %.0f samples/s; the plain loop gains %.2f x from its second thread\n",
              heavy * 100, 1.0 / heavy, c1 / heavy, b / c1);
  return 0;
}
