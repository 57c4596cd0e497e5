#pragma once
// What a process keeps of its stages at step boundaries, for healing: each
// stage leaves a copy of its weights and optimizer state here after every
// optimizer step (every supervision.copy_every-th), and once when a
// generation starts, and a new generation of the same slots starts from
// the copy at the boundary the supervisor rolls back to. At dp = 1 a
// process also holds here the copies that the stages it keeps for (their
// slots, not its own) sent after those steps.
//
// The newest boundaries per slot are kept, as many as `depth`. At dp > 1
// the boundary is the stage's live state itself (its tensors, shared): the
// stage forgets it just before its update writes them and keeps the new
// one after, and a heal waits until every live stage holds the step rank 0
// decided (all its gradients were in, so every live stage applies it) and
// rolls forward to it; a donor is a live replica, which holds its own. At
// dp = 1 the boundary must outlive the update (the dead stage's gradients
// die with it): when a run fails during an apply, some stages hold the
// step it was applying and the others the one before; and a keeper's
// copies of the newest two may still be on their way (a dying sender's
// last copy never arrives, and under load the one before it may not have
// either; a stage's update waits while two are, so never a third), so
// every slot must still hold the one before those: four.
// Each boundary held beyond the live one is a set of the stage's weights
// and optimizer state in memory (and, stepped aside, a set of buffers the
// stage writes in turn).
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "messages/payloads.hpp"
#include "runtime/model/tensor_pool.hpp"

namespace actorpipe {

/// Whether a run of `dp` replicas keeps live boundaries (the stage's state
/// itself, rolled forward in a heal; above): at dp > 1, where a donor is a
/// live replica. At dp = 1 a boundary must outlive the update.
inline bool live_boundaries(int dp) { return dp > 1; }

class boundary_memory {
public:
  /// At least two (the step being applied and the one before).
  explicit boundary_memory(size_t depth = 4) : depth_(depth < 2 ? 2 : depth) {}
  /// How many boundaries it keeps per slot.
  size_t depth() const { return depth_; }

  /// Slot `slot` (replica d, stage r at d S + r) after step `step` (-1:
  /// before the first); called from the stage's thread.
  void keep(int slot, int64_t step, stage_snapshot s) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& steps = by_slot_[slot];
    steps[step] = std::move(s);
    while (steps.size() > depth_) steps.erase(steps.begin());
  }

  /// Drops every boundary of `slot`: its stage is about to write the
  /// tensors that the newest one shares.
  void forget(int slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    by_slot_.erase(slot);
  }

  /// Drops every boundary of every slot (the layers moved between slots).
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    by_slot_.clear();
  }

  /// The copy of `slot` after `step`, if kept.
  std::optional<stage_snapshot> at(int slot, int64_t step) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = by_slot_.find(slot);
    if (it == by_slot_.end()) return std::nullopt;
    auto found = it->second.find(step);
    if (found == it->second.end()) return std::nullopt;
    return found->second;
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

  /// A copy from process `from` is on its way (a keeper posted its
  /// receives) / it arrived or failed: which processes are still sending
  /// copies here, so that a heal waits for a copy only while one can still
  /// come.
  void expect(int from) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++arriving_[from];
  }
  void settle(int from) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = arriving_.find(from); it != arriving_.end() && --it->second <= 0) arriving_.erase(it);
  }
  std::vector<int32_t> arriving_from() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<int32_t> out;
    for (const auto& [from, n] : arriving_) out.push_back(from);
    return out;
  }

  /// Buffers for the copies kept here that arrive from other processes:
  /// those of a copy dropped from here serve the next one.
  tensor_pool& buffers() { return buffers_; }

private:
  size_t depth_;
  mutable std::mutex mutex_;
  std::map<int, int> arriving_;  // by sending process
  std::map<int, std::map<int64_t, stage_snapshot>> by_slot_;
  tensor_pool buffers_;
};

}  // namespace actorpipe
