#include "runtime/canonical.hpp"

#include <algorithm>
#include <stdexcept>

namespace actorpipe {

namespace {

op_id fwd(int mb) { return {op_kind::F, mb, 0}; }
op_id bwd(int mb) { return {op_kind::B, mb, 0}; }

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

}  // namespace

std::vector<std::vector<op_id>> canonical_order(const std::string& schedule, int stages,
                                                int microbatches, int chunks) {
  if (schedule == "interleaved" && microbatches % stages != 0)
    throw std::invalid_argument("interleaved needs microbatches to be a multiple of stages");
  std::vector<std::vector<op_id>> order;
  for (int r = 0; r < stages; ++r) {
    if (schedule == "naive")
      order.push_back(gpipe_stage(1));
    else if (schedule == "gpipe")
      order.push_back(gpipe_stage(microbatches));
    else if (schedule == "1f1b")
      order.push_back(one_f_one_b_stage(stages, r, microbatches));
    else if (schedule == "interleaved")
      order.push_back(interleaved_stage(stages, r, microbatches, chunks));
    else if (schedule == "zb-h1")
      order.push_back(zb_h1_stage(stages, r, microbatches));
    else
      throw std::invalid_argument("no canonical order for schedule '" + schedule + "'");
  }
  return order;
}

double analytic_bubble(const std::string& schedule, int stages, int microbatches, int chunks) {
  // ZB-H1 with F = B = W: each stage idles (S-1)(F+B-W) = S-1 of 3M + S-1.
  if (schedule == "zb-h1")
    return static_cast<double>(stages - 1) / static_cast<double>(3 * microbatches + stages - 1);
  int m = schedule == "naive" ? 1 : schedule == "interleaved" ? microbatches * chunks : microbatches;
  return static_cast<double>(stages - 1) / static_cast<double>(m + stages - 1);
}

}  // namespace actorpipe
