// One generation joined by this process, rank 0's or a worker's: the
// plan, the rendezvous, the stages built while the links form, every
// process connected (join_generation.hpp).
#include "actors/process/join_generation.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <future>
#include <optional>

#include "actors/process/forming.hpp"
#include "messages/atoms.hpp"
#include "messages/errors.hpp"
#include "runtime/dist/launch/join.hpp"
#include "runtime/dist/transport/rendezvous.hpp"

namespace actorpipe::rank_detail {
// A re-placement over fewer processes: this process's rank and the world
// of generation hp.generation are its place among hp.members.
namespace {

void take_place(process_context& cx, const heal_plan& hp) {
  const int home = cx.home >= 0 ? cx.home : cx.opts.ranks.rank;
  const auto at = std::find(hp.members.begin(), hp.members.end(), home);
  if (at == hp.members.end())
    throw rendezvous_error(cx.where + " was left out of generation " + std::to_string(hp.generation) +
                           " (taken for dead); it stops");
  cx.env.rank = static_cast<int>(at - hp.members.begin());
  cx.env.world_size = static_cast<int>(hp.members.size());
  cx.members = hp.members;
  if (cx.home >= 0) cx.where = where_of(cx.env);  // a joiner's stand-in rank is gone
}

// A re-cut (runtime/dist/placement/recut.hpp): the plan's partition names
// another stage count. The schedule lays out that many; each replica's
// devices are its first ones (every stage of a process on one device).
void take_stage_count(attempt_plan& p, int stages) {
  for (auto& devs : p.replica_devices) {
    std::vector<std::string> now;
    for (int r = 0; r < stages; ++r) now.push_back(devs.at(std::min(static_cast<size_t>(r), devs.size() - 1)));
    devs = std::move(now);
  }
  p.stages = stages;
  p.plc = p.pol->layout(stages);
}

}  // namespace

// The rendezvous, this process's stages from the plan's boundary while the
// channel and groups form, every rank connected.
joined_generation join_generation(process_runtime& rt, process_context& cx, heal_plan hp, const train_options& opts,
                                  const std::function<void()>& commit) {
  joined_generation j;
  const uint32_t g = hp.generation;
  if (!hp.members.empty()) take_place(cx, hp);
  // For the tests of a process lost while a generation forms: the other
  // ranks hold here (tests/apps/elastic_test.cpp).
  if (const char* hold = std::getenv("ACTORPIPE_TEST_HOLD_FORMING_MS"); hold && *hold && g > 0 && cx.env.rank != 0)
    std::this_thread::sleep_for(milliseconds(std::atol(hold)));
  rendezvous_result met = meet(rt, cx, g);
  // The placement is rank 0's supervisor's: it publishes the generation's,
  // every other rank reads it.
  const std::string placed = gen_prefix(cx.env, g) + "/actorpipe/placement";
  if (cx.env.rank == 0)
    rt.store->set(placed, cx.places.encode());
  else
    cx.places = rank_placement::decode(rt.store->get(placed));
  // A process started again reads the plan it was started for.
  if (g > 0 && cx.fresh) hp = heal_plan::decode(rt.store->get(heal_key(cx.env, g)));
  // The plan's partition (pipeline.rebalance): a process that ran the one
  // before moves its layers; one that starts here takes it as it is.
  cx.moved_from.clear();
  if (!hp.parts.empty() && hp.parts != cx.plan.parts) {
    if (!cx.fresh && !hp.from_disk) cx.moved_from = cx.plan.parts;
    if (hp.parts.size() != cx.plan.parts.size()) take_stage_count(cx.plan, static_cast<int>(hp.parts.size()) / cx.plan.chunks);
    cx.plan.parts = hp.parts;
  }
  cx.fresh = false;
  j.hp = hp;
  j.cfg = without_fired(cx.cfg, hp.fired_through);
  j.cfg.pipeline.partition = cx.plan.parts;
  if (cx.plan.stages != j.cfg.pipeline.stages) {  // re-cut
    j.cfg.pipeline.stages = cx.plan.stages;
    j.cfg.pipeline.devices = cx.plan.replica_devices.front();
    j.cfg.replica_devices = cx.plan.replica_devices;
  }
  layers_building building = build_own_layers(cx, hp, j.cfg);
  j.links = form_links(rt, cx, g, j.cfg, std::move(met), hp.hands_over() || !cx.moved_from.empty());
  // Where each slot starts: the config (or --resume), the newest
  // checkpoint, this process's boundary memory, or a live peer's.
  j.rp = cx.rp0;
  if (g > 0) {
    train_options from;
    from.resume_dir = hp.from_disk ? j.cfg.checkpoint.dir : std::string();
    j.rp = !hp.from_disk ? resume_point{} : hp.resume_after == cx.rp0.ckpt.step ? cx.rp0 : find_resume(from, nullptr);
  }
  // The gate (actors/process/forming.cpp): past it, a re-partition rewrites
  // this process's boundary memory.
  if (g > 0 && rt.store->add(gate_key(cx.env, g), 1) >= gate_closed)
    throw forming_aborted(cx.where + ": generation " + std::to_string(g) + " was called off before its stages");
  j.stages = std::make_unique<process_stages>(cx.self);  // however this ends, they go with it
  spawn_process_stages(rt, cx, hp, j.cfg, opts, j.rp, j.links, std::move(building), *j.stages);
  j.peers = connect_ranks(rt, cx, g, j.links, j.stages->actors, j.stages->devices);
  // Formed by rank 0's word only, which its watch's call-off excludes.
  if (g > 0 && cx.env.rank == 0) {
    if (commit) commit();
    rt.store->set(formed_key(cx.env, g), "1");
  } else if (g > 0) {
    // For the test of a coordinator lost before a rank heard its word.
    if (const char* hold = std::getenv("ACTORPIPE_TEST_HOLD_FORMED_MS"); hold && *hold)
      std::this_thread::sleep_for(milliseconds(std::atol(hold)));
    rt.store->get(formed_key(cx.env, g));
  }
  return j;
}

}  // namespace actorpipe::rank_detail
