// DualPipeV as a policy: like zb-v, the order is a program per rank
// (runtime/schedule/canonical), fired op by op once ready. An overlapped F and B
// start together, so the F waits until its B is ready too.
#include "runtime/schedule/canonical.hpp"
#include "runtime/schedule/policies/builtin.hpp"
#include "runtime/schedule/policies/fixed_order.hpp"

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

bool dualpipev_policy::overlaps_next(const stage_view& v) const {
  return program_overlaps(v, (*programs(v.stages, v.microbatches))[v.rank].overlap);
}

std::optional<op_id> dualpipev_policy::next(const stage_view& v) const {
  const auto progs = programs(v.stages, v.microbatches);
  const auto& mine = (*progs)[v.rank];
  return program_next(v, mine.ops, &mine.overlap);
}

}  // namespace actorpipe
