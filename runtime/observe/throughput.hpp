#pragma once
// Tokens (or samples) per second and model FLOPs utilisation, as
// torchtitan and Megatron report them: a step's model FLOPs are
// 6 x (the parameters a token meets in a matmul) x tokens, plus attention's
// 12 x dim x seq_len per token and block (torchtitan's count, causal mask
// not halved), over the devices' peak. Embedding tables are lookups, not
// matmuls, and do not count. No torch here.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/config/config.hpp"
#include "runtime/observe/metrics.hpp"

namespace actorpipe {

/// What a step of cfg trains on and what it costs.
struct throughput_basis {
  int64_t units_per_step = 0;  ///< train.batch_size x seq_len for token data, train.batch_size otherwise
  std::string unit = "samples";  ///< "tokens" or "samples"
  double flops_per_unit = 0.0;   ///< forward and backward, per token (or sample)
};

throughput_basis throughput_of(const config& cfg);

/// Fills r's step_units, unit and step_flops from cfg, and its peak_flops
/// from `peak_tflops` (one device's bf16 dense peak, TFLOP/s; 0: unknown)
/// times the devices the run's stages occupy (devices_counted).
void set_throughput(train_result& r, const config& cfg, double peak_tflops);

/// The devices a run's peak counts: each stage on a GPU, and the CPU once
/// (every stage on it shares it) where any stage is on it.
int devices_counted(const std::vector<std::vector<std::string>>& replica_devices);

/// Tokens (or samples) per second of step `s` (0 when it took no time).
double units_per_second(const train_result& r, const step_record& s);
/// Model FLOPs utilisation of step `s`, in [0, 1]; -1 without a peak.
double mfu(const train_result& r, const step_record& s);
/// Over the run: the mean of each figure over its steps after the first
/// (as mean_step_seconds); -1 mfu without a peak.
double mean_units_per_second(const train_result& r);
double mean_mfu(const train_result& r);

/// One accelerator's dense bf16 peak in TFLOP/s, from its name as CUDA
/// reports it ("NVIDIA H100 80GB HBM3"): H100 (SXM 989.4, PCIe 756.5),
/// H200 989.4, A100 312, L40S 362.1, L40 181, L4 121; 0 for another.
double known_peak_tflops(const std::string& device_name);

/// The table known_peak_tflops reads, for --help and the docs.
struct peak_entry {
  const char* name;
  double tflops;
};
const std::vector<peak_entry>& known_peaks();

}  // namespace actorpipe
