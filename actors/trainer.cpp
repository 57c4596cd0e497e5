#include "actors/trainer.hpp"

#include <caf/all.hpp>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>

#include "actors/attempt_setup.hpp"
#include "actors/driver_actor.hpp"
#include "actors/stage_actor.hpp"
#include "actors/rank_trainer.hpp"
#include "actors/supervision.hpp"
#include "messages/atoms.hpp"
#include "messages/errors.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/file_io.hpp"
#include "runtime/model.hpp"

namespace actorpipe {

caf::actor spawn_attempt_driver(caf::actor_system& sys, const config& cfg, const train_options& opts,
                                const attempt_plan& p, const std::vector<caf::actor>& stages, int64_t resumed_step,
                                std::shared_ptr<checkpoint> last_good, std::chrono::steady_clock::time_point origin) {
  config run_cfg = cfg;
  run_cfg.pipeline.partition = p.parts;
  driver_setup ds;
  ds.cfg = run_cfg;
  ds.data = p.data;
  ds.stages = stages;
  ds.dp = p.dp;
  ds.verify_replicas = opts.verify_replicas;
  ds.microbatches = p.microbatches;
  ds.epoch = opts.epoch;
  ds.origin = origin;
  ds.on_step = opts.on_step;
  ds.plc = p.plc;
  ds.async = !p.pol->flushes();
  ds.first_step = resumed_step + 1;
  ds.skip_steps = opts.skip_steps;
  ds.last_good = std::move(last_good);
  return spawn_driver(sys, std::move(ds));
}

// An error as a run failure: ours by code and fields; another category's
// (a stage's own error carries one readable string) as `failed`, with its
// string or CAF's rendering.
run_failure failure_of(const caf::actor_system& sys, const caf::error& err) {
  run_failure f;
  if (read_failure(err, f)) return f;
  f.code = run_errc::failed;
  const auto& ctx = err.context();
  f.text = ctx.match_elements<std::string>() ? ctx.get_as<std::string>(0) : sys.render(err);
  return f;
}

namespace {

// An abandoned collective still runs inside its group (until the group's
// timeout); destroying the group would wait for it. Keep every group of a
// failed attempt for the life of the process.
void keep_for_good(const replica_groups& groups) {
  static std::mutex kept_mutex;
  static auto* kept = new std::vector<replica_groups>();
  std::lock_guard<std::mutex> lock(kept_mutex);
  kept->push_back(groups);
}

// -- the actors -------------------------------------------------------------------

struct attempt_actors {
  std::vector<caf::actor> stages;  // replica d, rank r at d * stages + r
  caf::actor driver;
};

// Every replica's stages: replica 0 takes `layers` (built and resumed),
// each other one the same seeded (or resumed) weights again.
std::vector<caf::actor> spawn_stages(caf::actor_system& sys, const config& cfg, const train_options& opts,
                                     const attempt_plan& p, std::vector<layer> layers, const resume_point& rp,
                                     const replica_groups& groups, const std::shared_ptr<std::atomic<bool>>& abandon,
                                     std::chrono::steady_clock::time_point origin) {
  std::vector<caf::actor> out;
  const auto [tie_e, tie_h] = tied_stages(cfg, p);
  for (int d = 0; d < p.dp; ++d) {
    if (d > 0) {
      layers = build_layers(cfg);
      load_resumed(rp, layers);
    }
    for (int r = 0; r < p.stages; ++r) {
      stage_setup st = stage_setup_for(cfg, opts, p, d, r);
      if (p.dp > 1) st.dp_group = groups.groups[r][d];
      if (!groups.ties.empty()) {
        if (r == tie_e) st.tie_group = groups.ties[d][0];
        if (r == tie_h) st.tie_group = groups.ties[d][1];
      }
      st.abandon = abandon;
      give_layers(st, p, layers, rp, cfg);
      st.origin = origin;
      out.push_back(spawn_stage(sys, std::move(st)));
    }
  }
  return out;
}

// -- running ----------------------------------------------------------------------

struct attempt_outcome {
  train_output out;
  run_failure failure{run_errc::none, -1, -1, -1, {}};  // the first error; code none: there was none
};

// Wires every replica's stages, runs the driver, collects replica 0's
// weights (the others hold the same, --verify-replicas) and shuts the
// actors down. `on_failure` runs once the run has failed, before any actor
// is told to exit.
attempt_outcome wire_and_run(caf::actor_system& sys, const attempt_actors& actors, int stages, int dp,
                             const std::function<void()>& on_failure) {
  attempt_outcome res;
  caf::scoped_actor self{sys};
  auto ok = [&] { return res.failure.code == run_errc::none; };
  auto on_error = [&](caf::error& err) {
    if (ok()) res.failure = failure_of(sys, err);
  };
  for (int d = 0; d < dp; ++d) {
    std::vector<caf::actor> replica(actors.stages.begin() + d * stages, actors.stages.begin() + (d + 1) * stages);
    for (int r = 0; r < stages; ++r)
      self->request(replica[r], caf::infinite, wire_atom::value, replica, actors.driver).receive([] {}, on_error);
  }
  if (ok())
    self->request(actors.driver, caf::infinite, run_atom::value)
        .receive([&](train_result& r) { res.out.result = std::move(r); }, on_error);
  if (!ok()) on_failure();
  if (ok())
    for (int r = 0; r < stages; ++r)
      self->request(actors.stages[r], caf::infinite, weights_atom::value)
          .receive(
              [&](named_params& w) {
                for (auto& p : w) res.out.weights.push_back(std::move(p));
              },
              on_error);
  // Model order (layer index), whatever stage or chunk held a layer.
  sort_by_layer(res.out.weights);
  for (auto& st : actors.stages) self->send_exit(st, caf::exit_reason::user_shutdown);
  self->send_exit(actors.driver, caf::exit_reason::user_shutdown);
  return res;
}

// One attempt: a fresh actor system, stages built from `from` (a checkpoint
// in memory or on disk, or the config's initial weights), run to the end or
// to the first failure. When `last_good` is set, every step boundary is kept
// there for a restart.
train_output run_attempt(const config& cfg, const train_options& opts, const checkpoint* from,
                         std::shared_ptr<checkpoint> last_good) {
  attempt_plan plan = plan_attempt(cfg, opts);
  auto layers = build_layers(cfg);
  const resume_point rp = find_resume(opts, from);
  load_resumed(rp, layers);  // a checkpoint that does not fit is found before anything runs
  plan.pol = policy_for(cfg, opts);
  plan.plc = plan.pol->layout(plan.stages);
  const replica_groups groups = make_replica_groups(cfg, opts, plan);
  // With replicas, a failed attempt (a death, a hang) may leave stages
  // waiting in allreduces that will never complete; this tells them to give
  // up, so that the attempt can be torn down.
  auto abandon = plan.dp > 1 || !groups.ties.empty() ? std::make_shared<std::atomic<bool>>(false) : nullptr;

  caf::actor_system_config sys_cfg;
  add_run_error_category(sys_cfg);
  add_payload_types(sys_cfg);
  sys_cfg.set("scheduler.max-threads", 2);
  // An idle worker polls a while, then sleeps on a condition variable that a
  // new message wakes at once. CAF's middle phase (sleeps of 50 us between
  // polls) would add up to 100 us to each driver message at a step boundary.
  sys_cfg.set("work-stealing.moderate-poll-attempts", 0);
  caf::actor_system sys{sys_cfg};
  auto origin = std::chrono::steady_clock::now();
  attempt_actors actors;
  actors.stages = spawn_stages(sys, cfg, opts, plan, std::move(layers), rp, groups, abandon, origin);
  actors.driver = spawn_attempt_driver(sys, cfg, opts, plan, actors.stages, rp.ckpt.step, std::move(last_good), origin);

  attempt_outcome res = wire_and_run(sys, actors, plan.stages, plan.dp, [&] {
    if (!abandon) return;
    abandon->store(true);
    keep_for_good(groups);
  });
  if (res.failure.code != run_errc::none) throw_run_error(std::move(res.failure));
  res.out.result.allreduce = groups.backend;
  res.out.result.split_backward = plan.pol->splits_backward();
  res.out.result.resumed_from = rp.ckpt.step;
  return std::move(res.out);
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

namespace {

// A supervised run's result: every attempt's steps, and what the failed
// ones noticed before the boundary they rolled back to.
void merge_attempts(train_output& out, std::vector<step_record> steps, std::vector<std::string> notices,
                    const train_options& opts, int64_t resumed_after, int restarts, double recovery_s) {
  out.result.steps = std::move(steps);
  // Steps skipped for a NaN by an earlier attempt (before the boundary it
  // rolled back to) count too, and what it noticed there is reported.
  out.result.skipped_steps.clear();
  for (const auto& r : out.result.steps) {
    if (r.skipped && std::find(opts.skip_steps.begin(), opts.skip_steps.end(), r.step) == opts.skip_steps.end())
      out.result.skipped_steps.push_back(r.step);
    if (r.step <= resumed_after && !r.notice.empty()) notices.push_back(r.notice);
  }
  out.result.notices.insert(out.result.notices.begin(), notices.begin(), notices.end());
  out.result.restarts = restarts;
  out.result.recovery_s = recovery_s;
}

// Supervised: a stage that dies (or throws) takes its attempt down; the
// next attempt starts new actors from the last step boundary, so no actor
// or message of the old one survives, and re-runs the step. What happens
// after a failure is restart_ledger's decision, from the error's code.
train_output run_supervised(const config& cfg, const train_options& opts) {
  config c = cfg;
  auto last_good = std::make_shared<checkpoint>();
  std::vector<step_record> steps;
  std::vector<std::string> notices;
  restart_ledger restarts;
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
      o.epoch = static_cast<uint32_t>(restarts.count());
      auto out = run_attempt(c, o, resumed ? &from : nullptr, last_good);
      merge_attempts(out, std::move(steps), std::move(notices), opts, from.step, restarts.count(), recovery_s);
      return out;
    } catch (const run_error& e) {
      auto next = restarts.decide(e.failure(), c, last_good->step);
      if (!next.retry && next.failure.code == e.code()) throw;
      if (!next.retry) throw_run_error(std::move(next.failure));
      c.faults.inject = std::move(next.faults);
      // Steps recorded past the boundary we roll back to are re-run.
      while (!steps.empty() && steps.back().step > next.resume_after) steps.pop_back();
      // Lost: the failed step's work, from its boundary to the failure.
      const double lost = std::chrono::duration<double>(std::chrono::steady_clock::now() - boundary_at).count();
      recovery_s += lost;
      notices.push_back(restart_notice(restarts.count(), e.failure(), next.resume_after, lost));
    }
  }
}

}  // namespace

void throw_run_error(run_failure f) {
  switch (f.code) {
    case run_errc::hang: throw stuck_error(std::move(f));
    case run_errc::restart_limit: throw restart_limit_error(std::move(f));
    default: throw run_error(std::move(f));
  }
}

train_output run_training(const config& cfg, const train_options& opts) {
  if (opts.ranks.rank == 0) prepare_checkpoint_dir(cfg, opts);  // rank 0 writes the checkpoints
  if (opts.ranks.multi_process()) return run_rank(cfg, opts);
  if (cfg.supervision.max_restarts <= 0) return run_attempt(cfg, opts, nullptr, nullptr);
  return run_supervised(cfg, opts);
}

}  // namespace actorpipe
