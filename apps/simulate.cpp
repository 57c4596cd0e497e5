// actorpipe simulate: one step of a schedule on a cost model, no tensors.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "apps/common.hpp"
#include "runtime/schedule/cost_fit.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/partition.hpp"
#include "runtime/schedule/policies/fixed_order.hpp"
#include "runtime/schedule/policies/registry.hpp"
#include "runtime/schedule/policy.hpp"
#include "runtime/observe/report.hpp"
#include "runtime/schedule/schedule_csv.hpp"
#include "runtime/schedule/simulator.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe::app {

namespace {

const command_spec simulate_spec = {
    "usage: actorpipe simulate [CONFIG] [options]",
    "Discrete-event simulation of one step under the same policy objects the\n"
    "stage actors use. Stages, microbatches and schedule come from CONFIG when\n"
    "given; the options override them.\n",
    {{"--stages", "S", "pipeline stages (default 4)"},
     {"--microbatches", "M", "microbatches per step (default 8)"},
     {"--schedule", "NAME",
      "any registered policy: " + schedule_names(false, 34, 56) +
          "\n(default 1f1b; async simulates one step)"},
     {"--virtual-stages", "V",
      "chunks per stage for interleaved (default 2) and greedy\n"
      "(default 1); zb-v has 2"},
     {"--steps", "K", "async: stream K steps with no flush between them (default 4)"},
     {"--max-inflight", "N",
      "greedy: microbatches a stage may hold open\n"
      "(default S - rank + (V - 1) S)"},
     {"--cost", "LIST",
      "op costs, e.g. F=1,B=2,W=1,comm=0.05 (default all 1, comm 0);\n"
      "overlap=1: the device runs an overlapped F and B (dualpipev's\n"
      "OVERLAP_F_B) at once, as two CUDA streams can (default 0: in turn)"},
     {"--stage-factors", "L", "per-stage cost multipliers, e.g. 1,1,2,1 (uneven stages)"},
     {"--fit", "TRACE",
      "op costs fitted from a measured run (train --trace): each\n"
      "stage's median F, B and W in ms; its stages must match"},
     {"--svg", "PATH", "write the timeline as SVG"},
     {"--export", "PATH", "write the emergent order as PyTorch pipelining CSV"},
     {"--export-format", "FORM",
      "compute (default): F, I or B, W and (F;B)OVERLAP_F_B\n"
      "for overlapped pairs (torch's compute_only); comms:\n"
      "those, REDUCE_GRAD and SEND_F/RECV_F/SEND_B/RECV_B\n"
      "where torch's _add_send_recv puts them (compute_comms)"},
     {"--import", "PATH",
      "run the order in a CSV file instead of a schedule: torch's\n"
      "compute_only or compute_comms (SEND/RECV, UNSHARD/RESHARD\n"
      "are checked and ignored with a note; REDUCE_GRAD is the\n"
      "rank's allreduce; OVERLAP_F_B an overlapped pair)"}},
    "exit codes: 0 done, 1 an output file (--svg, --export) could not be written,\n"
    "2 bad arguments, 3 the schedule deadlocks (the op grid is printed with the\n"
    "stuck stages marked)\n",
    22};

/// What to simulate: from the config when given, then the flags.
struct sim_setup {
  int stages = 4, microbatches = 8, chunks = 1, max_inflight = 0;
  std::string schedule = "1f1b";
  /// The config's, when one was given and the flags keep its stages.
  std::optional<config> cfg;
};

/// --schedule NAME: any registered policy simulates, also one the runtime
/// does not train with.
void check_policy_name(const std::string& schedule) {
  if (make_policy(schedule)) return;
  auto names = policy_names();
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  auto near = nearest(schedule, names);
  throw usage_error("unknown schedule " + quoted_input(schedule) +
                    (near.empty() ? "" : "; did you mean '" + near + "'?") + " (known: " + list + ")");
}

sim_setup read_setup(args& a) {
  sim_setup s;
  int chunks_from_config = 0;
  if (!a.positional.empty()) {
    auto cfg = load(a.positional[0]);
    s.stages = cfg.pipeline.stages;
    s.microbatches = cfg.pipeline.microbatches;
    s.schedule = cfg.pipeline.schedule;
    chunks_from_config = cfg.pipeline.virtual_stages;
    s.max_inflight = cfg.pipeline.max_inflight;
    s.cfg = std::move(cfg);
  }
  if (a.has("--max-inflight"))
    s.max_inflight = static_cast<int>(parse_count("--max-inflight", a.options["--max-inflight"]));
  if (a.has("--stages")) s.stages = static_cast<int>(parse_count("--stages", a.options["--stages"]));
  if (a.has("--microbatches"))
    s.microbatches = static_cast<int>(parse_count("--microbatches", a.options["--microbatches"]));
  if (a.has("--virtual-stages"))
    s.chunks = static_cast<int>(parse_count("--virtual-stages", a.options["--virtual-stages"]));
  if (a.has("--schedule")) {
    s.schedule = a.options["--schedule"];
    check_policy_name(s.schedule);
  }
  if (const schedule_traits* t = find_schedule(s.schedule); t && t->any_chunks() && !a.has("--virtual-stages")) {
    if (chunks_from_config > 1 && !a.has("--schedule")) s.chunks = chunks_from_config;
    else s.chunks = t->default_chunks;
  }
  if (auto pol = make_policy(s.schedule, policy_options{s.chunks}); pol && a.has("--virtual-stages") &&
                                                                    pol->chunks() != s.chunks)
    throw usage_error("--virtual-stages " + std::to_string(s.chunks) + ": schedule " + s.schedule + " runs " +
                      std::to_string(pol->chunks()) + " chunks per stage");
  if (const schedule_traits* t = find_schedule(s.schedule); t && t->one_microbatch) s.microbatches = 1;
  if (s.cfg && (s.cfg->pipeline.stages != s.stages || s.cfg->pipeline.virtual_stages != s.chunks)) s.cfg.reset();
  return s;
}

/// A transformer config without --stage-factors: each stage's share of the
/// model's compute (multiply-adds per token of its layers, as the default
/// partition balances them) becomes its cost factor, and the stage that
/// bounds the step is named, from the model alone.
void model_stage_factors(const sim_setup& s, cost_model& cost) {
  if (!s.cfg || !cost.stage_factor.empty()) return;
  const config& cfg = *s.cfg;
  auto pol = make_policy(s.schedule, policy_options{s.chunks, s.max_inflight});
  if (!has_transformer_layers(cfg.model) || !pol) return;
  const placement plc = pol->layout(s.stages);
  const auto costs = layer_compute_costs(cfg.model.layers, cfg.data.seq_len > 0 ? cfg.data.seq_len : 1);
  const partition_t parts = partition_for(cfg);
  std::vector<double> per_stage(static_cast<size_t>(s.stages), 0.0);
  for (int k = 0; k < static_cast<int>(parts.size()); ++k)
    for (int i = parts[k].first; i <= parts[k].second; ++i)
      per_stage[static_cast<size_t>(plc.rank_of(k))] += static_cast<double>(costs[static_cast<size_t>(i)]);
  double mean = 0.0;
  for (double c : per_stage) mean += c / static_cast<double>(s.stages);
  if (!(mean > 0)) return;
  size_t top = 0;
  std::string line = "model compute per stage (multiply-adds per token):";
  for (size_t r = 0; r < per_stage.size(); ++r) {
    cost.stage_factor.push_back(per_stage[r] / mean);
    if (per_stage[r] > per_stage[top]) top = r;
    line += " " + std::to_string(r) + ": " + fmt("%.3gM", per_stage[r] / 1e6);
  }
  std::printf("%s\nstage %zu bounds the step: %.2f x the mean stage (the stage factors of this simulation)\n",
              line.c_str(), top, per_stage[top] / mean);
}

/// --cost and --stage-factors.
cost_model read_cost(args& a, int stages) {
  cost_model cost;
  try {
    if (a.has("--cost")) cost = parse_cost(a.options["--cost"]);
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
  if (!a.has("--stage-factors")) return cost;
  std::stringstream ss(a.options["--stage-factors"]);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(v > 0))
      throw usage_error("--stage-factors expects positive numbers, got " + quoted_input(item));
    if (v > max_stage_factor)
      throw usage_error("--stage-factors: a factor is at most " + fmt("%g", max_stage_factor) + ", got " +
                        quoted_input(item));
    cost.stage_factor.push_back(v);
  }
  if (static_cast<int>(cost.stage_factor.size()) != stages)
    throw usage_error("--stage-factors has " + std::to_string(cost.stage_factor.size()) + " values for " +
                      std::to_string(stages) + " stages");
  return cost;
}

/// --fit TRACE: F, B and W per stage from a measured run.
cost_model fitted(args& a, int stages) {
  if (a.has("--cost") || a.has("--stage-factors"))
    throw usage_error("--fit sets the op costs and stage factors; leave out --cost and --stage-factors");
  const std::string& path = a.options["--fit"];
  fitted_cost fit;
  try {
    fit = fit_cost(read_file(path), stages, path);
  } catch (const std::invalid_argument& e) {
    throw usage_error(std::string("--fit ") + e.what());
  }
  std::string per_stage;
  size_t top = 0;
  for (size_t r = 0; r < fit.f.size(); ++r) {
    per_stage += (r ? " | " : "") + std::to_string(r) + ": " + fmt("%.3f", fit.f[r]) + "/" + fmt("%.3f", fit.b[r]) +
                 "/" + fmt("%.3f", fit.w[r]);
    if (fit.cost.stage_factor[r] > fit.cost.stage_factor[top]) top = r;
  }
  std::printf("fitted from %s (%zu ops): F=%.3f B=%.3f W=%.3f ms, the stages' mean of their medians\n"
              "per stage F/B/W ms: %s\nstage %zu bounds the step: %.2f x the mean stage\n",
              path.c_str(), fit.ops, fit.cost.f, fit.cost.b, fit.cost.w, per_stage.c_str(), top,
              fit.cost.stage_factor[top]);
  if (fit.cost.w == 0)
    std::printf("the trace has no W ops (its schedule does not split the backward): B is the whole backward\n");
  return fit.cost;
}

/// --import PATH: the order in the file instead of a schedule; what the
/// import did with torch's other actions goes to stderr, once per kind.
sim_result simulate_imported(const std::string& path, const sim_setup& s, const cost_model& cost) {
  imported_schedule imported = read_import(path, s.stages, s.microbatches);
  try {
    return simulate(fixed_order_policy(std::move(imported.order), imported.placement, std::move(imported.overlap)),
                    s.stages, s.microbatches, cost);
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
}

/// The schedule; one without a flush is one stream of `stream_steps` steps
/// of M microbatches (--steps, default 4).
sim_result simulate_schedule(args& a, const sim_setup& s, const cost_model& cost, int64_t& stream_steps) {
  try {
    auto pol = make_policy(s.schedule, policy_options{s.chunks, s.max_inflight});
    if (pol && !pol->flushes()) stream_steps = a.has("--steps") ? parse_count("--steps", a.options["--steps"]) : 4;
    else if (a.has("--steps")) throw usage_error("--steps is for schedules without a flush (async)");
    // Before the stream's microbatches become an int: K x M may not fit one.
    if (pol)
      if (auto why = simulation_too_large(s.stages, s.microbatches * stream_steps, pol->chunks(),
                                          pol->splits_backward());
          !why.empty())
        throw usage_error("simulate: " + why);
    return simulate(s.schedule, s.stages, static_cast<int>(s.microbatches * stream_steps), cost, s.chunks,
                    s.max_inflight);
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
}

}  // namespace

int cmd_simulate(int argc, char** argv) {
  auto a = parse(argc, argv, 2, simulate_spec);
  if (a.has("--help")) {
    std::fputs(a.help.c_str(), stdout);
    return exit_ok;
  }
  if (a.positional.size() > 1) throw usage_error("simulate takes at most one CONFIG (see --help)");
  check_outputs(a, {"--svg", "--export"});
  schedule_csv_options csv;
  if (a.has("--export-format")) {
    if (!a.has("--export")) throw usage_error("--export-format is for --export");
    try {
      csv.format = parse_schedule_csv_format(a.options["--export-format"]);
    } catch (const std::invalid_argument& e) {
      throw usage_error(std::string("--export-format: ") + e.what());
    }
  }
  const sim_setup s = read_setup(a);
  cost_model cost = read_cost(a, s.stages);
  if (a.has("--fit")) cost = fitted(a, s.stages);
  model_stage_factors(s, cost);
  auto t0 = std::chrono::steady_clock::now();
  int64_t stream_steps = 1;
  sim_result r = a.has("--import") ? simulate_imported(a.options["--import"], s, cost)
                                   : simulate_schedule(a, s, cost, stream_steps);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.deadlock) {
    std::fputs(r.diagnosis.c_str(), stderr);
    return exit_stuck;
  }
  std::fputs(format_simulation(r, cost).c_str(), stdout);
  if (stream_steps > 1)
    std::printf("no flush: %lld steps streamed as %d microbatches; makespan per step %.3f "
                "(steady state M(F+B+W) = %.3f)\n",
                static_cast<long long>(stream_steps), r.microbatches, r.makespan / static_cast<double>(stream_steps),
                s.microbatches * (cost.f + cost.b + cost.w));
  size_t ops = 0;
  for (const auto& lane : r.timeline) ops += lane.size();
  std::printf("simulated %zu ops in %.3f s\n", ops, wall);
  output_writer writer(a);
  writer.write("--svg", [&] { return simulation_svg(r); }, "timeline");
  bool exported = true;
  if (a.has("--export")) {
    csv.split_backward = r.split_backward;
    csv.placement = r.placement;
    csv.overlap = r.overlapped;
    std::string text;
    try {
      text = to_schedule_csv(r.order(), s.stages, csv);
    } catch (const std::invalid_argument& e) {  // an order torch's lowering cannot place
      std::fprintf(stderr, "--export: %s\n", e.what());
      exported = false;
    }
    if (exported) writer.write("--export", [&] { return text; }, "order");
  }
  return writer.ok() && exported ? exit_ok : exit_failed;
}

}  // namespace actorpipe::app
