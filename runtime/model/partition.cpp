#include "runtime/model/partition.hpp"

#include "runtime/config/config.hpp"
#include "runtime/model/model.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

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

namespace {

void reject(const std::string& why) { throw std::invalid_argument("rebalance_partition: " + why); }

void check_rebalance_input(const std::vector<int64_t>& costs, const partition_t& parts,
                           const std::vector<double>& busy, double floor) {
  if (parts.empty()) reject("no stages");
  if (busy.size() != parts.size())
    reject(std::to_string(parts.size()) + " stages but " + std::to_string(busy.size()) + " busy times");
  int next = 0;
  for (auto [first, last] : parts) {
    if (first != next || last < first)
      reject("stages are not contiguous from layer 0 (" + describe_partition(parts) + ")");
    next = last + 1;
  }
  if (next != static_cast<int>(costs.size()))
    reject("the stages cover " + std::to_string(next) + " layers, the costs " + std::to_string(costs.size()));
  for (auto c : costs)
    if (c < 0) reject("negative layer cost");
  for (double b : busy)
    if (!std::isfinite(b) || b < 0) reject("busy times must be finite and not negative");
  if (std::all_of(busy.begin(), busy.end(), [](double b) { return b == 0; })) reject("every busy time is 0");
  if (!(floor >= 0) || !std::isfinite(floor)) reject("floor must be finite and not negative");
}

// prefix[i]: the time cost of layers 0..i-1, a zero cost counting as `floor`
// of the mean nonzero one (1 when every layer costs 0).
std::vector<double> cost_prefix(const std::vector<int64_t>& costs, double floor) {
  double nonzero_sum = 0;
  int nonzero = 0;
  for (auto c : costs)
    if (c > 0) {
      nonzero_sum += static_cast<double>(c);
      ++nonzero;
    }
  const double zero_cost = nonzero > 0 ? floor * nonzero_sum / nonzero : 1.0;
  std::vector<double> prefix(costs.size() + 1, 0.0);
  for (size_t i = 0; i < costs.size(); ++i)
    prefix[i + 1] = prefix[i] + (costs[i] > 0 ? static_cast<double>(costs[i]) : zero_cost);
  return prefix;
}

// Busy time per unit of cost, stage by stage; a stage with no busy time or no
// cost gets the mean of the others' (1 when none has one).
std::vector<double> speed_factors(const std::vector<double>& prefix, const partition_t& parts,
                                  const std::vector<double>& busy) {
  std::vector<double> factor(parts.size(), 0.0);
  double known_sum = 0;
  int known = 0;
  for (size_t s = 0; s < parts.size(); ++s) {
    const double cost = prefix[parts[s].second + 1] - prefix[parts[s].first];
    if (busy[s] > 0 && cost > 0) {
      factor[s] = busy[s] / cost;
      known_sum += factor[s];
      ++known;
    }
  }
  const double fill = known > 0 ? known_sum / known : 1.0;
  for (auto& f : factor)
    if (f == 0) f = fill;
  return factor;
}

// The modelled time of stage s running layers first..last.
double stage_time(const std::vector<double>& prefix, const std::vector<double>& factor, int s, int first,
                  int last) {
  return factor[s] * (prefix[last + 1] - prefix[first]);
}

double slowest_time(const std::vector<double>& prefix, const std::vector<double>& factor, const partition_t& parts) {
  double worst = 0;
  for (size_t s = 0; s < parts.size(); ++s)
    worst = std::max(worst, stage_time(prefix, factor, static_cast<int>(s), parts[s].first, parts[s].second));
  return worst;
}

// The least slowest-stage time over every contiguous split with no empty stage.
double least_slowest_time(const std::vector<double>& prefix, const std::vector<double>& factor) {
  const int n = static_cast<int>(prefix.size()) - 1, stages = static_cast<int>(factor.size());
  const double inf = std::numeric_limits<double>::infinity();
  // best[j]: the least slowest time of the stages so far over layers 0..j-1.
  std::vector<double> best(n + 1, inf), next(n + 1);
  best[0] = 0;
  for (int s = 0; s < stages; ++s) {
    std::fill(next.begin(), next.end(), inf);
    for (int j = s + 1; j <= n - (stages - 1 - s); ++j)  // stage s ends at layer j-1 ...
      for (int i = s; i < j; ++i)                         // ... and starts at layer i
        if (best[i] < inf) next[j] = std::min(next[j], std::max(best[i], stage_time(prefix, factor, s, i, j - 1)));
    best.swap(next);
  }
  return best[n];
}

// Among the splits whose every stage takes at most `cap`, the one whose stage
// ends moved least in all from `old`'s, then the one whose earlier stages take
// as many layers as they can.
partition_t closest_split(const std::vector<double>& prefix, const std::vector<double>& factor, double cap,
                          const partition_t& old) {
  const int n = static_cast<int>(prefix.size()) - 1, stages = static_cast<int>(old.size());
  constexpr int far = INT_MAX / 2;
  // The movement of stage s's end when it runs layers first..last; far when over cap.
  auto step = [&](int s, int first, int last) {
    if (stage_time(prefix, factor, s, first, last) > cap) return far;
    return std::abs(last - old[s].second);
  };
  // rest[s][i]: the least movement of stages s.. when stage s starts at layer i.
  std::vector<std::vector<int>> rest(stages + 1, std::vector<int>(n + 1, far));
  rest[stages][n] = 0;
  for (int s = stages - 1; s >= 0; --s)
    for (int i = s; i <= n - (stages - s); ++i)
      for (int e = i; e <= n - (stages - s); ++e)
        rest[s][i] = std::min(rest[s][i], std::min(far, step(s, i, e) + rest[s + 1][e + 1]));
  if (rest[0][0] >= far) throw std::logic_error("rebalance_partition: no split under the least slowest time");
  partition_t parts;
  for (int s = 0, first = 0; s < stages; ++s) {
    int last = n - (stages - s);  // the last end that stays on a least-movement path
    while (last > first && std::min(far, step(s, first, last) + rest[s + 1][last + 1]) != rest[s][first]) --last;
    parts.emplace_back(first, last);
    first = last + 1;
  }
  return parts;
}

}  // namespace

rebalance_verdict rebalance_partition(const std::vector<int64_t>& costs, const partition_t& parts,
                                      const std::vector<double>& busy, double threshold, double floor) {
  check_rebalance_input(costs, parts, busy, floor);
  const auto prefix = cost_prefix(costs, floor);
  const auto factor = speed_factors(prefix, parts, busy);
  rebalance_verdict verdict;
  const auto slowest = std::max_element(busy.begin(), busy.end());
  verdict.slowest = static_cast<int>(slowest - busy.begin());
  const double mean = std::accumulate(busy.begin(), busy.end(), 0.0) / static_cast<double>(busy.size());
  verdict.over_share = *slowest / mean - 1;
  // Splits within this (relative) of the least slowest time tie: summing in
  // another order must not change the answer.
  constexpr double tie = 1e-12;
  const partition_t best = closest_split(prefix, factor, least_slowest_time(prefix, factor) * (1 + tie), parts);
  verdict.predicted = slowest_time(prefix, factor, best) / slowest_time(prefix, factor, parts);
  verdict.move = verdict.over_share > threshold && verdict.predicted < 1 - threshold / 2;
  const double mean_factor = std::accumulate(factor.begin(), factor.end(), 0.0) / static_cast<double>(factor.size());
  for (double f : factor) verdict.speed.push_back(f / mean_factor);
  verdict.parts = verdict.move ? best : parts;
  return verdict;
}

std::string describe_partition(const partition_t& parts) {
  std::string out;
  for (size_t s = 0; s < parts.size(); ++s) {
    if (s > 0) out += " | ";
    out += std::to_string(parts[s].first);
    if (parts[s].second != parts[s].first) out += "-" + std::to_string(parts[s].second);
  }
  return out;
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
    if (l.type == "embedding" || l.type == "gpt_block" || l.type == "layernorm" || l.type == "token_embedding" ||
        l.type == "llama_block" || l.type == "rmsnorm")
      return l.dim;
    if (l.type != "relu" && l.type != "gelu" && l.type != "tanh" && l.type != "dropout") return 0;
  }
  return 0;
}

int64_t largest_boundary_bytes(const config& cfg, const partition_t& parts) {
  const int64_t dp = std::max(1, cfg.parallel.dp), m = std::max(1, cfg.pipeline.microbatches);
  const int64_t rows = (cfg.train.batch_size + dp * m - 1) / (dp * m);
  const int64_t seq = std::max<int64_t>(1, cfg.data.seq_len);  // text and tokens; 0 otherwise
  int64_t most = 0;  // the widest output that crosses: every part's but the last
  for (size_t k = 0; k + 1 < parts.size(); ++k) most = std::max(most, output_width(cfg.model.layers, parts[k].second));
  // The activation, and the targets (an int64 a row or token) that ride along with it.
  return rows * seq * most * 4 + rows * seq * 8;
}

}  // namespace actorpipe
