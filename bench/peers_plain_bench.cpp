// The plain LibTorch loop for bench/peers.sh: the config's model as one
// torch::nn::Sequential (its initial weights: model.init_from, or the
// seeded default), the config's data and batches, Adam at the config's lr,
// the batch in M microbatches with gradient accumulation (M = 1: the whole
// batch at once), T intra-op threads. No runtime: what a LibTorch user
// writes by hand. Prints one JSON line: {"step_ms": [...]} (every step,
// warm-up included; the caller drops what it wants).
//
//   build/peers_plain_bench CONFIG [--microbatches M] [--steps N] [--threads T]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/config/config.hpp"
#include "runtime/data/data.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/plain_module.hpp"

namespace {

int positive(const char* flag, const char* v) {
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || n < 1 || n > 1 << 20) {
    std::fprintf(stderr, "peers_plain_bench: %s expects a positive integer, got '%s'\n", flag, v);
    std::exit(2);
  }
  return static_cast<int>(n);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace actorpipe;
  std::string path;
  int microbatches = 1, steps = 12, threads = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf("usage: peers_plain_bench CONFIG [--microbatches M] [--steps N] [--threads T]\n"
                  "The config's model as one LibTorch Sequential, Adam, M microbatches with gradient\n"
                  "accumulation (default 1: the whole batch), T intra-op threads (default 2), N steps\n"
                  "(default 12). Prints {\"step_ms\": [...]}.\n");
      return 0;
    }
    if (a.rfind("--", 0) == 0) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "peers_plain_bench: %s needs a value (see --help)\n", a.c_str());
        return 2;
      }
      const char* v = argv[++i];
      if (a == "--microbatches") microbatches = positive("--microbatches", v);
      else if (a == "--steps") steps = positive("--steps", v);
      else if (a == "--threads") threads = positive("--threads", v);
      else {
        std::fprintf(stderr, "peers_plain_bench: unknown option %s (see --help)\n", a.c_str());
        return 2;
      }
    } else if (path.empty()) {
      path = a;
    } else {
      std::fprintf(stderr, "peers_plain_bench: one config only (see --help)\n");
      return 2;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "peers_plain_bench: no config (see --help)\n");
    return 2;
  }
  try {
    const config c = load_config(path);
    if (c.train.optimizer.type != "adam") {
      std::fprintf(stderr, "peers_plain_bench: %s: train.optimizer.type is %s; this loop runs Adam only\n",
                   path.c_str(), c.train.optimizer.type.c_str());
      return 2;
    }
    at::set_num_threads(threads);
    auto net = plain_sequential(build_layers(c));
    net->train();
    auto data = load_dataset(c);
    torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(c.train.optimizer.lr));
    std::printf("{\"threads\": %d, \"microbatches\": %d, \"step_ms\": [", threads, microbatches);
    for (int step = 0; step < steps; ++step) {
      auto b = batch_for_step(data, c, step);
      const auto start = std::chrono::steady_clock::now();
      opt.zero_grad();
      for (const auto& mb : split_microbatches(b, microbatches)) {
        auto loss = torch::nn::functional::cross_entropy(net->forward(mb.x), mb.y) *
                    (static_cast<double>(mb.x.size(0)) / static_cast<double>(b.x.size(0)));
        loss.backward();
      }
      opt.step();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      std::printf("%s%.3f", step ? ", " : "", ms);
    }
    std::printf("]}\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "peers_plain_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
