// This process's stage actors of one generation: where each starts from,
// the copies donated and received in a heal, spawned and stopped
// (actors/process/process_context.hpp).
#include <c10/core/GradMode.h>

#include <map>
#include <optional>

#include "actors/process/process_stages.hpp"
#include "runtime/dist/transport/data_plane.hpp"
#include "runtime/dist/transport/state_transfer.hpp"
#include "runtime/model/partition.hpp"

namespace actorpipe::rank_detail {

namespace {

// The start of slot (d, r) in a healed generation: its layers and the
// optimizer copy, from `snap`.
void give_snapshot(stage_setup& st, const stage_snapshot& snap) {
  std::map<std::string, at::Tensor> by_name(snap.weights.begin(), snap.weights.end());
  std::vector<std::string> names;
  c10::NoGradGuard no_grad;
  for (auto& chunk : st.layers)
    for (auto& [name, t] : chunk->named_parameters()) {
      auto it = by_name.find(name);
      if (it == by_name.end()) throw std::runtime_error("the boundary copy has no " + name);
      t.copy_(it->second);
      names.push_back(name);
    }
  // The optimizer's state goes by position: a copy of other layers (one
  // kept before the layers moved) must not land on these.
  if (snap.optimizer && !snap.optimizer->names.empty() && snap.optimizer->names != names)
    throw rendezvous_error("the boundary copy's optimizer state is for other parameters than stage " +
                           std::to_string(st.rank) + "'s");
  st.optimizer_copy = snap.optimizer;
}

// -- a re-partition (pipeline.rebalance) -----------------------------------------

// The part of `snap` whose layers are `range` (global names "3.weight"):
// views, no copy.
stage_snapshot layers_in(const stage_snapshot& snap, std::pair<int, int> range) {
  const auto inside = [&](const std::string& name) {
    const int layer = std::stoi(name);
    return layer >= range.first && layer <= range.second;
  };
  stage_snapshot part;
  part.rank = snap.rank;
  for (const auto& w : snap.weights)
    if (inside(w.first)) part.weights.push_back(w);
  if (!snap.optimizer) return part;
  const auto& o = *snap.optimizer;
  if (o.names.size() != o.steps.size())
    throw rendezvous_error("a boundary copy does not name its optimizer state: its layers cannot move");
  auto mine = std::make_shared<optimizer_state_copy>();
  for (size_t i = 0; i < o.names.size(); ++i)
    if (inside(o.names[i])) {
      mine->names.push_back(o.names[i]);
      mine->steps.push_back(o.steps[i]);
      mine->tensors.push_back(o.tensors[i]);
    }
  part.optimizer = std::move(mine);
  return part;
}

// Stage `stage`'s start from the parts of the slots that held its layers,
// in layer order. Each part's wait ends when rank 0 calls the generation
// off (a peer stopped before its bytes came would hold it until the
// channel's timeout, and this rank would come too late to the next one).
stage_snapshot put_together(std::vector<std::future<stage_snapshot>>& pieces, int stage, const kv_store_ptr& store) {
  stage_snapshot all;
  all.rank = stage;
  std::shared_ptr<optimizer_state_copy> opt;
  for (auto& f : pieces) {
    stage_snapshot p = wait_unless_called_off(f, store);
    for (auto& w : p.weights) all.weights.push_back(std::move(w));
    if (!p.optimizer) continue;
    if (!opt) opt = std::make_shared<optimizer_state_copy>();
    opt->names.insert(opt->names.end(), p.optimizer->names.begin(), p.optimizer->names.end());
    opt->steps.insert(opt->steps.end(), p.optimizer->steps.begin(), p.optimizer->steps.end());
    opt->tensors.insert(opt->tensors.end(), p.optimizer->tensors.begin(), p.optimizer->tensors.end());
  }
  all.optimizer = std::move(opt);
  return all;
}

// One range of layers that moves to new slot `to` from old slot `from`'s
// boundary copy, which process `holder` (a rank of this generation) keeps.
struct layer_move {
  int to, from, first, last, holder;
};

// Every move of this generation: a re-cut's pieces (hp.pieces), or, where
// the stage count stays (pipeline.rebalance), each new stage's overlap
// with each old one, held by the process that keeps both slots.
std::vector<layer_move> moves_of(const process_context& cx, const heal_plan& hp) {
  std::vector<layer_move> moves;
  for (const auto& [to, pieces] : hp.pieces)
    for (const auto& p : pieces) moves.push_back({to, p.from, p.first, p.last, p.holder});
  if (!hp.pieces.empty()) return moves;
  const int S = cx.plan.stages;
  const auto before = [&](int r) { return cx.moved_from.at(static_cast<size_t>(cx.plan.plc.virtual_stage(r, 0))); };
  for (int d = 0; d < cx.plan.dp; ++d)
    for (int n = 0; n < S; ++n)
      for (int o = 0; o < S; ++o) {
        const int first = std::max(cx.plan.layers_of(n, 0).first, before(o).first);
        const int last = std::min(cx.plan.layers_of(n, 0).second, before(o).second);
        if (first <= last) moves.push_back({d * S + n, d * S + o, first, last, cx.places.owner(d, o)});
      }
  return moves;
}

// The layers move (cx.moved_from -> cx.plan.parts: a rebalance over the
// same slots, or a re-cut to another stage count): every part that
// another process's slot now runs goes to it over the tensor channel, from
// the boundary after hp.resume_after (every send is posted before anyone
// waits); a part that stays in this process is taken from its memory. The
// parts of each of this process's slots, by slot index, in layer order.
std::map<int, std::vector<std::future<stage_snapshot>>> move_layers(process_context& cx, const kv_store_ptr& store,
                                                                     const heal_plan& hp,
                                                                     const generation_links& links) {
  const int S = cx.plan.stages, me = cx.env.rank;
  const auto kept = [&](int index) {
    auto snap = cx.boundary->at(index, hp.resume_after);
    if (!snap) throw rendezvous_error(cx.where + ": no boundary copy after step " + std::to_string(hp.resume_after));
    return *snap;
  };
  const auto key = [&](int to, int from) {
    return links.prefix + "/actorpipe/state/move_" + std::to_string(to) + "_" + std::to_string(from);
  };
  const auto owner = [&](int index) { return cx.places.owner(index / S, index % S); };
  const std::vector<layer_move> moves = moves_of(cx, hp);
  for (const auto& m : moves)
    if (m.holder == me && owner(m.to) != me)
      store->set(key(m.to, m.from), send_snapshot(*links.channel, layers_in(kept(m.from), {m.first, m.last}),
                                                  owner(m.to), /*pack=*/true));
  std::map<int, std::vector<std::future<stage_snapshot>>> pieces;
  for (const auto& slot : cx.places.owned(me))
    for (const auto& m : moves) {
      const int to = slot.replica * S + slot.stage;
      if (m.to != to) continue;
      auto got = std::make_shared<std::promise<stage_snapshot>>();
      pieces[to].push_back(got->get_future());
      if (m.holder == me) {
        got->set_value(layers_in(kept(m.from), {m.first, m.last}));
        continue;
      }
      try {
        receive_snapshot_async(
            *links.channel, store->get(key(to, m.from)), [got](stage_snapshot s) { got->set_value(std::move(s)); },
            [got](const std::string& why) { got->set_exception(std::make_exception_ptr(transfer_error(why))); });
      } catch (const transfer_error& e) {
        throw rendezvous_error(cx.where + ": moving layers to stage " + std::to_string(slot.stage) + ": " + e.what());
      }
    }
  return pieces;
}

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

// The copies of a heal from memory: a survivor that is some dead slot's
// donor sends it first (every transfer is posted before anyone waits); a
// process started again posts its receives before it waits for its
// layers, so the copies travel while they are built. By slot index.
std::map<int, std::future<stage_snapshot>> hand_over(process_context& cx, const kv_store_ptr& store, const heal_plan& hp,
                                                     const generation_links& links) {
  const rank_env& env = cx.env;
  const uint32_t g = hp.generation;
  const std::string& where = cx.where;
  const std::string& prefix = links.prefix;
  const bool from_memory = g > 0 && !hp.from_disk;
  const bool replaced = g > 0 && hp.was_replaced(env.rank);
  const auto slot_key = [&](int index) { return prefix + "/actorpipe/state/slot_" + std::to_string(index); };
  // Donors send first (every transfer is posted before anyone waits).
  if (hp.hands_over())
    for (int q : hp.replaced)
      for (const auto& slot : cx.places.owned(q)) {
        const int index = slot.replica * cx.plan.stages + slot.stage;
        const auto named = hp.donors.find(index);  // a grow names its donors
        const donor from = named != hp.donors.end() ? named->second : donor_of(cx.places, hp, slot.replica, slot.stage);
        if (from.rank != env.rank) continue;
        auto snap = cx.boundary->at(from.index, hp.resume_after);
        if (!snap) throw rendezvous_error(where + ": no boundary copy after step " + std::to_string(hp.resume_after));
        store->set(slot_key(index), send_snapshot(*links.channel, *snap, q, /*pack=*/true));
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
            *links.channel, store->get(slot_key(index)), [got](stage_snapshot s) { got->set_value(std::move(s)); },
            [got](const std::string& why) { got->set_exception(std::make_exception_ptr(transfer_error(why))); });
      } catch (const transfer_error& e) {
        throw rendezvous_error(where + ": healing stage " + std::to_string(slot.stage) + ": " + e.what());
      }
    }

  return arriving;
}

}  // namespace

process_stages::~process_stages() {
  if (!actors.empty()) stop_stages(self, actors, abandon);
}

layers_building build_own_layers(const process_context& cx, const heal_plan& hp, const config& cfg) {
  const rank_env& env = cx.env;
  const uint32_t g = hp.generation;
  const bool from_memory = g > 0 && !hp.from_disk;
  layers_building building;
  if (!from_memory) return building;
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
  return building;
}

void spawn_process_stages(process_runtime& rt, process_context& cx, const heal_plan& hp, const config& cfg,
                       const train_options& opts, const resume_point& rp, const generation_links& links,
                       layers_building building, process_stages& out) {
  const rank_env& env = cx.env;
  const uint32_t g = hp.generation;
  const std::string& where = cx.where;
  const bool from_memory = g > 0 && !hp.from_disk;
  const bool replaced = g > 0 && hp.was_replaced(env.rank);
  kv_store_ptr store = rt.store;
  auto arriving = hand_over(cx, store, hp, links);
  auto moving = cx.moved_from.empty() ? decltype(move_layers(cx, store, hp, links)){} : move_layers(cx, store, hp, links);
  // Every copy kept so far is of the old partition's slots: none may
  // start a later generation (each slot keeps its new start below).
  if (!moving.empty()) cx.boundary->clear();
  if (cx.boundary) cx.boundary->buffers().age();
  // The last generation's copy segments: those this one's slots use again
  // stay (cx.copy_rings), the others go when `last` does.
  auto last = std::move(cx.copy_rings);
  cx.copy_rings.clear();
  std::map<int, std::vector<layer>> layers_of;  // by replica
  for (const auto& slot : cx.places.owned(env.rank)) {
    auto& layers = layers_of[slot.replica];
    if (layers.empty()) {
      layers = from_memory ? building.at(slot.replica).get() : build_layers(cfg);
      load_resumed(rp, layers);
    }
    stage_setup st = stage_setup_for(cfg, opts, cx.plan, slot.replica, slot.stage);
    const int index = slot.replica * cx.plan.stages + slot.stage;
    if (cx.plan.dp > 1) st.dp_group = links.groups.at(index);
    if (auto tie = links.ties.find(index); tie != links.ties.end()) st.tie_group = tie->second;
    st.abandon = out.abandon;
    give_layers(st, cx.plan, layers, rp, cfg);
    if (from_memory) {
      std::optional<stage_snapshot> snap;
      if (!moving.empty()) {
        try {
          snap = put_together(moving.at(index), slot.stage, store);
        } catch (const transfer_error& e) {
          throw rendezvous_error(where + ": moving layers to stage " + std::to_string(slot.stage) + ": " + e.what());
        }
        cx.boundary->keep(index, hp.resume_after, *snap);
      } else if (replaced) {
        try {
          snap = wait_unless_called_off(arriving.at(index), store);
        } catch (const transfer_error& e) {
          throw rendezvous_error(where + ": healing stage " + std::to_string(slot.stage) + ": " + e.what());
        }
        // Kept as its own: the wire finds it there (no copy of the stage).
        cx.boundary->keep(index, hp.resume_after, *snap);
      } else {
        // A slot moved here in a re-placement may start from a replica's
        // copy, kept under that replica's slot.
        const auto source = hp.sources.find(index);
        snap = cx.boundary->at(source == hp.sources.end() ? index : source->second, hp.resume_after);
      }
      if (!snap) throw rendezvous_error(where + ": no boundary copy after step " + std::to_string(hp.resume_after));
      give_snapshot(st, *snap);
      st.start_kept = true;
    }
    st.origin = links.origin;
    st.process_of = processes_of(cx.places, slot.replica);
    st.process = env.rank;
    st.plane = links.plane;
    for (int c = 0; c < cx.plan.chunks; ++c) {
      const int k = cx.plan.plc.virtual_stage(slot.stage, c);
      const auto& parts = cx.plan.parts;
      st.in_width.push_back(k > 0 ? output_width(cfg.model.layers, parts[static_cast<size_t>(k - 1)].second) : 0);
      st.out_width.push_back(k + 1 < cx.plan.plc.count() ? output_width(cfg.model.layers, parts[static_cast<size_t>(k)].second) : 0);
    }
    st.boundary = cx.boundary;
    st.resumed_after = g > 0 ? hp.resume_after : rp.ckpt.step;
    if (links.copies) {
      st.keeper_stage = cx.places.keeper(slot.replica, slot.stage);
      st.copy_channel = links.copies;
      if (st.keeper_stage >= 0) {
        const int keeper = st.process_of.at(static_cast<size_t>(st.keeper_stage));
        st.copy_segments = segments_for(cx, store, links, g, index, keeper, g > 0 && hp.was_replaced(keeper), last);
      }
    }
    st.copy_every = cx.cfg.supervision.copy_every;
    st.live_boundary = cx.boundary && live_boundaries(cx.plan.dp);
    out.actors.push_back(spawn_stage(*rt.sys, std::move(st)));
    out.devices.push_back(cx.plan.replica_devices.at(slot.replica).at(slot.stage));
  }
  // Before any stage is wired (connect_ranks), so before its first copy.
  adopt_spare_segments(cx, last);
}

}  // namespace actorpipe::rank_detail
