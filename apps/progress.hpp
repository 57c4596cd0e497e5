#pragma once
// What `train` and `compare` say while a run goes: a progress line every
// log_every steps (a live bar on a terminal), a line per evaluation during
// training, and the same figures as TensorBoard scalars (--tensorboard).
#include <cstdint>
#include <memory>
#include <string>

#include "actors/trainer.hpp"
#include "runtime/config/config.hpp"
#include "runtime/observe/metrics.hpp"

namespace actorpipe::app {

struct progress_options {
  int64_t log_every = 1;  ///< 0: no per-step lines (evaluations still print)
  int64_t total_steps = 0;
  bool quiet = false;     ///< no lines at all (a rank other than 0)
  std::string tensorboard;  ///< a directory for the event file ("": none)
  double peak_tflops = 0;   ///< one device's peak (0: a known GPU's, or no MFU)
};

/// One accelerator's peak for MFU: `given` (--peak-tflops) when set, else
/// the known bf16 dense peak of the GPU the first CUDA stage runs on (0:
/// none known, as on a CPU).
double peak_tflops_for(const config& cfg, double given);

/// Sets opts.on_step and opts.on_eval to report as `p` says. The returned
/// object holds what they write to (the TensorBoard file) and must outlive
/// the run; `finish` it with the run's result once it is over.
class progress_sink {
public:
  progress_sink(const config& cfg, const progress_options& p);
  ~progress_sink();
  void attach(train_options& opts);
  /// The run's throughput figures (step_units, unit, step_flops, peak_flops) set in `r`.
  void finish(train_result& r) const;
  struct impl;

private:
  std::shared_ptr<impl> impl_;
};

}  // namespace actorpipe::app
