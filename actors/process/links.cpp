// A generation's links between the processes: the rendezvous, the tensor
// channels, the replica and tie groups (actors/process/process_context.hpp).
#include <caf/io/all.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "actors/process/links.hpp"
#include "messages/payloads.hpp"
#include "runtime/dist/transport/data_plane.hpp"
#include "runtime/dist/transport/net_address.hpp"
#include "runtime/dist/transport/p2p_group.hpp"

namespace actorpipe::rank_detail {

namespace {

// This process's members (ranks of a group of `size` that meets under
// `name`), one per slot of `slots` (replica * pp + stage): Gloo's groups,
// or NCCL's where parallel.allreduce is nccl, each member on its stage's
// CUDA device (across processes only under ACTORPIPE_NCCL_ACROSS_PROCESSES,
// until it has run on a GPU: docs/GPUS.md).
allreduce_groups join_groups(const process_context& cx, const kv_store_ptr& store, const std::string& name,
                             const std::vector<int>& members, int size, const std::vector<int>& slots) {
  if (cx.cfg.parallel.allreduce != "nccl") return join_gloo_groups(store, name, members, size, cx.host, cx.timeout);
  std::vector<int> devices;
  const int pp = cx.places.pp();
  for (int slot : slots) {
    const std::string& d = cx.plan.replica_devices.at(static_cast<size_t>(slot / pp)).at(static_cast<size_t>(slot % pp));
    if (d.rfind("cuda:", 0) != 0)
      throw collective_error("nccl group '" + name + "': stage " + std::to_string(slot % pp) + " of replica " +
                             std::to_string(slot / pp) + " is on " + d + ", not a CUDA device; use gloo");
    devices.push_back(std::atoi(d.c_str() + 5));
  }
  return join_nccl_groups(store, name, members, size, devices, cx.timeout);
}

// The allreduce group member of each of this rank's slots, over the
// replicas of its stage (ranks of the group = replica numbers), formed
// through the store. Stages in ascending order on every rank, so no two
// ranks wait on each other's next group.
std::map<int, std::shared_ptr<allreduce_group>> join_replica_groups(const process_context& cx, int rank,
                                                                   const kv_store_ptr& store,
                                                                   const std::string& prefix) {
  const rank_placement& places = cx.places;
  std::map<int, std::shared_ptr<allreduce_group>> out;  // by slot index d * pp + r
  if (places.dp() <= 1) return out;
  const auto mine = places.owned(rank);
  for (int r = 0; r < places.pp(); ++r) {
    std::vector<int> replicas, slots;
    for (const auto& s : mine)
      if (s.stage == r) {
        replicas.push_back(s.replica);
        slots.push_back(s.replica * places.pp() + r);
      }
    if (replicas.empty()) continue;
    auto made = join_groups(cx, store, prefix + "/actorpipe/dp/stage_" + std::to_string(r), replicas, places.dp(),
                            slots);
    for (size_t i = 0; i < replicas.size(); ++i)
      out[replicas[i] * places.pp() + r] = std::shared_ptr<allreduce_group>(std::move(made[i]));
  }
  return out;
}

// The tie's two-rank group of each replica whose embedding and head sit on
// two stages, this rank's members by slot index; after the replica groups,
// in replica order on every rank.
std::map<int, std::shared_ptr<allreduce_group>> join_tie_groups(const process_context& cx, int rank,
                                                               std::pair<int, int> tied, const kv_store_ptr& store,
                                                               const std::string& prefix) {
  const rank_placement& places = cx.places;
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
    auto made = join_groups(cx, store, prefix + "/actorpipe/tie/replica_" + std::to_string(d), members, 2, slots);
    for (size_t i = 0; i < members.size(); ++i) out[slots[i]] = std::shared_ptr<allreduce_group>(std::move(made[i]));
  }
  return out;
}

// The processes whose stages exchange activations and gradients with this
// rank's: the owners of neighbouring virtual stages of one replica.
std::vector<int> op_peers(const process_context& cx) {
  std::set<int> peers;
  const placement& plc = cx.plan.plc;
  const int me = cx.env.rank;
  for (int d = 0; d < cx.places.dp(); ++d)
    for (int k = 0; k + 1 < plc.count(); ++k) {
      const int a = cx.places.owner(d, plc.rank_of(k)), b = cx.places.owner(d, plc.rank_of(k + 1));
      if (a != b && a == me) peers.insert(b);
      if (a != b && b == me) peers.insert(a);
    }
  return {peers.begin(), peers.end()};
}

// Generation g's data plane: shared rings with peers on this machine, TCP
// streams with the others (or with all of them under ACTORPIPE_SHM_DISABLE).
// A ring holds two of the largest boundary records (1-64 MiB); a larger
// record streams through it.
std::shared_ptr<data_plane> join_data_plane(const process_context& cx, const kv_store_ptr& store, const std::string& prefix,
                                            uint32_t g, const config& cfg, std::string* notice) {
  data_plane_options o;
  o.rank = cx.env.rank;
  o.peers = op_peers(cx);
  o.store = store;
  o.prefix = prefix;
  o.host = cx.host;
  o.machine = machine_id();
  o.ring_stem = shm_dir() + "/" + segment_run_id() + ".dp.g" + std::to_string(g);
  const int64_t record = largest_boundary_bytes(cfg, cx.plan.parts);
  o.ring_bytes = static_cast<size_t>(std::clamp<int64_t>(2 * record, 1 << 20, 64 << 20));
  o.timeout = cx.timeout;
  try {
    return data_plane::connect(o, notice);
  } catch (const std::runtime_error& e) {
    throw rendezvous_error(e.what());
  }
}

}  // namespace

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
  if (env.apart && env.rank == 0) return "the coordinator";
  return "rank " + std::to_string(env.shown(env.rank)) + "/" + std::to_string(env.workers());
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

bool launcher_present() {
  const char* fd = std::getenv("ACTORPIPE_LAUNCHER_FD");
  return fd && *fd;
}

// The faults a generation runs with: those that end a stage and fired in
// an earlier generation are gone.
config without_fired(const config& cfg, int64_t fired_through) {
  config c = cfg;
  c.faults.inject = faults_left(cfg.faults.inject, fired_through);
  return c;
}

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

rendezvous_result meet(process_runtime& rt, process_context& cx, uint32_t g) {
  const rank_env& env = cx.env;
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
  ro.config_digest = cx.opts.config_digest;
  ro.store = rt.store;
  rendezvous_result met = rendezvous(ro);
  if (!rt.store) rt.store = met.store;
  return met;
}

generation_links form_links(process_runtime& rt, process_context& cx, uint32_t g, const config& cfg, rendezvous_result met,
                            bool hands_over) {
  const rank_env& env = cx.env;
  generation_links links;
  links.met_at = clock_type::now();
  links.met = std::move(met);
  links.prefix = gen_prefix(env, g);
  const std::string& prefix = links.prefix;
  kv_store_ptr store = rt.store;
  // Every rank joins the tensor channel, whether or not its own stages
  // send across processes: forming the Gloo group takes all of them. It
  // forms only in a generation that hands state over (a process started
  // again): every rank reads the same plan. At dp = 1 with healing, a
  // second one carries the boundary copies.
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
  if (hands_over) links.channel = join_channel("p2p");
  std::string notice;  // a shared ring that could not be had: said once
  links.plane = join_data_plane(cx, store, prefix, g, cfg, &notice);
  if (!notice.empty()) std::fprintf(stderr, "%s: %s\n", cx.where.c_str(), notice.c_str());
  const bool keeps_copies = cx.boundary && cx.plan.dp == 1 && env.world_size > 1;
  // Each rank says which machine's memory it is in (before the channel
  // forms, so every rank's is set once it has): a copy for a keeper in the
  // same one goes through shared memory.
  links.machine = keeps_copies ? machine_id() : std::string();
  if (keeps_copies) store->set(prefix + "/actorpipe/machine/" + std::to_string(env.rank), links.machine);
  // Each stage's keeper on another host where there is one
  // (rank_placement::keeper): every rank numbers the hosts alike.
  // A machine not known anywhere (ACTORPIPE_SHM_DISABLE): no hosts, on
  // every rank alike.
  std::vector<int> hosts;
  if (keeps_copies) {
    std::vector<std::string> seen;
    bool unknown = false;
    for (int q = 0; q < cx.places.world(); ++q) {
      if (cx.places.owned(q).empty()) {  // holds no stage: keeps no copy
        links.machines.emplace_back();
        hosts.push_back(-1);
        continue;
      }
      const std::string& m = links.machines.emplace_back(
          q == env.rank ? links.machine : store->get(prefix + "/actorpipe/machine/" + std::to_string(q)));
      unknown = unknown || m.empty();
      const auto at = std::find(seen.begin(), seen.end(), m);
      hosts.push_back(static_cast<int>(at - seen.begin()));
      if (at == seen.end()) seen.push_back(m);
    }
    if (unknown || seen.size() < 2) hosts.clear();  // one host: the rule without hosts
  }
  cx.places.set_hosts(std::move(hosts));
  links.copies = keeps_copies ? join_channel("copies") : nullptr;
  try {
    links.groups = join_replica_groups(cx, env.rank, store, prefix);
    links.ties = join_tie_groups(cx, env.rank, tied_stages(cfg, cx.plan), store, prefix);
  } catch (const collective_error& e) {
    throw rendezvous_error(e.what());
  }
  rt.groups.push_back(links.groups);
  rt.groups.push_back(links.ties);
  links.grouped_at = clock_type::now();

  // One trace time zero for every rank and generation: rank 0's first (the
  // steady clock is the host's, so ranks on one host line up; on two hosts
  // only roughly).
  const std::string origin_key = env.store_prefix + "/actorpipe/origin_ns";
  links.origin = clock_type::now();
  if (env.rank == 0 && g == 0)
    store->set(origin_key, std::to_string(links.origin.time_since_epoch().count()));
  else
    links.origin = clock_type::time_point(clock_type::duration(std::stoll(store->get(origin_key))));
  return links;
}

std::shared_ptr<segment_ring> segments_for(process_context& cx, const kv_store_ptr& store, const generation_links& links,
                                           uint32_t g, int index, int keeper_process, bool keeper_restarted,
                                           std::map<std::pair<int, int>, std::shared_ptr<segment_ring>>& rings) {
  if (links.machine.empty() || links.machines.at(static_cast<size_t>(keeper_process)) != links.machine)
    return nullptr;
  const std::pair<int, int> key{index, keeper_process};
  std::shared_ptr<segment_ring>& ring = cx.copy_rings[key];
  // The last generation's stage let go of it (use_count: only `rings`).
  if (auto it = rings.find(key); it != rings.end() && !keeper_restarted && it->second.use_count() == 1)
    return ring = std::move(it->second);
  // Named by run, rank, generation and slot: a process started again
  // never meets its predecessor's files, and launch removes the run's.
  // As many as the keeper's memory holds, two more for copies in flight.
  return ring = std::make_shared<segment_ring>(shm_dir() + "/" + segment_run_id() + ".r" +
                                                   std::to_string(cx.env.rank) + ".g" + std::to_string(g) + ".s" +
                                                   std::to_string(index),
                                               static_cast<size_t>(cx.boundary->depth()) + 2);
}

void adopt_spare_segments(process_context& cx, std::map<std::pair<int, int>, std::shared_ptr<segment_ring>>& rings) {
  for (const bool own_slot : {true, false})
    for (auto& [key, ring] : cx.copy_rings) {
      if (!ring || ring->size() > 0) continue;
      for (auto& [was, old] : rings)
        if (old && old.use_count() == 1 && (was.first == key.first) == own_slot) ring->adopt_free(*old);
    }
}

}  // namespace actorpipe::rank_detail
