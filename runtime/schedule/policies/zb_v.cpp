// ZB-V as a policy: the paper's order is a hand-built program per rank
// (runtime/schedule/canonical), not a rule over counters, so the policy fires that
// program's next op once it is ready and waits otherwise. The program is
// built once per (S, M) and shared by every stage.
#include "runtime/schedule/canonical.hpp"
#include "runtime/schedule/policies/builtin.hpp"
#include "runtime/schedule/policies/fixed_order.hpp"

namespace actorpipe {

std::shared_ptr<const std::vector<std::vector<op_id>>> zb_v_policy::program(int stages,
                                                                            int microbatches) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!program_ || stages_ != stages || microbatches_ != microbatches) {
    std::vector<std::vector<op_id>> order;
    for (int r = 0; r < stages; ++r) order.push_back(canonical::zb_v_stage(stages, r, microbatches));
    program_ = std::make_shared<const std::vector<std::vector<op_id>>>(std::move(order));
    stages_ = stages;
    microbatches_ = microbatches;
  }
  return program_;
}

std::optional<op_id> zb_v_policy::next(const stage_view& v) const {
  const auto prog = program(v.stages, v.microbatches);
  return program_next(v, (*prog)[v.rank]);
}

}  // namespace actorpipe
