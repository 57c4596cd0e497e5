#include "runtime/observe/run_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "runtime/schedule/canonical.hpp"
#include "runtime/files/json_out.hpp"
#include "runtime/observe/report.hpp"
#include "runtime/util/text.hpp"
#include "runtime/observe/throughput.hpp"
#include "runtime/observe/timeline_svg.hpp"

namespace actorpipe {

namespace {

const step_record* pick(const train_result& r, int step) {
  if (r.steps.empty()) return nullptr;
  if (step < 0 || step >= static_cast<int>(r.steps.size())) return &r.steps.back();
  return &r.steps[step];
}

std::string lane_name(const train_result& r, size_t index) {
  const int s = std::max(1, r.stages);
  const std::string stage = "stage " + std::to_string(index % s);
  return r.dp > 1 ? "r" + std::to_string(index / s) + " " + stage : stage;
}

const char* palette(size_t i) {
  static const char* c[] = {"#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#EECA3B", "#9D755D"};
  return c[i % 8];
}

}  // namespace

double step_span_ms(const train_result& r, int step) {
  const auto* rec = pick(r, step);
  if (!rec) return 0.0;
  int64_t end = rec->start_ns;
  for (const auto& st : rec->stages) {
    for (const auto& e : st.events) end = std::max(end, e.end_ns);
    end = std::max({end, st.allreduce_end_ns, st.optimizer_end_ns});
  }
  return static_cast<double>(end - rec->start_ns) / 1e6;
}

std::string run_timeline_svg(const train_result& r, int step, double span_ms) {
  const auto* rec = pick(r, step);
  std::vector<timeline_lane> lanes;
  if (rec) {
    const double t0 = static_cast<double>(rec->start_ns);
    auto ms = [&](int64_t ns) { return (static_cast<double>(ns) - t0) / 1e6; };
    for (size_t i = 0; i < rec->stages.size(); ++i) {
      const auto& st = rec->stages[i];
      timeline_lane lane;
      lane.name = lane_name(r, i);
      for (const auto& e : st.events)
        lane.blocks.push_back({e.op, ms(e.start_ns), ms(e.end_ns), block_kind::op,
                               r.split_backward && e.op.kind == op_kind::B});
      if (st.allreduce_end_ns > 0)
        lane.blocks.push_back({{}, ms(st.allreduce_start_ns), ms(st.allreduce_end_ns), block_kind::allreduce});
      if (st.optimizer_end_ns > 0)
        lane.blocks.push_back({{}, ms(st.optimizer_start_ns), ms(st.optimizer_end_ns), block_kind::optimizer});
      lanes.push_back(std::move(lane));
    }
  }
  const double own = step_span_ms(r, step);
  const double span = span_ms > 0 ? span_ms : own;
  const std::string title = "measured " + r.schedule + ", S=" + std::to_string(r.stages) +
                            (r.dp > 1 ? ", dp=" + std::to_string(r.dp) : std::string()) + ", M=" +
                            std::to_string(r.microbatches) + ", step " + std::to_string(rec ? rec->step : 0) +
                            ": " + fmt("%.2f", rec ? rec->step_s * 1e3 : 0.0) + " ms";
  return timeline_svg(title, lanes, span, "ms", own);
}

std::string memory_svg(const train_result& r, int step) {
  const auto* rec = pick(r, step);
  const double left = 80, right = 260, top = 34, plot_w = 700, plot_h = 220;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + plot_w + right << "\" height=\""
     << top + plot_h + 50 << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  os << "<text x=\"" << left << "\" y=\"20\" font-size=\"14\">activation memory per stage, " << xml_escape(r.schedule)
     << (rec ? ", step " + std::to_string(rec->step) : std::string()) << "</text>\n";
  if (!rec) return os.str() + "</svg>\n";
  const double span = std::max(1e-9, step_span_ms(r, step));
  int64_t top_bytes = 1;
  for (const auto& st : rec->stages) {
    for (const auto& m : st.memory) top_bytes = std::max(top_bytes, m.second);
    for (const auto& c : st.cuda_memory) top_bytes = std::max(top_bytes, c[1]);
  }
  auto x = [&](int64_t ns) {
    return left + plot_w * std::clamp((static_cast<double>(ns - rec->start_ns) / 1e6) / span, 0.0, 1.0);
  };
  auto y = [&](int64_t bytes) { return top + plot_h * (1.0 - static_cast<double>(bytes) / top_bytes); };
  os << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << plot_w << "\" height=\"" << plot_h
     << "\" fill=\"#f8f8f8\"/>\n";
  for (size_t i = 0; i < rec->stages.size(); ++i) {
    const auto& mem = rec->stages[i].memory;
    int64_t peak = 0, level = 0;
    std::ostringstream pts;
    pts << fmt("%.1f", x(rec->start_ns)) << "," << fmt("%.1f", y(0));
    for (const auto& [t, bytes] : mem) {  // a step function: the level holds until the next op ends
      pts << " " << fmt("%.1f", x(t)) << "," << fmt("%.1f", y(level)) << " " << fmt("%.1f", x(t)) << ","
          << fmt("%.1f", y(bytes));
      level = bytes;
      peak = std::max(peak, bytes);
    }
    os << "<polyline class=\"memory\" fill=\"none\" stroke=\"" << palette(i) << "\" stroke-width=\"1.5\" points=\""
       << pts.str() << "\"/>\n";
    os << "<text x=\"" << left + plot_w + 8 << "\" y=\"" << top + 14 + 16 * i << "\" fill=\"" << palette(i)
       << "\">" << xml_escape(lane_name(r, i)) << ": peak " << xml_escape(human_bytes(peak)) << "</text>\n";
    // CUDA: the allocator's allocated bytes, dashed, on the same scale.
    const auto& cuda = rec->stages[i].cuda_memory;
    if (!cuda.empty()) {
      std::ostringstream cpts;
      int64_t cuda_peak = 0, reserved_peak = 0;
      for (const auto& sample : cuda) {
        cpts << fmt("%.1f", x(sample[0])) << "," << fmt("%.1f", y(std::min(sample[1], top_bytes))) << " ";
        cuda_peak = std::max(cuda_peak, sample[1]);
        reserved_peak = std::max(reserved_peak, sample[2]);
      }
      os << "<polyline class=\"cuda\" fill=\"none\" stroke=\"" << palette(i)
         << "\" stroke-dasharray=\"4 3\" stroke-width=\"1\" points=\"" << cpts.str() << "\"/>\n<text x=\""
         << left + plot_w + 8 << "\" y=\"" << top + 14 + 16 * (rec->stages.size() + i) << "\" fill=\"" << palette(i)
         << "\">cuda allocated peak " << xml_escape(human_bytes(cuda_peak)) << ", reserved "
         << xml_escape(human_bytes(reserved_peak)) << "</text>\n";
    }
  }
  os << "<text x=\"" << left - 6 << "\" y=\"" << top + 10 << "\" text-anchor=\"end\">"
     << xml_escape(human_bytes(top_bytes)) << "</text><text x=\"" << left - 6 << "\" y=\"" << top + plot_h
     << "\" text-anchor=\"end\">0</text>\n";
  os << "<text x=\"" << left + plot_w << "\" y=\"" << top + plot_h + 18 << "\" text-anchor=\"end\">time (ms) 0 .. "
     << fmt("%.2f", span) << "; bytes of activations held for the backward</text>\n</svg>\n";
  return os.str();
}

std::string results_json(const train_result& r, const std::string& config_path) {
  ordered_json doc;
  doc["config"] = config_path;
  doc["schedule"] = r.schedule;
  doc["stages"] = r.stages;
  doc["microbatches"] = r.microbatches;
  doc["virtual_stages"] = r.chunks;
  doc["dp"] = r.dp;
  doc["allreduce"] = r.allreduce;
  doc["devices"] = r.devices;
  doc["steps"] = ordered_json::array();
  for (const auto& s : r.steps) {
    ordered_json step;
    step["step"] = s.step;
    step["loss"] = json_number("%.9g", s.loss);
    step["lr"] = json_number("%.9g", s.lr);
    step["step_s"] = json_number("%.9g", s.step_s);
    step["pipeline_s"] = json_number("%.9g", s.pipeline_s);
    step["bubble"] = json_number("%.6f", s.bubble);
    step["grad_norm"] = json_number("%.9g", s.grad_norm);
    step["allreduce_s"] = json_number("%.9g", s.allreduce_s);
    step["train_accuracy"] = s.train_accuracy < 0 ? ordered_json() : json_number("%.6f", s.train_accuracy);
    step[r.unit + "_per_s"] = json_number("%.9g", units_per_second(r, s));
    const double util = mfu(r, s);
    step["mfu"] = util < 0 ? ordered_json() : json_number("%.9g", util);
    step["skipped"] = s.skipped;
    step["stages"] = ordered_json::array();
    for (const auto& st : s.stages) {
      const double busy = static_cast<double>(st.busy_ns) * 1e-9;
      step["stages"].push_back({{"busy_s", json_number("%.9g", busy)},
                                {"idle_s", json_number("%.9g", std::max(0.0, s.pipeline_s - busy))},
                                {"peak_stash", st.peak_stash},
                                {"peak_stash_bytes", st.peak_stash_bytes}});
    }
    doc["steps"].push_back(std::move(step));
  }
  const double analytic = analytic_bubble(r.schedule, r.stages, r.microbatches, r.chunks);
  ordered_json summary;
  summary["mean_step_s"] = json_number("%.9g", mean_step_seconds(r));
  summary["final_loss"] = r.steps.empty() ? ordered_json() : json_number("%.9g", r.steps.back().loss);
  summary["bubble_analytic"] = json_number("%.6f", analytic);  // NaN (no formula): null
  summary["bubble_measured"] = json_number("%.6f", mean_bubble(r));
  summary["peak_stash_bytes"] = peak_stash_bytes(r);
  summary["test_accuracy"] = r.test_accuracy < 0 ? ordered_json() : json_number("%.6f", r.test_accuracy);
  summary["test_loss"] = json_number("%.9g", r.test_loss);
  summary[r.unit + "_per_s"] = json_number("%.9g", mean_units_per_second(r));
  const double util = mean_mfu(r);
  summary["mfu"] = util < 0 ? ordered_json() : json_number("%.9g", util);
  summary["step_flops"] = json_number("%.9g", r.step_flops);
  summary["peak_flops"] = r.peak_flops > 0 ? json_number("%.9g", r.peak_flops) : ordered_json();
  doc["summary"] = std::move(summary);
  // eval.every: the held-out loss (and accuracy) after `step` updates.
  doc["evals"] = ordered_json::array();
  for (const auto& e : r.evals)
    doc["evals"].push_back({{"step", e.step},
                            {"loss", json_number("%.9g", e.loss)},
                            {"accuracy", json_number("%.9g", e.accuracy)},
                            {"positions", e.positions},
                            {"seconds", json_number("%.9g", e.seconds)}});
  // The supervisor's states in order (running, healing, closing, ...), its
  // restarts, and one line for each heal and re-placement: the same for a
  // run in one process and over several.
  doc["supervision"] = {{"restarts", r.restarts}, {"states", r.supervisor_states}, {"notices", r.notices}};
  return json_text(doc, 2);
}

namespace {

// One curve per run over the steps: value(step_record) < 0 is no point.
template <class Value>
std::string curve_svg(const std::vector<train_result>& runs, const std::string& title, Value value) {
  const double left = 60, top = 30, plot_w = 700, plot_h = 220, right = 150;
  size_t steps = 1;
  double lo = 1e300, hi = -1e300;
  for (const auto& r : runs)
    for (const auto& s : r.steps) {
      if (value(s) < 0) continue;
      lo = std::min(lo, value(s));
      hi = std::max(hi, value(s));
      steps = std::max(steps, r.steps.size());
    }
  if (!(hi > lo)) hi = lo + 1.0;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + plot_w + right << "\" height=\""
     << top + plot_h + 40 << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/><text x=\"" << left
     << "\" y=\"18\" font-size=\"14\">" << xml_escape(title) << "</text>\n<rect x=\"" << left << "\" y=\"" << top
     << "\" width=\"" << plot_w << "\" height=\"" << plot_h << "\" fill=\"#f8f8f8\"/>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    std::ostringstream pts;
    for (size_t k = 0; k < runs[i].steps.size(); ++k) {
      if (value(runs[i].steps[k]) < 0) continue;
      const double x = left + plot_w * (steps > 1 ? static_cast<double>(k) / (steps - 1) : 0.0);
      const double y = top + plot_h * (1.0 - (value(runs[i].steps[k]) - lo) / (hi - lo));
      pts << (k ? " " : "") << fmt("%.1f", x) << "," << fmt("%.1f", y);
    }
    os << "<polyline class=\"curve\" fill=\"none\" stroke=\"" << palette(i) << "\" stroke-width=\"1.5\" points=\""
       << pts.str() << "\"/><text x=\"" << left + plot_w + 8 << "\" y=\"" << top + 14 + 16 * i << "\" fill=\""
       << palette(i) << "\">" << xml_escape(runs[i].schedule) << "</text>\n";
  }
  os << "<text x=\"" << left - 6 << "\" y=\"" << top + 10 << "\" text-anchor=\"end\">" << fmt("%.3g", hi)
     << "</text><text x=\"" << left - 6 << "\" y=\"" << top + plot_h << "\" text-anchor=\"end\">" << fmt("%.3g", lo)
     << "</text><text x=\"" << left + plot_w << "\" y=\"" << top + plot_h + 18 << "\" text-anchor=\"end\">step 1 .. "
     << steps << "</text>\n</svg>\n";
  return os.str();
}

// Each run's training loss per update and, where it evaluated during
// training (eval.every), its validation loss after those updates, dashed
// with markers, on one axis: the curve a run is watched by.
std::string validation_svg(const std::vector<train_result>& runs) {
  const double left = 60, top = 30, plot_w = 700, plot_h = 220, right = 190;
  double lo = 1e300, hi = -1e300, last = 1;
  for (const auto& r : runs) {
    for (const auto& s : r.steps) {
      lo = std::min(lo, s.loss), hi = std::max(hi, s.loss);
      last = std::max(last, static_cast<double>(s.step + 1));
    }
    for (const auto& e : r.evals) {
      lo = std::min(lo, e.loss), hi = std::max(hi, e.loss);
      last = std::max(last, static_cast<double>(e.step));
    }
  }
  if (!(hi > lo)) hi = lo + 1.0;
  auto x = [&](double updates) { return left + plot_w * (last > 1 ? (updates - 1) / (last - 1) : 0.0); };
  auto y = [&](double loss) { return top + plot_h * (1.0 - (loss - lo) / (hi - lo)); };
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + plot_w + right << "\" height=\""
     << top + plot_h + 40 << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/><text x=\"" << left
     << "\" y=\"18\" font-size=\"14\">training and validation loss</text>\n<rect x=\"" << left << "\" y=\"" << top
     << "\" width=\"" << plot_w << "\" height=\"" << plot_h << "\" fill=\"#f8f8f8\"/>\n";
  int label = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    std::ostringstream train, val;
    for (const auto& s : runs[i].steps)
      train << fmt("%.1f", x(static_cast<double>(s.step + 1))) << "," << fmt("%.1f", y(s.loss)) << " ";
    os << "<polyline class=\"train\" fill=\"none\" stroke=\"" << palette(i) << "\" stroke-width=\"1.5\" points=\""
       << train.str() << "\"/><text x=\"" << left + plot_w + 8 << "\" y=\"" << top + 14 + 16 * label++
       << "\" fill=\"" << palette(i) << "\">" << xml_escape(runs[i].schedule) << ": training</text>\n";
    if (runs[i].evals.empty()) continue;
    for (const auto& e : runs[i].evals) {
      val << fmt("%.1f", x(static_cast<double>(e.step))) << "," << fmt("%.1f", y(e.loss)) << " ";
      os << "<circle class=\"val\" cx=\"" << fmt("%.1f", x(static_cast<double>(e.step))) << "\" cy=\""
         << fmt("%.1f", y(e.loss)) << "\" r=\"3\" fill=\"" << palette(i) << "\"/>\n";
    }
    os << "<polyline class=\"val\" fill=\"none\" stroke=\"" << palette(i)
       << "\" stroke-dasharray=\"5 3\" stroke-width=\"1.5\" points=\"" << val.str() << "\"/><text x=\""
       << left + plot_w + 8 << "\" y=\"" << top + 14 + 16 * label++ << "\" fill=\"" << palette(i) << "\">"
       << xml_escape(runs[i].schedule) << ": validation (dashed)</text>\n";
  }
  os << "<text x=\"" << left - 6 << "\" y=\"" << top + 10 << "\" text-anchor=\"end\">" << fmt("%.3g", hi)
     << "</text><text x=\"" << left - 6 << "\" y=\"" << top + plot_h << "\" text-anchor=\"end\">" << fmt("%.3g", lo)
     << "</text><text x=\"" << left + plot_w << "\" y=\"" << top + plot_h + 18
     << "\" text-anchor=\"end\">updates 1 .. " << fmt("%.0f", last) << "</text>\n</svg>\n";
  return os.str();
}

}  // namespace

std::string html_report(const std::string& title, const std::string& config_text,
                        const std::vector<train_result>& runs) {
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << xml_escape(title)
     << "</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#eee}"
        "td:first-child{text-align:left}pre{background:#f6f6f6;padding:8px;overflow:auto}"
        "section{margin-bottom:28px}</style></head>\n<body>\n<h1>"
     << xml_escape(title) << "</h1>\n";
  os << "<section><h2>Results</h2>\n<table id=\"results\"><tr><th>schedule</th><th>S</th><th>dp</th><th>M</th>"
        "<th>mean step (ms)</th><th>final loss</th><th>bubble (theory)</th><th>bubble (measured)</th>"
        "<th>peak activations per stage</th><th>test acc</th></tr>\n";
  for (const auto& r : runs) {
    std::string mem;
    for (auto b : peak_stash_bytes(r)) mem += (mem.empty() ? "" : " / ") + human_bytes(b);
    const double a = analytic_bubble(r.schedule, r.stages, r.microbatches, r.chunks);
    os << "<tr class=\"run\"><td>" << xml_escape(r.schedule) << "</td><td>" << r.stages << "</td><td>" << r.dp
       << "</td><td>" << r.microbatches << "</td><td>" << fmt("%.2f", mean_step_seconds(r) * 1e3) << "</td><td>"
       << (r.steps.empty() ? std::string("-") : fmt("%.4f", r.steps.back().loss)) << "</td><td>"
       << (std::isnan(a) ? std::string("n/a") : fmt("%.3f", a)) << "</td><td>" << fmt("%.3f", mean_bubble(r))
       << "</td><td>" << xml_escape(mem) << "</td><td>"
       << (r.test_accuracy < 0 ? std::string("-") : fmt("%.2f%%", r.test_accuracy * 100.0)) << "</td></tr>\n";
  }
  const bool validated =
      std::any_of(runs.begin(), runs.end(), [](const train_result& r) { return !r.evals.empty(); });
  os << "</table></section>\n<section><h2>Loss and accuracy</h2>\n"
     << (validated ? validation_svg(runs)
                   : curve_svg(runs, "training loss per step", [](const step_record& s) { return s.loss; }))
     << curve_svg(runs, "training accuracy per step (the step's batch, as its forward saw it)",
                  [](const step_record& s) { return s.train_accuracy; })
     << "<p>Held-out accuracy at the end: in the table.</p></section>\n";
  double span = 0.0;
  for (const auto& r : runs) span = std::max(span, step_span_ms(r));
  os << "<section><h2>Timelines</h2><p>The last step of each run, measured, on one time axis (0 .. "
     << fmt("%.2f", span) << " ms); empty space is idle time.</p>\n";
  for (const auto& r : runs) os << "<div class=\"timeline\">" << run_timeline_svg(r, -1, span) << "</div>\n";
  os << "</section>\n<section><h2>Activation memory</h2>\n";
  for (const auto& r : runs) os << "<div class=\"memory\">" << memory_svg(r) << "</div>\n";
  os << "</section>\n<section><h2>Config</h2><pre>" << xml_escape(config_text) << "</pre></section>\n</body></html>\n";
  return os.str();
}

}  // namespace actorpipe
