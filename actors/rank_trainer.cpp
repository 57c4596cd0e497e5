#include "actors/rank_trainer.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <c10/core/GradMode.h>

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

#include "actors/attempt_setup.hpp"
#include "actors/stage_actor.hpp"
#include "actors/supervision.hpp"
#include "messages/atoms.hpp"
#include "runtime/dist/boundary_memory.hpp"
#include "runtime/files/checkpoint.hpp"
#include "runtime/dist/collectives.hpp"
#include "runtime/dist/heal_plan.hpp"
#include "runtime/model/model.hpp"
#include "runtime/dist/rank_placement.hpp"
#include "runtime/util/text.hpp"
#include "runtime/dist/transport/kv_store.hpp"
#include "runtime/dist/transport/net_address.hpp"
#include "runtime/dist/transport/p2p_group.hpp"
#include "runtime/dist/transport/poll_backoff.hpp"
#include "runtime/dist/transport/rendezvous.hpp"
#include "runtime/dist/transport/shared_segments.hpp"
#include "runtime/dist/transport/state_transfer.hpp"
#include "runtime/dist/transport/tensor_channel.hpp"

namespace actorpipe {

namespace {

using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

// -- the directory: what a rank publishes -----------------------------------------

struct directory_state {
  caf::actor waiter;  // told when rank 0 says stop or heal
  std::shared_ptr<boundary_memory> boundary;  // this process's (null: no healing)
  // Rank 0: what the other ranks registered, by generation and rank: their
  // directory, then their stages; and each stage's device as that rank
  // resolved it (under auto on CUDA, its own cuda:LOCAL_RANK).
  std::map<uint32_t, std::map<int, std::vector<caf::actor>>> registered;
  std::map<uint32_t, std::map<int, std::vector<std::string>>> devices;
  static inline const char* name = "rank_directory";
};

caf::behavior directory(caf::stateful_actor<directory_state>* self, caf::actor waiter,
                        std::shared_ptr<boundary_memory> boundary) {
  self->state.waiter = std::move(waiter);
  self->state.boundary = std::move(boundary);
  return {
      // Rank 0: rank q registers its directory, stages and their devices
      // of generation g.
      [=](stages_atom, int32_t rank, uint32_t g, caf::actor dir, std::vector<caf::actor> stages,
          std::vector<std::string> devices) {
        stages.insert(stages.begin(), std::move(dir));
        self->state.registered[g][rank] = std::move(stages);
        self->state.devices[g][rank] = std::move(devices);
      },
      // Rank 0, locally: generation g's registrations in rank order once
      // `ranks` came (empty before), and the devices of their stages.
      [=](stages_atom, int32_t ranks, uint32_t g) {
        std::vector<caf::actor> out;
        std::vector<std::string> devices;
        auto& got = self->state.registered[g];
        if (static_cast<int32_t>(got.size()) < ranks) return std::make_tuple(out, devices);
        for (auto& [rank, actors] : got) out.insert(out.end(), actors.begin(), actors.end());
        for (auto& [rank, names] : self->state.devices[g]) devices.insert(devices.end(), names.begin(), names.end());
        return std::make_tuple(out, devices);
      },
      [=](stop_atom, int32_t code) { self->send(self->state.waiter, stop_atom::value, code); },
      [=](heal_atom, uint32_t g) { self->send(self->state.waiter, heal_atom::value, g); },
      // Rank 0, healing: after which steps this process holds slot `slot`.
      [=](held_atom, int32_t slot) {
        return self->state.boundary ? self->state.boundary->steps(slot) : std::vector<int64_t>{};
      },
      // Rank 0, healing: whose copies this process is still receiving.
      [=](arriving_atom) {
        return self->state.boundary ? self->state.boundary->arriving_from() : std::vector<int32_t>{};
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

// -- healing ----------------------------------------------------------------------

std::string heal_key(const rank_env& env, uint32_t g) {
  return env.store_prefix + "/actorpipe/heal/gen_" + std::to_string(g);
}
std::string gen_prefix(const rank_env& env, uint32_t g) {
  return g == 0 ? env.store_prefix : env.store_prefix + "/gen_" + std::to_string(g);
}

// The generation this process starts in: 0, or ACTORPIPE_GENERATION when
// the launcher started it again.
uint32_t start_generation() {
  const char* g = std::getenv("ACTORPIPE_GENERATION");
  return g && *g ? static_cast<uint32_t>(std::strtoul(g, nullptr, 10)) : 0u;
}

// Rank 0's line to the launcher (ACTORPIPE_LAUNCHER_FD); false when there
// is no launcher to hear it.
bool tell_launcher(const std::string& line) {
  const char* fd = std::getenv("ACTORPIPE_LAUNCHER_FD");
  if (!fd || !*fd) return false;
  const std::string l = line + "\n";
  return ::write(std::atoi(fd), l.data(), l.size()) == static_cast<ssize_t>(l.size());
}

// The faults a generation runs with: those that end a stage and fired in
// an earlier generation are gone.
config without_fired(const config& cfg, int64_t fired_through) {
  config c = cfg;
  c.faults.inject = faults_left(cfg.faults.inject, fired_through);
  return c;
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

// -- ranks 1.. ----------------------------------------------------------------

// Until rank 0 says stop (its exit code) or heal (the next generation), or
// its node goes down.
struct served {
  int code = -1;
  uint32_t heal = 0;  // > 0: the generation to start
};

served serve(caf::scoped_actor& self, const caf::actor& rank0, const std::string& rank0_at, const rank_env& env) {
  self->monitor(rank0);
  served out;
  std::string lost;
  bool done = false;
  while (!done)
    self->receive([&](stop_atom, int32_t c) { out.code = c, done = true; },
                  [&](heal_atom, uint32_t g) { out.heal = g, done = true; },
                  [&](caf::down_msg& dm) {
                    if (dm.source != rank0.address()) return;
                    lost = self->system().render(dm.reason);
                    done = true;
                  });
  self->demonitor(rank0);
  if (out.code >= 0 || out.heal > 0) return out;
  throw rendezvous_error(where_of(env) + " lost rank 0 at " + rank0_at + " (" + lost + ")");
}

// What outlives the stage actors of a rank: the store, every generation's
// channel and groups (an old one may still be inside a transfer or a
// collective that a dead peer never completes: kept for good), and the
// actor system, destroyed first (members go in reverse order), which waits
// for them.
struct rank_runtime {
  kv_store_ptr store;
  std::vector<std::shared_ptr<tensor_channel>> channels;
  std::vector<std::map<int, std::shared_ptr<allreduce_group>>> groups;
  caf::actor_system_config sc;
  std::unique_ptr<caf::actor_system> sys;
};

// What stays for the whole process: the actor system, this rank's
// directory, its place, and (rank 0) the supervision of every generation.
struct rank_context {
  const config& cfg;
  const train_options& opts;
  const rank_env& env;
  std::string where;
  milliseconds timeout;
  rank_placement places;
  attempt_plan plan;
  std::string host;
  caf::scoped_actor& self;
  caf::actor dir;
  uint16_t port = 0;
  resume_point rp0;  // generation 0's start (--resume)
  std::shared_ptr<boundary_memory> boundary;  // null: no healing
  // Rank 0.
  restart_ledger ledger;
  std::vector<step_record> steps;  // every generation's, up to its boundary
  std::vector<std::string> notices;
  double recovery_s = 0.0;  // work lost to restarts
  std::chrono::steady_clock::time_point boundary_at = clock_type::now();
  bool fresh = true;  // this process's first generation
  // Rank 0, healing: when the failure was seen and the replacement asked for.
  clock_type::time_point failed_at{}, asked_at{};
  // The newest step whose applies rank 0's driver sent in this generation
  // (dp > 1: every live stage will hold it).
  std::atomic<int64_t> decided{-2};
};

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The start of slot (d, r) in a healed generation: its layers and the
// optimizer copy, from `snap`.
void give_snapshot(stage_setup& st, const stage_snapshot& snap) {
  std::map<std::string, at::Tensor> by_name(snap.weights.begin(), snap.weights.end());
  c10::NoGradGuard no_grad;
  for (auto& chunk : st.layers)
    for (auto& [name, t] : chunk->named_parameters()) {
      auto it = by_name.find(name);
      if (it == by_name.end()) throw std::runtime_error("the boundary copy has no " + name);
      t.copy_(it->second);
    }
  st.optimizer_copy = snap.optimizer;
}

struct generation_end {
  bool heal = false;
  heal_plan next;
  train_output out;
};

// Every actor of this rank's generation goes, and is gone on return.
void stop_stages(caf::scoped_actor& self, std::vector<caf::actor>& stages,
                 const std::shared_ptr<std::atomic<bool>>& abandon) {
  abandon->store(true);
  for (auto& a : stages) {
    self->monitor(a);
    self->send_exit(a, caf::exit_reason::user_shutdown);
  }
  // Bounded: a stage stuck inside an op (a transfer to a peer that is gone)
  // is left to the end of the process; its messages carry an old epoch.
  size_t down = 0;
  const auto until = clock_type::now() + std::chrono::seconds(5);
  for (bool waiting = true; waiting && down < stages.size();)
    self->receive(
        [&](caf::down_msg& dm) {
          for (auto& a : stages)
            if (a && dm.source == a.address()) ++down;
        },
        caf::after(std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(until - clock_type::now()))) >>
            [&] { waiting = false; });
  stages.clear();
}

// Rank 0, after generation g failed with `f`: decide whether and how to
// heal (the next plan), or give up (nullopt; `f` says why).
std::optional<heal_plan> decide_heal(rank_context& cx, uint32_t g, run_failure& f, const std::vector<int>& dead,
                                     const heal_plan& now, const held_steps& held,
                                     const std::function<bool(bool from_dead)>& copies_arriving) {
  if (!dead.empty()) {
    std::string ranks;
    for (int q : dead) ranks += (ranks.empty() ? "" : ", ") + std::to_string(q);
    f.text += " (the process of rank " + ranks + " is gone)";
  }
  if (!cx.boundary) return std::nullopt;
  heal_plan hp;
  hp.generation = g + 1;
  hp.resume_after = cx.steps.empty() ? now.resume_after : cx.steps.back().step;
  hp.replaced = dead;
  hp.fired_through = std::max(now.fired_through, f.step);
  // dp > 1: every boundary is the live state (runtime/dist/boundary_memory.hpp),
  // and a step whose applies went out is applied by every live stage: the
  // heal rolls forward to it, once every live slot holds it.
  const bool live = live_boundaries(cx.plan.dp);
  if (live) hp.resume_after = std::max(hp.resume_after, cx.decided.load());
  // Boundaries are kept after every copy_every-th step only (at dp = 1):
  // the newest of those is the best there is. A lost stage heals from a
  // replica's memory or, at dp = 1, from its keeper's; every stage rolls
  // back to the newest boundary that all of them hold (the keeper's copy of
  // the last one may still be on its way). When there is none, everything
  // goes back to the newest checkpoint.
  const copy_rule copies{live ? 1 : cx.cfg.supervision.copy_every, g > 0 ? now.resume_after : cx.rp0.ckpt.step};
  const int64_t hoped = copies.newest_lasting(hp.resume_after);
  if (dead.empty() && !live) {
    hp.resume_after = hoped;
  } else {
    auto common = newest_common_boundary(cx.places, hp, hp.resume_after, held, copies);
    // A keeper's copy of that step may be moments from arriving: ask again
    // while some process is still receiving a copy (at most a quarter of a
    // second), then roll back to the copy before it (a copy that its dying
    // sender had not sent in full never arrives). Once some boundary is
    // common, a dead sender's copy is waited for 30 ms only: what it sent
    // in full is in by then (a stopped sender's rest would hold the wait
    // to its end). None on the way twice in a row, 10 ms apart: none is
    // coming.
    // Live (dp > 1): a stage is moments from applying the decided step
    // (or in the middle of it, holding nothing): ask again for up to 2 s;
    // an older common step could still be overwritten, so short of the
    // decided one, everything goes back to disk.
    int idle = 0;
    const auto asked = clock_type::now();
    for (const auto until = asked + milliseconds(live ? 2000 : 250);
         (!common || *common < hoped) && (live || idle < 2) && clock_type::now() < until;) {
      if (!live) idle = copies_arriving(!common || clock_type::now() < asked + milliseconds(30)) ? 0 : idle + 1;
      std::this_thread::sleep_for(milliseconds(10));
      common = newest_common_boundary(cx.places, hp, hp.resume_after, held, copies);
    }
    if (live && common && *common < hoped) common.reset();
    if (common)
      hp.resume_after = *common;
    else
      hp.from_disk = true;
  }
  if (hp.from_disk) {
    const auto& cc = cx.cfg.checkpoint;
    int64_t newest = -1;
    if (cc.every > 0) try {
        newest = load_latest_checkpoint(cc.dir).step;
      } catch (const std::exception&) {
      }
    // No checkpoint written yet: the run's own start (the config's seed,
    // or --resume's file) is the newest copy.
    hp.resume_after = std::max(newest, cx.rp0.ckpt.step);
  }
  auto decision = cx.ledger.decide(f, cx.cfg, hp.resume_after);
  if (!decision.retry) {
    f = decision.failure;
    // Every death counts: the earlier ones were healed.
    if (f.code == run_errc::restart_limit)
      for (const auto& n : cx.notices) f.text += "; before it, " + n;
    return std::nullopt;
  }
  for (int q : dead)
    if (!tell_launcher("respawn " + std::to_string(q) + " " + std::to_string(hp.generation))) {
      f.text += "; rank " + std::to_string(q) + "'s process is gone and nothing can start it again (run under "
                "`actorpipe launch` to heal it)";
      return std::nullopt;
    }
  return hp;
}

// One generation of this rank: rendezvous, channel and groups, its stages
// from the plan's boundary, then run (rank 0) or serve (the others).
generation_end run_generation(rank_runtime& rt, rank_context& cx, heal_plan hp) {
  const rank_env& env = cx.env;
  const uint32_t g = hp.generation;
  const std::string where = cx.where;
  const std::string prefix = gen_prefix(env, g);
  caf::scoped_actor& self = cx.self;
  train_options opts = cx.opts;
  opts.epoch = g;

  rendezvous_options ro;
  ro.master_addr = env.master_addr;
  ro.master_port = static_cast<uint16_t>(env.master_port);
  ro.rank = env.rank;
  ro.world_size = env.world_size;
  ro.hosts_store = env.hosts_store() && !rt.store;
  ro.store_prefix = env.store_prefix;
  ro.generation = g;
  ro.timeout = cx.timeout;
  ro.endpoint = cx.host + ":" + std::to_string(cx.port);
  ro.config_digest = opts.config_digest;
  ro.store = rt.store;
  rendezvous_result met = rendezvous(ro);
  if (!rt.store) rt.store = met.store;
  kv_store_ptr store = rt.store;
  const auto met_at = clock_type::now();
  // A process started again reads the plan it was started for.
  if (g > 0 && cx.fresh) hp = heal_plan::decode(store->get(heal_key(env, g)));
  cx.fresh = false;
  const config cfg = without_fired(cx.cfg, hp.fired_through);

  // From memory, only this process's layers are built (their weights are
  // about to be overwritten), on threads of their own while the channel
  // and the groups form; otherwise the whole model, seeded, further down.
  const bool from_memory = g > 0 && !hp.from_disk;
  std::map<int, std::future<std::vector<layer>>> building;  // by replica
  if (from_memory) {
    auto mine_only = [places = cx.places, plan = &cx.plan, rank = env.rank](int i) {
      for (const auto& slot : places.owned(rank))
        for (int c = 0; c < plan->chunks; ++c) {
          const auto& range = plan->layers_of(slot.stage, c);
          if (i >= range.first && i <= range.second) return true;
        }
      return false;
    };
    for (const auto& slot : cx.places.owned(env.rank))
      if (!building.count(slot.replica))
        building[slot.replica] = std::async(std::launch::async, [&cfg, mine_only] { return stand_in_layers(cfg, mine_only); });
  }

  // Every rank joins the tensor channel, whether or not its own stages
  // send across processes: forming the Gloo group takes all of them. At
  // dp = 1 with healing, a second one carries the boundary copies.
  auto join_channel = [&](const std::string& name) {
    p2p_options po;
    po.rank = env.rank;
    po.world_size = env.world_size;
    po.store = store;
    po.store_prefix = prefix + "/actorpipe/" + name;
    po.hostname = cx.host;
    po.timeout = cx.timeout;
    try {
      auto made = std::make_shared<tensor_channel>(p2p_group::connect(po));
      rt.channels.push_back(made);
      return made;
    } catch (const transfer_error& e) {
      throw rendezvous_error(e.what());
    }
  };
  std::shared_ptr<tensor_channel> channel = join_channel("p2p");
  const bool keeps_copies = cx.boundary && cx.plan.dp == 1 && env.world_size > 1;
  // Each rank says which machine's memory it is in (before the channel
  // forms, so every rank's is set once it has): a copy for a keeper in the
  // same one goes through shared memory.
  const std::string machine = keeps_copies ? machine_id() : std::string();
  if (keeps_copies) store->set(prefix + "/actorpipe/machine/" + std::to_string(env.rank), machine);
  std::shared_ptr<tensor_channel> copies = keeps_copies ? join_channel("copies") : nullptr;
  auto segments_for = [&](int index, int keeper_process) -> std::shared_ptr<segment_ring> {
    if (machine.empty() || store->get(prefix + "/actorpipe/machine/" + std::to_string(keeper_process)) != machine)
      return nullptr;
    // Named by run, rank, generation and slot: a process started again
    // never meets its predecessor's files, and launch removes the run's.
    // As many as the keeper's memory holds, two more for copies in flight.
    return std::make_shared<segment_ring>(shm_dir() + "/" + segment_run_id() + ".r" + std::to_string(env.rank) + ".g" +
                                              std::to_string(g) + ".s" + std::to_string(index),
                                          static_cast<size_t>(cx.boundary->depth()) + 2);
  };
  std::map<int, std::shared_ptr<allreduce_group>> groups, ties;
  try {
    groups = join_replica_groups(cx.places, env.rank, store, prefix, cx.host, cx.timeout);
    ties = join_tie_groups(cx.places, env.rank, tied_stages(cfg, cx.plan), store, prefix, cx.host, cx.timeout);
  } catch (const collective_error& e) {
    throw rendezvous_error(e.what());
  }
  rt.groups.push_back(groups);
  rt.groups.push_back(ties);
  const auto grouped_at = clock_type::now();

  // One trace time zero for every rank and generation: rank 0's first (the
  // steady clock is the host's, so ranks on one host line up; on two hosts
  // only roughly).
  const std::string origin_key = env.store_prefix + "/actorpipe/origin_ns";
  auto origin = clock_type::now();
  if (env.rank == 0 && g == 0)
    store->set(origin_key, std::to_string(origin.time_since_epoch().count()));
  else
    origin = clock_type::time_point(clock_type::duration(std::stoll(store->get(origin_key))));

  // Where each slot starts: the config (or --resume), the newest
  // checkpoint, this process's boundary memory, or a live peer's.
  resume_point rp = cx.rp0;
  if (g > 0) {
    train_options from;
    from.resume_dir = hp.from_disk ? cfg.checkpoint.dir : std::string();
    rp = !hp.from_disk ? resume_point{} : hp.resume_after == cx.rp0.ckpt.step ? cx.rp0 : find_resume(from, nullptr);
  }
  const bool replaced = g > 0 && hp.was_replaced(env.rank);
  const auto slot_key = [&](int index) { return prefix + "/actorpipe/state/slot_" + std::to_string(index); };
  // Donors send first (every transfer is posted before anyone waits).
  if (g > 0 && !hp.from_disk)
    for (int q : hp.replaced)
      for (const auto& slot : cx.places.owned(q)) {
        const donor from = donor_of(cx.places, hp, slot.replica, slot.stage);
        if (from.rank != env.rank) continue;
        auto snap = cx.boundary->at(from.index, hp.resume_after);
        if (!snap) throw rendezvous_error(where + ": no boundary copy after step " + std::to_string(hp.resume_after));
        store->set(slot_key(slot.replica * cx.plan.stages + slot.stage), send_snapshot(*channel, *snap, q, /*pack=*/true));
      }

  // A process started again posts its receives before it waits for its
  // layers: the copies travel while they are built.
  std::map<int, std::future<stage_snapshot>> arriving;
  if (replaced && from_memory)
    for (const auto& slot : cx.places.owned(env.rank)) {
      const int index = slot.replica * cx.plan.stages + slot.stage;
      auto got = std::make_shared<std::promise<stage_snapshot>>();
      arriving[index] = got->get_future();
      try {
        receive_snapshot_async(
            *channel, store->get(slot_key(index)), [got](stage_snapshot s) { got->set_value(std::move(s)); },
            [got](const std::string& why) { got->set_exception(std::make_exception_ptr(transfer_error(why))); });
      } catch (const transfer_error& e) {
        throw rendezvous_error(where + ": healing stage " + std::to_string(slot.stage) + ": " + e.what());
      }
    }

  auto abandon = std::make_shared<std::atomic<bool>>(false);
  std::vector<caf::actor> mine;
  std::vector<std::string> mine_on;  // each one's device, as this process resolved it
  std::map<int, std::vector<layer>> layers_of;  // by replica
  for (const auto& slot : cx.places.owned(env.rank)) {
    auto& layers = layers_of[slot.replica];
    if (layers.empty()) {
      layers = from_memory ? building.at(slot.replica).get() : build_layers(cfg);
      load_resumed(rp, layers);
    }
    stage_setup st = stage_setup_for(cfg, opts, cx.plan, slot.replica, slot.stage);
    const int index = slot.replica * cx.plan.stages + slot.stage;
    if (cx.plan.dp > 1) st.dp_group = groups.at(index);
    if (auto tie = ties.find(index); tie != ties.end()) st.tie_group = tie->second;
    st.abandon = abandon;
    give_layers(st, cx.plan, layers, rp, cfg);
    if (from_memory) {
      std::optional<stage_snapshot> snap;
      if (replaced) {
        try {
          snap = arriving.at(index).get();
        } catch (const transfer_error& e) {
          throw rendezvous_error(where + ": healing stage " + std::to_string(slot.stage) + ": " + e.what());
        }
        // Kept as its own: the wire finds it there (no copy of the stage).
        cx.boundary->keep(index, hp.resume_after, *snap);
      } else {
        snap = cx.boundary->at(index, hp.resume_after);
      }
      if (!snap) throw rendezvous_error(where + ": no boundary copy after step " + std::to_string(hp.resume_after));
      give_snapshot(st, *snap);
      st.start_kept = true;
    }
    st.origin = origin;
    st.process_of = processes_of(cx.places, slot.replica);
    st.process = env.rank;
    st.channel = channel;
    st.boundary = cx.boundary;
    st.resumed_after = g > 0 ? hp.resume_after : rp.ckpt.step;
    if (copies) {
      st.keeper_stage = cx.places.keeper(slot.replica, slot.stage);
      st.copy_channel = copies;
      if (st.keeper_stage >= 0)
        st.copy_segments = segments_for(index, st.process_of.at(static_cast<size_t>(st.keeper_stage)));
    }
    st.copy_every = cx.cfg.supervision.copy_every;
    st.live_boundary = cx.boundary && live_boundaries(cx.plan.dp);
    mine.push_back(spawn_stage(*rt.sys, std::move(st)));
    mine_on.push_back(cx.plan.replica_devices.at(slot.replica).at(slot.stage));
  }
  // However this returns, this generation's stages are gone.
  struct stopper {
    caf::scoped_actor& self;
    std::vector<caf::actor>& actors;
    std::shared_ptr<std::atomic<bool>> abandon;
    ~stopper() {
      if (!actors.empty()) stop_stages(self, actors, abandon);
    }
  } stop_all{self, mine, abandon};
  store->add(prefix + "/actorpipe/spawned", 1);
  if (!store->wait_count(prefix + "/actorpipe/spawned", env.world_size, cx.timeout))
    throw rendezvous_error(where + ": not every rank spawned its stages within " + describe_timeout(cx.timeout));

  // One direct CAF connection per pair of ranks, opened by the higher rank
  // (both opening one at once raced in CAF's handshake: a request over the
  // connection that lost was never answered). Rank q then registers its
  // directory and stages with rank 0, which alone needs every handle (and
  // their devices, which rank 0 reports); a stage learns its neighbours
  // from rank 0's wire message.
  std::vector<caf::actor> dirs(static_cast<size_t>(env.world_size));
  for (int q = 0; q < env.rank; ++q) {
    auto [qhost, qport] = split_endpoint(met.endpoints[static_cast<size_t>(q)]);
    // A peer busy starting (a process started again, on loaded cores) may
    // not finish CAF's handshake within middleman.connection-timeout (the
    // heartbeat timeout): ask again until the rendezvous's own timeout.
    auto remote = rt.sys->middleman().remote_actor(qhost, qport);
    for (const auto until = clock_type::now() + cx.timeout; !remote && clock_type::now() < until;) {
      std::this_thread::sleep_for(milliseconds(100));
      remote = rt.sys->middleman().remote_actor(qhost, qport);
    }
    if (!remote)
      throw rendezvous_error(where + ": cannot connect to rank " + std::to_string(q) + " at " +
                             met.endpoints[static_cast<size_t>(q)] + ": " + rt.sys->render(remote.error()));
    dirs[static_cast<size_t>(q)] = *remote;
  }
  if (env.rank > 0) self->send(dirs[0], stages_atom::value, int32_t{env.rank}, g, cx.dir, mine, mine_on);
  std::vector<caf::actor> all = mine;
  std::vector<std::string> all_on = mine_on;  // rank 0: as `all`, slot d * S + r
  if (env.rank == 0) {
    const auto deadline = clock_type::now() + cx.timeout;
    const size_t per_rank = static_cast<size_t>(cx.places.actors_per_rank());
    std::vector<caf::actor> got;
    std::vector<std::string> got_on;
    poll_backoff wait(milliseconds(5));
    while (got.empty()) {
      if (clock_type::now() > deadline)
        throw rendezvous_error(where + ": not every rank registered its stages within " + describe_timeout(cx.timeout));
      self->request(cx.dir, cx.timeout, stages_atom::value, int32_t{env.world_size - 1}, g)
          .receive(
              [&](std::vector<caf::actor>& v, std::vector<std::string>& on) {
                got = std::move(v);
                got_on = std::move(on);
              },
              [](caf::error&) {});
      if (got.empty()) wait.pause();
    }
    all_on.insert(all_on.end(), got_on.begin(), got_on.end());
    for (int q = 1; q < env.world_size; ++q) {
      auto first = got.begin() + static_cast<std::ptrdiff_t>((q - 1) * (per_rank + 1));
      dirs[static_cast<size_t>(q)] = *first;
      all.insert(all.end(), first + 1, first + 1 + static_cast<std::ptrdiff_t>(per_rank));
    }
  }
  store->add(prefix + "/actorpipe/connected", 1);
  if (!store->wait_count(prefix + "/actorpipe/connected", env.world_size, cx.timeout))
    throw rendezvous_error(where + ": not every rank connected to the others within " + describe_timeout(cx.timeout));
  // Healing from here on: rank 0's launcher waits for its "respawn";
  // another node's launcher (its first worker has the line) lets its dead
  // go, node 0 restarts them. A death before it (every rank still joining,
  // nothing kept to heal from) ends the run at once, as without
  // supervision, instead of leaving the others in the rendezvous until its
  // timeout.
  if (g == 0 && cx.boundary) tell_launcher("heal");

  generation_end end;
  if (env.rank != 0) {
    const served s = serve(self, dirs[0], met.endpoints[0], env);
    if (s.heal > 0) {
      end.heal = true;
      end.next = heal_plan::decode(store->get(heal_key(env, s.heal)));
      return end;
    }
    store->add(prefix + "/actorpipe/stopped", 1);  // rank 0 waits for it before it goes
    if (s.code != 0)
      throw peer_stopped(where + ": stopped: rank 0 ended the run with exit code " + std::to_string(s.code), s.code);
    return end;
  }

  if (g > 0 && cx.opts.on_notice) {
    const auto now = clock_type::now();
    cx.opts.on_notice("heal: generation " + std::to_string(g) + " runs from after step " +
                      std::to_string(hp.resume_after) + ": " + fmt("%.0f", ms_between(cx.failed_at, cx.asked_at)) +
                      " ms to decide, " + fmt("%.0f", ms_between(cx.asked_at, met_at)) +
                      " ms to the rendezvous (the new process's start), " + fmt("%.0f", ms_between(met_at, grouped_at)) +
                      " ms for the channel and groups, " + fmt("%.0f", ms_between(grouped_at, now)) +
                      " ms for the state and the stages");
  }
  // Rank 0: which processes go down is seen on their directories.
  for (int q = 1; q < env.world_size; ++q) self->monitor(dirs[static_cast<size_t>(q)]);
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
  end.out = drive(*rt.sys, cfg, opts, cx.plan, all, resumed, origin, cx.timeout, failure);
  // The devices as the ranks that run the stages resolved them: under auto
  // on CUDA another rank's are on its own GPU, not on this one's.
  if (all_on.size() == all.size()) {
    const auto S = static_cast<std::ptrdiff_t>(cx.plan.stages);
    auto& res = end.out.result;
    res.replica_devices.clear();
    for (auto at = all_on.begin(); at != all_on.end(); at += S) res.replica_devices.emplace_back(at, at + S);
    res.devices = res.replica_devices.front();
  }
  // The ranks whose process went (a connection lost closes every proxy of
  // it at once; wait a little for the directory's).
  std::vector<int> dead;
  cx.failed_at = clock_type::now();
  if (failure.code != run_errc::none) {
    // Up to 300 ms; 20 ms more once one is among them (the others of a
    // lost host go down with it). A failure first seen by a survivor (a
    // transfer or an allreduce with the dead) names the survivor's stage,
    // so any process gone ends the wait, not only the failed stage's.
    auto until = clock_type::now() + milliseconds(300);
    for (bool more = true; more;)
      self->receive(
          [&](caf::down_msg& dm) {
            for (int q = 1; q < env.world_size; ++q)
              if (dm.source == dirs[static_cast<size_t>(q)].address()) {
                dead.push_back(q);
                until = std::min(until, clock_type::now() + milliseconds(20));
              }
          },
          caf::after(std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(until - clock_type::now()))) >>
              [&] { more = false; });
    std::sort(dead.begin(), dead.end());
  }
  for (int q = 1; q < env.world_size; ++q) self->demonitor(dirs[static_cast<size_t>(q)]);
  // What a surviving process holds, asked through its directory (rank 0's
  // own too; nothing from a rank that does not answer).
  const auto dir_of = [&](int q) { return q == 0 ? cx.dir : dirs[static_cast<size_t>(q)]; };
  const auto ask_within = std::min(cx.timeout, milliseconds(5000));
  const held_steps held = [&](int q, int slot) {
    std::vector<int64_t> steps;
    self->request(dir_of(q), ask_within, held_atom::value, int32_t{slot})
        .receive([&](std::vector<int64_t>& v) { steps = std::move(v); }, [](caf::error&) {});
    return steps;
  };
  // Whether a surviving process is still receiving a boundary copy; from
  // a dead process only when `from_dead` (what it sent in full before it
  // died still arrives; a stopped one's rest never does, nor fails, until
  // the launcher kills it).
  const auto is_dead = [&](int q) { return std::find(dead.begin(), dead.end(), q) != dead.end(); };
  const auto copies_arriving = [&](bool from_dead) {
    for (int q = 0; q < env.world_size; ++q) {
      if (is_dead(q)) continue;
      std::vector<int32_t> from;
      self->request(dir_of(q), ask_within, arriving_atom::value)
          .receive([&](std::vector<int32_t>& v) { from = std::move(v); }, [](caf::error&) {});
      for (int32_t p : from)
        if (from_dead || !is_dead(p)) return true;
    }
    return false;
  };
  if (failure.code != run_errc::none && restartable(failure.code)) {
    if (auto next = decide_heal(cx, g, failure, dead, hp, held, copies_arriving)) {
      const run_failure& failed = failure;  // naming the processes that went
      while (!cx.steps.empty() && cx.steps.back().step > next->resume_after) cx.steps.pop_back();
      const double lost = std::chrono::duration<double>(clock_type::now() - cx.boundary_at).count();
      cx.recovery_s += lost;
      std::string how = !next->from_disk                        ? std::string("from memory")
                        : next->resume_after == cx.rp0.ckpt.step ? std::string("every stage from the run's start")
                                                                 : "every stage from the newest checkpoint, in " +
                                                                       cfg.checkpoint.dir;
      for (int q : dead) {
        how += "; started rank " + std::to_string(q) + " again";
        if (!next->from_disk)
          for (const auto& slot : cx.places.owned(q))
            how += ", its stage " + std::to_string(slot.stage) + " of replica " + std::to_string(slot.replica) +
                   " from rank " + std::to_string(donor_of(cx.places, *next, slot.replica, slot.stage).rank) +
                   "'s memory";
      }
      cx.notices.push_back(restart_notice(cx.ledger.count(), failed, next->resume_after, lost) + "; healed " + how);
      store->set(heal_key(env, next->generation), next->encode());
      cx.asked_at = clock_type::now();
      if (cx.opts.on_notice)
        cx.opts.on_notice("heal: " + failed.text + "; rolling back to after step " + std::to_string(next->resume_after) +
                          (dead.empty() ? std::string() : ", " + std::to_string(dead.size()) + " process(es) started again"));
      for (int q = 1; q < env.world_size; ++q)
        if (std::find(dead.begin(), dead.end(), q) == dead.end())
          self->send(dirs[static_cast<size_t>(q)], heal_atom::value, next->generation);
      end.heal = true;
      end.next = *next;
      return end;
    }
  }
  const int code = failure.code == run_errc::none ? 0 : exit_code_for(failure.code);
  // Confirmed through the store, so that no stop is lost in a socket when
  // this process ends; a rank that is gone never confirms (bounded).
  for (int q = 1; q < env.world_size; ++q) self->send(dirs[static_cast<size_t>(q)], stop_atom::value, int32_t{code});
  store->wait_count(prefix + "/actorpipe/stopped", env.world_size - 1 - static_cast<int>(dead.size()),
                    milliseconds(5000));
  if (failure.code != run_errc::none) throw_run_error(std::move(failure));
  end.out.result.allreduce = cx.plan.dp > 1 ? "gloo" : "";
  end.out.result.split_backward = cx.plan.pol->splits_backward();
  end.out.result.resumed_from = resumed;
  return end;
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
  auto dir = sys.spawn(directory, caf::actor{self}, boundary);
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
