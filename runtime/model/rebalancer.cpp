#include "runtime/model/rebalancer.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "runtime/observe/metrics.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe {

namespace {

// Split `n` layers at stage starts `b` (b[0] = 0); empty where a stage would
// be empty.
partition_t from_starts(const std::vector<int>& b, int n) {
  partition_t out;
  for (size_t k = 0; k < b.size(); ++k) {
    const int last = k + 1 < b.size() ? b[k + 1] - 1 : n - 1;
    if (last < b[k]) return {};
    out.emplace_back(b[k], last);
  }
  return out;
}

// Stage k's start (k >= 1) one layer of cost to the right (its first such
// layer, and the free ones before it, to stage k - 1) or to the left (stage
// k - 1's last such layer, and the free ones after it, to stage k); -1
// where there is none to move.
int shifted(const partition_t& parts, const std::vector<int64_t>& costs, size_t k, bool right) {
  if (right) {
    for (int l = parts[k].first; l <= parts[k].second; ++l)
      if (costs[static_cast<size_t>(l)] > 0) return l + 1;
    return -1;
  }
  for (int l = parts[k].first - 1; l > parts[k - 1].first; --l)
    if (costs[static_cast<size_t>(l)] > 0) return l;
  return -1;
}

// The splits one layer of cost away from `parts`, in the order they are
// tried: the slowest stage's first or last such layer to the stage beside
// it, every boundary one such layer right or left at once (work passes
// through the stages between), then each boundary alone.
std::vector<partition_t> neighbours(const partition_t& parts, const std::vector<int64_t>& costs, int slowest) {
  const size_t S = parts.size();
  const int n = static_cast<int>(costs.size());
  std::vector<int> b;
  for (const auto& p : parts) b.push_back(p.first);
  std::vector<partition_t> out;
  const auto add = [&](std::vector<int> starts) {
    for (int x : starts)
      if (x < 0) return;
    partition_t q = from_starts(starts, n);
    if (!q.empty() && q != parts && std::find(out.begin(), out.end(), q) == out.end()) out.push_back(q);
  };
  const auto one = [&](size_t k, bool right) {
    std::vector<int> c = b;
    c[k] = shifted(parts, costs, k, right);
    add(c);
  };
  const size_t s = static_cast<size_t>(slowest);
  if (s > 0) one(s, true);
  if (s + 1 < S) one(s + 1, false);
  for (bool right : {true, false}) {
    std::vector<int> c = b;
    for (size_t k = 1; k < S; ++k) c[k] = shifted(parts, costs, k, right);
    add(c);
  }
  for (size_t k = 1; k < S; ++k)
    for (bool right : {true, false}) one(k, right);
  return out;
}

}  // namespace

double stage_busy_ms(int64_t busy_ns, double cpu_ns, double quota) {
  const double busy = static_cast<double>(busy_ns) * 1e-6;
  if (!(quota > 0) || !(cpu_ns > 0)) return busy;
  return std::max(busy, cpu_ns * 1e-6 / quota);
}

std::vector<double> stage_busy_ms(const step_record& r) {
  std::vector<double> out;
  for (const auto& st : r.stages) {
    double process = 0;
    for (const auto& other : r.stages)
      if (other.pid == st.pid) process += static_cast<double>(other.cpu_ns);
    out.push_back(stage_busy_ms(st.busy_ns, process, st.cpu_quota));
  }
  return out;
}

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
  start(parts_);
  // A gain: faster than every window measured before, under any split, by
  // half the threshold. Moves since the last gain are counted; after
  // `budget` of them the layers stay (back moves aside). Once they stay, a
  // gain (the steps after a move that warm up, then run at speed) does not
  // start the search again.
  const size_t budget = 2 * parts_.size();
  if (misses_ < budget && fastest_ms_ > 0 && now_ms < fastest_ms_ * (1 - threshold_ / 2)) misses_ = 0;
  fastest_ms_ = fastest_ms_ > 0 ? std::min(fastest_ms_, now_ms) : now_ms;
  // Settled, the speeds change (two windows in a row slower than the
  // first settled one by the threshold: a new straggler): what was
  // measured no longer holds, and the search starts again from here.
  std::string again;
  if (misses_ >= budget) {
    if (calm_parts_ != parts_) calm_parts_ = parts_, calm_ms_ = now_ms, slow_windows_ = 0;
    slow_windows_ = now_ms > calm_ms_ * (1 + threshold_) ? slow_windows_ + 1 : 0;
    if (slow_windows_ >= 2) {
      step_ms_.clear(), explored_.clear(), left_.clear();
      misses_ = 0, slow_windows_ = 0, calm_parts_.clear(), fastest_ms_ = now_ms;
      again = "; steps slower than when the layers settled by the threshold: the search starts again";
    }
  }
  step_ms_[parts_] = now_ms;
  const rebalance_verdict v = rebalance_partition(costs_, parts_, busy, threshold_);
  // The model's last move, measured: where every stage's speed (busy time
  // per unit of cost, over the mean's) is within the threshold of what the
  // model moved on, or the step is as fast as the model promised (its
  // predicted share of the step before, within the threshold), its
  // prediction holds, and the layers settle there. A stage that is still
  // above the threshold then is the layers' grain, or the layers' costs
  // (multiply-adds) a little off, not a wrong model; the search by measure
  // is for speeds that change with the work (processes that share cores).
  const std::vector<double> moved_on = std::move(moved_on_);
  moved_on_.clear();
  if (!moved_on.empty() && misses_ < budget && moved_on.size() == v.speed.size()) {
    bool same_speeds = true;
    for (size_t k = 0; k < v.speed.size(); ++k)
      same_speeds = same_speeds && std::abs(v.speed[k] / moved_on[k] - 1) <= threshold_;
    if (same_speeds || now_ms <= promised_ms_ * (1 + threshold_)) {
      misses_ = budget;
      return std::nullopt;
    }
  }
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
  std::string ms;
  for (double b : busy) ms += (ms.empty() ? "" : " ") + fmt("%.0f", b);
  const std::string seen = "stage " + std::to_string(v.slowest) + " busy " + fmt("%.0f", 100 * (1 + v.over_share)) +
                           " % of the mean over " + steps + " (busy ms by stage: " + ms + "; a step " +
                           fmt("%.1f", now_ms) + " ms" + again;
  // The model's word is taken once from each split: a move that did not
  // pay is undone above, and not tried again.
  if (misses_ >= budget) return std::nullopt;
  if (v.move && !step_ms_.count(v.parts) && explored_.insert(parts_).second) {
    ++misses_;
    moved_on_ = v.speed;
    promised_ms_ = now_ms * v.predicted;
    return rebalance_move{v.parts, seen + "; the new split's slowest stage predicted at " +
                                       fmt("%.2f", v.predicted) + " of the old's)"};
  }
  // Where the model moved once (a straggler it saw), has nothing untried
  // to offer now, and a stage is still above the threshold, the measured
  // step time decides: each split one layer away is tried once (and left
  // again if slower). Without a straggler the configured split stays.
  if (v.over_share <= threshold_ || explored_.empty()) return std::nullopt;
  for (const partition_t& q : neighbours(parts_, costs_, v.slowest))
    if (!step_ms_.count(q)) {
      ++misses_;
      return rebalance_move{q, seen + "; trying a split one layer away, by measure)"};
    }
  return std::nullopt;
}

}  // namespace actorpipe
