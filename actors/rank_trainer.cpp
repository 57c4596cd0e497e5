#include "actors/rank_trainer.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <csignal>
#include <future>
#include <thread>

#include "actors/rank_context.hpp"
#include "messages/atoms.hpp"
#include "runtime/dist/transport/net_address.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe {

namespace {

using namespace rank_detail;

// -- rank 0 -----------------------------------------------------------------------

// Wires every stage, runs the driver, collects replica 0's weights.
train_output drive(caf::actor_system& sys, const config& cfg, const train_options& opts, const attempt_plan& plan,
                   const std::vector<caf::actor>& all, int64_t resumed_step, clock_type::time_point origin,
                   milliseconds timeout, run_failure& failure) {
  train_output out;
  caf::scoped_actor self{sys};
  auto driver = spawn_attempt_driver(sys, cfg, opts, plan, all, resumed_step, nullptr, origin);
  auto ok = [&] { return failure.code == run_errc::none; };
  auto on_error = [&](caf::error& err) {
    if (ok()) failure = failure_of(sys, err);
  };
  const auto S = static_cast<size_t>(plan.stages);
  // Every stage is wired at once (each copies its start into boundary
  // memory, and at dp = 1 waits for its keeper to hold it); then every
  // answer is taken.
  using wire_handle = decltype(self->request(driver, timeout, wire_atom::value, std::vector<caf::actor>{}, driver));
  std::vector<wire_handle> wired;
  for (int d = 0; d < plan.dp; ++d) {
    std::vector<caf::actor> replica(all.begin() + d * S, all.begin() + (d + 1) * S);
    for (size_t r = 0; r < S; ++r) wired.push_back(self->request(replica[r], timeout, wire_atom::value, replica, driver));
  }
  for (auto& w : wired) w.receive([] {}, on_error);
  if (ok())
    self->request(driver, caf::infinite, run_atom::value)
        .receive([&](train_result& r) { out.result = std::move(r); }, on_error);
  for (size_t r = 0; r < S && ok(); ++r)
    self->request(all[r], timeout, weights_atom::value)
        .receive(
            [&](named_params& w) {
              for (auto& p : w) out.weights.push_back(std::move(p));
            },
            on_error);
  sort_by_layer(out.weights);
  self->send_exit(driver, caf::exit_reason::user_shutdown);
  return out;
}

// Rank 0: the heal's timings, once the healed generation is ready to run.
void say_healed(const rank_context& cx, const heal_plan& hp, const generation_links& links) {
  if (!cx.opts.on_notice) return;
  const auto now = clock_type::now();
  cx.opts.on_notice("heal: generation " + std::to_string(hp.generation) + " runs from after step " +
                    std::to_string(hp.resume_after) + ": " + fmt("%.0f", ms_between(cx.failed_at, cx.asked_at)) +
                    " ms to decide, " + fmt("%.0f", ms_between(cx.asked_at, links.met_at)) +
                    " ms to the rendezvous (the new process's start), " +
                    fmt("%.0f", ms_between(links.met_at, links.grouped_at)) + " ms for the channel and groups, " +
                    fmt("%.0f", ms_between(links.grouped_at, now)) + " ms for the state and the stages");
}

// Rank 0: trains generation hp.generation with the driver (every step's
// record kept for the heal), then heals or ends the run.
generation_end lead(rank_runtime& rt, rank_context& cx, const heal_plan& hp, const config& cfg, train_options opts,
                    const resume_point& rp, const generation_links& links, const generation_peers& peers) {
  const rank_env& env = cx.env;
  const uint32_t g = hp.generation;
  caf::scoped_actor& self = cx.self;
  if (g > 0) say_healed(cx, hp, links);
  // Which processes go down is seen on their directories.
  for (int q = 1; q < env.world_size; ++q) self->monitor(peers.dirs[static_cast<size_t>(q)]);
  cx.decided.store(-2);
  opts.on_decided = [&cx](int64_t step) { cx.decided.store(step); };
  auto user_on_step = opts.on_step;
  opts.on_step = [&cx, user_on_step](const step_record& r) {
    cx.steps.push_back(r);
    cx.boundary_at = clock_type::now();
    if (user_on_step) user_on_step(r);
  };
  cx.boundary_at = clock_type::now();
  run_failure failure{run_errc::none, -1, -1, -1, {}};
  const int64_t resumed = g > 0 ? hp.resume_after : rp.ckpt.step;
  train_output out = drive(*rt.sys, cfg, opts, cx.plan, peers.all, resumed, links.origin, cx.timeout, failure);
  // The devices as the ranks that run the stages resolved them: under auto
  // on CUDA another rank's are on its own GPU, not on this one's.
  if (peers.all_on.size() == peers.all.size()) {
    const auto S = static_cast<std::ptrdiff_t>(cx.plan.stages);
    auto& res = out.result;
    res.replica_devices.clear();
    for (auto at = peers.all_on.begin(); at != peers.all_on.end(); at += S) res.replica_devices.emplace_back(at, at + S);
    res.devices = res.replica_devices.front();
  }
  return conclude(cx, rt.store, links, peers, hp, cfg, resumed, failure, std::move(out));
}

// -- ranks 1.. ----------------------------------------------------------------

// A rank other than 0: serves its stages until rank 0 says heal (the next
// generation's plan is in the store) or stop.
generation_end follow(rank_runtime& rt, rank_context& cx, const generation_links& links,
                      const generation_peers& peers) {
  const rank_env& env = cx.env;
  generation_end end;
  const served s = serve(cx.self, peers.dirs[0], links.met.endpoints[0], env);
  if (s.heal > 0) {
    end.heal = true;
    end.next = heal_plan::decode(rt.store->get(heal_key(env, s.heal)));
    return end;
  }
  rt.store->add(links.prefix + "/actorpipe/stopped", 1);  // rank 0 waits for it before it goes
  if (s.code != 0)
    throw peer_stopped(cx.where + ": stopped: rank 0 ended the run with exit code " + std::to_string(s.code), s.code);
  return end;
}

// One generation of this rank: the rendezvous, its stages from the plan's
// boundary while the channel and groups form, every rank connected, then
// lead (rank 0) or follow (the others).
generation_end run_generation(rank_runtime& rt, rank_context& cx, heal_plan hp) {
  const uint32_t g = hp.generation;
  train_options opts = cx.opts;
  opts.epoch = g;
  rendezvous_result met = meet(rt, cx, g);
  // A process started again reads the plan it was started for.
  if (g > 0 && cx.fresh) hp = heal_plan::decode(rt.store->get(heal_key(cx.env, g)));
  cx.fresh = false;
  const config cfg = without_fired(cx.cfg, hp.fired_through);
  layers_building building = build_own_layers(cx, hp, cfg);
  const generation_links links = form_links(rt, cx, g, cfg, std::move(met));
  // Where each slot starts: the config (or --resume), the newest
  // checkpoint, this process's boundary memory, or a live peer's.
  resume_point rp = cx.rp0;
  if (g > 0) {
    train_options from;
    from.resume_dir = hp.from_disk ? cfg.checkpoint.dir : std::string();
    rp = !hp.from_disk ? resume_point{} : hp.resume_after == cx.rp0.ckpt.step ? cx.rp0 : find_resume(from, nullptr);
  }
  rank_stages mine(cx.self);  // however this returns, this generation's stages are gone
  spawn_rank_stages(rt, cx, hp, cfg, opts, rp, links, std::move(building), mine);
  const generation_peers peers = connect_ranks(rt, cx, g, links, mine.actors, mine.devices);
  if (cx.env.rank != 0) return follow(rt, cx, links, peers);
  return lead(rt, cx, hp, cfg, opts, rp, links, peers);
}

train_output run_rank_in(rank_runtime& rt, const config& cfg, const train_options& opts) {
  const rank_env& env = opts.ranks;
  const auto timeout = milliseconds(static_cast<int64_t>(cfg.supervision.connect_timeout_s * 1000));
  attempt_plan plan = plan_attempt(cfg, opts);
  plan.pol = policy_for(cfg, opts);
  plan.plc = plan.pol->layout(plan.stages);
  std::string host;
  try {
    host = local_address_toward(env.master_addr, env.master_port);
  } catch (const std::exception& e) {
    throw rendezvous_error(where_of(env) + ": cannot reach the master at " + env.master_addr + ":" +
                           std::to_string(env.master_port) + ": " + e.what());
  }
  configure(rt.sc, milliseconds(static_cast<int64_t>(cfg.supervision.heartbeat_timeout_s * 1000)));
  rt.sys = std::make_unique<caf::actor_system>(rt.sc);
  caf::actor_system& sys = *rt.sys;
  caf::scoped_actor self{sys};
  const bool supervised = cfg.supervision.max_restarts > 0;
  // dp > 1: the boundary is the live state, forgotten before each update
  // (two only where a skipped step keeps the same tensors twice); at
  // dp = 1 the keepers' copies can lag (runtime/dist/boundary_memory.hpp).
  auto boundary = supervised ? std::make_shared<boundary_memory>(live_boundaries(cfg.parallel.dp) ? 2 : 4) : nullptr;
  auto dir = spawn_directory(sys, caf::actor{self}, boundary);
  struct dir_stopper {
    caf::scoped_actor& self;
    caf::actor dir;
    ~dir_stopper() { self->send_exit(dir, caf::exit_reason::user_shutdown); }
  } stop_dir{self, dir};
  auto published = sys.middleman().publish(dir, 0, nullptr, true);
  if (!published) throw rendezvous_error(where_of(env) + ": cannot publish its stages: " + sys.render(published.error()));

  rank_context cx{cfg, opts, env, where_of(env), timeout,
                  rank_placement(cfg.parallel.dp, cfg.pipeline.stages, env.world_size), std::move(plan), host, self, dir,
                  *published, find_resume(opts, nullptr), nullptr, {}, {}, {}, 0.0, clock_type::now()};
  cx.boundary = boundary;
  heal_plan hp;
  hp.generation = start_generation();
  for (;;) {
    generation_end end = run_generation(rt, cx, hp);
    if (!end.heal) {
      if (env.rank == 0 && supervised)
        merge_generations(end.out.result, std::move(cx.steps), std::move(cx.notices), opts.skip_steps,
                          end.out.result.resumed_from, cx.ledger.count(), cx.recovery_s);
      return std::move(end.out);
    }
    hp = end.next;
  }
}

}  // namespace

std::atomic<bool>& left_behind() {
  static std::atomic<bool> flag{false};
  return flag;
}

bool teardown_left_behind() { return left_behind().load(); }

train_output run_rank(const config& cfg, const train_options& opts) {
  // A peer that dies leaves sockets whose writes would raise SIGPIPE here;
  // the write's error says it instead, and the supervisor heals.
  std::signal(SIGPIPE, SIG_IGN);
  auto rt = std::make_shared<rank_runtime>();
  train_output out;
  std::exception_ptr failed;
  try {
    out = run_rank_in(*rt, cfg, opts);
  } catch (...) {
    failed = std::current_exception();
  }
  // The actor system waits for every actor it ran to be destroyed; a
  // reference left behind by a peer that went away (seen now and then in
  // runs with replicas) would hold this rank forever. The results are in
  // already, so the wait is bounded and the rest left to the process's end.
  // The actor system waits for every actor it ran to be destroyed. Now and
  // then (a few runs in a hundred) a detached stage stays referenced after
  // its peers went away, and that wait never ends. The results are in
  // already: the wait is bounded, and the process then ends without
  // running destructors (apps/main.cpp asks teardown_left_behind()).
  auto gone = std::make_shared<std::promise<void>>();
  auto waited = gone->get_future();
  std::thread([rt = std::move(rt), gone]() mutable {
    rt.reset();
    gone->set_value();
  }).detach();
  if (waited.wait_for(std::chrono::seconds(5)) != std::future_status::ready) left_behind().store(true);
  if (failed) std::rethrow_exception(failed);
  return out;
}

}  // namespace actorpipe
