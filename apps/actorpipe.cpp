// actorpipe: train | compare | bubble. Argument handling only; the work
// lives in runtime/ and actors/.
#include <torch/cuda.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <climits>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "actors/trainer.hpp"
#include "runtime/canonical.hpp"
#include "runtime/config.hpp"
#include "runtime/file_io.hpp"
#include "runtime/policies/fixed_order.hpp"
#include "runtime/partition.hpp"
#include "runtime/policies/registry.hpp"
#include "runtime/policy.hpp"
#include "runtime/report.hpp"
#include "runtime/run_report.hpp"
#include "runtime/schedule_csv.hpp"
#include "runtime/simulator.hpp"
#include "runtime/state_dict.hpp"
#include "runtime/text.hpp"

namespace {

using namespace actorpipe;

constexpr int exit_ok = 0;
constexpr int exit_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_stuck = 3;
constexpr int exit_gave_up = 4;  // more restarts than supervision allows

const char* main_help =
    "usage: actorpipe COMMAND [ARGS]\n"
    "\n"
    "Pipeline-parallel training on actors: each stage is an actor that fires\n"
    "its ready forward/backward ops under a schedule policy.\n"
    "\n"
    "commands:\n"
    "  train CONFIG     train the model a YAML config describes\n"
    "  compare CONFIG   train it under naive, gpipe and 1f1b; print one table\n"
    "  bubble           print the analytic pipeline-bubble table\n"
    "  simulate [CONFIG] simulate a schedule's step on a cost model (no tensors)\n"
    "\n"
    "Run 'actorpipe COMMAND --help' for a command's options.\n";

const char* train_help =
    "usage: actorpipe train CONFIG [options]\n"
    "\n"
    "options:\n"
    "  --schedule NAME   override pipeline.schedule (naive | gpipe | 1f1b | interleaved |\n"
    "                    zb-h1 | zb-v | greedy | async)\n"
    "  --steps N         override train.steps\n"
    "  --save PATH       write the final state dict (torch.load reads it)\n"
    "  --trace PATH      write a Chrome-trace JSON of every op (open in Perfetto)\n"
    "  --import PATH     run the per-rank op order in a CSV file (as `simulate --export`\n"
    "                    writes it) instead of the schedule; a deadlocking order exits 3\n"
    "  --log-every N     print a progress line every N steps (default 1)\n"
    "  --quiet           no per-step lines, only the final table\n"
    "  --resume DIR      continue from the newest loadable checkpoint in DIR (checkpoint.dir);\n"
    "                    the weights end bitwise equal to an uninterrupted run\n"
    "  --timeline PATH   SVG of the last step as measured: a lane per (replica, stage), F, B,\n"
    "                    I, W, allreduce and optimizer blocks, idle left empty\n"
    "  --memory PATH     SVG of each stage's stashed activation bytes over the last step\n"
    "  --results PATH    JSON: per-step metrics, per-stage busy, idle and peak memory, summary\n"
    "  --report PATH     one self-contained HTML page: config, table, loss, timeline, memory\n"
    "  --verify-against-clean  train again without the injected faults (skipping the\n"
    "                    same steps) and check the final weights are bitwise equal\n"
    "  --verify-replicas (parallel.dp > 1) compare every stage's weight checksum across\n"
    "                    replicas after every step; the first difference fails the run\n"
    "  -h, --help        this help\n"
    "\n"
    "exit codes: 0 done, 1 the run failed, 2 bad config or arguments, 3 the run hung\n"
    "(supervision.watchdog_s without an op anywhere; the op grid is printed), 4 more\n"
    "restarts than supervision.max_restarts within supervision.window_steps\n";

const char* compare_help =
    "usage: actorpipe compare CONFIG [options]\n"
    "\n"
    "Trains CONFIG once per schedule and prints one comparison table.\n"
    "\n"
    "options:\n"
    "  --schedules LIST  comma-separated (default: the config's compare.schedules,\n"
    "                    else naive,gpipe,1f1b); NAME+recompute runs NAME with every\n"
    "                    stage recomputing its activations\n"
    "  --steps N         override train.steps\n"
    "  --log-every N     progress line every N steps (default: quiet)\n"
    "  --report PATH     one HTML page with every schedule's timeline on one time axis\n"
    "  -h, --help        this help\n";

const char* bubble_help =
    "usage: actorpipe bubble [--stages S --microbatches M]\n"
    "\n"
    "Prints the analytic bubble (idle fraction) of each schedule for the\n"
    "reference (S, M) cases, or for one given pair.\n";

const char* simulate_help =
    "usage: actorpipe simulate [CONFIG] [options]\n"
    "\n"
    "Discrete-event simulation of one step under the same policy objects the\n"
    "stage actors use. Stages, microbatches and schedule come from CONFIG when\n"
    "given; the options override them.\n"
    "\n"
    "options:\n"
    "  --stages S          pipeline stages (default 4)\n"
    "  --microbatches M    microbatches per step (default 8)\n"
    "  --schedule NAME     any registered policy: naive | gpipe | 1f1b | interleaved |\n"
    "                      interleaved-greedy | zb-h1 | zb-v | greedy | async\n"
    "                      (default 1f1b; async simulates one step)\n"
    "  --virtual-stages V  chunks per stage for interleaved (default 2) and greedy\n"
    "                      (default 1); zb-v has 2\n"
    "  --steps K           async: stream K steps with no flush between them (default 4)\n"
    "  --max-inflight N    greedy: microbatches a stage may hold open\n"
    "                      (default S - rank + (V - 1) S)\n"
    "  --cost LIST         op costs, e.g. F=1,B=2,W=1,comm=0.05 (default all 1, comm 0)\n"
    "  --stage-factors L   per-stage cost multipliers, e.g. 1,1,2,1 (uneven stages)\n"
    "  --svg PATH          write the timeline as SVG\n"
    "  --export PATH       write the emergent order as PyTorch pipelining CSV\n"
    "  --import PATH       run the order in a CSV file instead of a schedule\n"
    "  -h, --help          this help\n"
    "\n"
    "exit codes: 0 done, 2 bad arguments, 3 the schedule deadlocks (the op grid\n"
    "is printed with the stuck stages marked)\n";

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Flags after the positional arguments: --name value, or --flag.
struct args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;
  bool has(const std::string& k) const { return options.count(k) > 0; }
};

args parse(int argc, char** argv, int first, const std::vector<std::string>& valued,
           const std::vector<std::string>& flags) {
  args a;
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "-h") s = "--help";
    if (s.rfind("--", 0) != 0) {
      a.positional.push_back(s);
      continue;
    }
    auto is = [&](const std::vector<std::string>& v) {
      return std::find(v.begin(), v.end(), s) != v.end();
    };
    if (is(flags) || s == "--help") {
      a.options[s] = "";
    } else if (is(valued)) {
      if (i + 1 >= argc) throw usage_error(s + " needs a value");
      a.options[s] = argv[++i];
    } else {
      throw usage_error("unknown option " + quoted_input(s, ""));
    }
  }
  return a;
}

int64_t parse_count(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 1 || n > INT_MAX)
    throw usage_error(flag + " expects a positive integer, got " + quoted_input(v));
  return n;
}

config load(const std::string& path) {
  load_env env;
  env.cuda_devices = static_cast<int>(torch::cuda::device_count());
  return load_config(path, env);
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

/// async streams the whole run as one step, its microbatches counted in an
/// int; the config checks its own steps, --steps comes after.
void check_async_stream(const config& cfg) {
  if (!find_schedule(cfg.pipeline.schedule)->flushes && cfg.pipeline.microbatches * cfg.train.steps > INT_MAX)
    throw usage_error("--steps " + std::to_string(cfg.train.steps) + ": " + cfg.pipeline.schedule + " streams every step's " +
                      std::to_string(cfg.pipeline.microbatches) + " microbatches as one, more than " +
                      std::to_string(INT_MAX) + " in all");
}

void print_plan(const config& cfg) {
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
  std::printf("parallel: data parallel dp=%d x pipeline stages pp=%d = %d stage actors; allreduce %s\n", dp,
              stages, dp * stages, cfg.parallel.allreduce.c_str());
  std::printf("  batch %lld per step: %lld per replica", static_cast<long long>(cfg.train.batch_size),
              static_cast<long long>(share));
  if (cfg.train.batch_size != share * dp)
    std::printf(" (the last one %lld)", static_cast<long long>(cfg.train.batch_size - share * (dp - 1)));
  std::printf("\n");
  for (int r = 0; r < stages; ++r) {
    std::printf("  pipeline stage %d, layers", r);
    for (int c = 0; c < plc.chunks; ++c) {
      const auto& range = parts.at(plc.virtual_stage(r, c));
      std::printf("%s %d..%d", c ? "," : "", range.first, range.second);
    }
    std::printf(":");
    for (int d = 0; d < dp; ++d) std::printf("%s replica %d on %s", d ? "," : "", d, cfg.replica_devices[d][r].c_str());
    std::printf("\n");
  }
  std::fflush(stdout);
}

void print_placement(const train_result& r) {
  const int chunks = static_cast<int>(r.partition.size()) / std::max(1, r.stages);
  const placement plc{r.placement, r.stages, chunks};
  for (int s = 0; s < r.stages; ++s) {
    std::printf("  stage %d on %s: layers", s, r.devices[s].c_str());
    for (int c = 0; c < chunks; ++c) {
      const auto& range = r.partition[plc.virtual_stage(s, c)];
      std::printf("%s %d..%d", c ? "," : "", range.first, range.second);
    }
    std::printf("\n");
  }
}

train_output train_one(const config& cfg, int64_t log_every, int64_t total_steps,
                       std::vector<std::vector<op_id>> fixed_order = {},
                       placement_kind fixed_placement = placement_kind::round_robin, bool verify_replicas = false,
                       const std::string& resume = {}) {
  train_options opts;
  opts.resume_dir = resume;
  opts.verify_replicas = verify_replicas;
  opts.on_notice = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  opts.fixed_order = std::move(fixed_order);
  opts.fixed_placement = fixed_placement;
  if (log_every > 0) {
    // A terminal gets one live bar (redrawn at most 10 times a second);
    // a pipe or file gets plain lines every log_every steps.
    const bool live = isatty(STDOUT_FILENO) != 0;
    auto started = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
    auto drawn = std::make_shared<std::chrono::steady_clock::time_point>();
    opts.on_step = [log_every, total_steps, live, started, drawn](const step_record& s) {
      const int64_t done = s.step + 1;
      if (live) {
        auto now = std::chrono::steady_clock::now();
        if (done != total_steps && now - *drawn < std::chrono::milliseconds(100)) return;
        *drawn = now;
        const double elapsed = std::chrono::duration<double>(now - *started).count();
        const double eta = done > 0 ? elapsed / done * static_cast<double>(total_steps - done) : 0.0;
        const int width = 30, filled = static_cast<int>(width * done / std::max<int64_t>(1, total_steps));
        std::printf("\r[%s%s] step %lld/%lld  loss %.4f  step %.2f ms  ETA %.1f s   ",
                    std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                    static_cast<long long>(done), static_cast<long long>(total_steps), s.loss, s.step_s * 1e3, eta);
        if (done == total_steps) std::printf("\n");
        std::fflush(stdout);
        return;
      }
      if (done % log_every != 0 && done != total_steps) return;
      std::printf("step %5lld/%lld  loss %.4f  step %8.2f ms  bubble %.3f  lr %.2e\n",
                  static_cast<long long>(done), static_cast<long long>(total_steps),
                  s.loss, s.step_s * 1e3, s.bubble, s.lr);
      std::fflush(stdout);
    };
  }
  return run_training(cfg, opts);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw usage_error("cannot read " + path);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

/// Before any work: every output path given can be written (its directory
/// exists and takes files; it is not a directory, a device or a FIFO).
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

/// Writes the outputs asked for, each atomically; a failure is named and
/// the others are still written. Returns false if any failed.
class output_writer {
public:
  explicit output_writer(const args& a) : a_(a) {}

  void write(const char* flag, const std::function<std::string()>& text, const char* what) {
    save(flag, [&](const std::string& path) {
      write_atomic(path, text());
      std::printf("%s written to %s\n", what, path.c_str());
    });
  }
  /// `save(path)` writes the output of `flag` itself.
  void save(const char* flag, const std::function<void(const std::string&)>& save) {
    auto it = a_.options.find(flag);
    if (it == a_.options.end()) return;
    try {
      save(it->second);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "actorpipe: %s %s\n", flag, e.what());
      ok_ = false;
    }
  }
  bool ok() const { return ok_; }

private:
  const args& a_;
  bool ok_ = true;
};

// What was injected and what the runtime did about it; stragglers.
void print_fault_report(const train_result& r, bool lockstep) {
  if (r.restarts > 0)
    std::printf("restarts: %d, %.1f ms of work lost to them (%.1f ms per restart)\n", r.restarts, r.recovery_s * 1e3,
                r.recovery_s * 1e3 / r.restarts);
  const auto f = count_message_faults(r);
  if (f.sent_twice + f.held_back + f.dropped + r.duplicates + r.skipped_steps.size() > 0)
    std::printf("faults: %llu messages sent twice, %llu held back, %llu dropped (%llu asked for again, %llu resent); "
                "%llu duplicate or stale messages dropped; %zu steps skipped for a NaN or an infinity\n",
                static_cast<unsigned long long>(f.sent_twice), static_cast<unsigned long long>(f.held_back),
                static_cast<unsigned long long>(f.dropped), static_cast<unsigned long long>(f.asked_again),
                static_cast<unsigned long long>(f.resent), static_cast<unsigned long long>(r.duplicates),
                r.skipped_steps.size());
  if (r.restarts + f.sent_twice + f.held_back + f.dropped + r.skipped_steps.size() > 0)
    std::printf("trace: %016llx (the faults injected per step and stage, restarts and skipped steps; the same for "
                "the same config and fault seed)\n",
                static_cast<unsigned long long>(trace_hash(r)));
  if (lockstep)  // the firing order depends on nothing but the config and the fault seed
    std::printf("order: %016llx (the trace with every stage's ops in firing order; lock-step makes it the same run "
                "to run)\n",
                static_cast<unsigned long long>(trace_hash(r, true)));
  const auto speeds = stage_speeds(r);
  const int per = std::max(1, r.stages);
  for (size_t i = 0; i < speeds.size(); ++i)
    if (speeds[i] > 0 && speeds[i] < 0.75)
      std::printf("straggler: %sstage %d runs at %.2f of the median stage's speed\n",
                  r.dp > 1 ? ("replica " + std::to_string(i / per) + " ").c_str() : "", static_cast<int>(i % per),
                  speeds[i]);
}

// --timeline, --memory, --results (one run) and --report (any number).
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

int cmd_train(int argc, char** argv) {
  auto a = parse(argc, argv, 2,
                 {"--schedule", "--steps", "--save", "--trace", "--log-every", "--import", "--timeline", "--memory",
                  "--results", "--report", "--resume"},
                 {"--quiet", "--verify-replicas", "--verify-against-clean"});
  if (a.has("--help")) {
    std::fputs(train_help, stdout);
    return exit_ok;
  }
  if (a.positional.size() != 1) throw usage_error("train takes one CONFIG (see --help)");
  check_outputs(a, {"--save", "--trace", "--timeline", "--memory", "--results", "--report"});
  auto cfg = load(a.positional[0]);
  if (a.has("--schedule")) set_schedule(cfg, a.options["--schedule"]);
  if (a.has("--steps")) cfg.train.steps = parse_count("--steps", a.options["--steps"]);
  check_async_stream(cfg);
  int64_t log_every = a.has("--log-every") ? parse_count("--log-every", a.options["--log-every"]) : 1;
  if (a.has("--quiet")) log_every = 0;
  std::vector<std::vector<op_id>> order;
  placement_kind placement = placement_kind::round_robin;
  if (a.has("--import")) {
    try {
      order = parse_schedule_csv(read_file(a.options["--import"]), cfg.pipeline.stages,
                                 cfg.pipeline.microbatches, a.options["--import"], &placement);
    } catch (const std::invalid_argument& e) {
      throw usage_error(e.what());
    }
    fixed_order_policy fixed(order, placement);
    if (fixed.chunks() != cfg.pipeline.virtual_stages)
      throw usage_error(a.options["--import"] + " runs " + std::to_string(fixed.chunks()) +
                        " chunks per stage; the config has pipeline.virtual_stages " +
                        std::to_string(cfg.pipeline.virtual_stages) +
                        " (set it, or --schedule a schedule with that many)");
    // A deadlocking order is found here, before any tensor moves.
    auto dry = simulate(fixed, cfg.pipeline.stages, cfg.pipeline.microbatches);
    if (dry.deadlock) {
      std::fputs(dry.diagnosis.c_str(), stderr);
      return exit_stuck;
    }
    cfg.pipeline.schedule = "fixed";
  }
  print_plan(cfg);
  std::string resume;
  if (a.has("--resume")) {
    resume = a.options["--resume"];
    if (!std::filesystem::is_directory(resume)) throw usage_error("--resume " + resume + ": not a directory");
  }
  auto out = train_one(cfg, log_every, cfg.train.steps, std::move(order), placement, a.has("--verify-replicas"),
                       resume);
  print_placement(out.result);
  for (const auto& n : out.result.notices) std::fprintf(stderr, "note: %s\n", n.c_str());
  print_fault_report(out.result, cfg.pipeline.lockstep);
  if (a.has("--verify-against-clean")) {
    // The same run without the injected faults, dropping the same steps'
    // updates as this one did: recovery must have lost nothing.
    config clean = cfg;
    clean.faults.inject.clear();
    clean.checkpoint.every = 0;
    train_options opts;
    opts.skip_steps = out.result.skipped_steps;
    auto twin = run_training(clean, opts);
    size_t differ = 0;
    std::string first;
    for (size_t i = 0; i < out.weights.size() && i < twin.weights.size(); ++i)
      if (!out.weights[i].second.equal(twin.weights[i].second)) {
        if (first.empty()) first = out.weights[i].first;
        ++differ;
      }
    if (out.weights.size() != twin.weights.size() || differ > 0) {
      std::fprintf(stderr, "actorpipe: verify: %zu of %zu tensors differ from the fault-free run (first: %s)\n", differ,
                   out.weights.size(), first.c_str());
      return exit_failed;
    }
    std::printf("verify: final weights bitwise equal to a fault-free run (%zu tensors%s)\n", out.weights.size(),
                out.result.skipped_steps.empty() ? "" : ", the same steps skipped");
  }
  if (!out.result.checkpoints.empty())
    std::printf("checkpoints: %zu written, the latest %s (%.1f ms writing in all)\n", out.result.checkpoints.size(),
                out.result.checkpoints.back().c_str(), out.result.checkpoint_s * 1e3);
  if (out.result.dp > 1) {
    double ar = 0.0, hidden = 0.0;
    for (const auto& st : out.result.steps) {
      ar += st.allreduce_s;
      hidden += st.allreduce_hidden;
    }
    const double n = static_cast<double>(std::max<size_t>(1, out.result.steps.size()));
    std::printf("allreduce (%s, dp=%d): %.3f ms per stage per step, %.0f%% of it during other stages' compute%s\n",
                out.result.allreduce.c_str(), out.result.dp, ar / n * 1e3, hidden / n * 100.0,
                out.result.replicas_verified ? "; replicas bitwise identical after every step (checksums)" : "");
  }
  std::fputs(format_comparison({out.result}).c_str(), stdout);
  output_writer writer(a);
  writer.save("--save", [&](const std::string& path) {
    save_tensors(path, out.weights);
    std::printf("saved %zu tensors to %s\n", out.weights.size(), path.c_str());
  });
  writer.write("--trace", [&] { return chrome_trace_json(out.result, cfg.path); }, "trace");
  write_outputs(writer, cfg, {out.result});
  return writer.ok() ? exit_ok : exit_failed;
}

int cmd_compare(int argc, char** argv) {
  auto a = parse(argc, argv, 2, {"--schedules", "--steps", "--log-every", "--report"}, {});
  if (a.has("--help")) {
    std::fputs(compare_help, stdout);
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
  for (const auto& cfg : cfgs) {
    print_plan(cfg);
    auto out = train_one(cfg, log_every, cfg.train.steps);
    std::printf("  done: mean step %.2f ms, final loss %.4f\n", mean_step_seconds(out.result) * 1e3,
                out.result.steps.empty() ? 0.0 : out.result.steps.back().loss);
    results.push_back(std::move(out.result));
  }
  std::fputs(format_comparison(results).c_str(), stdout);
  output_writer writer(a);
  write_outputs(writer, base, results);
  return writer.ok() ? exit_ok : exit_failed;
}

int cmd_bubble(int argc, char** argv) {
  auto a = parse(argc, argv, 2, {"--stages", "--microbatches"}, {});
  if (a.has("--help")) {
    std::fputs(bubble_help, stdout);
    return exit_ok;
  }
  if (!a.positional.empty()) throw usage_error("bubble takes no positional arguments");
  auto cases = reference_bubble_cases();
  if (a.has("--stages") || a.has("--microbatches")) {
    if (!a.has("--stages") || !a.has("--microbatches"))
      throw usage_error("give both --stages and --microbatches");
    cases = {{static_cast<int>(parse_count("--stages", a.options["--stages"])),
              static_cast<int>(parse_count("--microbatches", a.options["--microbatches"]))}};
  }
  std::fputs(format_bubble_table(cases).c_str(), stdout);
  return exit_ok;
}

int cmd_simulate(int argc, char** argv) {
  auto a = parse(argc, argv, 2,
                 {"--stages", "--microbatches", "--schedule", "--cost", "--stage-factors", "--svg",
                  "--export", "--import", "--virtual-stages", "--max-inflight", "--steps"},
                 {});
  if (a.has("--help")) {
    std::fputs(simulate_help, stdout);
    return exit_ok;
  }
  if (a.positional.size() > 1) throw usage_error("simulate takes at most one CONFIG (see --help)");
  check_outputs(a, {"--svg", "--export"});
  int stages = 4, microbatches = 8, chunks_from_config = 0, max_inflight = 0;
  std::string schedule = "1f1b";
  if (!a.positional.empty()) {
    auto cfg = load(a.positional[0]);
    stages = cfg.pipeline.stages;
    microbatches = cfg.pipeline.microbatches;
    schedule = cfg.pipeline.schedule;
    chunks_from_config = cfg.pipeline.virtual_stages;
    max_inflight = cfg.pipeline.max_inflight;
  }
  if (a.has("--max-inflight"))
    max_inflight = static_cast<int>(parse_count("--max-inflight", a.options["--max-inflight"]));
  if (a.has("--stages")) stages = static_cast<int>(parse_count("--stages", a.options["--stages"]));
  if (a.has("--microbatches"))
    microbatches = static_cast<int>(parse_count("--microbatches", a.options["--microbatches"]));
  int chunks = 1;
  if (a.has("--virtual-stages"))
    chunks = static_cast<int>(parse_count("--virtual-stages", a.options["--virtual-stages"]));
  if (a.has("--schedule")) {
    // Any registered policy simulates, also one the runtime does not train with.
    schedule = a.options["--schedule"];
    if (!make_policy(schedule)) {
      auto names = policy_names();
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      auto near = nearest(schedule, names);
      throw usage_error("unknown schedule " + quoted_input(schedule) +
                        (near.empty() ? "" : "; did you mean '" + near + "'?") + " (known: " + list + ")");
    }
  }
  if (const schedule_traits* t = find_schedule(schedule); t && t->any_chunks() && !a.has("--virtual-stages")) {
    if (chunks_from_config > 1 && !a.has("--schedule")) chunks = chunks_from_config;
    else chunks = t->default_chunks;
  }
  if (auto pol = make_policy(schedule, policy_options{chunks}); pol && a.has("--virtual-stages") &&
                                                                pol->chunks() != chunks)
    throw usage_error("--virtual-stages " + std::to_string(chunks) + ": schedule " + schedule + " runs " +
                      std::to_string(pol->chunks()) + " chunks per stage");
  if (const schedule_traits* t = find_schedule(schedule); t && t->one_microbatch) microbatches = 1;
  cost_model cost;
  try {
    if (a.has("--cost")) cost = parse_cost(a.options["--cost"]);
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
  if (a.has("--stage-factors")) {
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
      throw usage_error("--stage-factors has " + std::to_string(cost.stage_factor.size()) +
                        " values for " + std::to_string(stages) + " stages");
  }
  auto t0 = std::chrono::steady_clock::now();
  sim_result r;
  int64_t stream_steps = 1;
  if (a.has("--import")) {
    std::vector<std::vector<op_id>> order;
    placement_kind placement = placement_kind::round_robin;
    try {
      order = parse_schedule_csv(read_file(a.options["--import"]), stages, microbatches,
                                 a.options["--import"], &placement);
    } catch (const std::invalid_argument& e) {
      throw usage_error(e.what());
    }
    try {
      r = simulate(fixed_order_policy(std::move(order), placement), stages, microbatches, cost);
    } catch (const std::invalid_argument& e) {
      throw usage_error(e.what());
    }
  } else {
    try {
      // A schedule without a flush is one stream: K steps of M microbatches.
      auto pol = make_policy(schedule, policy_options{chunks, max_inflight});
      if (pol && !pol->flushes()) stream_steps = a.has("--steps") ? parse_count("--steps", a.options["--steps"]) : 4;
      else if (a.has("--steps")) throw usage_error("--steps is for schedules without a flush (async)");
      // Before the stream's microbatches become an int: K x M may not fit one.
      if (pol)
        if (auto why = simulation_too_large(stages, microbatches * stream_steps, pol->chunks(), pol->splits_backward());
            !why.empty())
          throw usage_error("simulate: " + why);
      r = simulate(schedule, stages, static_cast<int>(microbatches * stream_steps), cost, chunks, max_inflight);
    } catch (const std::invalid_argument& e) {
      throw usage_error(e.what());
    }
  }
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
                microbatches * (cost.f + cost.b + cost.w));
  size_t ops = 0;
  for (const auto& lane : r.timeline) ops += lane.size();
  std::printf("simulated %zu ops in %.3f s\n", ops, wall);
  output_writer writer(a);
  writer.write("--svg", [&] { return simulation_svg(r); }, "timeline");
  writer.write("--export", [&] { return to_schedule_csv(r.order(), stages, r.split_backward, r.placement); },
               "order");
  return writer.ok() ? exit_ok : exit_failed;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines reach pipes and logs at once
  std::string cmd = argc > 1 ? argv[1] : "";
  try {
    if (cmd.empty() || cmd == "--help" || cmd == "-h" || cmd == "help") {
      std::fputs(main_help, cmd.empty() ? stderr : stdout);
      return cmd.empty() ? exit_usage : exit_ok;
    }
    if (cmd == "train") return cmd_train(argc, argv);
    if (cmd == "compare") return cmd_compare(argc, argv);
    if (cmd == "bubble") return cmd_bubble(argc, argv);
    if (cmd == "simulate") return cmd_simulate(argc, argv);
    throw usage_error("unknown command " + quoted_input(cmd) + " (train | compare | bubble | simulate; see --help)");
  } catch (const config_error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return exit_usage;
  } catch (const usage_error& e) {
    std::fprintf(stderr, "actorpipe: %s\n", e.what());
    return exit_usage;
  } catch (const stuck_error& e) {
    std::fprintf(stderr, "actorpipe: %s", e.what());
    return exit_stuck;
  } catch (const restart_limit_error& e) {
    std::fprintf(stderr, "actorpipe: gave up: %s\n", e.what());
    return exit_gave_up;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "actorpipe: error: %s\n", e.what());
    return exit_failed;
  }
}
