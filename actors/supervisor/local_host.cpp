#include "actors/supervisor/local_host.hpp"

#include <caf/all.hpp>

#include <mutex>
#include <optional>

#include "actors/stage/stage_actor.hpp"
#include "actors/supervisor/supervisor_actor.hpp"
#include "actors/attempt/restart_ledger.hpp"
#include "messages/errors.hpp"
#include "messages/payloads.hpp"
#include "runtime/files/checkpoint.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/partition.hpp"
#include "runtime/model/rebalancer.hpp"

namespace actorpipe {

namespace {

using clock_type = std::chrono::steady_clock;

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

class local_host final : public generation_host {
public:
  local_host(const config& cfg, const train_options& opts) : cfg_(cfg), opts_(opts) {
    supervised_ = cfg_.supervision.max_restarts > 0;
    if (supervised_) last_good_ = std::make_shared<checkpoint>();
  }

  bool supervised() const override { return supervised_; }

  generation start(caf::actor_system& sys, uint32_t number, supervision_log& log) override {
    generation g;
    g.number = number;
    train_options o = opts_;
    o.epoch = g.number;
    const bool resumed = last_good_ && last_good_->step >= 0;
    const checkpoint from = resumed ? *last_good_ : checkpoint{};
    g.resumed_after = from.step;
    log.boundary_at = clock_type::now();
    g.plan = plan_attempt(cfg_, o);
    auto layers = build_layers(cfg_);
    const resume_point rp = find_resume(o, resumed ? &from : nullptr);
    load_resumed(rp, layers);  // a checkpoint that does not fit is found before anything runs
    g.resumed_from = rp.ckpt.step;
    if (supervised_) {
      auto user = opts_.on_step;
      const bool balances = balancing(o);
      const int64_t first = rp.ckpt.step + 1;
      // Async keeps no boundary to roll back to: a restart's lost work runs
      // from the generation's start.
      const bool boundaries = policy_for(cfg_, o)->flushes();
      o.on_step = [this, &log, user, balances, first, boundaries](const step_record& r) {
        log.steps.push_back(r);
        if (boundaries) log.boundary_at = clock_type::now();
        if (balances && r.step > first) watch_->add(r.step, r.step_s * 1e3, stage_busy_ms(r));  // the first warms up
        if (user) user(r);
      };
      auto user_eval = opts_.on_eval;
      o.on_eval = [&log, user_eval](const eval_record& e) {
        record_eval(log.evals, e);
        if (user_eval) user_eval(e);
      };
      if (balances) {
        watch_->start(partition_for(cfg_));
        o.regroup = [this] {
          move_ = watch_->check();
          return move_.has_value();
        };
      }
    }
    g.plan.pol = policy_for(cfg_, o);
    g.plan.plc = g.plan.pol->layout(g.plan.stages);
    groups_ = make_replica_groups(cfg_, o, g.plan);
    g.backend = groups_.backend;
    // With replicas or a tie across stages, a failed generation (a death, a
    // hang) may leave stages waiting in collectives that never complete;
    // this tells them to give up, so that the generation can go.
    abandon_.reset();
    if (g.plan.dp > 1 || !groups_.ties.empty()) abandon_ = std::make_shared<std::atomic<bool>>(false);
    const auto origin = clock_type::now();
    g.stages = spawn_stages(sys, cfg_, o, g.plan, std::move(layers), rp, groups_, abandon_, origin);
    g.driver = spawn_attempt_driver(sys, cfg_, o, g.plan, g.stages, rp.ckpt.step, last_good_, origin);
    g.local = g.stages;
    g.local.push_back(g.driver);
    return g;
  }

  host_decision decide(generation& g, run_failure& f, supervision_log& log) override {
    host_decision out;
    if (!supervised_) {
      out.failure = f;
      return out;
    }
    if (f.code == run_errc::regroup && move_) {  // planned (pipeline.rebalance): not a restart
      const std::string line = "re-placed: generation " + std::to_string(g.number + 1) +
                               " re-partitions the layers, " + move_->why + ": layers by stage " +
                               describe_partition(partition_for(cfg_)) + " -> " + describe_partition(move_->parts) +
                               ", after step " + std::to_string(last_good_->step) +
                               "; every stage from the boundary in memory";
      cfg_.pipeline.partition = move_->parts;
      move_.reset();
      log.notices.push_back(line);
      if (opts_.on_notice) opts_.on_notice(line);
      out.retry = true;
      return out;
    }
    auto next = ledger_.decide(f, cfg_, last_good_->step);
    if (!next.retry) {
      out.failure = std::move(next.failure);
      return out;
    }
    cfg_.faults.inject = std::move(next.faults);
    // Steps recorded past the boundary we roll back to are re-run.
    auto& steps = log.steps;
    while (!steps.empty() && steps.back().step > next.resume_after) steps.pop_back();
    drop_evals_after(log.evals, next.resume_after);
    // Lost: the failed step's work, from its boundary to the failure.
    const double lost = std::chrono::duration<double>(clock_type::now() - log.boundary_at).count();
    log.recovery_s += lost;
    log.restarts = ledger_.count();
    log.notices.push_back(restart_notice(ledger_.count(), f, next.resume_after, lost));
    out.retry = true;
    return out;
  }

  // Every actor of the generation is told to go; a stage blocked in a
  // collective gives it up, and the groups are kept for good.
  void stop(generation& g) override {
    if (abandon_) {
      abandon_->store(true);
      keep_for_good(groups_);
    }
    for (auto& a : g.local) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }

private:
  // pipeline.rebalance in one process: the stages' busy times measured
  // here, the split changed at a step boundary, every stage restarting
  // from the boundary kept in memory (by parameter name: any split).
  bool balancing(const train_options& o) {
    const auto& rb = cfg_.pipeline.rebalance;
    if (rb.every <= 0 || !policy_for(cfg_, o)->flushes() || cfg_.pipeline.virtual_stages != 1) return false;
    if (!watch_) {
      const int64_t seq = cfg_.data.seq_len > 0 ? cfg_.data.seq_len : 1;
      watch_.emplace(layer_compute_costs(cfg_.model.layers, seq), rb.every, rb.threshold);
    }
    return true;
  }

  config cfg_;  // its faults shrink as restarts go; its partition moves with rebalance
  train_options opts_;
  bool supervised_ = false;
  std::shared_ptr<checkpoint> last_good_;  // the boundary in memory (supervised)
  restart_ledger ledger_;
  replica_groups groups_;  // the current generation's
  std::shared_ptr<std::atomic<bool>> abandon_;
  std::optional<rebalancer> watch_;
  std::optional<rebalance_move> move_;  // decided at the last boundary
};

}  // namespace

std::unique_ptr<generation_host> make_local_host(const config& cfg, const train_options& opts) {
  return std::make_unique<local_host>(cfg, opts);
}

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
  return supervise(sys, [&cfg, &opts] { return make_local_host(cfg, opts); }, opts);
}

}  // namespace actorpipe
