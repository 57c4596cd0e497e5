// DualPipeV as a policy: like zb-v, the order is a program per rank
// (runtime/canonical), fired op by op once ready. An overlapped F and B
// start together, so the F waits until its B is ready too.
#include "runtime/canonical.hpp"
#include "runtime/policies/builtin.hpp"

namespace actorpipe {

std::shared_ptr<const std::vector<canonical::stage_program>> dualpipev_policy::programs(int stages,
                                                                                      int microbatches) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!programs_ || stages_ != stages || microbatches_ != microbatches) {
    std::vector<canonical::stage_program> all;
    for (int r = 0; r < stages; ++r) all.push_back(canonical::dualpipev_program(stages, r, microbatches));
    programs_ = std::make_shared<const std::vector<canonical::stage_program>>(std::move(all));
    stages_ = stages;
    microbatches_ = microbatches;
  }
  return programs_;
}

namespace {

bool ready_in(const stage_view& v, const op_id& op) {
  const mb_set* ready = op.kind == op_kind::F ? v.fwd_ready : op.kind == op_kind::B ? v.bwd_ready : v.w_ready;
  return ready[op.chunk].contains(op.mb);
}

size_t position(const stage_view& v) { return static_cast<size_t>(v.fwd_done + v.bwd_done + v.w_done); }

}  // namespace

bool dualpipev_policy::overlaps_next(const stage_view& v) const {
  auto progs = programs(v.stages, v.microbatches);
  const auto& mine = (*progs)[v.rank];
  const size_t pos = position(v);
  return pos < mine.overlap.size() && mine.overlap[pos];
}

std::optional<op_id> dualpipev_policy::next(const stage_view& v) const {
  auto progs = programs(v.stages, v.microbatches);
  const auto& mine = (*progs)[v.rank];
  const size_t pos = position(v);
  if (pos >= mine.ops.size()) return std::nullopt;
  const op_id op = mine.ops[pos];
  if (!ready_in(v, op)) return std::nullopt;
  if (mine.overlap[pos] && !ready_in(v, mine.ops[pos + 1])) return std::nullopt;
  return op;
}

}  // namespace actorpipe
