// Rank 0, going on without processes lost for good under
// supervision.shrink: recut: the layers cut again into one stage per
// process left (runtime/dist/placement/recut.hpp), whether every process
// has the memory for its new stage, and the re-placement's line.
#include <algorithm>

#include "actors/supervisor/heal_decision.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/partition.hpp"

namespace actorpipe::rank_detail {

std::optional<recut> recut_if_asked(process_context& cx, const generation_peers& peers, const heal_plan& next,
                                    const std::vector<int>& dead, const config& cfg, std::string& why_not) {
  if (cx.cfg.supervision.shrink != "recut") return std::nullopt;
  if (cx.plan.chunks > 1) {
    why_not = "pipeline.virtual_stages " + std::to_string(cx.plan.chunks) + ": interleaved chunks are not cut again";
    return std::nullopt;
  }
  // Balanced by each layer's static cost, as the first cut of a run.
  const int64_t seq = cfg.data.seq_len > 0 ? cfg.data.seq_len : 1;
  recut cut = recut_placement(cx.places, cx.plan.parts, dead, layer_compute_costs(cfg.model.layers, seq),
                              cx.cfg.pipeline.stages, next.from_disk);
  if (!cut.why_not.empty()) {
    why_not = cut.why_not;
    return std::nullopt;
  }
  if (cut.needs_disk && !next.from_disk) {
    why_not = "some layer has no copy in a live process's memory";
    return std::nullopt;
  }
  // What each process runs more than before: its new stage's layers less
  // those of the stages it ran.
  room_needs need;
  const int S = cut.places.pp();
  for (const auto& [slot, pieces] : cut.pieces) {
    const int q = cut.kept.at(static_cast<size_t>(cut.places.owner(slot / S, slot % S)));
    const auto& range = cut.parts.at(static_cast<size_t>(slot % S));
    auto& [bytes, what] = need[q];
    bytes += layers_state_bytes(cfg, range.first, range.second);
    what += (what.empty() ? "stage " : ", ") + std::to_string(slot % S) +
            (cut.places.dp() > 1 ? " of replica " + std::to_string(slot / S) : "");
  }
  for (auto& [q, want] : need)
    for (const auto& slot : cx.places.owned(q)) {
      const auto& range = cx.plan.layers_of(slot.stage, 0);
      want.first -= layers_state_bytes(cfg, range.first, range.second);
    }
  const int left = cut.places.world() - (cx.opts.ranks.apart ? 1 : 0);
  if (std::string why = short_of_room(cx, peers, need, left); !why.empty()) {
    why_not = std::move(why);
    return std::nullopt;
  }
  return cut;
}

std::string recut_line(const process_context& cx, const heal_plan& next, const recut& cut,
                       const std::vector<int>& dead) {
  std::string kept;
  std::vector<int> shown;  // by old rank
  for (int q = 0; q < cx.places.world(); ++q) shown.push_back(cx.opts.ranks.shown(home_rank(cx, q)));
  for (int q : cut.kept) kept += (kept.empty() ? "" : " ") + shown_rank(cx, q);
  const int before = cx.places.pp(), after = cut.places.pp();
  return going_on_without(cx, next, dead, cut.places) + ": " + std::to_string(before) + " stages -> " +
         std::to_string(after) + " (supervision.shrink recut): stages by process " + describe_placement(cx.places) +
         " -> " + describe_placement(cut.places) + " (ranks " + kept + "), layers by stage " +
         describe_partition(cx.plan.parts) + " -> " + describe_partition(cut.parts) + ", after step " +
         std::to_string(next.resume_after) + (next.from_disk ? "; every stage from disk" : "; " + describe_pieces(cut, shown));
}

void take_recut(heal_plan& next, const recut& cut) {
  next.parts = cut.parts;
  next.pieces.clear();
  if (next.from_disk) return;
  const auto now = [&](int old) {
    return static_cast<int>(std::find(cut.kept.begin(), cut.kept.end(), old) - cut.kept.begin());
  };
  for (const auto& [slot, pieces] : cut.pieces)
    for (recut_piece p : pieces) {
      p.holder = now(p.holder);
      next.pieces[slot].push_back(p);
    }
}

}  // namespace actorpipe::rank_detail
