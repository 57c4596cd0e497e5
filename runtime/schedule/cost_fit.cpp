#include "runtime/schedule/cost_fit.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace actorpipe {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

fitted_cost fit_cost(const std::string& trace_json, int stages, const std::string& source) {
  if (stages < 1) throw std::invalid_argument("fit_cost: stages must be positive");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(trace_json);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(source + ": not JSON (" + std::string(e.what()) + ")");
  }
  const nlohmann::json* events = doc.is_array() ? &doc : nullptr;
  if (doc.is_object() && doc.contains("traceEvents")) events = &doc["traceEvents"];
  if (!events || !events->is_array())
    throw std::invalid_argument(source + ": not a Chrome trace (no traceEvents list); write one with train --trace");
  std::vector<std::vector<double>> times[3];  // by kind: F, B, W; then by stage
  for (auto& t : times) t.resize(static_cast<size_t>(stages));
  fitted_cost out;
  int64_t tracks = 0;  // every complete event's track: ops, allreduces
  for (const auto& e : *events) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    if (e.contains("tid") && e["tid"].is_number_integer())
      tracks = std::max<int64_t>(tracks, e["tid"].get<int64_t>() + 1);
    const std::string cat = e.value("cat", "");
    const int kind = cat == "forward" ? 0 : cat == "backward" ? 1 : cat == "weight-grad" ? 2 : -1;
    if (kind < 0) continue;
    if (!e.contains("tid") || !e["tid"].is_number_integer() || !e.contains("dur") || !e["dur"].is_number())
      throw std::invalid_argument(source + ": an op event without an integer tid or a numeric dur");
    const int64_t tid = e["tid"].get<int64_t>();
    const double dur_us = e["dur"].get<double>();
    if (tid < 0 || dur_us < 0 || !(dur_us < 1e15))
      throw std::invalid_argument(source + ": an op event with tid " + std::to_string(tid) + " or dur out of range");
    times[kind][static_cast<size_t>(tid % stages)].push_back(dur_us / 1000.0);
    ++out.ops;
  }
  if (tracks % stages != 0)
    throw std::invalid_argument(source + ": " + std::to_string(tracks) + " tracks are not replicas of " +
                                std::to_string(stages) + " stages; was the trace taken with " +
                                std::to_string(stages) + " stages?");
  double f = 0, b = 0, w = 0;
  for (int r = 0; r < stages; ++r) {
    const size_t k = static_cast<size_t>(r);
    if (times[0][k].empty() || times[1][k].empty())
      throw std::invalid_argument(source + ": stage " + std::to_string(r) + " has no forward or no backward op; " +
                                  "was the trace taken with " + std::to_string(stages) + " stages?");
    out.f.push_back(median(times[0][k]));
    out.b.push_back(median(times[1][k]));
    out.w.push_back(median(times[2][k]));
    f += out.f.back() / stages;
    b += out.b.back() / stages;
    w += out.w.back() / stages;
  }
  out.cost.f = f;
  out.cost.b = b;
  out.cost.w = w;
  const double mean = f + b + w;
  for (int r = 0; r < stages; ++r) {
    const size_t k = static_cast<size_t>(r);
    out.cost.stage_factor.push_back(mean > 0 ? (out.f[k] + out.b[k] + out.w[k]) / mean : 1.0);
  }
  return out;
}

}  // namespace actorpipe
