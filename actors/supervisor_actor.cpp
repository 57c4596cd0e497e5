#include "actors/supervisor_actor.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <exception>
#include <mutex>
#include <optional>

#include "actors/attempt_setup.hpp"
#include "actors/stage_actor.hpp"
#include "actors/supervision.hpp"
#include "messages/atoms.hpp"
#include "messages/errors.hpp"
#include "runtime/files/checkpoint.hpp"
#include "runtime/model/model.hpp"

namespace actorpipe {

namespace {

using clock_type = std::chrono::steady_clock;
// supervisor -> itself: every actor of the generation went before the
// state that waits for them began.
using gone_atom = caf::atom_constant<caf::atom("gone")>;

// An abandoned collective still runs inside its group (until the group's
// timeout); destroying the group would wait for it. Keep every group of a
// failed generation for the life of the process.
void keep_for_good(const replica_groups& groups) {
  static std::mutex kept_mutex;
  static auto* kept = new std::vector<replica_groups>();
  std::lock_guard<std::mutex> lock(kept_mutex);
  kept->push_back(groups);
}

// Every replica's stages: replica 0 takes `layers` (built and resumed),
// each other one the same seeded (or resumed) weights again.
std::vector<caf::actor> spawn_stages(caf::actor_system& sys, const config& cfg, const train_options& opts,
                                     const attempt_plan& p, std::vector<layer> layers, const resume_point& rp,
                                     const replica_groups& groups, const std::shared_ptr<std::atomic<bool>>& abandon,
                                     clock_type::time_point origin) {
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

// What the driver's thread writes (after each step) and the supervisor
// reads once the driver has answered: the steps of every generation.
struct step_log {
  std::vector<step_record> steps;
  clock_type::time_point boundary_at = clock_type::now();  // when the last step closed
};

// One generation: its actors, the groups they share, and where it started.
struct generation {
  uint32_t number = 0;
  attempt_plan plan;
  replica_groups groups;
  std::shared_ptr<std::atomic<bool>> abandon;
  resume_point rp;
  std::vector<caf::actor> stages;  // replica d, stage r at d * stages + r
  caf::actor driver;
  std::vector<caf::actor_addr> alive;  // monitored, not down yet
  train_output out;
  int pending = 0;  // replies still awaited (wire, weights)
};

struct supervisor_state {
  config cfg;           // its faults shrink as restarts go
  train_options opts;   // the caller's
  bool supervised = false;  // supervision.max_restarts > 0
  std::shared_ptr<checkpoint> last_good;  // the boundary in memory (supervised)
  std::shared_ptr<step_log> log = std::make_shared<step_log>();
  std::vector<std::string> notices;
  restart_ledger restarts;
  double recovery_s = 0.0;
  int64_t resumed_after = -1;  // the boundary the current generation started after
  std::optional<generation> gen;
  run_failure failure{run_errc::none, -1, -1, -1, {}};  // the current generation's first
  std::shared_ptr<std::exception_ptr> thrown;  // set-up's exception, for the caller
  caf::response_promise promise;
  const char* phase = "idle";  // the behavior's name, for a debugger
  static inline const char* name = "supervisor";
};

using supervisor_ptr = caf::stateful_actor<supervisor_state>*;

caf::behavior running(supervisor_ptr self);
caf::behavior winding_down(supervisor_ptr self, const char* name, std::function<void(supervisor_ptr)> then);

// Ends the supervisor with what set-up threw: the caller rethrows it.
void fail_with_exception(supervisor_ptr self, std::exception_ptr e) {
  *self->state.thrown = std::move(e);
  self->state.promise.deliver(make_error(run_errc::failed));
  self->quit();
}

// Spawns generation `restarts.count()` from the last boundary (or the
// config's start), monitors every actor of it and wires them.
void start_generation(supervisor_ptr self) {
  auto& s = self->state;
  generation g;
  g.number = static_cast<uint32_t>(s.restarts.count());
  train_options o = s.opts;
  o.epoch = g.number;
  if (s.supervised) {
    auto log = s.log;
    auto user = s.opts.on_step;
    o.on_step = [log, user](const step_record& r) {
      log->steps.push_back(r);
      log->boundary_at = clock_type::now();
      if (user) user(r);
    };
  }
  const bool resumed = s.last_good && s.last_good->step >= 0;
  const checkpoint from = resumed ? *s.last_good : checkpoint{};
  s.resumed_after = from.step;
  s.log->boundary_at = clock_type::now();
  g.plan = plan_attempt(s.cfg, o);
  auto layers = build_layers(s.cfg);
  g.rp = find_resume(o, resumed ? &from : nullptr);
  load_resumed(g.rp, layers);  // a checkpoint that does not fit is found before anything runs
  g.plan.pol = policy_for(s.cfg, o);
  g.plan.plc = g.plan.pol->layout(g.plan.stages);
  g.groups = make_replica_groups(s.cfg, o, g.plan);
  // With replicas or a tie across stages, a failed generation (a death, a
  // hang) may leave stages waiting in collectives that never complete; this
  // tells them to give up, so that the generation can go.
  if (g.plan.dp > 1 || !g.groups.ties.empty()) g.abandon = std::make_shared<std::atomic<bool>>(false);
  const auto origin = clock_type::now();
  auto& sys = self->system();
  g.stages = spawn_stages(sys, s.cfg, o, g.plan, std::move(layers), g.rp, g.groups, g.abandon, origin);
  g.driver = spawn_attempt_driver(sys, s.cfg, o, g.plan, g.stages, g.rp.ckpt.step, s.last_good, origin);
  for (auto& a : g.stages) {
    self->monitor(a);
    g.alive.push_back(a.address());
  }
  self->monitor(g.driver);
  g.alive.push_back(g.driver.address());
  s.failure = run_failure{run_errc::none, -1, -1, -1, {}};
  s.gen = std::move(g);
}

// Every actor of the current generation is told to go.
void stop_generation(supervisor_ptr self) {
  auto& g = *self->state.gen;
  for (auto& a : g.stages) self->send_exit(a, caf::exit_reason::user_shutdown);
  self->send_exit(g.driver, caf::exit_reason::user_shutdown);
}

// The generation failed with s.failure: its stages give up their
// collectives, every actor goes, and the ledger decides what comes next.
void on_failed(supervisor_ptr self) {
  auto& s = self->state;
  auto& g = *s.gen;
  if (g.abandon) {
    g.abandon->store(true);
    keep_for_good(g.groups);
  }
  stop_generation(self);
  const run_failure f = s.failure;
  if (!s.supervised) {
    self->become(winding_down(self, "giving_up", [f](supervisor_ptr me) {
      me->state.promise.deliver(to_error(f));
      me->quit();
    }));
    return;
  }
  auto next = s.restarts.decide(f, s.cfg, s.last_good->step);
  if (!next.retry) {
    self->become(winding_down(self, "giving_up", [failure = std::move(next.failure)](supervisor_ptr me) {
      me->state.promise.deliver(to_error(failure));
      me->quit();
    }));
    return;
  }
  s.cfg.faults.inject = std::move(next.faults);
  // Steps recorded past the boundary we roll back to are re-run.
  auto& steps = s.log->steps;
  while (!steps.empty() && steps.back().step > next.resume_after) steps.pop_back();
  // Lost: the failed step's work, from its boundary to the failure.
  const double lost = std::chrono::duration<double>(clock_type::now() - s.log->boundary_at).count();
  s.recovery_s += lost;
  s.notices.push_back(restart_notice(s.restarts.count(), f, next.resume_after, lost));
  self->become(winding_down(self, "healing", [](supervisor_ptr me) {
    try {
      start_generation(me);
    } catch (...) {
      fail_with_exception(me, std::current_exception());
      return;
    }
    me->become(running(me));
  }));
}

// A reply's error, the generation's first failure: the generation ends.
void fail(supervisor_ptr self, const caf::error& err) {
  auto& s = self->state;
  if (!s.gen || s.failure.code != run_errc::none) return;
  s.failure = failure_of(self->system(), err);
  on_failed(self);
}

// Replica 0's weights (the others hold the same, --verify-replicas), in
// model order whatever stage or chunk held a layer; then every actor goes.
void collect_weights(supervisor_ptr self) {
  auto& g = *self->state.gen;
  g.pending = g.plan.stages;
  for (int r = 0; r < g.plan.stages; ++r)
    self->request(g.stages[static_cast<size_t>(r)], caf::infinite, weights_atom::value)
        .then(
            [=](named_params& w) {
              auto& gen = *self->state.gen;
              for (auto& p : w) gen.out.weights.push_back(std::move(p));
              if (--gen.pending > 0) return;
              sort_by_layer(gen.out.weights);
              stop_generation(self);
              self->become(winding_down(self, "closing", [](supervisor_ptr me) {
                auto& st = me->state;
                auto& out = st.gen->out;
                out.result.allreduce = st.gen->groups.backend;
                out.result.split_backward = st.gen->plan.pol->splits_backward();
                out.result.resumed_from = st.gen->rp.ckpt.step;
                if (st.supervised)
                  merge_generations(out.result, std::move(st.log->steps), std::move(st.notices), st.opts.skip_steps,
                                    st.resumed_after, st.restarts.count(), st.recovery_s);
                st.promise.deliver(std::move(out));
                me->quit();
              }));
            },
            [=](caf::error& err) { fail(self, err); });
}

// Wires every replica's stages, then runs the driver.
void run_generation(supervisor_ptr self) {
  auto& g = *self->state.gen;
  const int S = g.plan.stages;
  g.pending = S * g.plan.dp;
  for (int d = 0; d < g.plan.dp; ++d) {
    std::vector<caf::actor> replica(g.stages.begin() + d * S, g.stages.begin() + (d + 1) * S);
    for (int r = 0; r < S; ++r)
      self->request(replica[static_cast<size_t>(r)], caf::infinite, wire_atom::value, replica, g.driver)
          .then(
              [=] {
                auto& gen = *self->state.gen;
                if (--gen.pending > 0 || self->state.failure.code != run_errc::none) return;
                self->request(gen.driver, caf::infinite, run_atom::value)
                    .then(
                        [=](train_result& r) {
                          self->state.gen->out.result = std::move(r);
                          collect_weights(self);
                        },
                        [=](caf::error& err) { fail(self, err); });
              },
              [=](caf::error& err) { fail(self, err); });
  }
}

// An actor of the current generation went down: no longer waited for. In
// running, the driver notices a stage's death itself (it fails the run,
// naming the stage); the driver's own is a failure here.
bool forget(supervisor_ptr self, const caf::down_msg& dm) {
  auto& s = self->state;
  if (!s.gen) return false;
  auto& alive = s.gen->alive;
  auto it = std::find(alive.begin(), alive.end(), dm.source);
  if (it == alive.end()) return false;
  alive.erase(it);
  return true;
}

caf::behavior running(supervisor_ptr self) {
  self->state.phase = "running";
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& s = self->state;
    if (!forget(self, dm)) return;
    if (dm.source == s.gen->driver.address() && s.failure.code == run_errc::none) {
      s.failure = run_failure{run_errc::failed, -1, -1, -1, "the driver stopped: " + self->system().render(dm.reason)};
      on_failed(self);
    }
  });
  run_generation(self);
  return {[](run_atom) {}};  // the run is under way; a second request is ignored
}

// Waits until every actor of the generation is down, then `then`.
caf::behavior winding_down(supervisor_ptr self, const char* name, std::function<void(supervisor_ptr)> then) {
  auto finish_if_done = [=] {
    if (self->state.gen->alive.empty()) then(self);
  };
  self->set_down_handler([=](caf::down_msg& dm) {
    if (forget(self, dm)) finish_if_done();
  });
  self->state.phase = name;
  // Every actor went before this state began: act once the state is in.
  if (self->state.gen->alive.empty()) self->send(self, gone_atom::value);
  return {[=](gone_atom) { finish_if_done(); }};
}

caf::behavior idle(supervisor_ptr self, config cfg, train_options opts, std::shared_ptr<std::exception_ptr> thrown) {
  auto& s = self->state;
  s.cfg = std::move(cfg);
  s.opts = std::move(opts);
  s.thrown = std::move(thrown);
  s.supervised = s.cfg.supervision.max_restarts > 0;
  if (s.supervised) s.last_good = std::make_shared<checkpoint>();
  return {[=](run_atom) -> caf::result<train_output> {
    auto& st = self->state;
    st.promise = self->make_response_promise();
    try {
      start_generation(self);
    } catch (...) {
      fail_with_exception(self, std::current_exception());
      return st.promise;
    }
    self->become(running(self));
    return st.promise;
  }};
}

}  // namespace

train_output run_supervised(const config& cfg, const train_options& opts) {
  for (size_t i = 0; i < cfg.faults.inject.size(); ++i)
    if (const auto kind = cfg.faults.inject[i].kind; kind == fault_kind::kill_process || kind == fault_kind::stop_process)
      throw cfg.error_at("faults.inject[" + std::to_string(i) + "].kind",
                         std::string(info(kind).name) + (kind == fault_kind::kill_process ? " kills" : " stops") +
                             " the stage's whole process, and this run has one: run it under "
                             "`actorpipe launch --nprocs N` (or use kill_stage)");
  caf::actor_system_config sys_cfg;
  add_run_error_category(sys_cfg);
  add_payload_types(sys_cfg);
  sys_cfg.set("scheduler.max-threads", 2);
  // An idle worker polls a while, then sleeps on a condition variable that a
  // new message wakes at once. CAF's middle phase (sleeps of 50 us between
  // polls) would add up to 100 us to each driver message at a step boundary.
  sys_cfg.set("work-stealing.moderate-poll-attempts", 0);
  caf::actor_system sys{sys_cfg};
  auto thrown = std::make_shared<std::exception_ptr>();
  // Detached: set-up (building a generation's model and groups) blocks.
  auto sup = sys.spawn<caf::detached>(idle, cfg, opts, thrown);
  train_output out;
  run_failure failure{run_errc::none, -1, -1, -1, {}};
  {
    caf::scoped_actor self{sys};
    self->request(sup, caf::infinite, run_atom::value)
        .receive([&](train_output& o) { out = std::move(o); },
                 [&](caf::error& err) { failure = failure_of(sys, err); });
  }
  if (*thrown) std::rethrow_exception(*thrown);
  if (failure.code != run_errc::none) throw_run_error(std::move(failure));
  return out;
}

}  // namespace actorpipe
