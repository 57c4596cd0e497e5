#include "apps/progress.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <utility>
#include <vector>

#if ACTORPIPE_HAS_NCCL
#include <cuda_runtime_api.h>
#endif

#include "runtime/observe/tensorboard.hpp"
#include "runtime/observe/throughput.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe::app {

namespace {

using clock_type = std::chrono::steady_clock;

// 12345 -> "12.3k": a rate as a progress line shows it.
std::string rate(double v) {
  if (v >= 1e9) return fmt("%.2fG", v / 1e9);
  if (v >= 1e6) return fmt("%.2fM", v / 1e6);
  if (v >= 1e4) return fmt("%.1fk", v / 1e3);
  return fmt("%.0f", v);
}

}  // namespace

double peak_tflops_for(const config& cfg, double given) {
  if (given > 0) return given;
#if ACTORPIPE_HAS_NCCL
  for (const auto& d : cfg.pipeline.devices) {
    if (d.rfind("cuda:", 0) != 0) continue;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, std::stoi(d.substr(5))) != cudaSuccess) return 0.0;
    return known_peak_tflops(prop.name);
  }
#else
  (void)cfg;
#endif
  return 0.0;
}

struct progress_sink::impl {
  progress_options p;
  train_result basis;  // the throughput fields only: what mfu() and units_per_second() read
  std::unique_ptr<tensorboard_writer> tb;
  bool live = false;
  bool bar_open = false;
  clock_type::time_point started = clock_type::now(), drawn{};

  void step(const step_record& s) {
    const int64_t done = s.step + 1;
    const double per_s = units_per_second(basis, s);
    const double util = mfu(basis, s);
    if (tb) tensorboard_step(s, done, per_s, util);
    if (p.quiet || p.log_every <= 0) return;
    if (live) {
      bar(s, done, per_s);
      return;
    }
    if (done % p.log_every != 0 && done != p.total_steps) return;
    std::printf("step %5lld/%lld  loss %.4f  step %8.2f ms  bubble %.3f  %s/s %s%s  lr %.2e%s\n",
                static_cast<long long>(done), static_cast<long long>(p.total_steps), s.loss, s.step_s * 1e3, s.bubble,
                basis.unit.c_str(), rate(per_s).c_str(), util >= 0 ? fmt("  mfu %.1f%%", util * 100).c_str() : "",
                s.lr, s.skipped ? "  skipped (a NaN or an infinity)" : "");
    std::fflush(stdout);
  }

  // A terminal gets one live bar, redrawn at most 10 times a second.
  void bar(const step_record& s, int64_t done, double per_s) {
    auto now = clock_type::now();
    if (done != p.total_steps && now - drawn < std::chrono::milliseconds(100)) return;
    drawn = now;
    const double elapsed = std::chrono::duration<double>(now - started).count();
    const double eta = done > 0 ? elapsed / done * static_cast<double>(p.total_steps - done) : 0.0;
    const int width = 30, filled = static_cast<int>(width * done / std::max<int64_t>(1, p.total_steps));
    std::printf("\r[%s%s] step %lld/%lld  loss %.4f  step %.2f ms  %s/s %s  ETA %.1f s   ",
                std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                static_cast<long long>(done), static_cast<long long>(p.total_steps), s.loss, s.step_s * 1e3,
                basis.unit.c_str(), rate(per_s).c_str(), eta);
    bar_open = done != p.total_steps;
    if (!bar_open) std::printf("\n");
    std::fflush(stdout);
  }

  void eval(const eval_record& e) {
    if (tb) {
      tb->scalars(e.step, {{"val/loss", e.loss}, {"val/accuracy", e.accuracy}});
    }
    if (p.quiet) return;
    if (bar_open) std::printf("\n");
    bar_open = false;
    std::printf("eval after %lld/%lld  val loss %.4f  accuracy %.4f  (%lld %s, %.1f ms)\n",
                static_cast<long long>(e.step), static_cast<long long>(p.total_steps), e.loss, e.accuracy,
                static_cast<long long>(e.positions), basis.unit == "tokens" ? "tokens" : "samples", e.seconds * 1e3);
    std::fflush(stdout);
  }

  void tensorboard_step(const step_record& s, int64_t done, double per_s, double util) {
    std::vector<std::pair<std::string, double>> v{{"train/loss", s.loss},
                                                  {"train/lr", s.lr},
                                                  {"train/grad_norm", s.grad_norm},
                                                  {"train/step_ms", s.step_s * 1e3},
                                                  {"train/" + basis.unit + "_per_s", per_s},
                                                  {"train/bubble", s.bubble}};
    if (util >= 0) v.emplace_back("train/mfu", util);
    // Replica 0's stages (the others run the same layers).
    const size_t stages = std::min(s.stages.size(), static_cast<size_t>(std::max(1, basis.stages)));
    for (size_t i = 0; i < stages; ++i) {
      const std::string at = "stages/" + std::to_string(i) + "/";
      v.emplace_back(at + "busy_ms", static_cast<double>(s.stages[i].busy_ns) / 1e6);
      v.emplace_back(at + "peak_activation_bytes", static_cast<double>(s.stages[i].peak_stash_bytes));
    }
    tb->scalars(done, v);
  }
};

progress_sink::progress_sink(const config& cfg, const progress_options& p) : impl_(std::make_shared<impl>()) {
  impl_->p = p;
  impl_->basis.stages = cfg.pipeline.stages;
  set_throughput(impl_->basis, cfg, peak_tflops_for(cfg, p.peak_tflops));
  impl_->live = !p.quiet && p.log_every > 0 && isatty(STDOUT_FILENO) != 0;
  if (!p.tensorboard.empty()) impl_->tb = std::make_unique<tensorboard_writer>(p.tensorboard);
}

progress_sink::~progress_sink() {
  if (impl_ && impl_->tb) impl_->tb->flush();
}

void progress_sink::attach(train_options& opts) {
  auto self = impl_;
  opts.on_step = [self](const step_record& s) { self->step(s); };
  opts.on_eval = [self](const eval_record& e) { self->eval(e); };
}

void progress_sink::finish(train_result& r) const {
  r.step_units = impl_->basis.step_units;
  r.unit = impl_->basis.unit;
  r.step_flops = impl_->basis.step_flops;
  r.peak_flops = impl_->basis.peak_flops;
  if (impl_->tb) impl_->tb->flush();
}

}  // namespace actorpipe::app
