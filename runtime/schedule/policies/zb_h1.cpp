// ZB-H1 as a firing rule. Like interleaved, it names the next op from its
// counters and waits for it. A rule that fires whatever is ready (B, then
// F, then W to fill gaps) was tried on the simulator: within the same
// memory bound it leaves two thirds of 1F1B's idle time instead of one
// third, because early Ws take the slots the forwards need.
#include <algorithm>

#include "runtime/schedule/policies/builtin.hpp"

namespace actorpipe {

std::optional<op_id> zb_h1_policy::next(const stage_view& v) const {
  const int m = v.microbatches;
  const int warmup = std::min(v.stages - v.rank - 1, m);
  const int f = v.fwd_done, b = v.bwd_done, w = v.w_done;
  op_id op;
  if (f < warmup)
    op = {op_kind::F, f, 0};
  else if (b - w > v.rank)  // more pending weight gradients than this stage may hold
    op = {op_kind::W, w, 0};
  else if (f < m && f - warmup == b)
    op = {op_kind::F, f, 0};
  else if (b < m)
    op = {op_kind::B, b, 0};
  else if (w < m)
    op = {op_kind::W, w, 0};
  else
    return std::nullopt;
  const mb_set& ready = op.kind == op_kind::F   ? *v.fwd_ready
                        : op.kind == op_kind::B ? *v.bwd_ready
                                                : *v.w_ready;
  if (!ready.contains(op.mb)) return std::nullopt;
  return op;
}

}  // namespace actorpipe
