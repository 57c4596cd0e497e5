// A coordinator that takes a run over (launch --coordinator etcd://): the
// one before was lost, its lease in etcd expired, and this one won the
// election (runtime/dist/coord/run_record.hpp). Its own store is new; the
// workers still live, each with its boundary memory, waiting for it
// (actors/process/worker_agent.cpp). It reads the generation they ran from the
// record, reaches every worker's directory, hands each the new store,
// and heals as after any failure: every stage rolls to the newest
// boundary all of them hold (actors/process/process_context.hpp).
#include <caf/io/all.hpp>

#include <future>
#include <nlohmann/json.hpp>

#include "actors/supervisor/takeover.hpp"
#include "actors/supervisor/heal_decision.hpp"
#include "actors/attempt/run_options.hpp"
#include "messages/atoms.hpp"
#include "runtime/dist/transport/rendezvous.hpp"

namespace actorpipe::rank_detail {

namespace {
using json = nlohmann::json;
}  // namespace

std::string takeover_state(const process_context& cx, const heal_plan& hp, const std::vector<std::string>& endpoints,
                           uint32_t epoch, clock_type::time_point origin) {
  json t = {{"plan", hp.encode()},   {"places", cx.places.encode()}, {"homes", cx.members},
            {"world0", cx.world0},   {"joined", cx.joined},          {"dirs", endpoints},
            {"epoch", epoch},        {"origin_ns", origin.time_since_epoch().count()}};
  return t.dump();
}

std::optional<heal_plan> take_over(process_context& cx, const kv_store_ptr& store, const takeover_start& t,
                                   run_failure& failure, supervision_log& log,
                                   std::chrono::system_clock::time_point& asked) {
  failure = run_failure{run_errc::coordinator_lost, -1, -1, -1, ""};
  json r, s;
  try {
    r = json::parse(t.record);
    s = json::parse(r.at("takeover").get<std::string>());
  } catch (const std::exception& e) {
    failure.text = "the run's record in etcd holds no generation to take over (" + std::string(e.what()) + ")";
    return std::nullopt;
  }
  const heal_plan was = heal_plan::decode(s.at("plan").get<std::string>());
  cx.places = rank_placement::decode(s.at("places").get<std::string>());
  cx.members = s.at("homes").get<std::vector<int>>();
  cx.world0 = s.at("world0").get<int>();
  cx.joined = s.at("joined").get<int>();
  cx.env.world_size = cx.places.world();
  if (!was.parts.empty()) cx.plan.parts = was.parts;
  cx.decided.store(r.value("decided", int64_t{-2}));
  const auto endpoints = s.at("dirs").get<std::vector<std::string>>();
  // The trace's time zero, as every rank had it (actors/process/links.cpp).
  store->set(cx.env.store_prefix + "/actorpipe/origin_ns",
             std::to_string(s.value("origin_ns", clock_type::now().time_since_epoch().count())));
  const int W = cx.places.world();
  if (static_cast<int>(endpoints.size()) != W) {
    failure.text = "the run's record in etcd names " + std::to_string(endpoints.size()) + " ranks for " +
                   std::to_string(W) + " processes";
    return std::nullopt;
  }
  // Every worker of that generation: reached on its directory and handed
  // the new store; one that does not answer is gone.
  generation_peers peers;
  peers.dirs.assign(static_cast<size_t>(W), caf::actor{});
  peers.dirs[0] = cx.dir;
  std::vector<int> dead;
  const auto ask_within = std::min(cx.timeout, milliseconds(5000));
  auto& mm = cx.self->home_system().middleman();
  // A bounded connect to each first, all at once: a host cut off would
  // hold CAF's connect for minutes.
  std::vector<std::future<std::string>> probes;
  for (int q = 1; q < W; ++q)
    probes.push_back(std::async(std::launch::async, [&endpoints, q, limit = std::min(cx.timeout, milliseconds(1000))] {
      const auto [host, port] = split_endpoint(endpoints[static_cast<size_t>(q)]);
      return try_connect(host, port, limit);
    }));
  for (int q = 1; q < W; ++q) {
    const auto [host, port] = split_endpoint(endpoints[static_cast<size_t>(q)]);
    if (!probes[static_cast<size_t>(q - 1)].get().empty()) {
      dead.push_back(q);
      continue;
    }
    auto dir = mm.remote_actor(host, port);
    uint32_t got = 0;
    if (dir)
      cx.self->request(*dir, ask_within, takeover_atom::value, t.epoch, cx.host, static_cast<int32_t>(store->port()),
                       cx.dir, was.generation)
          .receive([&](uint32_t e) { got = e; }, [](caf::error&) {});
    if (got != t.epoch) {
      dead.push_back(q);
      continue;
    }
    peers.dirs[static_cast<size_t>(q)] = *dir;
  }
  // The newest step any live slot holds: how far the run got.
  int64_t upto = was.resume_after;
  const int S = cx.places.pp();
  for (int q = 1; q < W; ++q) {
    if (!peers.dirs[static_cast<size_t>(q)]) continue;
    for (const auto& slot : cx.places.owned(q))
      cx.self->request(peers.dirs[static_cast<size_t>(q)], ask_within, held_atom::value,
                       int32_t{slot.replica * S + slot.stage})
          .receive(
              [&](std::vector<int64_t>& v) {
                for (int64_t step : v) upto = std::max(upto, step);
              },
              [](caf::error&) {});
  }
  asked = std::chrono::system_clock::now();
  std::string by = std::to_string(W - 1 - static_cast<int>(dead.size())) + " of " + std::to_string(W - 1);
  failure = run_failure{run_errc::stage_died, -1, -1, -1,
                        "the coordinator was lost; takeover " + std::to_string(t.epoch) + " of generation " +
                            std::to_string(was.generation) + " (" + by + " workers answered, the newest step held " +
                            std::to_string(upto) + ")"};
  log.steps.clear();
  step_record last;
  last.step = upto;
  log.steps.push_back(last);
  log.boundary_at = clock_type::now();
  auto next = heal(cx, store, peers, was, without_fired(cx.cfg, was.fired_through), dead, failure, log);
  log.steps.clear();  // this coordinator's log starts with its own steps
  return next;
}

}  // namespace actorpipe::rank_detail
