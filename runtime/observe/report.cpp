#include "runtime/observe/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "runtime/schedule/canonical.hpp"
#include "runtime/files/json_out.hpp"
#include "runtime/util/text.hpp"
#include "runtime/observe/timeline_svg.hpp"

namespace actorpipe {

namespace {

// Renders rows as a box table; column widths from the content.
std::string box(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], row[i].size());
    }
  std::string rule = "+";
  for (auto x : w) rule += std::string(x + 2, '-') + "+";
  std::ostringstream os;
  os << rule << "\n";
  for (size_t r = 0; r < rows.size(); ++r) {
    os << "|";
    for (size_t i = 0; i < w.size(); ++i) {
      const std::string cell = i < rows[r].size() ? rows[r][i] : "";
      os << " " << cell << std::string(w[i] - cell.size(), ' ') << " |";
    }
    os << "\n";
    if (r == 0) os << rule << "\n";
  }
  os << rule << "\n";
  return os.str();
}

}  // namespace

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 3) {
    v /= 1024.0;
    ++u;
  }
  return fmt(u == 0 ? "%.0f" : "%.1f", v) + " " + units[u];
}

std::string analytic_text(const train_result& r) {
  const double a = analytic_bubble(r.schedule, r.stages, r.microbatches, r.chunks);
  return std::isnan(a) ? std::string("n/a") : fmt("%.3f", a);
}

std::string format_comparison(const std::vector<train_result>& runs) {
  std::vector<std::vector<std::string>> rows = {
      {"schedule", "S", "M", "mean step", "final loss", "bubble (theory)", "bubble (measured)",
       "peak activations per stage", "test acc"}};
  for (const auto& r : runs) {
    std::string mem;
    for (auto b : peak_stash_bytes(r)) mem += (mem.empty() ? "" : " / ") + human_bytes(b);
    rows.push_back({r.schedule, std::to_string(r.stages), std::to_string(r.microbatches),
                    fmt("%.2f ms", mean_step_seconds(r) * 1e3),
                    r.steps.empty() ? "-" : fmt("%.4f", r.steps.back().loss),
                    analytic_text(r),
                    fmt("%.3f", mean_bubble(r)) + (r.schedule.rfind("async", 0) == 0 ? " (stream idle)" : ""), mem,
                    r.test_accuracy < 0 ? "-" : fmt("%.2f%%", r.test_accuracy * 100.0)});
  }
  return box(rows);
}

std::vector<std::pair<int, int>> reference_bubble_cases() {
  return {{4, 4},   {4, 8},   {4, 16},  {4, 32}, {4, 64},  {4, 100},
          {8, 16},  {16, 32}, {32, 64}, {8, 32}, {16, 64}};
}

std::string format_bubble_table(const std::vector<std::pair<int, int>>& cases) {
  // Two conventions, side by side: idle / total step time (the first four
  // columns; the notebook's GPipe formula) and idle / useful time (the
  // notebook's 1F1B (S-1)/M and interleaved (S-1)/(vM)). Same idle time,
  // different denominators.
  const int v = 2;
  std::vector<std::vector<std::string>> rows = {
      {"S", "M", "naive", "gpipe", "1f1b", "interleaved v=2", "zb-h1", "zb-v", "dualpipev",
       "gpipe idle/useful", "1f1b idle/useful", "interleaved v=2 idle/useful", "zb-h1 idle/useful", "zb-v idle/useful",
       "dualpipev idle/useful"}};
  for (auto [s, m] : cases) {
    const double idle = s - 1;
    const bool zb_v = m >= 2 * s - 1;  // the paper's order has a closed form from there
    const bool dpv = s % 2 == 0 && m >= 2 * s;  // DualPipeV's shape: even ranks, M >= 2S
    rows.push_back({std::to_string(s), std::to_string(m),
                    fmt("%.3f", analytic_bubble("naive", s, m)),
                    fmt("%.3f", analytic_bubble("gpipe", s, m)),
                    fmt("%.3f", analytic_bubble("1f1b", s, m)),
                    fmt("%.3f", idle / (v * m + idle)), fmt("%.3f", analytic_bubble("zb-h1", s, m)),
                    zb_v ? fmt("%.3f", analytic_bubble("zb-v", s, m)) : std::string("-"),
                    dpv ? fmt("%.3f", analytic_bubble("dualpipev", s, m)) : std::string("-"),
                    fmt("%.3f", idle / m), fmt("%.3f", idle / m), fmt("%.3f", idle / (v * m)),
                    fmt("%.3f", idle / (3.0 * m)), zb_v ? fmt("%.3f", idle / (6.0 * m)) : std::string("-"),
                    dpv ? fmt("%.3f", idle / (6.0 * m)) : std::string("-")});
  }
  return box(rows) +
         "columns naive..dualpipev: idle / total step time = (S-1)/(M+S-1), (S-1)/(vM+S-1), (S-1)/(3M+S-1),\n"
         "(S-1)/(6M+S-1)\n"
         "columns 'idle/useful': idle / useful time = (S-1)/M, (S-1)/(vM), (S-1)/(3M), (S-1)/(6M), the\n"
         "notebook's 1F1B and interleaved convention. Equal F and B costs (zb-h1: F = B = W, 1F1B's\n"
         "backward being B + W; zb-v: F = I = W per chunk, '-' where M < 2S-1; dualpipev: DeepSeek's\n"
         "(S-1)(F&B+B-3W) with F = B = W per chunk and the overlapped F&B run in turn, F&B = F+B+W, '-'\n"
         "unless S is even and M >= 2S); naive runs one microbatch.\n";
}

std::string chrome_trace_json(const train_result& run, const std::string& config_path) {
  ordered_json events = ordered_json::array();
  // One track per (replica, stage): replica d, stage r is tid d * S + r,
  // under the OS process that ran it (one process per rank of a
  // multi-process run; 0 when the run recorded none).
  const int tracks = run.stages * std::max(1, run.dp);
  std::vector<int> pid_of(static_cast<size_t>(tracks), 0);
  for (const auto& step : run.steps)
    for (size_t r = 0; r < step.stages.size() && r < pid_of.size(); ++r)
      if (step.stages[r].pid != 0) pid_of[r] = step.stages[r].pid;
  std::vector<int> named;
  for (int t = 0; t < tracks; ++t) {
    const int pid = pid_of[static_cast<size_t>(t)];
    if (std::find(named.begin(), named.end(), pid) == named.end()) {
      named.push_back(pid);
      events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid},
                        {"args", {{"name", "actorpipe (pid " + std::to_string(pid) + ")"}}}});
    }
    const int r = t % std::max(1, run.stages), d = t / std::max(1, run.stages);
    const auto& devices =
        d < static_cast<int>(run.replica_devices.size()) ? run.replica_devices[static_cast<size_t>(d)] : run.devices;
    const std::string name = (run.dp > 1 ? "replica " + std::to_string(d) + " " : std::string()) + "stage " +
                             std::to_string(r) + " (" +
                             (r < static_cast<int>(devices.size()) ? devices[static_cast<size_t>(r)] : "") + ")";
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", t}, {"args", {{"name", name}}}});
  }
  auto us = [](int64_t ns) { return json_number("%.3f", static_cast<double>(ns) / 1e3); };
  auto pid_at = [&](size_t r) { return r < pid_of.size() ? pid_of[r] : 0; };
  for (const auto& step : run.steps)
    for (size_t r = 0; r < step.stages.size(); ++r)
      for (const auto& e : step.stages[r].events)
        events.push_back(
            {{"ph", "X"}, {"pid", pid_at(r)}, {"tid", r}, {"name", to_string(e.op)},
             {"cat", e.op.kind == op_kind::F ? "forward" : e.op.kind == op_kind::B ? "backward" : "weight-grad"},
             {"ts", us(e.start_ns)}, {"dur", us(e.end_ns - e.start_ns)},
             {"args", {{"step", step.step}, {"microbatch", e.op.mb}}}});
  for (const auto& step : run.steps)
    for (size_t r = 0; r < step.stages.size(); ++r) {
      const auto& st = step.stages[r];
      if (st.allreduce_end_ns <= 0) continue;
      events.push_back({{"ph", "X"}, {"pid", pid_at(r)}, {"tid", r}, {"name", "allreduce"}, {"cat", "allreduce"},
                        {"ts", us(st.allreduce_start_ns)}, {"dur", us(st.allreduce_end_ns - st.allreduce_start_ns)},
                        {"args", {{"step", step.step}}}});
    }
  ordered_json doc;
  doc["displayTimeUnit"] = "ms";
  doc["otherData"] = {{"config", config_path}};
  doc["traceEvents"] = std::move(events);
  return json_text(doc);
}

std::string format_simulation(const sim_result& r, const cost_model& cost) {
  std::ostringstream os;
  double work = 0.0;
  for (double b : r.busy) work += b;
  os << "schedule " << r.schedule << "  stages " << r.stages << "  microbatches " << r.microbatches
     << "  cost F=" << cost.f << " B=" << cost.b << " W=" << cost.w << " comm=" << cost.comm << "\n";
  os << "makespan " << fmt("%.3f", r.makespan) << "  (busiest stage " << fmt("%.3f", *std::max_element(r.busy.begin(), r.busy.end()))
     << ")\n";
  const double analytic = analytic_bubble(r.schedule, r.stages, r.microbatches, r.chunks);
  os << "bubble   simulated " << fmt("%.4f", r.bubble()) << "   analytic "
     << (std::isnan(analytic) ? std::string("n/a") : fmt("%.4f", analytic)) << "  ("
     << analytic_formula(r.schedule) << ": idle / total, equal stages, no comm)\n";
  std::vector<std::vector<std::string>> rows = {{"stage", "busy", "bubble", "peak stash"}};
  for (int s = 0; s < r.stages; ++s)
    rows.push_back({std::to_string(s), fmt("%.3f", r.busy[s]), fmt("%.4f", r.stage_bubble(s)),
                    std::to_string(r.peak_stash[s])});
  os << box(rows);
  return os.str();
}

std::string simulation_svg(const sim_result& r) {
  std::vector<timeline_lane> lanes(r.stages);
  for (int s = 0; s < r.stages; ++s) {
    lanes[s].name = "stage " + std::to_string(s);
    for (const auto& o : r.timeline[s])
      lanes[s].blocks.push_back({o.op, o.start, o.end, block_kind::op, r.split_backward && o.op.kind == op_kind::B});
  }
  return timeline_svg("simulated " + r.schedule + ", S=" + std::to_string(r.stages) + ", M=" +
                          std::to_string(r.microbatches) + ": makespan " + fmt("%.2f", r.makespan) +
                          ", bubble " + fmt("%.3f", r.bubble()),
                      lanes, r.makespan, "cost units");
}

}  // namespace actorpipe
