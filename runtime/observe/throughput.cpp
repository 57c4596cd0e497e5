#include "runtime/observe/throughput.hpp"

#include <algorithm>
#include <set>

namespace actorpipe {

namespace {

bool token_data(const config& cfg) { return cfg.data.seq_len > 0; }

// The parameters of one layer that a token (or sample) meets in a matmul
// or an elementwise op: all but embedding tables.
int64_t compute_parameters(const layer_spec& s) {
  if (s.type == "linear") return s.in * s.out + s.out;
  if (s.type == "layernorm") return 2 * s.dim;
  if (s.type == "lm_head") return s.vocab * s.dim;
  if (s.type == "gpt_block")
    return 4 * s.dim + 4 * s.dim * s.dim + 4 * s.dim + 2 * s.dim * s.mlp_hidden + s.mlp_hidden + s.dim;
  if (s.type == "rmsnorm") return s.dim;
  if (s.type == "llama_block") {
    const int64_t kv = (s.kv_heads > 0 ? s.kv_heads : s.heads) * (s.dim / s.heads);
    return 2 * s.dim + 2 * s.dim * s.dim + 2 * s.dim * kv + 3 * s.dim * s.ffn_hidden;  // norms, wq wo, wk wv, SwiGLU
  }
  return 0;  // embedding, token_embedding (lookups), activations, dropout
}

bool attends(const layer_spec& s) { return s.type == "gpt_block" || s.type == "llama_block"; }

}  // namespace

throughput_basis throughput_of(const config& cfg) {
  throughput_basis b;
  const int64_t seq = token_data(cfg) ? cfg.data.seq_len : 1;
  b.unit = token_data(cfg) ? "tokens" : "samples";
  b.units_per_step = cfg.train.batch_size * seq;
  double flops = 0.0;
  for (const auto& s : cfg.model.layers) {
    flops += 6.0 * static_cast<double>(compute_parameters(s));
    if (attends(s)) flops += 12.0 * static_cast<double>(s.dim) * static_cast<double>(seq);
  }
  b.flops_per_unit = flops;
  return b;
}

int devices_counted(const std::vector<std::vector<std::string>>& replica_devices) {
  int gpus = 0;
  bool cpu = false;
  for (const auto& replica : replica_devices)
    for (const auto& d : replica) {
      if (d.rfind("cuda", 0) == 0)
        ++gpus;
      else
        cpu = true;
    }
  return gpus + (cpu ? 1 : 0);
}

void set_throughput(train_result& r, const config& cfg, double peak_tflops) {
  const auto b = throughput_of(cfg);
  r.step_units = b.units_per_step;
  r.unit = b.unit;
  r.step_flops = b.flops_per_unit * static_cast<double>(b.units_per_step);
  const auto& devices = !r.replica_devices.empty() ? r.replica_devices : cfg.replica_devices;
  r.peak_flops = peak_tflops > 0 ? peak_tflops * 1e12 * std::max(1, devices_counted(devices)) : 0.0;
}

double units_per_second(const train_result& r, const step_record& s) {
  return s.step_s > 0 ? static_cast<double>(r.step_units) / s.step_s : 0.0;
}

double mfu(const train_result& r, const step_record& s) {
  if (r.peak_flops <= 0 || s.step_s <= 0) return -1.0;
  return r.step_flops / s.step_s / r.peak_flops;
}

namespace {

template <class F>
double mean_after_first(const train_result& r, F figure) {
  const size_t first = r.steps.size() > 1 ? 1 : 0;
  double sum = 0.0;
  size_t n = 0;
  for (size_t i = first; i < r.steps.size(); ++i) {
    sum += figure(r.steps[i]);
    ++n;
  }
  return n > 0 ? sum / static_cast<double>(n) : 0.0;
}

}  // namespace

double mean_units_per_second(const train_result& r) {
  // Units over the mean step time: a mean of rates would weigh fast steps more.
  const size_t first = r.steps.size() > 1 ? 1 : 0;
  const double seconds = mean_after_first(r, [](const step_record& s) { return s.step_s; });
  return r.steps.size() > first && seconds > 0 ? static_cast<double>(r.step_units) / seconds : 0.0;
}

double mean_mfu(const train_result& r) {
  const double seconds = mean_after_first(r, [](const step_record& s) { return s.step_s; });
  if (r.peak_flops <= 0 || seconds <= 0) return -1.0;
  return r.step_flops / seconds / r.peak_flops;
}

const std::vector<peak_entry>& known_peaks() {
  // Dense bf16 tensor-core peaks from NVIDIA's data sheets (without sparsity).
  static const std::vector<peak_entry> peaks{
      {"H200", 989.4}, {"H100 PCIe", 756.5}, {"H100", 989.4}, {"A100", 312.0},
      {"L40S", 362.1}, {"L40", 181.0}, {"L4", 121.0}};
  return peaks;
}

double known_peak_tflops(const std::string& device_name) {
  for (const auto& p : known_peaks()) {
    const std::string key = p.name;
    // "H100 PCIe": both words somewhere in the name, in order.
    const auto space = key.find(' ');
    if (space == std::string::npos) {
      if (device_name.find(key) != std::string::npos) return p.tflops;
      continue;
    }
    const auto a = device_name.find(key.substr(0, space));
    if (a != std::string::npos && device_name.find(key.substr(space + 1), a) != std::string::npos) return p.tflops;
  }
  return 0.0;
}

}  // namespace actorpipe
