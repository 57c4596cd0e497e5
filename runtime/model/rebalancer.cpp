#include "runtime/model/rebalancer.hpp"

#include <algorithm>
#include <stdexcept>

#include "runtime/util/text.hpp"

namespace actorpipe {

rebalancer::rebalancer(std::vector<int64_t> costs, int every, double threshold)
    : costs_(std::move(costs)), every_(every), threshold_(threshold) {
  if (every < 1 || !(threshold > 0)) throw std::invalid_argument("rebalancer: every >= 1 and threshold > 0");
}

void rebalancer::start(const partition_t& parts) {
  parts_ = parts;
  busy_.assign(parts.size(), 0.0);
  step_sum_ = 0.0;
  measured_ = 0;
}

void rebalancer::add(int64_t step, double step_ms, const std::vector<double>& busy_ms) {
  const size_t S = busy_.size();
  if (S == 0 || busy_ms.size() % S != 0) throw std::invalid_argument("rebalancer: busy times for other stages");
  std::vector<double> slowest(S, 0.0);
  for (size_t i = 0; i < busy_ms.size(); ++i) slowest[i % S] = std::max(slowest[i % S], busy_ms[i]);
  for (size_t k = 0; k < S; ++k) busy_[k] += slowest[k];
  step_sum_ += step_ms;
  if (measured_++ == 0) from_ = step;
  to_ = step;
}

std::optional<rebalance_move> rebalancer::check() {
  if (measured_ < every_) return std::nullopt;
  const double now_ms = step_sum_ / measured_;
  const std::string steps = "steps " + std::to_string(from_) + "-" + std::to_string(to_);
  const std::vector<double> busy = busy_;
  step_ms_[parts_] = now_ms;
  start(parts_);
  // A split tried before that ran faster by more than half the threshold;
  // the one left for it is never gone back to (times measured apart drift:
  // no back and forth between two).
  const partition_t* best = nullptr;
  double best_ms = now_ms * (1 - threshold_ / 2);
  for (const auto& [p, ms] : step_ms_)
    if (p != parts_ && !left_.count(p) && ms < best_ms) best = &p, best_ms = ms;
  if (best && left_.insert(parts_).second)
    return rebalance_move{*best, "a step took " + fmt("%.1f", now_ms) + " ms over " + steps + ", " +
                                     fmt("%.1f", best_ms) + " ms under the split " + describe_partition(*best) +
                                     " tried before: back to it"};
  const rebalance_verdict v = rebalance_partition(costs_, parts_, busy, threshold_);
  // The model's word is taken once from each split: a move that did not
  // pay is undone above, and not tried again.
  if (!v.move || step_ms_.count(v.parts) || !explored_.insert(parts_).second) return std::nullopt;
  std::string ms;
  for (double b : busy) ms += (ms.empty() ? "" : " ") + fmt("%.0f", b);
  return rebalance_move{v.parts, "stage " + std::to_string(v.slowest) + " busy " +
                                     fmt("%.0f", 100 * (1 + v.over_share)) + " % of the mean over " + steps +
                                     " (busy ms by stage: " + ms + "; a step " + fmt("%.1f", now_ms) +
                                     " ms; the new split's slowest stage predicted at " + fmt("%.2f", v.predicted) +
                                     " of the old's)"};
}

}  // namespace actorpipe
