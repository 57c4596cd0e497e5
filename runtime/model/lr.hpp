#pragma once
// The learning rate of a step, as torch's StepLR chains it: multiplied by
// gamma at every step_size boundary, in that order, so every caller gets
// the same bits.
#include <cstdint>

#include "runtime/config/config.hpp"

namespace actorpipe {

inline double lr_at(const train_config& t, int64_t step) {
  double lr = t.optimizer.lr;
  if (t.lr_schedule.type != "step") return lr;
  for (int64_t s = 1; s <= step; ++s)
    if (s % t.lr_schedule.step_size == 0) lr *= t.lr_schedule.gamma;
  return lr;
}

}  // namespace actorpipe
