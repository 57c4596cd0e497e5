// GPT throughput: a byte-level GPT (tests/reference/gpt_reference.py's
// layers), or with --model llama a LLaMA (llama_reference.py's: GQA with
// --kv-heads, SwiGLU of --ffn, a --vocab of random token ids), as an
// S-stage pipeline on one device against the plain LibTorch
// loop a user writes on that device (the same layers in one stack, the same
// microbatches with gradient accumulation, and the whole batch at once),
// Adam. Tokens per second, their ratio, model FLOPs utilization against a
// peak (989 TFLOPS, the H100's dense bf16, by default) and, on CUDA, peak
// allocated memory per schedule.
//
// Model FLOPs per token: 6 x parameters (each counted once: the tied head is
// the embedding's table) + the attention term 12 x blocks x T x dim (q k^T
// and att v, forward and backward, the full T x T square). --peak-tflops
// measure: the peak is what this device's float32 matmul reaches (a
// 2048 x 2048 matmul on the cores LibTorch uses, best of 5).
//
//   build/gpt_bench [--device cpu|cuda:0] [--steps N] [--rounds R] [--blocks B]
//                   [--dim D] [--heads H] [--seq T] [--batch N] [--stages S]
//                   [--microbatches M] [--dtype T] [--schedules a,b] [--peak-tflops P|measure]
//                   [--model gpt|llama] [--kv-heads K] [--ffn F] [--vocab V] [--mixed]
#include <torch/cuda.h>
#include <torch/torch.h>

#if ACTORPIPE_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_pipeline.hpp"
#include "runtime/data/data.hpp"
#include "runtime/model/model.hpp"

namespace {

using namespace actorpipe;
using clock_type = std::chrono::steady_clock;

struct shape {
  std::string device = "cpu";
  int steps = 8, blocks = 4, stages = 4, microbatches = 8, heads = 4, kv_heads = 0;
  int64_t dim = 128, seq = 128, batch = 32, ffn = 0, vocab = 256;
  std::string dtype = "float32";
  std::string model = "gpt";
  bool mixed = false;
  double peak_tflops = 989.0;
  bool measure_peak = false;
};

bool llama(const shape& p) { return p.model == "llama"; }

std::string model_yaml(const shape& p, const std::string& text, const std::string& schedule, int stages) {
  std::ostringstream y;
  y << "model:\n  dtype: " << p.dtype << "\n" << (p.mixed ? "  mixed_precision: bfloat16\n" : "") << "  layers:\n";
  if (llama(p)) {
    y << "    - {type: token_embedding, vocab: " << p.vocab << ", dim: " << p.dim << "}\n"
      << "    - {type: llama_block, dim: " << p.dim << ", heads: " << p.heads
      << ", kv_heads: " << (p.kv_heads > 0 ? p.kv_heads : p.heads) << ", ffn_hidden: " << p.ffn
      << ", repeat: " << p.blocks << "}\n"
      << "    - {type: rmsnorm, dim: " << p.dim << "}\n"
      << "    - {type: lm_head, vocab: " << p.vocab << ", dim: " << p.dim << ", tie: true}\n";
    y << "data: {kind: tokens, path: " << text << ", seq_len: " << p.seq << ", test_fraction: 0}\n";
  } else {
    y << "    - {type: embedding, vocab: 256, dim: " << p.dim << ", max_seq: " << p.seq << "}\n"
      << "    - {type: gpt_block, dim: " << p.dim << ", heads: " << p.heads << ", repeat: " << p.blocks << "}\n"
      << "    - {type: layernorm, dim: " << p.dim << "}\n"
      << "    - {type: lm_head, vocab: 256, dim: " << p.dim << ", tie: true}\n";
    y << "data: {kind: text, path: " << text << ", seq_len: " << p.seq << ", test_fraction: 0}\n";
  }
  y << "train: {steps: " << p.steps << ", batch_size: " << p.batch
    << ", optimizer: {type: adam, lr: 0.0001}, seed: 7}\n";
  y << "pipeline:\n  stages: " << stages << "\n  schedule: " << schedule << "\n  microbatches: " << p.microbatches
    << "\n  devices: [";
  for (int i = 0; i < stages; ++i) y << (i ? ", " : "") << p.device;
  y << "]\nsupervision: {watchdog_s: 0}\n";
  return y.str();
}

bool cuda(const shape& p) { return p.device.rfind("cuda", 0) == 0; }

void sync(const shape& p) {
  if (cuda(p)) torch::cuda::synchronize();
}

void reset_peak(const shape& p) {
#if ACTORPIPE_TORCH_CUDA
  if (!cuda(p)) return;
  c10::cuda::CUDACachingAllocator::emptyCache();
  c10::cuda::CUDACachingAllocator::resetPeakStats(0);
#else
  (void)p;
#endif
}

double peak_gib(const shape& p) {
#if ACTORPIPE_TORCH_CUDA
  if (!cuda(p)) return 0.0;
  return static_cast<double>(c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].peak) /
         (1024.0 * 1024.0 * 1024.0);
#else
  (void)p;
  return 0.0;
#endif
}

struct figures {
  double tokens_per_s = 0.0;
  double peak_gib = 0.0;
};

// The plain loop: every layer in one stack on the device, the batch in
// `microbatches` pieces with gradient accumulation, Adam. The tie is one
// tensor here, as in the reference: the head runs with the embedding's table.
figures plain(const shape& p, const config& c, int microbatches, int warmup) {
  reset_peak(p);
  const auto dtype = parameter_dtype(c.model);
  std::vector<layer> layers = build_layers(c);
  for (auto& l : layers) l.to(p.device, dtype);
  const layer_stack model(std::move(layers));
  std::vector<at::Tensor> params;
  at::Tensor table;
  const int head = c.model.tie_head;
  std::vector<at::Tensor> stack_params;  // as the layers hold them, head copy included
  for (const auto& l : model.layers())
    for (auto& [name, t] : l.parameters()) {
      if (l.index() == c.model.tie_embedding && !table.defined()) table = t;  // wte.weight, or a token_embedding's
      stack_params.push_back(t);
      if (l.index() != head) params.push_back(t);
    }
  torch::optim::Adam opt(params, torch::optim::AdamOptions(c.train.optimizer.lr));
  auto data = load_dataset(c);
  clock_type::time_point start;
  const forward_ctx ctx{c.train.seed, 0, 0, true};
  for (int64_t step = 0; step < c.train.steps; ++step) {
    if (step == warmup) {
      sync(p);
      start = clock_type::now();
    }
    opt.zero_grad();
    auto b = batch_for_step(data, c, step);
    auto x = b.x.to(torch::Device(p.device)), y = b.y.to(torch::Device(p.device));
    auto xs = x.chunk(microbatches), ys = y.chunk(microbatches);
    // The head's parameters are the table itself; mixed precision casts the
    // weights once for the step, as a stage does.
    std::vector<at::Tensor> run = stack_params;
    if (head >= 0) run.back() = table;
    if (p.mixed)
      for (auto& t : run) t = t.to(at::kBFloat16);
    for (size_t i = 0; i < xs.size(); ++i) {
      auto logits = model.forward(xs[i], ctx, nullptr, &run);
      if (p.mixed) logits = logits.to(at::kFloat);
      auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), ys[i].reshape({-1})) *
                  (static_cast<double>(xs[i].size(0)) / static_cast<double>(x.size(0)));
      loss.backward();
    }
    opt.step();
  }
  sync(p);
  const double s = std::chrono::duration<double>(clock_type::now() - start).count();
  return {static_cast<double>((c.train.steps - warmup) * c.train.batch_size * p.seq) / s, peak_gib(p)};
}

figures pipelined(const shape& p, const config& c, int warmup) {
  reset_peak(p);
  auto out = run_training(c);
  auto f = bench::figures(out.result, warmup);
  return {static_cast<double>(f.steps * c.train.batch_size * p.seq) / f.seconds, peak_gib(p)};
}

// What this device's float32 matmul reaches, in TFLOP/s: 2048 x 2048 x 2048
// (2 n^3 FLOPs), best of 5 after a warm-up.
double measured_peak_tflops(const shape& p) {
  const int64_t n = 2048;
  auto a = torch::randn({n, n}, torch::Device(p.device)), b = torch::randn({n, n}, torch::Device(p.device));
  (void)torch::matmul(a, b);
  sync(p);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = clock_type::now();
    auto c = torch::matmul(a, b);
    sync(p);
    best = std::min(best, std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return 2.0 * static_cast<double>(n * n * n) / best / 1e12;
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
  std::vector<std::string> schedules = {"gpipe", "1f1b", "zb-h1"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: gpt_bench [--device cpu|cuda:0] [--steps N] [--rounds R] [--blocks B] [--dim D]\n"
          "                 [--heads H] [--seq T] [--batch N] [--stages S] [--microbatches M]\n"
          "                 [--dtype float32|bfloat16|float16] [--schedules a,b] [--peak-tflops P|measure]\n"
          "                 [--model gpt|llama] [--kv-heads K] [--ffn F] [--vocab V] [--mixed 1]\n"
          "A byte-level GPT as an S-stage pipeline on one device against a plain LibTorch loop\n"
          "on it (the same microbatches, and the whole batch): tokens/s, their ratio, MFU\n"
          "against P TFLOPS, peak allocated memory on CUDA. Defaults: cpu, 8 steps (2 warm-up),\n"
          "3 rounds, 4 blocks of dim 128 (4 heads), T 128, batch 32 in 8 microbatches, 4 stages,\n"
          "float32, schedules gpipe,1f1b,zb-h1, P 989 (an H100's dense bf16); measure: this device's\n"
          "float32 matmul peak. llama: token_embedding, llama_block (K kv heads, SwiGLU F, default\n"
          "8 dim / 3), rmsnorm, tied lm_head over random ids below V (default 2048); --mixed 1:\n"
          "model.mixed_precision bfloat16 (the plain loop casts its weights once a step too).\n");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "gpt_bench: %s needs a value (see --help)\n", a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--device") p.device = v;
    else if (a == "--steps") p.steps = std::atoi(v.c_str());
    else if (a == "--rounds") rounds = std::atoi(v.c_str());
    else if (a == "--blocks") p.blocks = std::atoi(v.c_str());
    else if (a == "--dim") p.dim = std::atoll(v.c_str());
    else if (a == "--heads") p.heads = std::atoi(v.c_str());
    else if (a == "--seq") p.seq = std::atoll(v.c_str());
    else if (a == "--batch") p.batch = std::atoll(v.c_str());
    else if (a == "--stages") p.stages = std::atoi(v.c_str());
    else if (a == "--microbatches") p.microbatches = std::atoi(v.c_str());
    else if (a == "--dtype") p.dtype = v;
    else if (a == "--schedules") schedules = split_list(v);
    else if (a == "--peak-tflops" && v == "measure") p.measure_peak = true;
    else if (a == "--peak-tflops") p.peak_tflops = std::atof(v.c_str());
    else if (a == "--model" && (v == "gpt" || v == "llama")) p.model = v;
    else if (a == "--kv-heads") p.kv_heads = std::atoi(v.c_str());
    else if (a == "--ffn") p.ffn = std::atoll(v.c_str());
    else if (a == "--vocab") p.vocab = std::atoll(v.c_str());
    else if (a == "--mixed") p.mixed = v == "1";
    else {
      std::fprintf(stderr, "gpt_bench: unknown option %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (p.steps < 3 || rounds < 1 || p.blocks < 1 || p.dim < 1 || p.heads < 1 || p.seq < 1 || p.batch < 1 ||
      p.stages < 1 || p.microbatches < 1 || schedules.empty() || !(p.peak_tflops > 0)) {
    std::fprintf(stderr, "gpt_bench: --steps must be at least 3; the sizes, counts and --peak-tflops positive\n");
    return 2;
  }
  if (cuda(p) && !torch::cuda::is_available()) {
    std::fprintf(stderr, "gpt_bench: no CUDA device (LibTorch without CUDA, or no GPU); use --device cpu\n");
    return 1;
  }
  if (cuda(p)) (void)torch::zeros({1}, torch::Device(p.device));  // the allocator answers once CUDA is in use
  if (llama(p) && p.ffn == 0) p.ffn = (8 * p.dim / 3 + 31) / 32 * 32;
  if (!llama(p)) p.vocab = 256;
  // Random bytes (GPT) or uint16 token ids (LLaMA): enough windows for every
  // step (the speed does not depend on them).
  const std::string text = "/tmp/actorpipe_gpt_bench_" + std::to_string(::getpid()) + (llama(p) ? ".bin" : ".txt");
  {
    std::mt19937 gen(7);
    const auto count = static_cast<size_t>(p.batch * p.seq * (p.steps + 1) + 1);
    std::string bytes;
    if (llama(p)) {
      bytes.resize(2 * count);
      for (size_t i = 0; i < count; ++i) {
        const auto id = static_cast<uint16_t>(gen() % static_cast<uint32_t>(p.vocab));
        bytes[2 * i] = static_cast<char>(id & 0xFF);
        bytes[2 * i + 1] = static_cast<char>(id >> 8);
      }
    } else {
      bytes.assign(count, ' ');
      for (auto& ch : bytes) ch = static_cast<char>(32 + gen() % 95);
    }
    std::ofstream(text, std::ios::binary) << bytes;
  }
  if (p.measure_peak) p.peak_tflops = measured_peak_tflops(p);
  const int warmup = 2;
  load_env env;
  env.cuda_devices = static_cast<int>(torch::cuda::device_count());
  config plain_cfg, counted;
  std::map<std::string, config> cfgs;
  try {
    plain_cfg = bench::config_from_yaml(model_yaml(p, text, "gpipe", 1), env);
    for (const auto& s : schedules) cfgs.emplace(s, bench::config_from_yaml(model_yaml(p, text, s, p.stages), env));
  } catch (const std::exception& e) {
    std::remove(text.c_str());
    std::fprintf(stderr, "gpt_bench: %s\n", e.what());
    return 2;
  }
  int64_t params = 0;
  for (const auto& n : layer_parameter_counts(plain_cfg.model.layers)) params += n;
  params -= p.vocab * p.dim;  // the tied head is the embedding's table
  const double flops_per_token =
      6.0 * static_cast<double>(params) + 12.0 * p.blocks * static_cast<double>(p.seq) * static_cast<double>(p.dim);
  std::printf("device %s; %s of %d blocks, dim %lld, %d heads, T %lld, %s%s: %.2f M parameters, %.3g FLOPs per "
              "token; batch %lld sequences in %d microbatches; %d stages; peak %.3g TFLOPS%s\n",
              p.device.c_str(), llama(p) ? "LLaMA" : "GPT", p.blocks, static_cast<long long>(p.dim), p.heads,
              static_cast<long long>(p.seq), p.dtype.c_str(), p.mixed ? ", bf16 mixed" : "",
              static_cast<double>(params) / 1e6, flops_per_token, static_cast<long long>(p.batch), p.microbatches,
              p.stages, p.peak_tflops, p.measure_peak ? " (measured: a 2048^3 float32 matmul)" : "");
  std::fflush(stdout);
  std::vector<double> plain_mb, plain_full;
  std::map<std::string, std::vector<double>> pipe;
  std::map<std::string, figures> last;
  figures plain_mb_f, plain_full_f;
  for (int r = 0; r < rounds; ++r) {
    plain_mb_f = plain(p, plain_cfg, p.microbatches, warmup);
    plain_mb.push_back(plain_mb_f.tokens_per_s);
    plain_full_f = plain(p, plain_cfg, 1, warmup);
    plain_full.push_back(plain_full_f.tokens_per_s);
    std::printf("round %d: plain loop %.0f tokens/s (%d microbatches), %.0f (whole batch)", r + 1, plain_mb.back(),
                p.microbatches, plain_full.back());
    for (const auto& s : schedules) {
      last[s] = pipelined(p, cfgs.at(s), warmup);
      pipe[s].push_back(last[s].tokens_per_s);
      std::printf("; %s %.0f", s.c_str(), pipe[s].back());
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  std::remove(text.c_str());
  auto mfu = [&](double tokens_per_s) { return tokens_per_s * flops_per_token / (p.peak_tflops * 1e12); };
  const double base = median(plain_mb), full = median(plain_full);
  std::printf("median: plain loop %.0f tokens/s, MFU %.4f (%d microbatches); %.0f tokens/s, MFU %.4f (whole batch); "
              "MFU against %g TFLOPS\n",
              base, mfu(base), p.microbatches, full, mfu(full), p.peak_tflops);
  for (const auto& s : schedules) {
    const double m = median(pipe[s]);
    std::printf("  %-6s %.0f tokens/s, MFU %.4f: %.3f of the plain loop with microbatches, %.3f of the whole batch\n",
                s.c_str(), m, mfu(m), m / base, m / full);
  }
  if (cuda(p)) {
    std::printf("peak allocated (GiB): plain %.2f (microbatches), %.2f (whole batch)", plain_mb_f.peak_gib,
                plain_full_f.peak_gib);
    for (const auto& s : schedules) std::printf("; %s %.2f", s.c_str(), last[s].peak_gib);
    std::printf("\n");
  }
  return 0;
}
