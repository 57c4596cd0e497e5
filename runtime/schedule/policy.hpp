#pragma once
// A schedule is a policy: a small pure object that, given a stage's ready
// set and counters, picks the next op to fire or says "wait". It has no
// clock and no I/O, so the same object drives the stage actors, the
// canonical-order tests and (later) the simulator.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "messages/ops.hpp"
#include "runtime/schedule/placement.hpp"

namespace actorpipe {

/// Microbatch ids whose op is ready, as a flag per microbatch. No heap
/// traffic once sized.
class mb_set {
public:
  void reset(int microbatches) {
    flags_.assign(static_cast<size_t>(microbatches), 0);
    count_ = 0;
    low_ = flags_.size();
  }
  void insert(int mb) {
    if (!flags_[mb]) { flags_[mb] = 1; ++count_; }
    if (static_cast<size_t>(mb) < low_) low_ = static_cast<size_t>(mb);
  }
  void erase(int mb) {
    if (flags_[mb]) { flags_[mb] = 0; --count_; }
  }
  bool contains(int mb) const { return flags_[mb] != 0; }
  bool empty() const { return count_ == 0; }
  int size() const { return count_; }
  /// Smallest member, or -1. Amortized O(1) while microbatches go in
  /// ascending order: the scan starts where the last one ended.
  int lowest() const {
    for (; low_ < flags_.size(); ++low_)
      if (flags_[low_]) return static_cast<int>(low_);
    return -1;
  }

private:
  std::vector<char> flags_;
  int count_ = 0;
  /// No member lies below it (a cache of lowest(); owned by one stage or
  /// one simulation, never read from two threads).
  mutable size_t low_ = 0;
};

/// What a policy may look at.
struct stage_view {
  int rank = 0;
  int stages = 1;
  int microbatches = 1;
  int fwd_done = 0;  ///< forwards fired this step, over all chunks
  int bwd_done = 0;  ///< backwards fired this step, over all chunks
  /// Ready sets, one per chunk (fwd_ready[c]); chunk 0 is *fwd_ready.
  mb_set const* fwd_ready = nullptr;
  mb_set const* bwd_ready = nullptr;
  int chunks = 1;  ///< model chunks (virtual stages) on this stage
  /// Split-backward policies only: weight-gradient ops ready (per chunk)
  /// and fired. A W(mb) becomes ready when B(mb) has run.
  mb_set const* w_ready = nullptr;
  int w_done = 0;
  /// Microbatches this stage opened (its first chunk's F ran) and has not
  /// closed (that chunk's last B, or W when split, has not): the activation
  /// memory in microbatches.
  int open_microbatches = 0;
  /// This stage's own mean measured duration of F, B and W (indexed by
  /// op_kind), any unit; 0 where nothing was measured yet. May be null.
  double const* measured = nullptr;

  int in_flight() const { return fwd_done - bwd_done; }
};

/// Knobs a policy may take from the config.
struct policy_options {
  int virtual_stages = 1;  ///< chunks per stage (interleaved, greedy)
  int max_inflight = 0;    ///< greedy: open microbatches per stage; 0 = its default
};

/// Picks the next op of one stage.
class policy {
public:
  virtual ~policy() = default;
  /// Registry name ("1f1b").
  virtual std::string name() const = 0;
  /// The op to fire now, or nullopt to wait for more input.
  virtual std::optional<op_id> next(const stage_view& v) const = 0;
  /// Model chunks (virtual stages) per stage.
  virtual int chunks() const { return 1; }
  /// How chunks map to virtual stages (round-robin unless the schedule
  /// says otherwise, like zb-v's V).
  virtual placement_kind placement() const { return placement_kind::round_robin; }
  actorpipe::placement layout(int stages) const { return {placement(), stages, chunks()}; }
  /// True when B computes only the input gradient and a separate W the
  /// weight gradient (zero-bubble schedules). Activations live until W.
  virtual bool splits_backward() const { return false; }
  /// False for asynchronous schedules (PipeDream-2BW): microbatches stream
  /// through without a flush, each stage steps its own weights every M
  /// backwards, and forwards use the version before the last.
  virtual bool flushes() const { return true; }
  /// OVERLAP_F_B (DualPipeV): true when the op next(v) returns opens an
  /// overlapped action: an F fired together with the op the policy returns
  /// right after it, a B of the other chunk. next() returns such an F only
  /// once that B is ready too, so the two start as one.
  virtual bool overlaps_next(const stage_view&) const { return false; }
};

using policy_factory = std::function<std::unique_ptr<policy>(const policy_options&)>;

/// Policy by name; nullptr if unknown (runtime/schedule/policies/registry.cpp).
std::unique_ptr<policy> make_policy(const std::string& name, const policy_options& opts = {});
/// Names of all registered policies, in registry order.
std::vector<std::string> policy_names();

}  // namespace actorpipe
