#pragma once
// The learning rate of a step, from the step alone (a resumed, healed or
// re-placed run needs no scheduler state):
// - step: as torch's StepLR chains it, multiplied by gamma at every
//   step_size boundary in that order, so every caller gets the same bits;
// - cosine, linear, constant: a linear warmup, then a cosine or linear decay
//   to min_lr (or none), in double, exactly as lr_at in
//   ../shared/reference/llama_reference.py (nanoGPT's get_lr, torchtitan's
//   warmup and decay).
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "runtime/config/config.hpp"

namespace actorpipe {

/// lr_schedule.decay_steps as it applies to a run of t.steps.
inline int64_t decay_steps(const train_config& t) {
  const auto& l = t.lr_schedule;
  if (l.decay_steps >= 0) return l.decay_steps;
  return t.steps > l.warmup_steps ? t.steps - l.warmup_steps : 0;
}

/// The rate the update of 0-based optimizer step `step` uses.
inline double lr_at(const train_config& t, int64_t step) {
  const auto& l = t.lr_schedule;
  double lr = t.optimizer.lr;
  if (l.type == "step") {
    for (int64_t s = 1; s <= step; ++s)
      if (s % l.step_size == 0) lr *= l.gamma;
    return lr;
  }
  if (l.type != "cosine" && l.type != "linear" && l.type != "constant") return lr;
  const int64_t warmup = l.warmup_steps;
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup + 1);
  if (l.type == "constant") return lr;
  const int64_t decay = decay_steps(t);
  if (step >= warmup + decay) return l.min_lr;
  const double r = static_cast<double>(step - warmup) / static_cast<double>(decay);
  const double c = l.type == "cosine" ? 0.5 * (1.0 + std::cos(M_PI * r)) : 1.0 - r;
  return l.min_lr + (lr - l.min_lr) * c;
}

/// "" when every update of a run of t.steps steps has a rate LibTorch can
/// take (a float); else what grows past it: the step (StepLR with a gamma
/// above 1 is the one schedule that grows) and the rate. Every other
/// schedule stays at or below train.optimizer.lr, which the config checks.
inline std::string rate_overflow(const train_config& t) {
  const auto& l = t.lr_schedule;
  if (l.type != "step" || l.gamma <= 1) return {};
  double lr = t.optimizer.lr;
  for (int64_t s = 1; s < t.steps; ++s) {
    if (s % l.step_size == 0) lr *= l.gamma;
    if (lr <= static_cast<double>(std::numeric_limits<float>::max())) continue;
    std::ostringstream factor;
    factor << l.gamma;  // as the config wrote it (10, not 10.000000)
    return "StepLR (gamma " + factor.str() + " every " + std::to_string(l.step_size) +
           " steps) grows train.optimizer.lr past float32's largest value (3.4e+38), which the optimizer computes "
           "in, at step " + std::to_string(s) + " of train.steps " + std::to_string(t.steps);
  }
  return {};
}

/// Throws cfg's config_error at train.lr_schedule.gamma when rate_overflow
/// has something to say (exit 2, before any work).
inline void check_rates(const config& cfg) {
  if (const std::string why = rate_overflow(cfg.train); !why.empty()) throw cfg.error_at("train.lr_schedule.gamma", why);
}

}  // namespace actorpipe
