// actorpipe compare: one config trained under several schedules, one table.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "apps/common.hpp"
#include "runtime/observe/report.hpp"
#include "runtime/files/state_dict.hpp"

namespace actorpipe::app {

namespace {

const command_spec compare_spec = {
    "usage: actorpipe compare CONFIG [options]",
    "Trains CONFIG once per schedule and prints one comparison table.\n",
    {{"--schedules", "LIST",
      "comma-separated, of " + schedule_names(true, 36, 58) +
          "\n(default: the config's compare.schedules, else\n"
          "naive,gpipe,1f1b); NAME+recompute runs NAME with every\n"
          "stage recomputing its activations"},
     {"--steps", "N", "override train.steps"},
     {"--log-every", "N", "progress line every N steps (default: quiet)"},
     {"--report", "PATH", "one HTML page with every schedule's timeline on one time axis"}},
    "",
    20};

}  // namespace

int cmd_compare(int argc, char** argv) {
  auto a = parse(argc, argv, 2, compare_spec);
  if (a.has("--help")) {
    std::fputs(a.help.c_str(), stdout);
    return exit_ok;
  }
  if (a.positional.size() != 1) throw usage_error("compare takes one CONFIG (see --help)");
  check_outputs(a, {"--report"});
  auto base = load(a.positional[0]);
  if (a.has("--steps")) base.train.steps = parse_count("--steps", a.options["--steps"]);
  std::vector<std::string> names = {"naive", "gpipe", "1f1b"};
  if (!base.compare_schedules.empty()) names = base.compare_schedules;
  if (a.has("--schedules")) {
    names.clear();
    std::string list = a.options["--schedules"];
    size_t pos = 0;
    while (pos <= list.size()) {
      auto comma = list.find(',', pos);
      if (comma == std::string::npos) comma = list.size();
      names.push_back(list.substr(pos, comma - pos));
      pos = comma + 1;
    }
  }
  int64_t log_every = a.has("--log-every") ? parse_count("--log-every", a.options["--log-every"]) : 0;
  std::vector<config> cfgs;
  for (const auto& n : names) {
    cfgs.push_back(base);
    set_schedule(cfgs.back(), n);  // all names checked before any run starts
    check_async_stream(cfgs.back());
  }
  std::vector<train_result> results;
  bool finite = true;
  for (const auto& cfg : cfgs) {
    print_plan(cfg);
    progress_options progress;
    progress.log_every = log_every;
    progress.total_steps = cfg.train.steps;
    progress.quiet = log_every == 0;
    auto out = train_one(cfg, progress);
    std::printf("  done: mean step %.2f ms, final loss %.4f\n", mean_step_seconds(out.result) * 1e3,
                out.result.steps.empty() ? 0.0 : out.result.steps.back().loss);
    if (const std::string bad = first_nonfinite(out.weights); !bad.empty()) {
      std::printf("  final weights: '%s' holds a NaN or an infinity: the run failed\n", bad.c_str());
      finite = false;
    }
    results.push_back(std::move(out.result));
  }
  std::fputs(format_comparison(results).c_str(), stdout);
  output_writer writer(a);
  write_outputs(writer, base, results);
  return writer.ok() && finite ? exit_ok : exit_failed;
}

}  // namespace actorpipe::app
