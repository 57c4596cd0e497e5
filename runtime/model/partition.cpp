#include "runtime/model/partition.hpp"

#include "runtime/config/config.hpp"
#include "runtime/model/model.hpp"

#include <algorithm>
#include <stdexcept>

namespace actorpipe {

namespace {

// Can `costs` be cut into at most `stages` ranges of at most `cap` each?
bool fits(const std::vector<int64_t>& costs, int stages, int64_t cap) {
  int used = 1;
  int64_t sum = 0;
  for (auto c : costs) {
    if (c > cap) return false;
    if (sum + c > cap) {
      ++used;
      sum = 0;
    }
    sum += c;
  }
  return used <= stages;
}

}  // namespace

partition_t balanced_partition(const std::vector<int64_t>& costs, int stages) {
  int n = static_cast<int>(costs.size());
  if (stages < 1 || stages > n) throw std::invalid_argument("balanced_partition: bad stage count");
  int64_t lo = *std::max_element(costs.begin(), costs.end());
  int64_t hi = 0;
  for (auto c : costs) hi += c;
  while (lo < hi) {  // smallest feasible bottleneck
    int64_t mid = lo + (hi - lo) / 2;
    if (fits(costs, stages, mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  // Greedy from the left under the bottleneck, leaving one layer for each
  // stage still to come.
  partition_t parts;
  int begin = 0;
  for (int s = 0; s < stages; ++s) {
    int remaining_stages = stages - s - 1;
    int end = begin;
    int64_t sum = costs[begin];
    while (end + 1 < n - remaining_stages && sum + costs[end + 1] <= lo) {
      ++end;
      sum += costs[end];
    }
    if (s == stages - 1) end = n - 1;
    parts.emplace_back(begin, end);
    begin = end + 1;
  }
  return parts;
}

partition_t partition_for(const config& cfg) {
  if (!cfg.pipeline.partition.empty()) return cfg.pipeline.partition;
  // Balanced by compute, not parameters: an embedding's table is large and
  // its work small; attention's work grows with the sequence.
  const int64_t seq = cfg.data.seq_len > 0 ? cfg.data.seq_len : 1;
  return balanced_partition(layer_compute_costs(cfg.model.layers, seq),
                            cfg.pipeline.stages * cfg.pipeline.virtual_stages);
}

int64_t output_width(const std::vector<layer_spec>& layers, int index) {
  for (int i = index; i >= 0; --i) {
    const layer_spec& l = layers.at(static_cast<size_t>(i));
    if (l.type == "linear") return l.out;
    if (l.type == "lm_head") return l.vocab;
    if (l.type == "embedding" || l.type == "gpt_block" || l.type == "layernorm") return l.dim;
    if (l.type != "relu" && l.type != "gelu" && l.type != "tanh" && l.type != "dropout") return 0;
  }
  return 0;
}

int64_t largest_boundary_bytes(const config& cfg, const partition_t& parts) {
  const int64_t dp = std::max(1, cfg.parallel.dp), m = std::max(1, cfg.pipeline.microbatches);
  const int64_t rows = (cfg.train.batch_size + dp * m - 1) / (dp * m);
  const int64_t seq = cfg.data.kind == "text" ? std::max<int64_t>(1, cfg.data.seq_len) : 1;
  int64_t most = 0;  // the widest output that crosses: every part's but the last
  for (size_t k = 0; k + 1 < parts.size(); ++k) most = std::max(most, output_width(cfg.model.layers, parts[k].second));
  // The activation, and the targets (an int64 a row or token) that ride along with it.
  return rows * seq * most * 4 + rows * seq * 8;
}

}  // namespace actorpipe
