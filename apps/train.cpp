// actorpipe train: one run of a config, its fault report, and the files it
// was asked for.
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <map>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "apps/common.hpp"
#include "runtime/model/lr.hpp"
#include "runtime/observe/tensorboard.hpp"
#include "runtime/observe/throughput.hpp"
#include "runtime/data/tokenizer.hpp"
#include "runtime/files/checkpoint.hpp"
#include "runtime/model/generate.hpp"
#include "runtime/model/model.hpp"
#include "runtime/schedule/canonical.hpp"
#include "runtime/util/fnv1a.hpp"
#include "runtime/schedule/policies/fixed_order.hpp"
#include "runtime/dist/launch/rank_env.hpp"
#include "runtime/dist/placement/rank_placement.hpp"
#include "runtime/observe/report.hpp"
#include "runtime/schedule/schedule_csv.hpp"
#include "runtime/schedule/simulator.hpp"
#include "runtime/files/state_dict.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe::app {

namespace {

std::string known_peaks_text() {
  std::string out;
  for (const auto& p : known_peaks()) out += (out.empty() ? "" : ", ") + std::string(p.name) + " " + fmt("%g", p.tflops);
  return out;
}

const command_spec train_spec = {
    "usage: actorpipe train CONFIG [options]",
    "",
    {{"--schedule", "NAME",
      "override pipeline.schedule (" + schedule_names(true, 30, 58) + ")"},
     {"--steps", "N", "override train.steps"},
     {"--save", "PATH", "write the final state dict (torch.load reads it)"},
     {"--trace", "PATH", "write a Chrome-trace JSON of every op (open in Perfetto)"},
     {"--import", "PATH",
      "run the per-rank op order in a CSV file (as `simulate --export`\n"
      "writes it, or torch's compute_only / compute_comms _dump_csv)\n"
      "instead of the schedule; a deadlocking order exits 3"},
     {"--log-every", "N", "print a progress line every N steps (default 1)"},
     {"--tensorboard", "DIR",
      "write TensorBoard scalars to DIR/events.out.tfevents.*: train/loss,\n"
      "lr, grad_norm, step_ms, tokens_per_s (samples_per_s), bubble, mfu;\n"
      "val/loss and val/accuracy; stages/<i>/busy_ms and peak_activation_bytes"},
     {"--peak-tflops", "X",
      "one device's peak TFLOP/s, for MFU (default: a known GPU's bf16\n"
      "dense peak: " + known_peaks_text() + "; none on a CPU)"},
     {"--quiet", "", "no per-step lines, only the final table"},
     {"--resume", "DIR",
      "continue from the newest loadable checkpoint in DIR (checkpoint.dir);\n"
      "the weights end bitwise equal to an uninterrupted run"},
     {"--timeline", "PATH",
      "SVG of the last step as measured: a lane per (replica, stage), F, B,\n"
      "I, W, allreduce and optimizer blocks, idle left empty"},
     {"--memory", "PATH", "SVG of each stage's stashed activation bytes over the last step"},
     {"--results", "PATH", "JSON: per-step metrics, per-stage busy, idle and peak memory, summary"},
     {"--report", "PATH", "one self-contained HTML page: config, table, loss, timeline, memory"},
     {"--verify-against-clean", "",
      "train again without the injected faults (skipping the\n"
      "same steps) and check the final weights are bitwise equal"},
     {"--samples", "N",
      "data.kind text: end with N samples of 200 bytes from the final\n"
      "weights (temperature 0.8, top-k 40, seeds 1..N; default 3, 0: none)"},
     {"--verify-replicas", "",
      "(parallel.dp > 1) compare every stage's weight checksum across\n"
      "replicas after every step; the first difference fails the run"}},
    "exit codes: 0 done, 1 the run failed, 2 bad config or arguments, 3 the run hung\n"
    "(supervision.watchdog_s without an op anywhere; the op grid is printed), 4 more\n"
    "restarts than supervision.max_restarts within supervision.window_steps, 5 this\n"
    "process lost the coordinator (rank 0's process, or the coordinator apart): go on\n"
    "with --resume, 130 and 143 after SIGINT and SIGTERM\n",
    20};

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
  if (f.stale > 0)
    std::printf("stale: %llu messages of an earlier attempt or generation dropped on arrival\n",
                static_cast<unsigned long long>(f.stale));
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

/// --import: the order in the CSV file (torch's compute_only or
/// compute_comms), checked against the config and dry-run on the simulator.
/// What the import did with torch's other actions goes to stderr, once per
/// kind (`speaks`: rank 0 of a multi-process run). False (the op grid
/// printed) if it deadlocks.
bool import_order(const std::string& path, config& cfg, imported_schedule& imported, bool speaks) {
  imported = read_import(path, cfg.pipeline.stages, cfg.pipeline.microbatches, speaks);
  fixed_order_policy fixed(imported.order, imported.placement, imported.overlap);
  if (fixed.chunks() != cfg.pipeline.virtual_stages)
    throw usage_error(path + " runs " + std::to_string(fixed.chunks()) +
                      " chunks per stage; the config has pipeline.virtual_stages " +
                      std::to_string(cfg.pipeline.virtual_stages) +
                      " (set it, or --schedule a schedule with that many)");
  // A deadlocking order is found here, before any tensor moves.
  auto dry = simulate(fixed, cfg.pipeline.stages, cfg.pipeline.microbatches);
  if (dry.deadlock) {
    std::fputs(dry.diagnosis.c_str(), stderr);
    return false;
  }
  cfg.pipeline.schedule = "fixed";
  return true;
}

/// --verify-against-clean: the same run without the injected faults,
/// dropping the same steps' updates as this one did: recovery must have
/// lost nothing. False (the difference printed) if the weights differ.
bool verify_against_clean(const config& cfg, const train_output& out) {
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
    return false;
  }
  std::printf("verify: final weights bitwise equal to a fault-free run (%zu tensors%s)\n", out.weights.size(),
              out.result.skipped_steps.empty() ? "" : ", the same steps skipped");
  return true;
}

/// The checkpoints written and, with dp > 1, what the allreduce cost.
void print_checkpoints_and_allreduce(const train_result& r) {
  if (!r.checkpoints.empty())
    std::printf("checkpoints: %zu written, the latest %s (%.1f ms writing in all)\n", r.checkpoints.size(),
                r.checkpoints.back().c_str(), r.checkpoint_s * 1e3);
  if (r.dp > 1) {
    double ar = 0.0, hidden = 0.0;
    for (const auto& st : r.steps) {
      ar += st.allreduce_s;
      hidden += st.allreduce_hidden;
    }
    const double n = static_cast<double>(std::max<size_t>(1, r.steps.size()));
    std::printf("allreduce (%s, dp=%d): %.3f ms per stage per step, %.0f%% of it during other stages' compute%s\n",
                r.allreduce.c_str(), r.dp, ar / n * 1e3, hidden / n * 100.0,
                r.replicas_verified ? "; replicas bitwise identical after every step (checksums)" : "");
  }
}

// What every rank of a multi-process run must agree on: the config file's
// bytes, what the command line changed in it, and an imported order. Rank 0
// refuses (exit 2) a rank whose digest differs.
std::string run_digest(const config& cfg, const std::string& import_path) {
  fnv1a h;
  auto add = [&](const std::string& s) {
    h.value(s.size());
    h.bytes(s.data(), s.size());
  };
  add(read_file(cfg.path));
  add(cfg.pipeline.schedule);
  add(std::to_string(cfg.train.steps));
  add(import_path.empty() ? std::string() : read_file(import_path));
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(h.digest()));
  return text;
}

// A language model's run ends with what it learned to write: `count`
// samples from the final weights, each after a newline (with a tokenizer:
// after "The"), seed k for the k-th, in one process (runtime/model/generate).
void print_samples(const config& cfg, const named_params& weights, int64_t count) {
  const std::string first = cfg.model.layers.front().type;
  if (count == 0 || (first != "embedding" && first != "token_embedding") || cfg.data.kind != "text") return;
  std::unique_ptr<tokenizer> tok;
  if (!cfg.data.tokenizer.empty()) tok = std::make_unique<tokenizer>(cfg.data.tokenizer);
  config plain = cfg;
  plain.model.init_from.clear();
  std::vector<layer> layers = build_layers(plain);
  std::map<std::string, at::Tensor> by_name;
  for (const auto& [name, t] : weights) by_name[name] = t;
  {
    at::NoGradGuard no_grad;
    for (auto& l : layers)
      for (auto& [name, t] : l.parameters()) {
        auto it = by_name.find(std::to_string(l.index()) + "." + name);
        if (it != by_name.end()) t.copy_(it->second.to(t.scalar_type()));
      }
  }
  const layer_stack model(std::move(layers));
  const std::vector<int64_t> prompt = tok ? tok->encode("The") : std::vector<int64_t>{'\n'};
  const int64_t window = first == "embedding" ? cfg.model.layers.front().max_seq : cfg.data.seq_len;
  sampling s;
  for (int64_t k = 1; k <= count; ++k) {
    s.seed = static_cast<uint64_t>(k);
    const auto tokens = generate_tokens(model, prompt.empty() ? std::vector<int64_t>{0} : prompt, 200, window, s);
    std::string text;
    if (tok) {
      std::vector<int64_t> all = prompt;
      all.insert(all.end(), tokens.begin(), tokens.end());
      text = tok->decode(all);
    } else {
      text.assign(tokens.begin(), tokens.end());
    }
    std::printf("sample %lld (temperature %.1f, top-k %lld, seed %lld):\n%s\n", static_cast<long long>(k),
                s.temperature, static_cast<long long>(s.top_k), static_cast<long long>(k), text.c_str());
  }
}

// The run's mean throughput (steps after the first) and, with a peak, its
// MFU; the evaluations during training, as one curve.
void print_throughput(const train_result& r) {
  if (r.steps.empty()) return;
  const double util = mean_mfu(r);
  std::printf("throughput: %.1f %s/s (%lld per step, %.3g model FLOPs per step)%s\n", mean_units_per_second(r),
              r.unit.c_str(), static_cast<long long>(r.step_units), r.step_flops,
              util >= 0 ? fmt(", MFU %.2f%%", util * 100).c_str()
                        : ", MFU: no peak known (--peak-tflops)");
  if (r.evals.empty()) return;
  std::string curve;
  for (const auto& e : r.evals) curve += (curve.empty() ? "" : ", ") + std::to_string(e.step) + ": " + fmt("%.4f", e.loss);
  std::printf("validation loss after updates: %s\n", curve.c_str());
}

// A decay that ends past the run's last update never reaches min_lr: said
// once, with the rate the last update uses.
void print_lr_note(const config& cfg) {
  const auto& l = cfg.train.lr_schedule;
  if (l.type != "cosine" && l.type != "linear") return;
  const int64_t end = l.warmup_steps + decay_steps(cfg.train);
  if (end <= cfg.train.steps) return;
  std::printf("note: train.lr_schedule decays until update %lld, past train.steps %lld: the run ends before the rate "
              "reaches min_lr %g (its last update uses %.6g)\n",
              static_cast<long long>(end), static_cast<long long>(cfg.train.steps), l.min_lr,
              lr_at(cfg.train, cfg.train.steps - 1));
}

// Under torchrun, TORCHELASTIC_RESTART_COUNT > 0 means torchrun restarted
// every worker: no process is left whose memory could heal the one that
// failed, so the run resumes from the newest checkpoint in checkpoint.dir,
// bitwise as --resume does (or starts over when there is none), and says
// which. Returns the directory to resume from ("" to start over).
std::string resume_after_torchrun_restart(const config& cfg, const rank_env& env, bool speaks) {
  const auto& cc = cfg.checkpoint;
  std::error_code ec;
  const bool any = cc.every > 0 && std::filesystem::is_directory(cc.dir, ec) && !checkpoint_files(cc.dir).empty();
  if (speaks)
    std::printf("torchrun restart %d (TORCHELASTIC_RESTART_COUNT): every worker was restarted, so no peer's memory "
                "is left to heal from; %s\n",
                env.restart_count,
                any ? ("resuming from the newest checkpoint in " + cc.dir).c_str()
                    : cc.every > 0 ? ("no checkpoint in " + cc.dir + " yet: starting over from step 0").c_str()
                                   : "checkpoint.every is 0 (no checkpoints): starting over from step 0");
  return any ? cc.dir : "";
}

// --peak-tflops: the device's peak for MFU (0: not given).
double peak_tflops_of(args& a) {
  if (!a.has("--peak-tflops")) return 0;
  const std::string& v = a.options["--peak-tflops"];
  char* end = nullptr;
  const double peak = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(peak > 0) || !std::isfinite(peak))
    throw usage_error("--peak-tflops takes a positive number of TFLOP/s, got " + quoted_input(v));
  return peak;
}

// --samples: texts generated after a language model's run (3 by default).
int64_t samples_of(args& a, const config& cfg) {
  if (!a.has("--samples")) return cfg.data.kind == "text" ? 3 : 0;
  const std::string& v = a.options["--samples"];
  const int64_t samples = v == "0" ? 0 : parse_count("--samples", v);
  if (samples > 100) throw usage_error("--samples is at most 100, got " + quoted_input(v));
  if (samples > 0 && cfg.data.kind != "text")
    throw usage_error("--samples is for language models (data.kind text), not " + cfg.data.kind);
  return samples;
}

// A multi-process run's line: how many processes, from which launcher.
void print_processes(const config& cfg, const rank_env& env) {
  // Under auto, every other rank's stages are on its own GPU: the plan
  // names it by the variable (device_label), the stage lines after the
  // run by what each rank said it resolved.
  const bool per_rank_gpu = cfg.pipeline.auto_devices && cfg.pipeline.devices.front().rfind("cuda:", 0) == 0;
  std::printf("processes: %d (%s)%s, %d stage actor(s) each, consecutive (replica, stage) blocks%s; master %s:%d\n",
              env.workers(), launcher_name(env.launcher),
              env.apart ? " and a coordinator apart that holds no stage" : "",
              rank_placement(cfg.parallel.dp, cfg.pipeline.stages, env.workers()).actors_per_rank(),
              per_rank_gpu ? (std::string(", each on its cuda:") + local_rank_variable(env.launcher)).c_str() : "",
              env.master_addr.c_str(), env.master_port);
}

// --resume DIR, or (torchrun started this process again) the run's own
// checkpoints; "" otherwise.
std::string resume_of(args& a, const config& cfg, const rank_env& env, bool speaks) {
  if (a.has("--resume")) {
    const std::string resume = a.options["--resume"];
    if (!std::filesystem::is_directory(resume)) throw usage_error("--resume " + resume + ": not a directory");
    return resume;
  }
  return env.restart_count > 0 ? resume_after_torchrun_restart(cfg, env, speaks) : "";
}

// What rank 0 prints once the run is over.
void print_run(const config& cfg, const train_output& out) {
  print_placement(out.result);
  for (const auto& n : out.result.notices) std::fprintf(stderr, "note: %s\n", n.c_str());
  print_fault_report(out.result, cfg.pipeline.lockstep);
}

void print_results(const config& cfg, const train_output& out) {
  print_checkpoints_and_allreduce(out.result);
  std::fputs(format_comparison({out.result}).c_str(), stdout);
  print_throughput(out.result);
  if ((cfg.data.kind == "text" || cfg.data.kind == "tokens") && out.result.test_accuracy >= 0) {
    const char* unit = cfg.data.kind == "text" && cfg.data.tokenizer.empty() ? "byte" : "token";
    std::printf("held-out loss %.4f nats per %s (%.3f bits per %s)\n", out.result.test_loss, unit,
                out.result.test_loss / std::log(2.0), unit);
  }
}

// The weights (--save, only when finite: a run never ends well with a NaN
// or an infinity in them), the samples and the other output files.
int save_outputs(args& a, const config& cfg, const train_output& out, int64_t samples) {
  const std::string nonfinite = first_nonfinite(out.weights);
  if (!nonfinite.empty())
    std::printf("final weights: '%s' holds a NaN or an infinity: the run failed, and they are not saved\n",
                nonfinite.c_str());
  else
    print_samples(cfg, out.weights, samples);
  output_writer writer(a);
  writer.save("--save", [&](const std::string& path) {
    if (!nonfinite.empty())
      throw std::runtime_error(path + ": not written: '" + nonfinite + "' holds a NaN or an infinity" +
                               (out.result.checkpoints.empty()
                                    ? std::string()
                                    : "; the newest checkpoint, " + out.result.checkpoints.back() + ", is finite"));
    save_tensors(path, out.weights);
    std::printf("saved %zu tensors to %s\n", out.weights.size(), path.c_str());
  });
  writer.write("--trace", [&] { return chrome_trace_json(out.result, cfg.path); }, "trace");
  write_outputs(writer, cfg, {out.result});
  return writer.ok() && nonfinite.empty() ? exit_ok : exit_failed;
}

}  // namespace

int cmd_train(int argc, char** argv) {
  auto a = parse(argc, argv, 2, train_spec);
  if (a.has("--help")) {
    std::fputs(a.help.c_str(), stdout);
    return exit_ok;
  }
  if (a.positional.size() != 1) throw usage_error("train takes one CONFIG (see --help)");
  check_outputs(a, {"--save", "--trace", "--timeline", "--memory", "--results", "--report"});
  const double peak_tflops = peak_tflops_of(a);
  // Started as one rank of several (torchrun, launch, Slurm, mpirun): the
  // environment is read first, as `auto` places this rank's stages by it.
  const rank_env env = read_rank_env();
  auto cfg = load(a.positional[0], env);
  if (a.has("--schedule")) set_schedule(cfg, a.options["--schedule"]);
  if (a.has("--steps")) cfg.train.steps = parse_count("--steps", a.options["--steps"]);
  check_rates(cfg);  // before the plan: --steps may be what grows a rate past float's range
  const int64_t samples = samples_of(a, cfg);
  check_async_stream(cfg);
  // A process that joins a running job (launch --join) has a stand-in
  // RANK and WORLD_SIZE until the job gives it its place.
  const char* joins = std::getenv("ACTORPIPE_JOIN");
  if (!joins || !*joins)
    check_world_divides(env, cfg.parallel.dp, cfg.pipeline.stages);  // names SLURM_NTASKS etc.; rank 0 alone says it
  // Rank 0 speaks for a multi-process run; the others stay quiet.
  const bool speaks = env.rank == 0;
  int64_t log_every = a.has("--log-every") ? parse_count("--log-every", a.options["--log-every"]) : 1;
  if (a.has("--quiet")) log_every = 0;
  imported_schedule imported;
  if (a.has("--import") && !import_order(a.options["--import"], cfg, imported, speaks)) return exit_stuck;
  if (speaks && a.has("--tensorboard")) {
    try {
      tensorboard_writer::check_writable(a.options["--tensorboard"]);
    } catch (const std::exception& e) {
      throw usage_error(std::string("--tensorboard ") + e.what());
    }
  }
  if (speaks) print_plan(cfg, env);
  if (speaks) print_lr_note(cfg);
  if (speaks && env.multi_process()) print_processes(cfg, env);
  const std::string resume = resume_of(a, cfg, env, speaks);
  const std::string digest = env.multi_process() ? run_digest(cfg, a.has("--import") ? a.options["--import"] : "") : "";
  progress_options progress;
  progress.log_every = log_every;
  progress.total_steps = cfg.train.steps;
  progress.quiet = !speaks || a.has("--quiet");
  if (speaks && a.has("--tensorboard")) progress.tensorboard = a.options["--tensorboard"];
  progress.peak_tflops = peak_tflops;
  auto out = train_one(cfg, progress, std::move(imported.order), imported.placement,
                       a.has("--verify-replicas"), resume, env, digest, std::move(imported.overlap));
  if (!speaks) return exit_ok;
  print_run(cfg, out);
  if (a.has("--verify-against-clean") && !verify_against_clean(cfg, out)) return exit_failed;
  print_results(cfg, out);
  return save_outputs(a, cfg, out, samples);
}

}  // namespace actorpipe::app
