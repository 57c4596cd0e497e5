#include "actors/supervisor/multi_process_host.hpp"
#include "actors/process/forming.hpp"
#include "actors/process/join_generation.hpp"
#include "actors/supervisor/forming_watch.hpp"
#include "actors/supervisor/heal_decision.hpp"
#include "actors/supervisor/takeover.hpp"

#include <caf/all.hpp>

#include <cstdlib>
#include <thread>

#include "actors/attempt/restart_ledger.hpp"
#include "runtime/dist/coord/run_record.hpp"
#include "runtime/dist/launch/join.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/rebalancer.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe::rank_detail {

namespace {

class multi_process_host final : public generation_host {
public:
  multi_process_host(process_runtime& rt, process_start st)
      : rt_(rt),
        self_(*rt.sys),
        cx_{st.cfg,
            st.opts,
            st.env,
            where_of(st.env),
            st.timeout,
            rank_placement::first(st.cfg.parallel.dp, st.cfg.pipeline.stages, st.env.workers(), st.env.apart),
            std::move(st.plan),
            st.host,
            self_,
            st.dir,
            st.port,
            find_resume(st.opts, nullptr),
            std::move(st.boundary)},
        record_(std::move(st.record)),
        takeover_(std::move(st.takeover)) {
    next_.generation = start_generation();
    cx_.world0 = st.env.world_size;
    if (takeover_) epoch_ = takeover_->epoch;
  }

  bool supervised() const override { return cx_.boundary != nullptr; }

  caf::duration request_timeout() const override { return caf::duration{cx_.timeout}; }

  generation start(caf::actor_system& sys, uint32_t number, supervision_log& log) override {
    (void)number;  // the heal plan numbers the generations
    train_options opts = cx_.opts;
    if (takeover_ && !took_over_) take_over_now(log);
    // A process lost while the generation forms calls it off, and the
    // next plan goes on over what is left (actors/process/forming.cpp).
    for (;;) {
      opts.epoch = next_.generation;
      std::unique_ptr<forming_watch> watch = watch_forming();
      try {
        armed arm(rt_.store, watch ? called_off_key(cx_.env, next_.generation) : "");
        gen_ = join_generation(rt_, cx_, next_, opts, [&watch] {
          if (watch) watch->commit();
        });
        break;
      } catch (...) {
        const auto grace = milliseconds(static_cast<int64_t>(cx_.cfg.supervision.heartbeat_timeout_s * 1000) + 1000);
        std::optional<forming_loss> loss = watch ? watch->lost(grace) : std::nullopt;
        if (!loss) throw;
        watch.reset();
        replan(*loss, log);
      }
    }
    const heal_plan& hp = gen_.hp;
    if (took_at_)
      say_taken_over(hp);
    else if (hp.generation > 0)
      say_healed(hp);
    took_at_.reset();
    // For the test of a coordinator lost after its generation formed but
    // before its record says so (tests/apps/etcd_coordinator_test.cpp).
    if (const char* hold = std::getenv("ACTORPIPE_TEST_HOLD_RECORD_MS"); hold && *hold && record_ && hp.generation > 0)
      std::this_thread::sleep_for(milliseconds(std::atol(hold)));
    if (record_) {
      std::string members;
      for (int q = 0; q < cx_.places.world(); ++q) members += (members.empty() ? "" : " ") + shown_rank(cx_, q);
      record_->generation(hp.generation, members, describe_placement(cx_.places), describe_partition(cx_.plan.parts),
                          hp.generation > 0 ? hp.resume_after : gen_.rp.ckpt.step,
                          takeover_state(cx_, hp, gen_.links.met.endpoints, epoch_, gen_.links.origin));
    }
    if (!joiners_told_) open_for_joiners_once();
    // Which processes go down is seen on their directories.
    for (int q = 1; q < cx_.env.world_size; ++q) self_->monitor(gen_.peers.dirs[static_cast<size_t>(q)]);
    dead_.clear();
    cx_.decided.store(-2);
    opts.on_decided = [this](int64_t step) {
      cx_.decided.store(step);
      if (record_) record_->decided(step);
    };
    // At a flush only: an async schedule has no step boundary to stop at.
    const bool joins = poll_ && cx_.plan.pol->flushes(), balances = balancing();
    // What each split measured holds for one placement only.
    if (const std::string now = cx_.places.encode(); now != measured_on_) watch_.reset(), measured_on_ = now;
    if (balances && !watch_) {
      const auto& rb = cx_.cfg.pipeline.rebalance;
      const int64_t seq = cx_.cfg.data.seq_len > 0 ? cx_.cfg.data.seq_len : 1;
      watch_.emplace(layer_compute_costs(cx_.cfg.model.layers, seq), rb.every, rb.threshold);
    }
    if (watch_) watch_->start(cx_.plan.parts);
    rebalance_.reset();
    if (joins || balances)
      opts.regroup = [this, joins, balances, lost = cx_.joiners_lost] {
        if (joins && crowded() && !live_joiner_tickets(*poll_, cx_, lost).empty()) return true;
        return balances && rebalance_due();
      };
    auto user = opts.on_step;
    const int64_t first = hp.generation > 0 ? hp.resume_after + 1 : gen_.rp.ckpt.step + 1;
    opts.on_step = [this, &log, user, balances, first](const step_record& r) {
      log.steps.push_back(r);
      log.boundary_at = clock_type::now();
      if (balances && r.step > first) watch_->add(r.step, r.step_s * 1e3, stage_busy_ms(r));  // the first warms up
      if (user) user(r);
    };
    auto user_eval = opts.on_eval;
    opts.on_eval = [&log, user_eval](const eval_record& e) {
      record_eval(log.evals, e);
      if (user_eval) user_eval(e);
    };
    log.boundary_at = clock_type::now();
    generation g;
    g.number = hp.generation;
    g.plan = cx_.plan;
    g.stages = gen_.peers.all;
    g.resumed_after = g.resumed_from = hp.generation > 0 ? hp.resume_after : gen_.rp.ckpt.step;
    g.backend = cx_.plan.dp > 1 ? (cx_.cfg.parallel.allreduce == "nccl" ? "nccl" : "gloo") : "";
    g.driver = spawn_attempt_driver(sys, gen_.cfg, opts, cx_.plan, g.stages, g.resumed_after, nullptr, gen_.links.origin);
    g.local = {g.driver};
    return g;
  }

  host_decision decide(generation& g, run_failure& f, supervision_log& log) override {
    (void)g;
    cx_.failed_at = clock_type::now();
    before_ = before_forming(cx_);
    const bool planned = f.code == run_errc::regroup;
    dead_ = planned ? std::vector<int>{} : gone_ranks(cx_, gen_.peers.dirs, gen_.links.met.endpoints);
    demonitor();
    host_decision out;
    std::optional<heal_plan> next;
    if (planned && rebalance_)
      next = repartition(cx_, rt_.store, gen_.peers, gen_.hp, rebalance_->parts, rebalance_->why, f, log);
    else if (planned)
      next = regroup(cx_, rt_.store, gen_.peers, gen_.hp, f, log);
    else
      next = heal(cx_, rt_.store, gen_.peers, gen_.hp, gen_.cfg, dead_, f, log);
    if (next) {
      next_ = *next;
      out.retry = true;
    } else {
      out.failure = f;
    }
    return out;
  }

  // Rank 0's own stages go (and are waited for, bounded); the driver is
  // the supervisor's to wait for.
  void stop(generation& g) override {
    gen_.stages.reset();
    caf::anon_send_exit(g.driver, caf::exit_reason::user_shutdown);
  }

  // The devices as the ranks that run the stages resolved them: under auto
  // on CUDA another rank's are on its own GPU, not on this one's.
  void complete(train_output& out) override {
    const auto& all = gen_.peers.all;
    const auto& on = gen_.peers.all_on;
    if (on.size() != all.size()) return;
    const auto S = static_cast<std::ptrdiff_t>(cx_.plan.stages);
    auto& res = out.result;
    res.replica_devices.clear();
    for (auto at = on.begin(); at != on.end(); at += S) res.replica_devices.emplace_back(at, at + S);
    res.devices = res.replica_devices.front();
  }

  void finish(int code) override {
    demonitor();
    if (record_) record_->finish(code);
    if (poll_) {  // the joiners not taken in hear why; the live ones have 2 s at most to read it
      const std::string why = "the run ended (exit code " + std::to_string(code) + ") before it re-placed its stages";
      close_to_joiners(*poll_, cx_.env.store_prefix, why);
      std::vector<int> live;
      for (int t : live_joiner_tickets(*poll_, cx_, cx_.joiners_lost)) live.push_back(joiner_rank(cx_.world0, t));
      for (int r : cx_.joiners_lost) place_joiner(*poll_, cx_.env.store_prefix, r, 0, why);
      turn_away_joiners(*poll_, cx_.env.store_prefix, live, why, std::chrono::milliseconds(2000));
    }
    stop_ranks(cx_, rt_.store, gen_.links, gen_.peers, dead_, code);
  }

private:
  // Takes the run over from the coordinator before (its record in etcd):
  // the plan of the first generation here. Gives up with a run_error.
  void take_over_now(supervision_log& log) {
    run_failure f;
    std::chrono::system_clock::time_point asked;
    cx_.taking_over = true;
    std::optional<heal_plan> next = take_over(cx_, rt_.store, *takeover_, f, log, asked);
    cx_.taking_over = false;
    if (!next) {
      if (record_) record_->finish(exit_code_for(f.code));
      throw_run_error(std::move(f));
    }
    next_ = *next;
    took_at_ = asked;
    took_over_ = true;
  }

  // The takeover's timings, once its generation is ready to run: from the
  // coordinator's loss (as its launcher saw it) to here.
  void say_taken_over(const heal_plan& hp) const {
    if (!cx_.opts.on_notice) return;
    using sys_clock = std::chrono::system_clock;
    const auto ms = [](sys_clock::time_point a, sys_clock::time_point b) {
      return fmt("%.0f", std::chrono::duration<double, std::milli>(b - a).count());
    };
    const auto& t = *takeover_;
    const auto now = sys_clock::now();
    // The rendezvous and the groups on this process's steady clock, put on
    // the wall clock from now.
    const auto wall = [&](clock_type::time_point p) {
      return now - std::chrono::duration_cast<sys_clock::duration>(clock_type::now() - p);
    };
    const auto& l = gen_.links;
    cx_.opts.on_notice("takeover " + std::to_string(t.epoch) + ": generation " + std::to_string(hp.generation) +
                       " runs from after step " + std::to_string(hp.resume_after) + ", " + ms(t.lost, now) +
                       (t.lost == t.expired ? std::string(" ms after the coordinator's lease expired (it stopped "
                                                          "answering, or was cut off): ")
                                            : " ms after the coordinator was lost: " + ms(t.lost, t.expired) +
                                                  (t.revoked ? " ms to revoke its lease (its process is gone), "
                                                             : " ms to its lease's expiry, ")) +
                       ms(t.expired, t.elected) + " ms for the election (the new coordinator's start), " +
                       ms(t.elected, t.stored) + " ms for the new store, " + ms(t.stored, *took_at_) +
                       " ms to reach the workers and ask what they hold, " + ms(*took_at_, wall(l.met_at)) +
                       " ms to the rendezvous, " + ms(wall(l.met_at), now) + " ms for the channel, groups and stages");
  }

  // While generation next_ forms after one that ran (gen_): its processes
  // from that one (a loss is healed as any other: over the survivors, or
  // started again by the launcher), those that joined for it, and those
  // the launcher started again for it (beating from their start).
  // Null: none to watch.
  std::unique_ptr<forming_watch> watch_forming() {
    const uint32_t g = next_.generation;
    if (g == 0 || !rt_.store || gen_.peers.dirs.empty() || !before_) return nullptr;
    std::vector<std::pair<int, caf::actor>> old;
    for (int q = 1; q < static_cast<int>(gen_.peers.dirs.size()); ++q)
      if (std::find(dead_.begin(), dead_.end(), q) == dead_.end())
        old.emplace_back(q, gen_.peers.dirs[static_cast<size_t>(q)]);
    std::vector<int> joiners;
    for (int h : next_.members)
      if (h >= cx_.world0 && std::find(before_->members.begin(), before_->members.end(), h) == before_->members.end())
        joiners.push_back(h);
    // Those started again for it.
    std::vector<std::pair<int, int>> restarted;
    for (int q : next_.replaced) {
      const int h = next_.members.empty() ? home_rank(cx_, q) : next_.members.at(static_cast<size_t>(q));
      if (h < cx_.world0) restarted.emplace_back(q, h);
    }
    if (old.empty() && joiners.empty() && restarted.empty()) return nullptr;
    if (!watch_store_) watch_store_ = open_client_store(cx_.env.master_addr, rt_.store->port(), cx_.timeout);
    // A joiner beats while it waits and while it forms; between the two
    // it starts its actor system: a second more than the heartbeat. A
    // process started again beats from its start (early_beats) and has
    // as long.
    const auto beat_limit = milliseconds(static_cast<int64_t>(cx_.cfg.supervision.heartbeat_timeout_s * 1000) + 1000);
    const std::vector<int> was = before_->members;
    return std::make_unique<forming_watch>(
        *rt_.sys, watch_store_, cx_.env, g, std::move(old), std::move(joiners), std::move(restarted),
        [was, env = cx_.opts.ranks](int q) {
          return "rank " + env.shown_text(was.empty() ? q : was.at(static_cast<size_t>(q)));
        },
        beat_limit);
  }

  // The watch called generation next_ off for `loss`: every rank puts its
  // context back as it was in gen_'s generation, and the next plan goes on
  // from there without the processes lost. Gives up (the other ranks told)
  // with a run_error when it cannot.
  void replan(const forming_loss& loss, supervision_log& log) {
    const heal_plan aborted = next_;
    // The joiners' tickets go back: those that live are taken in again at
    // a later boundary, and wait for it (actors/process/worker_agent.cpp); a lost one's is
    // skipped from now on.
    put_back(cx_, *before_);
    cx_.joined = before_->joined;
    cx_.joiners_lost.insert(loss.joiners.begin(), loss.joiners.end());
    cx_.failed_at = clock_type::now();
    cx_.spoiled = loss.passed > 0 && aborted.parts != before_->plan.parts;
    for (int q : loss.old)
      if (std::find(dead_.begin(), dead_.end(), q) == dead_.end()) dead_.push_back(q);
    std::sort(dead_.begin(), dead_.end());
    run_failure f;
    auto next = call_off(cx_, rt_.store, gen_.peers, gen_.hp, aborted, gen_.cfg, dead_, loss, f, log);
    cx_.spoiled = false;
    if (!next) {
      finish(exit_code_for(f.code));
      throw_run_error(std::move(f));
    }
    next_ = *next;
  }

  // With supervision.replace_timeout_s set and a store, the run takes
  // processes that join (runtime/dist/launch/join.hpp); the driver asks, on a
  // connection of this host's own, at every step boundary.
  void open_for_joiners_once() {
    const auto& env = cx_.env;
    if (!rt_.store) return;
    joiners_told_ = true;  // once per run: the store keeps the word
    // One that asks a run that takes none is told so at once.
    if (!supervised() || cx_.cfg.supervision.replace_timeout_s < 0) {
      refuse_joiners(*rt_.store, env.store_prefix,
                     !supervised() ? "its config sets no supervision.max_restarts, so it heals nothing"
                                   : "its config does not set supervision.replace_timeout_s");
      return;
    }
    open_for_joiners(*rt_.store, env.store_prefix, cx_.opts.config_digest, cx_.world0, env.apart);
    const std::string at = env.master_addr + ":" + std::to_string(rt_.store->port());
    poll_ = open_client_store(env.master_addr, rt_.store->port(), cx_.timeout);
    if (cx_.opts.on_notice)
      cx_.opts.on_notice(std::string(env.apart ? "the coordinator" : "rank 0") + " takes processes that join at " + at +
                         ": actorpipe launch --join " + at + " --nprocs N CONFIG");
  }

  // pipeline.rebalance: rank 0 measures every stage's busy time (the
  // slowest replica's, where there are several) and re-partitions at a
  // step boundary (runtime/model/partition.hpp).
  bool balancing() const {
    return cx_.cfg.pipeline.rebalance.every > 0 && supervised() && cx_.plan.pol->flushes() && cx_.plan.chunks == 1;
  }

  // On the driver's thread, at a step boundary: every `every` measured
  // steps, whether the layers move.
  bool rebalance_due() {
    rebalance_ = watch_->check();
    return rebalance_.has_value();
  }

  // Whether some process holds more than one slot (a joiner can take one).
  bool crowded() const {
    for (int q = 0; q < cx_.places.world(); ++q)
      if (cx_.places.owned(q).size() > 1) return true;
    return false;
  }

  void demonitor() {
    for (int q = 1; q < cx_.env.world_size && q < static_cast<int>(gen_.peers.dirs.size()); ++q)
      self_->demonitor(gen_.peers.dirs[static_cast<size_t>(q)]);
  }

  void say_healed(const heal_plan& hp) const {
    if (cx_.opts.on_notice) cx_.opts.on_notice(healed_line(cx_, gen_.links, hp));
  }

  process_runtime& rt_;
  caf::scoped_actor self_;  // this thread's: requests, monitors, stops
  process_context cx_;
  heal_plan next_;         // the generation to start next
  joined_generation gen_;  // the current one (its stages go before self_)
  std::vector<int> dead_;  // the ranks gone in the current generation
  std::optional<context_before> before_;  // cx_ while gen_ ran: put back when the next is called off
  kv_store_ptr watch_store_;  // the forming watch's own connection to the store
  kv_store_ptr poll_;      // the driver's own connection to the store (null: takes no joiners)
  bool joiners_told_ = false;  // opened for joiners, or refused them
  // pipeline.rebalance: what rank 0 measured, and the move it decided.
  std::optional<rebalancer> watch_;
  std::string measured_on_;  // the placement watch_ measured (rank_placement::encode)
  std::optional<rebalance_move> rebalance_;
  std::shared_ptr<run_record> record_;  // launch --coordinator etcd://: the run's durable record
  std::optional<takeover_start> takeover_;  // this coordinator takes the run over
  std::optional<std::chrono::system_clock::time_point> took_at_;  // until its first generation formed
  bool took_over_ = false;
  uint32_t epoch_ = 0;  // the takeovers so far
};

}  // namespace

std::unique_ptr<generation_host> make_multi_process_host(process_runtime& rt, process_start start) {
  return std::make_unique<multi_process_host>(rt, std::move(start));
}

}  // namespace actorpipe::rank_detail
