#pragma once
// One stage's ready sets for one step, shared by the stage actor and the
// simulator so that both promote the same way. An input that arrives is
// recorded once (a second copy is refused); per chunk, ops of one kind run
// in ascending microbatch order, so an input that came ahead of its turn
// waits until every earlier microbatch of its kind has fired (the gradient
// sums stay bitwise the same under delayed or reordered messages, and a
// late activation cannot lose its in-flight slot to a later one). The
// counters a policy's stage_view is built from live here too. Pure: no
// clock, no I/O, no CAF.
#include <vector>

#include "messages/ops.hpp"
#include "runtime/schedule/policy.hpp"

namespace actorpipe {

class ready_board {
public:
  /// An empty step of `microbatches` x `chunks`; `split`: B and W are
  /// separate ops (a B makes its W ready).
  void reset(int microbatches, int chunks, bool split);

  /// The input of op (kind F or B, chunk, mb) is here. False, and nothing
  /// changes, for one out of range or already arrived this step.
  bool arrive(op_kind kind, int chunk, int mb);
  /// The policy chose `op`, which must be ready: it leaves the ready set,
  /// the next microbatch of its kind and chunk moves up if it is here, the
  /// counters advance, and a split B makes its W ready.
  void fire(op_id op);

  bool ready(op_id op) const;
  bool in_range(int chunk, int mb) const { return chunk >= 0 && chunk < chunks_ && mb >= 0 && mb < m_; }
  /// Every B (and, split, every W) of the step has fired.
  bool done() const;
  /// What a policy sees.
  stage_view view(int rank, int stages, const double* measured) const;

  int microbatches() const { return m_; }
  int chunks() const { return chunks_; }
  bool split() const { return split_; }
  int fwd_done() const { return fwd_done_; }
  int bwd_done() const { return bwd_done_; }
  int w_done() const { return w_done_; }
  /// Microbatches opened by chunk 0's F and not closed by its last B (W
  /// when split): activation memory, in microbatches.
  int open() const { return open_; }
  /// The microbatch whose op of `kind` (F or B) fires next on `chunk`.
  int next(op_kind kind, int chunk) const { return (kind == op_kind::F ? fwd_next_ : bwd_next_)[chunk]; }
  bool arrived(op_kind kind, int chunk, int mb) const {
    return (kind == op_kind::F ? fwd_seen_ : bwd_seen_)[slot(chunk, mb)] != 0;
  }
  /// The first microbatch of `kind` on `chunk` whose input has not come, or -1.
  int first_missing(op_kind kind, int chunk) const;
  /// Ready ops, by chunk then microbatch (F, B, W of each).
  std::vector<op_id> ready_ops() const;
  /// Inputs that are here but wait for an earlier microbatch.
  std::vector<op_id> queued_ops() const;

private:
  int slot(int chunk, int mb) const { return chunk * m_ + mb; }
  void promote(mb_set& arrived, mb_set& ready, int next);

  int m_ = 0, chunks_ = 0;
  bool split_ = false;
  std::vector<mb_set> fwd_ready_, bwd_ready_, w_ready_;  // by chunk
  std::vector<mb_set> fwd_arrived_, bwd_arrived_;        // here, not yet in turn
  std::vector<int> fwd_next_, bwd_next_;
  std::vector<char> fwd_seen_, bwd_seen_;                // by slot
  int fwd_done_ = 0, bwd_done_ = 0, w_done_ = 0, open_ = 0;
};

}  // namespace actorpipe
