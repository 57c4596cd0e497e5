// The directory a rank publishes, the connections between the ranks, and
// a rank's wait for rank 0's word (actors/process/process_context.hpp).
#include <caf/io/all.hpp>

#include <thread>

#include "actors/process/directory.hpp"
#include "runtime/util/host_memory.hpp"
#include "messages/atoms.hpp"
#include "runtime/dist/transport/poll_backoff.hpp"

namespace actorpipe::rank_detail {

namespace {

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
      // Forwarded with their sender: a worker taken over heeds only its
      // coordinator's (actors/process/worker_agent.cpp).
      [=](stop_atom, int32_t code) { self->delegate(self->state.waiter, stop_atom::value, code); },
      [=](heal_atom, uint32_t g) { self->delegate(self->state.waiter, heal_atom::value, g); },
      // A coordinator that took the run over: the waiter answers.
      [=](takeover_atom a, uint32_t epoch, std::string host, int32_t port, caf::actor dir, uint32_t generation) {
        return self->delegate(self->state.waiter, a, epoch, std::move(host), port, std::move(dir), generation);
      },
      // Rank 0, healing: after which steps this process holds slot `slot`.
      [=](held_atom, int32_t slot) {
        return self->state.boundary ? self->state.boundary->steps(slot) : std::vector<int64_t>{};
      },
      // Rank 0, healing: whose copies this process is still receiving.
      [=](arriving_atom) {
        return self->state.boundary ? self->state.boundary->arriving_from() : std::vector<int32_t>{};
      },
      // Rank 0, re-placing: the memory this process can still take.
      [=](room_atom) { return available_memory().bytes; },
  };
}

}  // namespace

caf::actor spawn_directory(caf::actor_system& sys, caf::actor waiter, std::shared_ptr<boundary_memory> boundary) {
  return sys.spawn(directory, std::move(waiter), std::move(boundary));
}

generation_peers connect_ranks(process_runtime& rt, process_context& cx, uint32_t g, const generation_links& links,
                               const std::vector<caf::actor>& mine, const std::vector<std::string>& mine_on) {
  const rank_env& env = cx.env;
  const std::string& where = cx.where;
  const std::string& prefix = links.prefix;
  caf::scoped_actor& self = cx.self;
  kv_store_ptr store = rt.store;
  generation_peers peers;
  store->add(prefix + "/actorpipe/spawned", 1);
  if (!store->wait_count(prefix + "/actorpipe/spawned", env.world_size, cx.timeout))
    throw rendezvous_error(where + ": not every rank spawned its stages within " + describe_timeout(cx.timeout));

  // One direct CAF connection per pair of ranks, opened by the higher rank
  // (both opening one at once raced in CAF's handshake: a request over the
  // connection that lost was never answered). Rank q then registers its
  // directory and stages with rank 0, which alone needs every handle (and
  // their devices, which rank 0 reports); a stage learns its neighbours
  // from rank 0's wire message.
  std::vector<caf::actor>& dirs = peers.dirs;
  dirs.resize(static_cast<size_t>(env.world_size));
  for (int q = 0; q < env.rank; ++q) {
    auto [qhost, qport] = split_endpoint(links.met.endpoints[static_cast<size_t>(q)]);
    // A peer busy starting (a process started again, on loaded cores) may
    // not finish CAF's handshake within middleman.connection-timeout (the
    // heartbeat timeout): ask again until the rendezvous's own timeout.
    auto remote = rt.sys->middleman().remote_actor(qhost, qport);
    for (const auto until = clock_type::now() + cx.timeout; !remote && clock_type::now() < until;) {
      store->check_armed();  // a generation called off (actors/process/forming.cpp)
      std::this_thread::sleep_for(milliseconds(100));
      remote = rt.sys->middleman().remote_actor(qhost, qport);
    }
    if (!remote)
      throw rendezvous_error(where + ": cannot connect to rank " + std::to_string(q) + " at " +
                             links.met.endpoints[static_cast<size_t>(q)] + ": " + rt.sys->render(remote.error()));
    dirs[static_cast<size_t>(q)] = *remote;
  }
  if (env.rank > 0) self->send(dirs[0], stages_atom::value, int32_t{env.rank}, g, cx.dir, mine, mine_on);
  // Rank 0: every stage in slot order (replica d, stage r at d S + r),
  // wherever the placement put it; the others: their own.
  std::vector<caf::actor>& all = peers.all;
  std::vector<std::string>& all_on = peers.all_on;
  all = mine;
  all_on = mine_on;
  if (env.rank == 0) {
    const auto deadline = clock_type::now() + cx.timeout;
    std::vector<caf::actor> got;  // per rank 1.., its directory, then its stages
    std::vector<std::string> got_on;
    poll_backoff wait(milliseconds(5));
    // Alone after a re-placement over one process: nobody else registers.
    while (got.empty() && env.world_size > 1) {
      if (clock_type::now() > deadline)
        throw rendezvous_error(where + ": not every rank registered its stages within " + describe_timeout(cx.timeout));
      store->check_armed();
      self->request(cx.dir, cx.timeout, stages_atom::value, int32_t{env.world_size - 1}, g)
          .receive(
              [&](std::vector<caf::actor>& v, std::vector<std::string>& on) {
                got = std::move(v);
                got_on = std::move(on);
              },
              [](caf::error&) {});
      if (got.empty()) wait.pause();
    }
    const int S = cx.places.pp();
    all.assign(static_cast<size_t>(cx.places.dp() * S), caf::actor{});
    all_on.assign(all.size(), std::string());
    size_t at = 0, on_at = 0;
    for (int q = 0; q < env.world_size; ++q) {
      if (q > 0) dirs[static_cast<size_t>(q)] = got.at(at++);
      size_t own = 0;
      for (const auto& slot : cx.places.owned(q)) {
        const auto index = static_cast<size_t>(slot.replica * S + slot.stage);
        all[index] = q == 0 ? mine.at(own) : got.at(at++);
        all_on[index] = q == 0 ? mine_on.at(own) : got_on.at(on_at++);
        ++own;
      }
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

  return peers;
}

}  // namespace actorpipe::rank_detail
