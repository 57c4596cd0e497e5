// What the commands share (apps/common.hpp).
#include "apps/common.hpp"

#include <torch/cuda.h>

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <utility>
#include <sstream>

#include "runtime/schedule/canonical.hpp"
#include "runtime/files/file_io.hpp"
#include "runtime/model/partition.hpp"
#include "runtime/schedule/policies/registry.hpp"
#include "runtime/schedule/policy.hpp"
#include "runtime/dist/placement/rank_placement.hpp"
#include "runtime/observe/run_report.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe::app {

namespace {

/// --help as the hand-written helps had it: the usage line, the
/// description, "options:" with one flag per line ("-h, --help", the value
/// as its name), the help in a column, its further lines under it; then the
/// footer. Positional arguments are in the usage line.
class help_format : public CLI::Formatter {
public:
  explicit help_format(std::string usage) : usage_(std::move(usage)) {}

  std::string make_option_name(const CLI::Option* o, bool) const override {
    std::string names;
    for (const auto& n : o->get_snames()) names += (names.empty() ? "-" : ", -") + n;
    for (const auto& n : o->get_lnames()) names += (names.empty() ? "--" : ", --") + n;
    return names;
  }
  std::string make_option_opts(const CLI::Option* o) const override {
    return o->get_expected_max() == 0 ? std::string() : " " + o->get_type_name();
  }
  std::string make_option_desc(const CLI::Option* o) const override { return o->get_description(); }
  std::string make_option(const CLI::Option* o, bool positional) const override {
    std::string out = "  " + make_option_name(o, positional) + make_option_opts(o);
    const size_t column = get_column_width();
    out += out.size() < column ? std::string(column - out.size(), ' ') : "  ";
    for (char c : make_option_desc(o)) {
      out += c;
      if (c == '\n') out += std::string(column, ' ');
    }
    return out + "\n";
  }
  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode) const override {
    std::string out = usage_ + "\n";
    if (!app->get_description().empty()) out += "\n" + app->get_description();
    const auto flags = app->get_options([](const CLI::Option* o) { return o->nonpositional(); });
    if (!flags.empty()) out += "\noptions:\n";
    for (const auto* o : flags) out += make_option(o, false);
    if (!app->get_footer().empty()) out += "\n" + app->get_footer();
    return out;
  }

private:
  std::string usage_;
};

}  // namespace

args parse(int argc, char** argv, int first, const command_spec& spec) {
  CLI::App app(spec.description, argv[first - 1]);
  app.formatter(std::make_shared<help_format>(spec.usage));
  app.get_formatter()->column_width(spec.column);
  app.footer(spec.footer);
  app.allow_extras();  // a flag the spec lacks: named below as the old parser named it
  app.set_help_flag();
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  args a;
  app.add_option("ARGS", a.positional);
  std::vector<std::pair<const flag_spec*, CLI::Option*>> given;
  for (const auto& f : spec.flags) {
    CLI::Option* o = f.value.empty() ? app.add_flag(f.names, f.help) : app.add_option(f.names, f.help);
    if (!f.value.empty()) o->type_name(f.value);
    given.emplace_back(&f, o);
  }
  app.set_help_flag("-h,--help", "this help");
  auto refuse_unknown = [&] {  // also before --help, as the hand-rolled parser did
    for (const auto& extra : app.remaining())
      if (extra.rfind("-", 0) == 0) throw usage_error("unknown option " + quoted_input(extra, ""));
  };
  try {
    app.parse(argc - first + 1, argv + first - 1);
  } catch (const CLI::CallForHelp&) {
    refuse_unknown();
    a.options["--help"] = "";
    a.help = app.help();
    return a;
  } catch (const CLI::ArgumentMismatch& e) {
    // CLI11 says "--steps: 1 required N missing"; the flag's name is enough.
    const std::string what = e.what();
    const auto colon = what.find(':');
    if (what.rfind("--", 0) == 0 && colon != std::string::npos && what.find("missing", colon) != std::string::npos)
      throw usage_error(what.substr(0, colon) + " needs a value");
    throw usage_error(what);
  } catch (const CLI::ParseError& e) {
    throw usage_error(e.what());
  }
  refuse_unknown();
  for (const auto& [f, o] : given)
    if (o->count() > 0)
      a.options["--" + o->get_lnames().front()] =
          f->value.empty() || o->results().empty() ? std::string() : o->results().back();
  return a;
}

std::string schedule_names(bool trainable_only, size_t first_width, size_t width) {
  const std::vector<std::string> names = trainable_only ? trainable_schedule_names() : policy_names();
  std::string out, line;
  size_t limit = first_width;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string word = names[i] + (i + 1 < names.size() ? " |" : "");
    if (!line.empty() && line.size() + 1 + word.size() > limit) {
      out += line + "\n";
      line.clear();
      limit = width;
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line;
}

int64_t parse_count(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 1 || n > INT_MAX)
    throw usage_error(flag + " expects a positive integer, got " + quoted_input(v));
  return n;
}

config load(const std::string& path, const rank_env& ranks) {
  return load_config(path, load_env_for(ranks, static_cast<int>(torch::cuda::device_count())));
}

void set_schedule(config& cfg, std::string name) {
  // NAME+recompute: the schedule with every stage recomputing (for compare).
  const std::string suffix = "+recompute";
  if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    name.resize(name.size() - suffix.size());
    cfg.pipeline.recompute.assign(cfg.pipeline.stages, true);
  }
  const auto& known = known_schedules();
  if (std::find(known.begin(), known.end(), name) == known.end()) {
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    auto near = nearest(name, known);
    throw usage_error("unknown schedule " + quoted_input(name) +
                      (near.empty() ? "" : "; did you mean '" + near + "'?") + " (known: " +
                      list + ")");
  }
  const schedule_traits& t = *find_schedule(name);
  auto& p = cfg.pipeline;
  p.schedule = name;
  if (t.one_microbatch) p.microbatches = 1;
  if (t.fixed_chunks > 1) {
    const int v = t.fixed_chunks;
    if (p.virtual_stages != v && !p.partition.empty())
      throw usage_error("--schedule " + name + ": pipeline.partition has " + std::to_string(p.partition.size()) +
                        " ranges; " + name + " needs one per virtual stage (" + std::to_string(p.stages) +
                        " stages x " + std::to_string(v) + ")");
    p.virtual_stages = v;
    if (p.partition.empty() && p.stages * v > static_cast<int>(cfg.model.layers.size()))
      throw usage_error("--schedule " + name + ": " + std::to_string(p.stages) + " stages x " + std::to_string(v) +
                        " chunks exceed the " + std::to_string(cfg.model.layers.size()) + " layers of model.layers");
    return;
  }
  if (!t.flushes && cfg.train.clip_grad_norm > 0)
    throw usage_error("--schedule " + name + ": train.clip_grad_norm is " + std::to_string(cfg.train.clip_grad_norm) +
                      "; " + t.display + " steps each stage on its own, with no global gradient norm to "
                      "clip by (leave train.clip_grad_norm out of the config)");
  if (t.microbatches_at_least_stages && p.microbatches < p.stages)
    throw usage_error("--schedule " + name + " needs at least as many microbatches as stages (" +
                      std::to_string(p.stages) + "); pipeline.microbatches is " + std::to_string(p.microbatches));
  if (t.shape_error)
    if (const std::string why = t.shape_error(p.stages, p.microbatches); !why.empty())
      throw usage_error("--schedule " + name + ": " + why + " (pipeline.stages " + std::to_string(p.stages) +
                        ", pipeline.microbatches " + std::to_string(p.microbatches) + ")");
  if (t.takes_max_inflight) return;  // any chunk count; the config's stays
  if (p.max_inflight != 0) p.max_inflight = 0;  // only a schedule that takes it keeps it
  if (!t.any_chunks()) {
    if (p.virtual_stages != 1) {
      // One range per stage again: regroup chunks only when none were given.
      if (!p.partition.empty())
        throw usage_error("--schedule " + name + ": pipeline.partition lists virtual stages; "
                          "give one range per stage for " + name);
      p.virtual_stages = 1;
    }
    return;
  }
  if (p.virtual_stages < t.default_chunks && p.partition.empty()) p.virtual_stages = t.default_chunks;
  const int layers = static_cast<int>(cfg.model.layers.size());
  if (t.microbatches_in_stage_groups && p.microbatches % p.stages != 0)
    throw usage_error("--schedule " + name + " runs microbatches in groups of pipeline.stages (" +
                      std::to_string(p.stages) + "); pipeline.microbatches " +
                      std::to_string(p.microbatches) + " is not a multiple");
  if (p.partition.empty() && p.stages * p.virtual_stages > layers)
    throw usage_error("--schedule " + name + ": " + std::to_string(p.stages) + " stages x " +
                      std::to_string(p.virtual_stages) + " virtual stages exceed the " +
                      std::to_string(layers) + " layers of model.layers");
  if (!p.partition.empty() &&
      static_cast<int>(p.partition.size()) != p.stages * p.virtual_stages)
    throw usage_error("--schedule " + name + ": pipeline.partition has " +
                      std::to_string(p.partition.size()) + " ranges; " + name + " needs one per virtual stage (" +
                      std::to_string(p.stages) + " stages x " + std::to_string(p.virtual_stages) + ")");
}

void check_async_stream(const config& cfg) {
  if (!find_schedule(cfg.pipeline.schedule)->flushes && cfg.pipeline.microbatches * cfg.train.steps > INT_MAX)
    throw usage_error("--steps " + std::to_string(cfg.train.steps) + ": " + cfg.pipeline.schedule + " streams every step's " +
                      std::to_string(cfg.pipeline.microbatches) + " microbatches as one, more than " +
                      std::to_string(INT_MAX) + " in all");
}

void print_plan(const config& cfg, const rank_env& ranks) {
  std::printf("actorpipe: %s  schedule %s  stages %d  microbatches %d  batch %lld  steps %lld\n",
              cfg.path.c_str(), cfg.pipeline.schedule.c_str(), cfg.pipeline.stages,
              cfg.pipeline.microbatches, static_cast<long long>(cfg.train.batch_size),
              static_cast<long long>(cfg.train.steps));
  if (cfg.parallel.dp <= 1) return;
  // The device map, per pipeline stage and replica (the reference
  // notebook's hybrid section prints it per stage).
  const int dp = cfg.parallel.dp, stages = cfg.pipeline.stages;
  const auto parts = partition_for(cfg);
  auto pol = make_policy(cfg.pipeline.schedule, policy_options{cfg.pipeline.virtual_stages});
  const placement plc = pol ? pol->layout(stages) : placement{placement_kind::round_robin, stages, 1};
  const int64_t share = (cfg.train.batch_size + dp - 1) / dp;
  // auto across processes is Gloo: said, so that no one takes it for NCCL.
  const std::string backend = cfg.parallel.allreduce == "auto" && ranks.multi_process()
                                  ? std::string("auto: gloo across processes")
                                  : cfg.parallel.allreduce;
  std::printf("parallel: data parallel dp=%d x pipeline stages pp=%d = %d stage actors; allreduce %s\n", dp,
              stages, dp * stages, backend.c_str());
  std::printf("  batch %lld per step: %lld per replica", static_cast<long long>(cfg.train.batch_size),
              static_cast<long long>(share));
  if (cfg.train.batch_size != share * dp)
    std::printf(" (the last one %lld)", static_cast<long long>(cfg.train.batch_size - share * (dp - 1)));
  std::printf("\n");
  // Which rank runs each (replica, stage); one process runs them all.
  const load_env env = load_env_for(ranks, static_cast<int>(torch::cuda::device_count()));
  const rank_placement places = ranks.multi_process() ? rank_placement::first(dp, stages, ranks.workers(), ranks.apart)
                                                      : rank_placement(dp, stages, 1);
  for (int r = 0; r < stages; ++r) {
    std::printf("  pipeline stage %d, layers", r);
    for (int c = 0; c < plc.chunks; ++c) {
      const auto& range = parts.at(plc.virtual_stage(r, c));
      std::printf("%s %d..%d", c ? "," : "", range.first, range.second);
    }
    std::printf(":");
    for (int d = 0; d < dp; ++d)
      std::printf("%s replica %d on %s", d ? "," : "", d,
                  device_label(cfg, env, d, r, places.owner(d, r)).c_str());
    std::printf("\n");
  }
  std::fflush(stdout);
}

train_output train_one(const config& cfg, const progress_options& progress,
                       std::vector<std::vector<op_id>> fixed_order, placement_kind fixed_placement,
                       bool verify_replicas, const std::string& resume, const rank_env& ranks,
                       const std::string& digest, std::vector<std::vector<char>> fixed_overlap) {
  train_options opts;
  opts.ranks = ranks;
  opts.config_digest = digest;
  opts.resume_dir = resume;
  opts.verify_replicas = verify_replicas;
  opts.on_notice = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  opts.fixed_order = std::move(fixed_order);
  opts.fixed_placement = fixed_placement;
  opts.fixed_overlap = std::move(fixed_overlap);
  progress_sink sink(cfg, progress);
  sink.attach(opts);
  auto out = run_training(cfg, opts);
  sink.finish(out.result);
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw usage_error("cannot read " + path);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

imported_schedule read_import(const std::string& path, int stages, int microbatches, bool speaks) {
  imported_schedule imported;
  try {
    imported = read_schedule_csv(read_file(path), stages, microbatches, path);
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
  if (speaks)
    for (const auto& n : imported.notices) std::fprintf(stderr, "note: %s\n", n.message.c_str());
  return imported;
}

void check_outputs(const args& a, const std::vector<std::string>& flags) {
  for (const auto& flag : flags) {
    auto it = a.options.find(flag);
    if (it == a.options.end()) continue;
    try {
      output_target(it->second);
    } catch (const io_error& e) {
      throw usage_error(flag + " " + e.what());
    }
  }
}

void output_writer::write(const char* flag, const std::function<std::string()>& text, const char* what) {
  save(flag, [&](const std::string& path) {
    write_atomic(path, text());
    std::printf("%s written to %s\n", what, path.c_str());
  });
}

void output_writer::save(const char* flag, const std::function<void(const std::string&)>& save) {
  auto it = a_.options.find(flag);
  if (it == a_.options.end()) return;
  try {
    save(it->second);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "actorpipe: %s %s\n", flag, e.what());
    ok_ = false;
  }
}

void write_outputs(output_writer& out, const config& cfg, const std::vector<train_result>& runs) {
  if (runs.size() == 1) {
    const auto& r = runs.front();
    out.write("--timeline", [&] { return run_timeline_svg(r); }, "timeline");
    out.write("--memory", [&] { return memory_svg(r); }, "memory plot");
    out.write("--results", [&] { return results_json(r, cfg.path); }, "results");
  }
  out.write("--report", [&] {
    std::string text;
    try {
      text = read_file(cfg.path);
    } catch (const usage_error&) {
      text = "(" + cfg.path + " could not be read back)";
    }
    return html_report("actorpipe: " + cfg.path, text, runs);
  }, "report");
}

}  // namespace actorpipe::app
