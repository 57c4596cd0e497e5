// Interleaved 1F1B as a firing rule. It decides from its counters alone
// which op comes next and waits for that op's input, so it never fires
// chunk 0 of microbatch S while chunk 1 of microbatch 0 is due: that wait is
// what reproduces Megatron's order exactly.
#include <algorithm>

#include "runtime/schedule/policies/builtin.hpp"

namespace actorpipe {

std::optional<op_id> interleaved_policy::next(const stage_view& v) const {
  const int s = v.stages, c = v.chunks, total = v.microbatches * c;
  const int warmup = std::min(2 * (s - v.rank - 1) + (c - 1) * s, total);
  const int f = v.fwd_done, b = v.bwd_done;
  if (b >= total) return std::nullopt;
  const bool forward_turn = f < warmup || (f < total && f - warmup == b);
  const int k = forward_turn ? f : b;
  // The k-th op of a kind: microbatch group k / (S c), chunk (k / S) mod c
  // (reversed for backwards), microbatch S * group + k mod S.
  const int group = k / (s * c);
  int chunk = (k / s) % c;
  if (!forward_turn) chunk = c - 1 - chunk;
  const int mb = group * s + k % s;
  const mb_set& ready = forward_turn ? v.fwd_ready[chunk] : v.bwd_ready[chunk];
  if (!ready.contains(mb)) return std::nullopt;
  return op_id{forward_turn ? op_kind::F : op_kind::B, mb, chunk};
}

namespace {

// Position of (chunk, mb) in Megatron's forward (or backward) order.
int order_key(int chunk, int mb, int s, int c, bool forward) {
  const int slot = forward ? chunk : c - 1 - chunk;
  return (mb / s) * s * c + slot * s + mb % s;
}

std::optional<op_id> earliest(const mb_set* sets, int c, int s, op_kind kind) {
  std::optional<op_id> best;
  int best_key = 0;
  for (int chunk = 0; chunk < c; ++chunk) {
    // Later microbatches of this chunk come later in the order.
    const int mb = sets[chunk].lowest();
    if (mb < 0) continue;
    const int key = order_key(chunk, mb, s, c, kind == op_kind::F);
    if (!best || key < best_key) {
      best = op_id{kind, mb, chunk};
      best_key = key;
    }
  }
  return best;
}

}  // namespace

std::optional<op_id> interleaved_greedy_policy::next(const stage_view& v) const {
  const int s = v.stages, c = v.chunks, total = v.microbatches * c;
  const int bound = std::min(2 * (s - v.rank - 1) + (c - 1) * s, total) + 1;
  if (auto b = earliest(v.bwd_ready, c, s, op_kind::B)) return b;
  if (v.in_flight() < bound) return earliest(v.fwd_ready, c, s, op_kind::F);
  return std::nullopt;
}

}  // namespace actorpipe
