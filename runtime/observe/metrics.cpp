#include "runtime/observe/metrics.hpp"
#include "runtime/util/fnv1a.hpp"

#include <algorithm>
#include <array>

namespace actorpipe {

double measured_bubble(const std::vector<stage_stats>& stages, int64_t span_ns) {
  if (stages.empty() || span_ns <= 0) return 0.0;
  double busy = 0.0;
  for (const auto& s : stages) busy += static_cast<double>(s.busy_ns);
  // A share of idle time is never negative: under async a step's ops run
  // before its span (the steps overlap), and mean_bubble measures the
  // stream instead.
  return std::clamp(1.0 - busy / (static_cast<double>(stages.size()) * static_cast<double>(span_ns)), 0.0, 1.0);
}

namespace {

template <class F>
double mean_over_steps(const train_result& r, F get) {
  if (r.steps.empty()) return 0.0;
  size_t first = r.steps.size() > 1 ? 1 : 0;
  double sum = 0.0;
  for (size_t i = first; i < r.steps.size(); ++i) sum += get(r.steps[i]);
  return sum / static_cast<double>(r.steps.size() - first);
}

}  // namespace

double mean_step_seconds(const train_result& r) {
  return mean_over_steps(r, [](const step_record& s) { return s.step_s; });
}

double mean_bubble(const train_result& r) {
  if (r.schedule.rfind("async", 0) != 0) return mean_over_steps(r, [](const step_record& s) { return s.bubble; });
  // Async has no flush, so no bubble of a step: its steps overlap. What it
  // has is the stream's idle share: every op's busy time over the stages'
  // time from the first step's close to the last's (steps after the first,
  // as above).
  if (r.steps.size() < 2) return 0.0;
  double busy = 0.0, span = 0.0;
  size_t stages = 0;
  for (size_t i = 1; i < r.steps.size(); ++i) {
    for (const auto& st : r.steps[i].stages) busy += static_cast<double>(st.busy_ns) * 1e-9;
    span += r.steps[i].step_s;
    stages = std::max(stages, r.steps[i].stages.size());
  }
  if (span <= 0 || stages == 0) return 0.0;
  return std::clamp(1.0 - busy / (static_cast<double>(stages) * span), 0.0, 1.0);
}

std::vector<int64_t> peak_stash_bytes(const train_result& r) {
  std::vector<int64_t> peak(r.stages, 0);
  for (const auto& step : r.steps)
    for (size_t i = 0; i < step.stages.size() && i < peak.size(); ++i)
      peak[i] = std::max(peak[i], step.stages[i].peak_stash_bytes);
  return peak;
}

std::vector<int> peak_stash_count(const train_result& r) {
  std::vector<int> peak(r.stages, 0);
  for (const auto& step : r.steps)
    for (size_t i = 0; i < step.stages.size() && i < peak.size(); ++i)
      peak[i] = std::max(peak[i], step.stages[i].peak_stash);
  return peak;
}

message_fault_counts count_message_faults(const train_result& r) {
  message_fault_counts c;
  for (const auto& step : r.steps)
    for (const auto& s : step.stages) {
      c.sent_twice += s.injected_duplicates;
      c.held_back += s.injected_delays;
      c.dropped += s.injected_drops;
      c.asked_again += s.resend_requests;
      c.resent += s.retransmits;
      c.stale += s.stale_epochs;
    }
  return c;
}

uint64_t trace_hash(const train_result& r, bool with_order) {
  fnv1a h;
  auto mix = [&h](uint64_t v) { h.value(v); };
  for (const auto& step : r.steps) {
    mix(static_cast<uint64_t>(step.step));
    mix(step.skipped);
    mix(step.stages.size());
    for (const auto& s : step.stages) {
      mix(s.events.size());
      if (with_order)
        for (const auto& e : s.events)
        mix(static_cast<uint64_t>(e.op.kind) | static_cast<uint64_t>(e.op.mb) << 8 |
            static_cast<uint64_t>(e.op.chunk) << 40);
      mix(s.injected_duplicates);
      mix(s.injected_delays);
      mix(s.injected_drops);
    }
  }
  mix(static_cast<uint64_t>(r.restarts));
  return h.digest();
}

std::vector<double> stage_speeds(const train_result& r) {
  // Per stage and op kind, every op's duration; a stage's typical op time
  // is the kinds' medians weighted by their counts, so one late wake-up on
  // a loaded machine does not move the score, while the F/B/W mix does.
  constexpr int kinds = 3;
  std::vector<std::array<std::vector<int64_t>, kinds>> took;
  for (size_t t = r.steps.size() > 1 ? 1 : 0; t < r.steps.size(); ++t) {
    const auto& st = r.steps[t].stages;
    took.resize(std::max(took.size(), st.size()));
    for (size_t i = 0; i < st.size(); ++i)
      for (const auto& e : st[i].events) took[i][static_cast<int>(e.op.kind)].push_back(e.end_ns - e.start_ns);
  }
  std::vector<double> typical;
  for (auto& stage : took) {
    double sum = 0.0;
    size_t n = 0;
    for (auto& d : stage) {
      if (d.empty()) continue;
      std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
      sum += static_cast<double>(d[d.size() / 2]) * static_cast<double>(d.size());
      n += d.size();
    }
    typical.push_back(n > 0 ? sum / static_cast<double>(n) : 0.0);
  }
  if (typical.empty()) return {};
  std::vector<double> sorted = typical;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  std::vector<double> speed;
  for (double m : typical) speed.push_back(m > 0 ? median / m : 0.0);
  return speed;
}

void record_eval(std::vector<eval_record>& evals, const eval_record& e) {
  auto it = std::lower_bound(evals.begin(), evals.end(), e.step,
                             [](const eval_record& a, int64_t step) { return a.step < step; });
  if (it != evals.end() && it->step == e.step)
    *it = e;
  else
    evals.insert(it, e);
}

void drop_evals_after(std::vector<eval_record>& evals, int64_t resume_after) {
  while (!evals.empty() && evals.back().step > resume_after + 1) evals.pop_back();
}

}  // namespace actorpipe
