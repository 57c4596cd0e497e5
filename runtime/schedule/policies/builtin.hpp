#pragma once
// The built-in policies. Each lives in its own file in this folder and has
// one entry in registry.cpp.
#include <memory>
#include <mutex>

#include "runtime/schedule/canonical.hpp"
#include "runtime/schedule/policy.hpp"

namespace actorpipe {

/// GPipe (and naive, which is GPipe with one microbatch).
class gpipe_policy : public policy {
public:
  explicit gpipe_policy(std::string name = "gpipe") : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::optional<op_id> next(const stage_view& v) const override;

private:
  std::string name_;
};

/// 1F1B (PipeDream-flush).
class one_f_one_b_policy : public policy {
public:
  std::string name() const override { return "1f1b"; }
  std::optional<op_id> next(const stage_view& v) const override;
};

/// Forwards first, up to twice 1F1B's in-flight bound: a stage runs further
/// ahead than 1F1B before it turns to its backwards (more activation
/// memory, more slack for uneven op times). The worked example of
/// docs/CUSTOM_SCHEDULE.md.
class forward_first_policy : public policy {
public:
  std::string name() const override { return "forward-first"; }
  std::optional<op_id> next(const stage_view& v) const override;
};

/// ZB-H1 (Qi et al., 2024): the backward split into B (input gradient,
/// which unblocks the stage before) and W (weight gradient). 1F1B's
/// warm-up and F-B alternation, with each W deferred while stage r holds at
/// most r pending ones; the rest run at the end, filling the cool-down.
/// Activations peak at S microbatches on every stage, 1F1B's stage-0 peak.
class zb_h1_policy : public policy {
public:
  std::string name() const override { return "zb-h1"; }
  std::optional<op_id> next(const stage_view& v) const override;
  bool splits_backward() const override { return true; }
};

/// PipeDream-2BW (Narayanan et al., 2021): 1F1B's rule over a stream of
/// microbatches with no flush between steps. Step t's microbatches compute
/// with weight version t-1 on every stage (staleness 1; step 0 with the
/// initial weights) and each stage steps its weights after the M-th
/// backward. Needs M >= S so that version t-1 exists when step t begins.
class async_policy : public policy {
public:
  std::string name() const override { return "async"; }
  std::optional<op_id> next(const stage_view& v) const override;
  bool flushes() const override { return false; }
};

/// ZB-V (Qi et al., 2024): two chunks per stage in a V (chunk 0 down the
/// ranks, chunk 1 back up), the backward split into I and W, run in the
/// paper's order. Zero bubble when F = I = W and M >= 2S - 1, with
/// activations bounded like 1F1B's (2S chunk-sized entries on rank 0).
class zb_v_policy : public policy {
public:
  std::string name() const override { return "zb-v"; }
  std::optional<op_id> next(const stage_view& v) const override;
  int chunks() const override { return 2; }
  placement_kind placement() const override { return placement_kind::v_shape; }
  bool splits_backward() const override { return true; }

private:
  std::shared_ptr<const std::vector<std::vector<op_id>>> program(int stages, int microbatches) const;
  mutable std::mutex mu_;
  mutable std::shared_ptr<const std::vector<std::vector<op_id>>> program_;
  mutable int stages_ = 0, microbatches_ = 0;
};

/// DeepSeek's DualPipeV: two chunks per rank in a V, as zb-v, fired in the
/// reference's order (canonical::dualpipev_program), where the main phase
/// runs the forward of one chunk overlapped with the backward of the other
/// (OVERLAP_F_B). S even, M >= 2S.
class dualpipev_policy : public policy {
public:
  std::string name() const override { return "dualpipev"; }
  std::optional<op_id> next(const stage_view& v) const override;
  bool overlaps_next(const stage_view& v) const override;
  int chunks() const override { return 2; }
  placement_kind placement() const override { return placement_kind::v_shape; }
  bool splits_backward() const override { return true; }

private:
  std::shared_ptr<const std::vector<canonical::stage_program>> programs(int stages, int microbatches) const;
  mutable std::mutex mu_;
  mutable std::shared_ptr<const std::vector<canonical::stage_program>> programs_;
  mutable int stages_ = 0, microbatches_ = 0;
};

/// Interleaved 1F1B (Megatron's order): v chunks per stage, microbatches in
/// groups of S. Forwards go strictly in (group, chunk, microbatch) order,
/// backwards likewise with the chunks reversed; after a warm-up of
/// 2(S - rank - 1) + (v - 1)S forwards, one forward then one backward.
/// Requires M to be a multiple of S.
class interleaved_policy : public policy {
public:
  explicit interleaved_policy(int chunks) : chunks_(chunks < 1 ? 1 : chunks) {}
  std::string name() const override { return "interleaved"; }
  std::optional<op_id> next(const stage_view& v) const override;
  int chunks() const override { return chunks_; }

private:
  int chunks_;
};

/// Critical-path list scheduling (HLFET): among ready ops, the one with the
/// longest remaining path to the end of its microbatch, estimated from this
/// stage's own measured op durations. A forward opens a microbatch only
/// while fewer than max_inflight (default S - rank + (chunks - 1) S) are
/// open here; later
/// chunks of an open microbatch and backwards always may run, so it cannot
/// deadlock.
class greedy_policy : public policy {
public:
  greedy_policy(int chunks, int max_inflight)
      : chunks_(chunks < 1 ? 1 : chunks), max_inflight_(max_inflight < 0 ? 0 : max_inflight) {}
  std::string name() const override { return "greedy"; }
  std::optional<op_id> next(const stage_view& v) const override;
  int chunks() const override { return chunks_; }

private:
  int chunks_;
  int max_inflight_;
};

/// The dynamic variant of interleaved: same priorities (a backward before a
/// forward, each kind in Megatron's order) but it fires whichever op of
/// them is ready, within the same in-flight bound, instead of waiting for
/// the one Megatron's order names next.
class interleaved_greedy_policy : public policy {
public:
  explicit interleaved_greedy_policy(int chunks) : chunks_(chunks < 1 ? 1 : chunks) {}
  std::string name() const override { return "interleaved-greedy"; }
  std::optional<op_id> next(const stage_view& v) const override;
  int chunks() const override { return chunks_; }

private:
  int chunks_;
};

}  // namespace actorpipe
