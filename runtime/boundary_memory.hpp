#pragma once
// What a process keeps of its stages at step boundaries, for healing: each
// stage leaves a copy of its weights and optimizer state here after every
// optimizer step (and once before the first), and a new generation of the
// same slots starts from the copy at the boundary the supervisor rolls
// back to. At dp = 1 a process also holds here the copies that the stages
// it keeps for (their slots, not its own) sent after each step.
//
// The three newest boundaries per slot are kept: when a run fails during
// an apply, some stages hold the step it was applying and the others the
// one before; and a keeper's copy of the newest may still be on its way,
// so every slot must still hold the one before that. So are the two newest
// lasting ones, the boundaries whose copy went to a keeper
// (supervision.copy_every): with copies every k steps, a lost stage's
// newest copy may be k steps old, and every other stage must roll back
// there too; its copy may still be on its way, so the one before stays.
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

#include "messages/payloads.hpp"

namespace actorpipe {

class boundary_memory {
public:
  /// Slot `slot` (replica d, stage r at d S + r) after step `step` (-1:
  /// before the first), lasting or not; called from the stage's thread or,
  /// for a keeper's copies (always lasting), the copy channel's.
  void keep(int slot, int64_t step, stage_snapshot s, bool lasting = true) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& steps = by_slot_[slot];
    steps[step] = kept{std::move(s), lasting};
    // Oldest first: drop any that is neither among the three newest nor
    // among the two newest lasting.
    size_t newer = steps.size(), lasting_newer = 0;
    for (auto& [at, k] : steps) lasting_newer += k.lasting;
    for (auto it = steps.begin(); it != steps.end();) {
      const bool keep_it = newer <= 3 || (it->second.lasting && lasting_newer <= 2);
      --newer;
      lasting_newer -= it->second.lasting;
      it = keep_it ? std::next(it) : steps.erase(it);
    }
  }

  /// The copy of `slot` after `step`, if kept.
  std::optional<stage_snapshot> at(int slot, int64_t step) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = by_slot_.find(slot);
    if (it == by_slot_.end()) return std::nullopt;
    auto found = it->second.find(step);
    if (found == it->second.end()) return std::nullopt;
    return found->second.snapshot;
  }

  /// The steps kept for `slot`, oldest first (for the error that says
  /// what is there when the one asked for is not).
  std::vector<int64_t> steps(int slot) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<int64_t> out;
    if (auto it = by_slot_.find(slot); it != by_slot_.end())
      for (const auto& [step, s] : it->second) out.push_back(step);
    return out;
  }

private:
  struct kept {
    stage_snapshot snapshot;
    bool lasting = true;
  };
  mutable std::mutex mutex_;
  std::map<int, std::map<int64_t, kept>> by_slot_;
};

}  // namespace actorpipe
