#include "runtime/schedule/canonical.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "runtime/schedule/policies/registry.hpp"

namespace actorpipe::canonical {

namespace {

op_id fwd(int mb) { return {op_kind::F, mb, 0}; }
op_id bwd(int mb) { return {op_kind::B, mb, 0}; }

}  // namespace

std::vector<op_id> gpipe_stage(int m) {
  std::vector<op_id> ops;
  for (int i = 0; i < m; ++i) ops.push_back(fwd(i));
  for (int i = 0; i < m; ++i) ops.push_back(bwd(i));
  return ops;
}

// Warm-up of S - rank - 1 forwards, steady one-forward-one-backward, then
// the cool-down backwards.
std::vector<op_id> one_f_one_b_stage(int s, int rank, int m) {
  int warmup = std::min(s - rank - 1, m);
  std::vector<op_id> ops;
  for (int i = 0; i < warmup; ++i) ops.push_back(fwd(i));
  for (int i = 0; i < m - warmup; ++i) {
    ops.push_back(fwd(warmup + i));
    ops.push_back(bwd(i));
  }
  for (int i = m - warmup; i < m; ++i) ops.push_back(bwd(i));
  return ops;
}

// ZB-H1 from the paper's construction: 1F1B with the backward split; after
// each B the stage keeps at most `rank` weight gradients pending (the last
// stage defers S - 1 of them), and the deferred ones close the step.
std::vector<op_id> zb_h1_stage(int s, int rank, int m) {
  const int warmup = std::min(s - rank - 1, m);
  std::vector<op_id> ops;
  std::vector<int> pending;
  auto after_backward = [&](int mb) {
    pending.push_back(mb);
    if (static_cast<int>(pending.size()) > rank) {
      ops.push_back({op_kind::W, pending.front(), 0});
      pending.erase(pending.begin());
    }
  };
  for (int i = 0; i < warmup; ++i) ops.push_back(fwd(i));
  for (int i = 0; i < m - warmup; ++i) {
    ops.push_back(fwd(warmup + i));
    ops.push_back(bwd(i));
    after_backward(i);
  }
  for (int i = m - warmup; i < m; ++i) {
    ops.push_back(bwd(i));
    after_backward(i);
  }
  for (int mb : pending) ops.push_back({op_kind::W, mb, 0});
  return ops;
}

// Megatron-LM's interleaved schedule, written as its three loops: the
// chunk of the k-th forward cycles every S microbatches, backwards walk the
// chunks in reverse.
std::vector<op_id> interleaved_stage(int s, int rank, int m, int v) {
  const int total = m * v;
  const int warmup = std::min((s - rank - 1) * 2 + (v - 1) * s, total);
  auto at = [&](int k, bool forward) {
    int in_group = k % (s * v);
    int chunk = in_group / s;
    if (!forward) chunk = v - 1 - chunk;
    return op_id{forward ? op_kind::F : op_kind::B, (k / (s * v)) * s + k % s, chunk};
  };
  std::vector<op_id> ops;
  for (int k = 0; k < warmup; ++k) ops.push_back(at(k, true));
  for (int i = 0; i < total - warmup; ++i) {
    ops.push_back(at(warmup + i, true));
    ops.push_back(at(i, false));
  }
  for (int i = total - warmup; i < total; ++i) ops.push_back(at(i, false));
  return ops;
}

// ZB-V (Qi et al. 2024, section 6), the paper's hand-built order for two
// chunks in a V. With F = I = W every rank is busy from its first op to
// the end once M >= 2S - 1. Rank r:
//   warm-up    2(S-r)-1 chunk-0 forwards, r pairs (F1, F0), then S-r
//              rounds of F1 I1 W1 (chunk 1 turns round at rank S-1);
//   steady     F0 I0 W0 F1 I1 W1 while forwards remain;
//   cool-down  r pairs (I0, I1), S-r pairs (I0, W0), then the held W1s
//              and W0s.
// For M < 2S-1 the order is built for 2S-1 microbatches and the ops of the
// missing ones are dropped; the rest keep their relative order.
std::vector<op_id> zb_v_stage(int s, int rank, int m) {
  const int n = std::max(m, 2 * s - 1);
  int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  std::vector<op_id> all;
  auto emit = [&](op_kind kind, int chunk, int& counter) { all.push_back({kind, counter++, chunk}); };
  auto emit_w = [&](int chunk, int mb) { all.push_back({op_kind::W, mb, chunk}); };
  auto emit_iw = [&](int chunk, int& counter) {  // I, then at once its W
    all.push_back({op_kind::B, counter, chunk});
    emit_w(chunk, counter++);
  };
  for (int i = 0; i < 2 * (s - rank) - 1; ++i) emit(op_kind::F, 0, f0);
  for (int i = 0; i < rank; ++i) {
    emit(op_kind::F, 1, f1);
    emit(op_kind::F, 0, f0);
  }
  for (int i = 0; i < s - rank; ++i) {
    emit(op_kind::F, 1, f1);
    emit_iw(1, b1);
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) emit(op_kind::F, 0, f0);
    emit_iw(0, b0);
    emit(op_kind::F, 1, f1);
    emit_iw(1, b1);
  }
  int w0 = b0, w1 = b1;
  for (int i = 0; i < rank; ++i) {
    emit(op_kind::B, 0, b0);
    emit(op_kind::B, 1, b1);
  }
  for (int i = 0; i < s - rank; ++i) {
    emit(op_kind::B, 0, b0);
    emit_w(0, w0++);
  }
  while (w1 < b1) emit_w(1, w1++);
  while (w0 < b0) emit_w(0, w0++);
  std::vector<op_id> ops;
  for (const auto& op : all)
    if (op.mb < m) ops.push_back(op);
  return ops;
}

}  // namespace actorpipe::canonical

namespace actorpipe {

std::vector<std::vector<op_id>> canonical_order(const std::string& schedule, int stages,
                                                int microbatches, int chunks) {
  const schedule_traits* t = find_schedule(schedule);
  if (!t || !t->canonical || t->name != schedule)
    throw std::invalid_argument("no canonical order for schedule '" + schedule + "'");
  if (t->microbatches_in_stage_groups && microbatches % stages != 0)
    throw std::invalid_argument(t->name + " needs microbatches to be a multiple of stages");
  if (t->shape_error)
    if (const std::string why = t->shape_error(stages, microbatches); !why.empty()) throw std::invalid_argument(why);
  std::vector<std::vector<op_id>> order;
  for (int r = 0; r < stages; ++r) order.push_back(t->canonical(stages, r, microbatches, chunks));
  return order;
}

double analytic_bubble(const std::string& name, int stages, int microbatches, int chunks) {
  const schedule_traits* t = find_schedule(name);
  if (!t) t = find_schedule("1f1b");
  return t->bubble(stages, microbatches, chunks);
}

std::string analytic_formula(const std::string& name) {
  const schedule_traits* t = find_schedule(name);
  return t ? t->formula : find_schedule("1f1b")->formula;
}

}  // namespace actorpipe

namespace actorpipe::canonical {

std::string dualpipev_shape_error(int s, int m) {
  if (s < 2 || s % 2 != 0)
    return "DualPipeV needs an even number of stages (ranks), at least 2; got " + std::to_string(s);
  if (m < 2 * s)
    return "DualPipeV needs at least 2 x stages (" + std::to_string(2 * s) + ") microbatches; got " + std::to_string(m);
  return "";
}

// The reference's eight phases (DeepSeek's dualpipev.py, step()), as a
// rank's program. Chunk p's forwards and backwards each take its next
// microbatch; W slots take the oldest deferred weight gradient.
stage_program dualpipev_program(int s, int rank, int m) {
  if (auto why = dualpipev_shape_error(s, m); !why.empty()) throw std::invalid_argument(why);
  if (rank < 0 || rank >= s) throw std::invalid_argument("dualpipev: rank out of range");
  stage_program p;
  int f[2] = {0, 0}, b[2] = {0, 0};
  std::vector<op_id> deferred;  // zero-bubble backwards' W, oldest first
  size_t next_w = 0;
  auto push = [&](op_id op, bool overlap = false) {
    p.ops.push_back(op);
    p.overlap.push_back(overlap ? 1 : 0);
  };
  auto forward = [&](int c, bool overlap = false) { push({op_kind::F, f[c]++, c}, overlap); };
  // A full backward is B and at once its W; a zero-bubble one defers W.
  auto backward = [&](int c, bool zero_bubble) {
    const int mb = b[c]++;
    push({op_kind::B, mb, c});
    if (zero_bubble)
      deferred.push_back({op_kind::W, mb, c});
    else
      push({op_kind::W, mb, c});
  };
  auto weight = [&] {
    if (next_w >= deferred.size()) throw std::logic_error("dualpipev: a W slot with no deferred weight gradient");
    push(deferred[next_w++]);
  };
  auto overlapped = [&](int fc, int bc) {  // F of chunk fc with a full B of chunk bc
    forward(fc, true);
    backward(bc, false);
  };
  const bool last_rank = rank == s - 1;
  // 1: forwards of chunk 0 down the V.
  for (int i = 0; i < 2 * (s - rank - 1); ++i) forward(0);
  // 2: chunk 0 and chunk 1 in turn.
  for (int i = 0; i < rank + 1; ++i) {
    forward(0);
    forward(1);
  }
  // 3: zero-bubble backward of chunk 1, its W, a forward of chunk 1.
  for (int i = 0; i < s - rank - 1; ++i) {
    backward(1, true);
    weight();
    forward(1);
  }
  // 4, the main phase: F0 with B1 overlapped, then F1 with B0. The last
  // rank does not overlap its first pair (the reference's choice, to cut
  // the bubble further).
  for (int i = 0; i < m - 2 * s + rank + 1; ++i) {
    if (i == 0 && last_rank) {
      forward(0);
      backward(1, false);
    } else {
      overlapped(0, 1);
    }
    overlapped(1, 0);
  }
  // 5: B1, then F1 with B0.
  for (int i = 0; i < s - rank - 1; ++i) {
    backward(1, false);
    overlapped(1, 0);
  }
  // 6: B1 and B0 in turn; from the middle on, their W are deferred (odd
  // ranks switch before B1, even ranks before B0).
  bool zero_bubble = false;
  for (int i = 0; i < rank + 1; ++i) {
    if (i == (rank + 1) / 2 && rank % 2 == 1) zero_bubble = true;
    backward(1, zero_bubble);
    if (i == (rank + 1) / 2 && rank % 2 == 0) zero_bubble = true;
    backward(0, zero_bubble);
  }
  // 7: a deferred W, then a zero-bubble B0.
  for (int i = 0; i < s - rank - 1; ++i) {
    weight();
    backward(0, true);
  }
  // 8: the W still deferred.
  for (int i = 0; i < rank + 1; ++i) weight();
  if (next_w != deferred.size() || f[0] != m || f[1] != m || b[0] != m || b[1] != m)
    throw std::logic_error("dualpipev: the program does not run every op once");
  return p;
}

std::vector<op_id> dualpipev_stage(int s, int rank, int m) { return dualpipev_program(s, rank, m).ops; }

}  // namespace actorpipe::canonical
