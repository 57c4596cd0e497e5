#include "actors/trainer.hpp"

#include <caf/all.hpp>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "actors/driver_actor.hpp"
#include "actors/stage_actor.hpp"
#include "messages/atoms.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/collectives.hpp"
#include "runtime/data.hpp"
#include "runtime/file_io.hpp"
#include "runtime/model.hpp"
#include "runtime/partition.hpp"
#include "runtime/text.hpp"
#include "runtime/policies/fixed_order.hpp"

namespace actorpipe {

namespace {

// One attempt: a fresh actor system, stages built from `from` (a checkpoint
// in memory or on disk, or the config's initial weights), run to the end or
// to the first failure. When `last_good` is set, every step boundary is kept
// there for a restart.
train_output run_attempt(const config& cfg, const train_options& opts, const checkpoint* from,
                         std::shared_ptr<checkpoint> last_good) {
  auto data = std::make_shared<const dataset>(load_dataset(cfg));
  const int stages = cfg.pipeline.stages;
  const int microbatches =
      static_cast<int>(chunk_count(cfg.train.batch_size, cfg.pipeline.microbatches));

  const int chunks = cfg.pipeline.virtual_stages;
  auto parts = partition_for(cfg);  // one range per virtual stage
  auto layers = build_layers(cfg);

  // Resuming: the newest checkpoint that loads; a torn or corrupted newer
  // one is named and skipped. What a file from disk holds is bad input
  // (exit 2) when it does not fit this model; a copy in memory always does.
  checkpoint resume;
  const bool from_disk = !from && !opts.resume_dir.empty();
  auto unfit = [&](const std::string& why) -> config_error {
    return config_error((resume.path.empty() ? opts.resume_dir : resume.path) + ": " + why);
  };
  if (from) {
    resume = *from;
  } else if (from_disk) {
    std::vector<std::string> problems;
    try {
      resume = load_latest_checkpoint(opts.resume_dir, &problems);
    } catch (const std::runtime_error& e) {
      throw config_error(e.what());
    }
    for (const auto& p : problems)
      if (opts.on_notice) opts.on_notice("note: skipped " + p);
    if (opts.on_notice)
      opts.on_notice("note: resuming after step " + std::to_string(resume.step) + " from " + opts.resume_dir);
  }
  auto load_resumed = [&](std::vector<layer>& ls) {
    if (resume.step < 0) return;
    std::map<std::string, at::Tensor> by_name(resume.weights.begin(), resume.weights.end());
    size_t count = 0;
    torch::NoGradGuard no_grad;
    for (auto& l : ls)
      for (auto& [name, t] : l.parameters()) {
        const std::string key = std::to_string(l.index()) + "." + name;
        auto it = by_name.find(key);
        if (it == by_name.end() || !it->second.sizes().equals(t.sizes()))
          throw unfit("the checkpoint has no " + key + " of shape " + c10::str(t.sizes()) +
                      "; it was written for another model");
        if (from_disk && !at::isfinite(it->second).all().item<bool>())
          throw unfit("the checkpoint's " + key + " holds a NaN or an infinity");
        t.copy_(it->second);
        ++count;
      }
    if (count != by_name.size())
      throw unfit("the checkpoint holds " + std::to_string(by_name.size()) + " parameters, the model " +
                  std::to_string(count) + "; it was written for another model");
  };
  load_resumed(layers);

  const int dp = cfg.parallel.dp;
  // Every (replica, stage)'s device; a config built in code may give only
  // pipeline.devices, which then holds for every replica.
  auto replica_devices = cfg.replica_devices;
  if (static_cast<int>(replica_devices.size()) != dp) replica_devices.assign(dp, cfg.pipeline.devices);
  int threads = cfg.pipeline.intra_op_threads;
  if (threads <= 0)
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / (stages * dp));

  std::shared_ptr<const policy> pol;
  if (!opts.fixed_order.empty())
    pol = std::make_shared<fixed_order_policy>(opts.fixed_order, opts.fixed_placement);
  else
    pol = make_policy(cfg.pipeline.schedule, policy_options{chunks, cfg.pipeline.max_inflight});
  if (!pol) throw std::invalid_argument("unknown schedule " + cfg.pipeline.schedule);
  if (pol->chunks() != chunks)
    throw std::invalid_argument("schedule " + pol->name() + " runs " + std::to_string(pol->chunks()) +
                                " chunks per stage; the config has virtual_stages " + std::to_string(chunks));
  const placement plc = pol->layout(stages);

  // One allreduce group per stage rank, over that rank's replicas.
  std::vector<std::vector<std::shared_ptr<allreduce_group>>> groups(stages);  // [rank][replica]
  std::string backend;
  if (dp > 1) {
    for (int r = 0; r < stages; ++r) {
      std::vector<std::string> devs;
      for (int d = 0; d < dp; ++d) devs.push_back(replica_devices.at(d).at(r));
      allreduce_groups made;
      try {
        made = make_allreduce_groups(cfg.parallel.allreduce, devs, "stage " + std::to_string(r));
      } catch (const collective_error& e) {
        if (cfg.parallel.allreduce != "nccl") throw;
        // NCCL refuses two ranks on one device (or finds no GPU): Gloo works
        // everywhere, through host copies.
        if (opts.on_notice) opts.on_notice("note: stage " + std::to_string(r) + ": " + e.what() + "; using gloo");
        made = make_allreduce_groups("gloo", std::vector<std::string>(devs.size(), "cpu"), "stage " + std::to_string(r));
      }
      for (auto& g : made) groups[r].push_back(std::shared_ptr<allreduce_group>(std::move(g)));
      backend = groups[r].front()->backend();
      // auto on GPUs that replicas share: NCCL would refuse, so Gloo it is;
      // say so once, as the explicit nccl fallback above does. (On distinct
      // GPUs, Gloo under auto means NCCL is missing, which is another story.)
      const bool all_cuda = std::all_of(devs.begin(), devs.end(), [](const std::string& d) { return d.rfind("cuda", 0) == 0; });
      const bool shared = std::set<std::string>(devs.begin(), devs.end()).size() < devs.size();
      if (r == 0 && backend == "gloo" && cfg.parallel.allreduce == "auto" && all_cuda && shared && opts.on_notice)
        opts.on_notice("note: allreduce auto: replicas share a GPU (" + devs.front() +
                       "), and NCCL refuses two ranks on one device; using gloo");
    }
  }

  // With replicas, a failed attempt (a death, a hang) may leave stages
  // waiting in allreduces that will never complete; this tells them to give
  // up, so that the attempt can be torn down.
  auto abandon = dp > 1 ? std::make_shared<std::atomic<bool>>(false) : nullptr;

  caf::actor_system_config sys_cfg;
  sys_cfg.set("scheduler.max-threads", 2);
  // An idle worker polls a while, then sleeps on a condition variable that a
  // new message wakes at once. CAF's middle phase (sleeps of 50 us between
  // polls) would add up to 100 us to each driver message at a step boundary.
  sys_cfg.set("work-stealing.moderate-poll-attempts", 0);
  caf::actor_system sys{sys_cfg};
  auto origin = std::chrono::steady_clock::now();

  std::vector<caf::actor> stage_actors;  // replica d, rank r at d * stages + r
  for (int d = 0; d < dp; ++d) {
    if (d > 0) {
      layers = build_layers(cfg);  // the same seeded weights again
      load_resumed(layers);
    }
    const auto& devices = replica_devices.at(d);
    for (int r = 0; r < stages; ++r) {
      stage_setup st;
      st.rank = r;
      st.stages = stages;
      st.replica = d;
      if (dp > 1) st.dp_group = groups[r][d];
      st.abandon = abandon;
      st.skip_allreduce = d == opts.skip_allreduce_replica;
      st.async = !pol->flushes();
      st.step_microbatches = microbatches;
      st.steps = cfg.train.steps;
      st.train = cfg.train;
      // Async: one stream over the whole run.
      st.microbatches =
          st.async ? static_cast<int>(microbatches * std::max<int64_t>(1, cfg.train.steps)) : microbatches;
      st.batch_size = cfg.train.batch_size;
      st.device = devices[r];
      st.devices = devices;
      if (is_measuring_device(st.device)) {
        // Nothing runs on it: the layers and the tensors stay on the CPU.
        st.work = st.device == "null" ? stage_setup::work_kind::none : stage_setup::work_kind::timed;
        const auto& pc = cfg.pipeline;
        st.sim_ms[0] = pc.sim_f_ms;
        st.sim_ms[1] = pol->splits_backward() ? pc.sim_b_ms : pc.sim_b_ms + pc.sim_w_ms;
        st.sim_ms[2] = pc.sim_w_ms;
        st.device = "cpu";
        st.devices.assign(devices.size(), "cpu");
        st.shared_thread = pc.threads == "shared";
      }
      st.intra_op_threads = threads;
      st.pace_ms = cfg.pipeline.pace_ms;
      st.recompute = r < static_cast<int>(cfg.pipeline.recompute.size()) && cfg.pipeline.recompute[r];
      st.lockstep = cfg.pipeline.lockstep;
      st.seed = cfg.train.seed;
      st.pol = pol;
      st.chunks = chunks;
      st.dtype = parameter_dtype(cfg.model);
      st.optimizer = cfg.train.optimizer;
      for (const auto& f : cfg.faults.inject)
        if (info(f.kind).picks_messages || (f.stage == r && (f.replica < 0 || f.replica == d)))
          st.faults.push_back(f);
      st.fault_seed = cfg.faults.seed;
      st.op_timeout_ms = cfg.supervision.op_timeout_ms;
      std::vector<std::pair<std::string, at::Tensor>> named;
      for (int c = 0; c < chunks; ++c) {
        const auto& range = parts[plc.virtual_stage(r, c)];
        std::vector<layer> mine;
        for (int i = range.first; i <= range.second; ++i) mine.push_back(std::move(layers[i]));
        st.layers.push_back(std::make_shared<layer_stack>(std::move(mine)));
        for (auto& p : st.layers.back()->named_parameters()) named.push_back(std::move(p));
        st.layers.back()->to(st.device, st.dtype);
      }
      if (resume.step >= 0) {
        // By parameter name: a checkpoint resumes under any split into stages.
        try {
          st.optimizer_copy = optimizer_state_for(resume, named, cfg.train.optimizer.type);
        } catch (const std::invalid_argument& e) {
          if (from_disk) throw unfit(e.what());
          throw std::runtime_error(e.what());
        }
      }
      st.origin = origin;
      stage_actors.push_back(spawn_stage(sys, std::move(st)));
    }
  }

  config run_cfg = cfg;
  run_cfg.pipeline.partition = parts;
  driver_setup ds;
  ds.cfg = run_cfg;
  ds.data = data;
  ds.stages = stage_actors;
  ds.dp = dp;
  ds.verify_replicas = opts.verify_replicas;
  ds.microbatches = microbatches;
  ds.origin = origin;
  ds.on_step = opts.on_step;
  ds.plc = plc;
  ds.async = !pol->flushes();
  ds.first_step = resume.step + 1;
  ds.skip_steps = opts.skip_steps;
  ds.last_good = last_good;
  auto driver = spawn_driver(sys, std::move(ds));

  caf::scoped_actor self{sys};
  std::string failure;
  auto on_error = [&](caf::error& err) {
    if (!failure.empty()) return;
    // Our own errors carry one readable string; others get CAF's rendering.
    const auto& ctx = err.context();
    failure = ctx.match_elements<std::string>() ? ctx.get_as<std::string>(0) : sys.render(err);
  };
  for (int d = 0; d < dp; ++d) {
    std::vector<caf::actor> replica(stage_actors.begin() + d * stages, stage_actors.begin() + (d + 1) * stages);
    for (int r = 0; r < stages; ++r)
      self->request(replica[r], caf::infinite, wire_atom::value, replica, driver).receive([] {}, on_error);
  }

  train_output out;
  if (failure.empty())
    self->request(driver, caf::infinite, run_atom::value)
        .receive([&](train_result& r) { out.result = std::move(r); }, on_error);
  if (!failure.empty() && abandon) {
    abandon->store(true);
    // An abandoned collective still runs inside its group (until the group's
    // timeout); destroying the group would wait for it. Keep every group of
    // the failed attempt for the life of the process.
    static std::mutex kept_mutex;
    static auto* kept = new std::vector<std::vector<std::vector<std::shared_ptr<allreduce_group>>>>();
    std::lock_guard<std::mutex> lock(kept_mutex);
    kept->push_back(groups);
  }
  out.result.allreduce = backend;
  out.result.split_backward = pol->splits_backward();
  out.result.resumed_from = resume.step;
  if (failure.empty())
    for (int r = 0; r < stages; ++r)  // replica 0's; the others hold the same (--verify-replicas)
      self->request(stage_actors[r], caf::infinite, weights_atom::value)
          .receive(
              [&](named_params& w) {
                for (auto& p : w) out.weights.push_back(std::move(p));
              },
              on_error);
  // Model order (layer index), whatever stage or chunk held a layer.
  sort_by_layer(out.weights);
  for (auto& st : stage_actors) self->send_exit(st, caf::exit_reason::user_shutdown);
  self->send_exit(driver, caf::exit_reason::user_shutdown);
  if (failure.rfind("watchdog:", 0) == 0) throw stuck_error(failure);
  if (!failure.empty()) throw std::runtime_error(failure);
  return out;
}

}  // namespace

namespace {

// Before the first step: the checkpoint directory exists and takes files,
// and what an interrupted write left in it goes, named.
void prepare_checkpoint_dir(const config& cfg, const train_options& opts) {
  const auto& cc = cfg.checkpoint;
  if (cc.every <= 0) return;
  std::error_code ec;
  if (std::filesystem::exists(cc.dir, ec) && !std::filesystem::is_directory(cc.dir, ec))
    throw cfg.error_at("checkpoint.dir", cc.dir + ": is a file, not a directory");
  std::filesystem::create_directories(cc.dir, ec);
  if (ec) throw cfg.error_at("checkpoint.dir", cc.dir + ": cannot create the directory: " + ec.message());
  if (::access(cc.dir.c_str(), W_OK | X_OK) != 0)
    throw cfg.error_at("checkpoint.dir", cc.dir + ": cannot write in it: " + std::strerror(errno));
  for (const auto& torn : torn_temporaries(cc.dir, "step_")) {
    std::filesystem::remove(torn, ec);
    if (opts.on_notice)
      opts.on_notice("note: removed " + torn + ", a checkpoint whose write was interrupted" +
                     (ec ? " (failed: " + ec.message() + ")" : ""));
  }
}

}  // namespace

train_output run_training(const config& cfg, const train_options& opts) {
  prepare_checkpoint_dir(cfg, opts);
  if (cfg.supervision.max_restarts <= 0) return run_attempt(cfg, opts, nullptr, nullptr);

  // Supervised: a stage that dies (or throws) takes its attempt down; the
  // next attempt starts new actors from the last step boundary, so no actor
  // or message of the old one survives, and re-runs the step.
  config c = cfg;
  auto last_good = std::make_shared<checkpoint>();
  std::vector<step_record> steps;
  std::vector<std::string> notices;
  std::vector<int64_t> restarts_at;
  train_options o = opts;
  auto boundary_at = std::chrono::steady_clock::now();  // when the last step closed
  o.on_step = [&steps, &opts, &boundary_at](const step_record& r) {
    steps.push_back(r);
    boundary_at = std::chrono::steady_clock::now();
    if (opts.on_step) opts.on_step(r);
  };
  double recovery_s = 0.0;
  for (;;) {
    const bool resumed = last_good->step >= 0;
    const checkpoint from = *last_good;
    boundary_at = std::chrono::steady_clock::now();
    try {
      auto out = run_attempt(c, o, resumed ? &from : nullptr, last_good);
      out.result.steps = std::move(steps);
      // Steps skipped for a NaN by an earlier attempt (before the boundary it
      // rolled back to) count too, and what it noticed there is reported.
      out.result.skipped_steps.clear();
      for (const auto& r : out.result.steps) {
        if (r.skipped && std::find(opts.skip_steps.begin(), opts.skip_steps.end(), r.step) == opts.skip_steps.end())
          out.result.skipped_steps.push_back(r.step);
        if (r.step <= from.step && !r.notice.empty()) notices.push_back(r.notice);
      }
      out.result.notices.insert(out.result.notices.begin(), notices.begin(), notices.end());
      out.result.restarts = static_cast<int>(restarts_at.size());
      out.result.recovery_s = recovery_s;
      return out;
    } catch (const stuck_error&) {
      throw;
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      const auto at = what.find(" stopped at step ");
      if (at == std::string::npos) throw;
      const int64_t failed = std::stoll(what.substr(at + 17));
      restarts_at.push_back(failed);
      int64_t recent = 0;
      for (int64_t s : restarts_at) recent += s > failed - c.supervision.window_steps;
      if (recent > c.supervision.max_restarts)
        throw restart_limit_error(what + "; " + std::to_string(recent) + " restarts within " +
                                  std::to_string(c.supervision.window_steps) + " steps exceed supervision.max_restarts " +
                                  std::to_string(c.supervision.max_restarts) +
                                  (c.checkpoint.every > 0 ? "; the last good checkpoint is in " + c.checkpoint.dir : ""));
      // Faults of the failed step have fired; the re-run must not meet them again.
      std::vector<fault_spec> left;
      for (const auto& f : c.faults.inject)
        if (!(info(f.kind).ends_stage && f.step <= failed)) left.push_back(f);
      c.faults.inject = left;
      // Steps recorded past the boundary we roll back to are re-run.
      while (!steps.empty() && steps.back().step > last_good->step) steps.pop_back();
      // Lost: the failed step's work, from its boundary to the failure.
      const double lost = std::chrono::duration<double>(std::chrono::steady_clock::now() - boundary_at).count();
      recovery_s += lost;
      notices.push_back("restart " + std::to_string(restarts_at.size()) + ": " + what + "; rolled back to after step " +
                        std::to_string(last_good->step) + " and re-ran from step " +
                        std::to_string(last_good->step + 1) + " (" + fmt("%.1f", lost * 1e3) + " ms of work lost)");
    }
  }
}

}  // namespace actorpipe
