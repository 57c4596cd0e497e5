// GPU throughput and memory: a model large enough to keep one GPU busy
// (an input layer, B blocks of linear H -> H with GELU, a 16-way head; in
// bfloat16 by default) as a 4-stage pipeline on one GPU, every stage on its
// own CUDA stream, against a plain single-module LibTorch loop on the same
// GPU. Same global batch, same microbatches (gradient accumulation), Adam.
// The plain loop also runs without microbatches (the whole batch at once),
// which is what a user would compare against. Peak allocated memory of
// every schedule, from the CUDA caching allocator. Needs a CUDA LibTorch and
// a GPU (scripts/build-cuda); elsewhere it says so and exits 1.
//
//   build/gpu_bench [--steps N] [--rounds R] [--blocks B] [--hidden H]
//                   [--batch N] [--microbatches M] [--dtype T] [--schedules a,b]
#include <torch/cuda.h>
#include <torch/torch.h>

#if ACTORPIPE_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_pipeline.hpp"
#include "runtime/data/data.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/plain_module.hpp"

namespace {

using namespace actorpipe;
using clock_type = std::chrono::steady_clock;

struct shape {
  int steps = 12, blocks = 8, stages = 4, microbatches = 8;
  int64_t hidden = 4096, batch = 32768, features = 64, classes = 16;
  std::string dtype = "bfloat16";
};

std::string model_yaml(const shape& p, const std::string& schedule, int stages, int microbatches) {
  std::ostringstream y;
  y << "model:\n  dtype: " << p.dtype << "\n  layers:\n"
    << "    - {type: linear, in: " << p.features << ", out: " << p.hidden << "}\n    - {type: gelu}\n";
  for (int b = 0; b < p.blocks; ++b)
    y << "    - {type: linear, in: " << p.hidden << ", out: " << p.hidden << "}\n    - {type: gelu}\n";
  y << "    - {type: linear, in: " << p.hidden << ", out: " << p.classes << "}\n";
  y << "data:\n  kind: synthetic\n  synthetic: {samples: " << p.batch << ", features: " << p.features
    << ", classes: " << p.classes << "}\n  test_fraction: 0\n";
  y << "train:\n  steps: " << p.steps << "\n  batch_size: " << p.batch
    << "\n  optimizer: {type: adam, lr: 0.0001}\n  seed: 7\n";
  y << "pipeline:\n  stages: " << stages << "\n  schedule: " << schedule << "\n  microbatches: " << microbatches
    << "\n  devices: [";
  for (int i = 0; i < stages; ++i) y << (i ? ", " : "") << "cuda:0";
  y << "]\nsupervision: {watchdog_s: 0}\n";
  return y.str();
}

void reset_peak() {
#if ACTORPIPE_TORCH_CUDA
  c10::cuda::CUDACachingAllocator::emptyCache();
  c10::cuda::CUDACachingAllocator::resetPeakStats(0);
#endif
}

double peak_gib() {
#if ACTORPIPE_TORCH_CUDA
  return static_cast<double>(c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].peak) /
         (1024.0 * 1024.0 * 1024.0);
#else
  return 0.0;
#endif
}

std::string device_name() {
#if ACTORPIPE_TORCH_CUDA
  return at::cuda::getDeviceProperties(0)->name;
#else
  return "?";
#endif
}

struct figures {
  double samples_per_s = 0.0;
  double peak_gib = 0.0;
  double stash_gib = 0.0;  ///< pipeline: the stages' peak stashed activations, summed
};

// The loop a LibTorch user writes, on the GPU: one Sequential, the batch in
// `microbatches` pieces with gradient accumulation, Adam.
figures plain(const config& c, int microbatches, int warmup) {
  reset_peak();
  const auto dtype = parameter_dtype(c.model);
  auto net = plain_sequential(build_layers(c));
  net->to(torch::Device("cuda:0"), dtype);
  net->train();
  auto data = load_dataset(c);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(c.train.optimizer.lr));
  clock_type::time_point start;
  for (int64_t step = 0; step < c.train.steps; ++step) {
    if (step == warmup) {
      torch::cuda::synchronize();
      start = clock_type::now();
    }
    opt.zero_grad();
    auto b = batch_for_step(data, c, step);
    auto x = b.x.pin_memory().to(torch::Device("cuda:0"), dtype, true);
    auto y = b.y.pin_memory().to(torch::Device("cuda:0"), b.y.scalar_type(), true);
    auto xs = x.chunk(microbatches), ys = y.chunk(microbatches);
    for (size_t i = 0; i < xs.size(); ++i) {
      auto loss = torch::nn::functional::cross_entropy(net->forward(xs[i]), ys[i]) *
                  (static_cast<double>(xs[i].size(0)) / static_cast<double>(x.size(0)));
      loss.backward();
    }
    opt.step();
  }
  torch::cuda::synchronize();
  const double s = std::chrono::duration<double>(clock_type::now() - start).count();
  return {static_cast<double>((c.train.steps - warmup) * c.train.batch_size) / s, peak_gib(), 0.0};
}

figures pipelined(const config& c, int warmup) {
  reset_peak();
  auto out = run_training(c);
  auto f = bench::figures(out.result, warmup);
  int64_t stash = 0;
  for (size_t r = 0; r < static_cast<size_t>(c.pipeline.stages); ++r) {
    int64_t most = 0;
    for (const auto& st : out.result.steps) most = std::max(most, st.stages[r].peak_stash_bytes);
    stash += most;
  }
  return {static_cast<double>(f.steps * c.train.batch_size) / f.seconds, peak_gib(),
          static_cast<double>(stash) / (1024.0 * 1024.0 * 1024.0)};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  shape p;
  int rounds = 3;
  std::vector<std::string> schedules = {"1f1b", "zb-h1", "gpipe"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: gpu_bench [--steps N] [--rounds R] [--blocks B] [--hidden H] [--batch N]\n"
          "                 [--microbatches M] [--dtype float32|bfloat16|float16] [--schedules a,b,...]\n"
          "A %d-stage pipeline on one GPU (each stage on its own CUDA stream) against a plain\n"
          "LibTorch loop on the same GPU: samples/s, their ratio, and peak allocated memory.\n"
          "Defaults: 12 steps (2 warm-up), 3 rounds, 8 blocks of hidden 4096, batch 32768 in\n"
          "8 microbatches, bfloat16, schedules 1f1b,zb-h1,gpipe.\n",
          p.stages);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "gpu_bench: %s needs a value (see --help)\n", a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--steps") p.steps = std::atoi(v.c_str());
    else if (a == "--rounds") rounds = std::atoi(v.c_str());
    else if (a == "--blocks") p.blocks = std::atoi(v.c_str());
    else if (a == "--hidden") p.hidden = std::atoll(v.c_str());
    else if (a == "--batch") p.batch = std::atoll(v.c_str());
    else if (a == "--microbatches") p.microbatches = std::atoi(v.c_str());
    else if (a == "--dtype") p.dtype = v;
    else if (a == "--schedules") schedules = split_list(v);
    else {
      std::fprintf(stderr, "gpu_bench: unknown option %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (p.steps < 3 || rounds < 1 || p.blocks < 1 || p.hidden < 1 || p.microbatches < 1 || schedules.empty()) {
    std::fprintf(stderr, "gpu_bench: --steps must be at least 3; --rounds, --blocks, --hidden, --microbatches at least 1\n");
    return 2;
  }
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "gpu_bench: no CUDA device (LibTorch without CUDA, or no GPU); build with scripts/build-cuda on a GPU machine\n");
    return 1;
  }
  // The caching allocator answers (peak stats) only once CUDA is in use.
  (void)torch::zeros({1}, torch::Device("cuda:0"));
  const int warmup = 2;
  std::printf("device: %s; model: %d blocks of %lld, %s; batch %lld in %d microbatches; %d stages on cuda:0\n",
              device_name().c_str(), p.blocks, static_cast<long long>(p.hidden), p.dtype.c_str(),
              static_cast<long long>(p.batch), p.microbatches, p.stages);
  std::fflush(stdout);
  load_env env;
  env.cuda_devices = static_cast<int>(torch::cuda::device_count());
  const auto plain_cfg = bench::config_from_yaml(model_yaml(p, "gpipe", 1, p.microbatches), env);
  std::map<std::string, config> cfgs;
  for (const auto& s : schedules)
    cfgs.emplace(s, bench::config_from_yaml(model_yaml(p, s, p.stages, p.microbatches), env));
  std::vector<double> plain_mb, plain_full;
  std::map<std::string, std::vector<double>> pipe;
  std::map<std::string, figures> last;
  figures plain_mb_f, plain_full_f;
  for (int r = 0; r < rounds; ++r) {
    plain_mb_f = plain(plain_cfg, p.microbatches, warmup);
    plain_mb.push_back(plain_mb_f.samples_per_s);
    plain_full_f = plain(plain_cfg, 1, warmup);
    plain_full.push_back(plain_full_f.samples_per_s);
    std::printf("round %d: plain loop %.0f samples/s (%d microbatches), %.0f samples/s (whole batch)", r + 1,
                plain_mb.back(), p.microbatches, plain_full.back());
    for (const auto& s : schedules) {
      last[s] = pipelined(cfgs.at(s), warmup);
      pipe[s].push_back(last[s].samples_per_s);
      std::printf("; %s %.0f", s.c_str(), pipe[s].back());
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  const double base = median(plain_mb), full = median(plain_full);
  std::printf("median: plain loop %.0f samples/s (%d microbatches), %.0f samples/s (whole batch)\n", base,
              p.microbatches, full);
  for (const auto& s : schedules) {
    const double m = median(pipe[s]);
    std::printf("  %-6s %.0f samples/s: %.3f of the plain loop with microbatches, %.3f of the whole-batch loop\n",
                s.c_str(), m, m / base, m / full);
  }
  std::printf("peak allocated (CUDA caching allocator, GiB): plain %.2f (microbatches), %.2f (whole batch)",
              plain_mb_f.peak_gib, plain_full_f.peak_gib);
  for (const auto& s : schedules)
    std::printf("; %s %.2f (stashed activations, all stages: %.2f)", s.c_str(), last[s].peak_gib, last[s].stash_gib);
  std::printf("\n");
  return 0;
}
