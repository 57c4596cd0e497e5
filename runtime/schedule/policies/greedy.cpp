// Greedy critical path. The remaining path of an op is the chain of ops its
// microbatch still needs after it: a forward at virtual stage k has the
// forwards k+1..K-1 and all K backwards ahead, a backward at k the
// backwards k-1..0. Every stage estimates them with its own measured mean
// durations (it knows no other stage's). For this DAG the ranking cannot
// flip with positive estimates: a forward always outranks a backward, an
// earlier chunk's forward a later one's, a later chunk's backward an earlier
// one's. So with one chunk and the default bound it runs forward-first
// under S - rank open microbatches, which is 1F1B's order on uniform costs;
// the bound, not the ranking, sets the memory.
#include "runtime/schedule/policies/builtin.hpp"

namespace actorpipe {

namespace {

double estimate(const stage_view& v, op_kind kind) {
  const double m = v.measured ? v.measured[static_cast<int>(kind)] : 0.0;
  return m > 0.0 ? m : 1.0;
}

}  // namespace

std::optional<op_id> greedy_policy::next(const stage_view& v) const {
  const int s = v.stages, c = v.chunks, total = s * c;
  const double f = estimate(v, op_kind::F), b = estimate(v, op_kind::B);
  // A microbatch stays open here for its whole round trip through the
  // later chunks too, so the default grows by S per extra chunk.
  const int bound = max_inflight_ > 0 ? max_inflight_ : s - v.rank + (c - 1) * s;
  std::optional<op_id> best;
  double best_level = 0.0;
  auto consider = [&](op_id op, double level) {
    if (!best || level > best_level) {
      best = op;
      best_level = level;
    }
  };
  for (int chunk = 0; chunk < c; ++chunk) {
    const int k = chunk * s + v.rank;  // round-robin placement
    // Per chunk the lowest microbatch first: inputs arrive in ascending
    // order, so B runs ascending and the gradient sums stay bitwise stable.
    const int fwd = v.fwd_ready[chunk].lowest();
    if (fwd >= 0 && (chunk > 0 || v.open_microbatches < bound))
      consider({op_kind::F, fwd, chunk}, f * (total - k) + b * total);
    const int bwd = v.bwd_ready[chunk].lowest();
    if (bwd >= 0) consider({op_kind::B, bwd, chunk}, b * (k + 1));
  }
  return best;
}

}  // namespace actorpipe
