#include "actors/rank_trainer.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <unistd.h>

#include <future>
#include <map>
#include <thread>

#include "actors/attempt_setup.hpp"
#include "actors/stage_actor.hpp"
#include "messages/atoms.hpp"
#include "runtime/collectives.hpp"
#include "runtime/rank_placement.hpp"
#include "runtime/transport/kv_store.hpp"
#include "runtime/transport/net_address.hpp"
#include "runtime/transport/p2p_group.hpp"
#include "runtime/transport/rendezvous.hpp"
#include "runtime/transport/tensor_channel.hpp"

namespace actorpipe {

namespace {

using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

// -- the directory: what a rank publishes -----------------------------------------

struct directory_state {
  caf::actor waiter;  // told when rank 0 says stop
  // Rank 0: what the other ranks registered, by rank: their directory, then
  // their stages.
  std::map<int, std::vector<caf::actor>> registered;
  static inline const char* name = "rank_directory";
};

caf::behavior directory(caf::stateful_actor<directory_state>* self, caf::actor waiter) {
  self->state.waiter = std::move(waiter);
  return {
      // Rank 0: rank q registers its directory and stages.
      [=](stages_atom, int32_t rank, caf::actor dir, std::vector<caf::actor> stages) {
        stages.insert(stages.begin(), std::move(dir));
        self->state.registered[rank] = std::move(stages);
      },
      // Rank 0, locally: every registration in rank order once `ranks` came
      // (empty before).
      [=](stages_atom, int32_t ranks) {
        std::vector<caf::actor> out;
        if (static_cast<int32_t>(self->state.registered.size()) < ranks) return out;
        for (auto& [rank, actors] : self->state.registered) out.insert(out.end(), actors.begin(), actors.end());
        return out;
      },
      [=](stop_atom, int32_t code) {
        self->send(self->state.waiter, stop_atom::value, code);
      },
  };
}

// -- set-up ---------------------------------------------------------------------

// One config for every rank: the same serialization and, for the remote
// round trips of control messages, CAF's sharing scheduler (the default
// work stealing took 5x longer per round trip on 2 cores). Heartbeats on
// every node alike, so an idle healthy peer is never dropped, and a peer
// silent for `heartbeat_timeout` (stopped, or cut off) is.
void configure(caf::actor_system_config& sc, milliseconds heartbeat_timeout) {
  add_run_error_category(sc);
  add_payload_types(sc);
  sc.load<caf::io::middleman>();
  sc.set("scheduler.policy", caf::atom("sharing"));
  sc.set("scheduler.max-threads", 2);
  sc.set("middleman.heartbeat-interval", caf::timespan{milliseconds(500)});
  sc.set("middleman.connection-timeout", caf::timespan{heartbeat_timeout});
}

std::string where_of(const rank_env& env) {
  return "rank " + std::to_string(env.rank) + "/" + std::to_string(env.world_size);
}

// host:port -> (host, port)
std::pair<std::string, uint16_t> split_endpoint(const std::string& e) {
  const size_t colon = e.rfind(':');
  if (colon == std::string::npos) throw rendezvous_error("malformed endpoint '" + e + "'");
  return {e.substr(0, colon), static_cast<uint16_t>(std::stoi(e.substr(colon + 1)))};
}

// The processes of replica d's stages.
std::vector<int> processes_of(const rank_placement& places, int d) {
  std::vector<int> out;
  for (int r = 0; r < places.pp(); ++r) out.push_back(places.owner(d, r));
  return out;
}

// The allreduce group member of each of this rank's slots, over the
// replicas of its stage (ranks of the group = replica numbers), formed
// through the store. Stages in ascending order on every rank, so no two
// ranks wait on each other's next group.
std::map<int, std::shared_ptr<allreduce_group>> join_replica_groups(const rank_placement& places, int rank,
                                                                   const kv_store_ptr& store, const std::string& prefix,
                                                                   const std::string& host, milliseconds timeout) {
  std::map<int, std::shared_ptr<allreduce_group>> out;  // by slot index d * pp + r
  if (places.dp() <= 1) return out;
  const auto mine = places.owned(rank);
  for (int r = 0; r < places.pp(); ++r) {
    std::vector<int> replicas;
    for (const auto& s : mine)
      if (s.stage == r) replicas.push_back(s.replica);
    if (replicas.empty()) continue;
    auto made = join_gloo_groups(store, prefix + "/actorpipe/dp/stage_" + std::to_string(r), replicas, places.dp(),
                                 host, timeout);
    for (size_t i = 0; i < replicas.size(); ++i)
      out[replicas[i] * places.pp() + r] = std::shared_ptr<allreduce_group>(std::move(made[i]));
  }
  return out;
}

// The tie's two-rank group of each replica whose embedding and head sit on
// two stages, this rank's members by slot index; after the replica groups,
// in replica order on every rank.
std::map<int, std::shared_ptr<allreduce_group>> join_tie_groups(const rank_placement& places, int rank,
                                                               std::pair<int, int> tied, const kv_store_ptr& store,
                                                               const std::string& prefix, const std::string& host,
                                                               milliseconds timeout) {
  std::map<int, std::shared_ptr<allreduce_group>> out;
  const auto [e, h] = tied;
  if (e == h) return out;
  const auto mine = places.owned(rank);
  for (int d = 0; d < places.dp(); ++d) {
    std::vector<int> members, slots;
    for (const auto& s : mine)
      if (s.replica == d && (s.stage == e || s.stage == h)) {
        members.push_back(s.stage == e ? 0 : 1);
        slots.push_back(d * places.pp() + s.stage);
      }
    if (members.empty()) continue;
    auto made = join_gloo_groups(store, prefix + "/actorpipe/tie/replica_" + std::to_string(d), members, 2, host,
                                 timeout);
    for (size_t i = 0; i < members.size(); ++i) out[slots[i]] = std::shared_ptr<allreduce_group>(std::move(made[i]));
  }
  return out;
}

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
  for (int d = 0; d < plan.dp && ok(); ++d) {
    std::vector<caf::actor> replica(all.begin() + d * S, all.begin() + (d + 1) * S);
    for (size_t r = 0; r < S && ok(); ++r)
      self->request(replica[r], timeout, wire_atom::value, replica, driver).receive([] {}, on_error);
  }
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

// -- ranks 1.. ----------------------------------------------------------------

// Until rank 0 says stop (its exit code) or its node goes down.
int serve(caf::scoped_actor& self, const caf::actor& rank0, const std::string& rank0_at, const rank_env& env) {
  self->monitor(rank0);
  int code = -1;
  std::string lost;
  self->receive([&](stop_atom, int32_t c) { code = c; },
                [&](caf::down_msg& dm) { lost = self->system().render(dm.reason); });
  if (code >= 0) return code;
  throw rendezvous_error(where_of(env) + " lost rank 0 at " + rank0_at + " (" + lost + ")");
}

// What outlives the stage actors of a rank: the store, the channel and the
// groups they use, and the actor system, destroyed first (members go in
// reverse order), which waits for them.
struct rank_runtime {
  kv_store_ptr store;
  std::shared_ptr<tensor_channel> channel;
  std::map<int, std::shared_ptr<allreduce_group>> groups;
  std::map<int, std::shared_ptr<allreduce_group>> ties;  // the tied copies' groups, by slot
  caf::actor_system_config sc;
  std::unique_ptr<caf::actor_system> sys;
};

train_output run_rank_in(rank_runtime& rt, const config& cfg, const train_options& opts) {
  const rank_env& env = opts.ranks;
  const std::string where = where_of(env);
  const auto timeout = milliseconds(static_cast<int64_t>(cfg.supervision.connect_timeout_s * 1000));
  rank_placement places(cfg.parallel.dp, cfg.pipeline.stages, env.world_size);

  attempt_plan plan = plan_attempt(cfg, opts);
  plan.pol = policy_for(cfg, opts);
  plan.plc = plan.pol->layout(plan.stages);
  if (!plan.pol->flushes())
    throw cfg.error_at("pipeline.schedule", "schedule " + plan.pol->name() +
                                                " runs in one process only (it never flushes); start one process");
  const resume_point rp = find_resume(opts, nullptr);
  std::string host;
  try {
    host = local_address_toward(env.master_addr, env.master_port);
  } catch (const std::exception& e) {
    throw rendezvous_error(where + ": cannot reach the master at " + env.master_addr + ":" +
                           std::to_string(env.master_port) + ": " + e.what());
  }

  auto abandon = std::make_shared<std::atomic<bool>>(false);
  kv_store_ptr& store = rt.store;
  std::shared_ptr<tensor_channel>& channel = rt.channel;
  std::map<int, std::shared_ptr<allreduce_group>>& groups = rt.groups;
  configure(rt.sc, milliseconds(static_cast<int64_t>(cfg.supervision.heartbeat_timeout_s * 1000)));
  rt.sys = std::make_unique<caf::actor_system>(rt.sc);
  caf::actor_system& sys = *rt.sys;
  caf::scoped_actor self{sys};
  auto dir = sys.spawn(directory, caf::actor{self});
  std::vector<caf::actor> mine;
  // However this returns, this rank's actors are told to go (the actor
  // system waits for them), and a stage waiting in an allreduce gives up.
  struct stopper {
    caf::scoped_actor& self;
    std::vector<caf::actor>& actors;
    std::shared_ptr<std::atomic<bool>> abandon;
    ~stopper() {
      abandon->store(true);
      for (auto& a : actors) self->send_exit(a, caf::exit_reason::user_shutdown);
    }
  };
  std::vector<caf::actor> to_stop{dir};
  stopper stop_all{self, to_stop, abandon};
  auto published = sys.middleman().publish(dir, 0, nullptr, true);
  if (!published) throw rendezvous_error(where + ": cannot publish its stages: " + sys.render(published.error()));

  rendezvous_options ro;
  ro.master_addr = env.master_addr;
  ro.master_port = static_cast<uint16_t>(env.master_port);
  ro.rank = env.rank;
  ro.world_size = env.world_size;
  ro.hosts_store = env.hosts_store();
  ro.store_prefix = env.store_prefix;
  ro.timeout = timeout;
  ro.endpoint = host + ":" + std::to_string(*published);
  ro.config_digest = opts.config_digest;
  rendezvous_result met = rendezvous(ro);
  store = met.store;

  // Every rank joins the tensor channel, whether or not its own stages
  // send across processes: forming the Gloo group takes all of them.
  {
    p2p_options po;
    po.rank = env.rank;
    po.world_size = env.world_size;
    po.store = store;
    po.store_prefix = env.store_prefix + "/actorpipe/p2p";
    po.hostname = host;
    po.timeout = timeout;
    try {
      channel = std::make_shared<tensor_channel>(p2p_group::connect(po));
    } catch (const transfer_error& e) {
      throw rendezvous_error(e.what());
    }
  }
  try {
    groups = join_replica_groups(places, env.rank, store, env.store_prefix, host, timeout);
    rt.ties = join_tie_groups(places, env.rank, tied_stages(cfg, plan), store, env.store_prefix, host, timeout);
  } catch (const collective_error& e) {
    throw rendezvous_error(e.what());
  }

  // One trace time zero for every rank: rank 0's (the steady clock is the
  // host's, so ranks on one host line up; on two hosts only roughly).
  const std::string origin_key = env.store_prefix + "/actorpipe/origin_ns";
  auto origin = clock_type::now();
  if (env.rank == 0)
    store->set(origin_key, std::to_string(origin.time_since_epoch().count()));
  else
    origin = clock_type::time_point(clock_type::duration(std::stoll(store->get(origin_key))));
  // This rank's stages. Every replica's weights come from the same seed (or
  // checkpoint), so each rank builds the model and keeps its part.
  std::map<int, std::vector<layer>> layers_of;  // by replica
  for (const auto& slot : places.owned(env.rank)) {
    auto& layers = layers_of[slot.replica];
    if (layers.empty()) {
      layers = build_layers(cfg);
      load_resumed(rp, layers);
    }
    stage_setup st = stage_setup_for(cfg, opts, plan, slot.replica, slot.stage);
    const int index = slot.replica * plan.stages + slot.stage;
    if (plan.dp > 1) st.dp_group = groups.at(index);
    if (auto tie = rt.ties.find(index); tie != rt.ties.end()) st.tie_group = tie->second;
    st.abandon = abandon;
    give_layers(st, plan, layers, rp, cfg);
    st.origin = origin;
    st.process_of = processes_of(places, slot.replica);
    st.process = env.rank;
    st.channel = channel;
    mine.push_back(spawn_stage(sys, std::move(st)));
    to_stop.push_back(mine.back());
  }
  store->add(env.store_prefix + "/actorpipe/spawned", 1);
  if (!store->wait_count(env.store_prefix + "/actorpipe/spawned", env.world_size, timeout))
    throw rendezvous_error(where + ": not every rank spawned its stages within " + describe_timeout(timeout));

  // One direct CAF connection per pair of ranks, opened by the higher rank
  // (both opening one at once raced in CAF's handshake: a request over the
  // connection that lost was never answered). Rank q then registers its
  // directory and stages with rank 0, which alone needs every handle; a
  // stage learns its neighbours from rank 0's wire message.
  std::vector<caf::actor> dirs(static_cast<size_t>(env.world_size));
  for (int q = 0; q < env.rank; ++q) {
    auto [qhost, qport] = split_endpoint(met.endpoints[static_cast<size_t>(q)]);
    auto remote = sys.middleman().remote_actor(qhost, qport);
    if (!remote)
      throw rendezvous_error(where + ": cannot connect to rank " + std::to_string(q) + " at " +
                             met.endpoints[static_cast<size_t>(q)] + ": " + sys.render(remote.error()));
    dirs[static_cast<size_t>(q)] = *remote;
  }
  if (env.rank > 0) self->send(dirs[0], stages_atom::value, int32_t{env.rank}, dir, mine);
  std::vector<caf::actor> all = mine;
  if (env.rank == 0) {
    const auto deadline = clock_type::now() + timeout;
    const size_t per_rank = static_cast<size_t>(places.actors_per_rank());
    std::vector<caf::actor> got;
    while (got.empty()) {
      if (clock_type::now() > deadline)
        throw rendezvous_error(where + ": not every rank registered its stages within " + describe_timeout(timeout));
      self->request(dir, timeout, stages_atom::value, int32_t{env.world_size - 1})
          .receive([&](std::vector<caf::actor>& v) { got = std::move(v); }, [](caf::error&) {});
      if (got.empty()) std::this_thread::sleep_for(milliseconds(5));
    }
    for (int q = 1; q < env.world_size; ++q) {
      auto first = got.begin() + static_cast<std::ptrdiff_t>((q - 1) * (per_rank + 1));
      dirs[static_cast<size_t>(q)] = *first;
      all.insert(all.end(), first + 1, first + 1 + static_cast<std::ptrdiff_t>(per_rank));
    }
  }
  store->add(env.store_prefix + "/actorpipe/connected", 1);
  if (!store->wait_count(env.store_prefix + "/actorpipe/connected", env.world_size, timeout))
    throw rendezvous_error(where + ": not every rank connected to the others within " + describe_timeout(timeout));

  train_output out;
  if (env.rank != 0) {
    const int code = serve(self, dirs[0], met.endpoints[0], env);
    store->add(env.store_prefix + "/actorpipe/stopped", 1);  // rank 0 waits for it before it goes
    if (code != 0) throw peer_stopped(where + ": stopped: rank 0 ended the run with exit code " + std::to_string(code), code);
    return out;
  }
  run_failure failure{run_errc::none, -1, -1, -1, {}};
  out = drive(sys, cfg, opts, plan, all, rp.ckpt.step, origin, timeout, failure);
  const int code = failure.code == run_errc::none ? 0 : exit_code_for(failure.code);
  // Confirmed through the store, so that no stop is lost in a socket when
  // this process ends (a rank that is gone already never confirms: bounded).
  for (int q = 1; q < env.world_size; ++q) self->send(dirs[static_cast<size_t>(q)], stop_atom::value, int32_t{code});
  store->wait_count(env.store_prefix + "/actorpipe/stopped", env.world_size - 1, milliseconds(5000));
  if (failure.code != run_errc::none) throw_run_error(std::move(failure));
  out.result.allreduce = plan.dp > 1 ? "gloo" : "";
  out.result.split_backward = plan.pol->splits_backward();
  out.result.resumed_from = rp.ckpt.step;
  return out;
}

}  // namespace

std::atomic<bool>& left_behind() {
  static std::atomic<bool> flag{false};
  return flag;
}

bool teardown_left_behind() { return left_behind().load(); }

train_output run_rank(const config& cfg, const train_options& opts) {
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
