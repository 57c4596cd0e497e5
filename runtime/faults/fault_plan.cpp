#include "runtime/faults/fault_plan.hpp"

#include <algorithm>

#include "runtime/util/seed.hpp"

namespace actorpipe {

fault_plan::fault_plan(std::vector<fault_spec> faults, uint64_t seed, int rank, int replica)
    : seed_(seed), rank_(rank), replica_(replica) {
  for (auto& f : faults) {
    // Several slow_stage faults compound: each pads the op by its factor.
    if (f.kind == fault_kind::slow_stage && f.factor > 1.0) slow_factor_ *= f.factor;
    auto op = info(f.kind).op_key ? parse_op(f.op) : std::nullopt;
    faults_.push_back({std::move(f), op});
  }
}

fault_plan::send_verdict fault_plan::on_send(int64_t step, op_id op, int to_rank) const {
  send_verdict v;
  // drop: the message of op f.op at step f.step, once.
  for (const auto& a : faults_) {
    const auto& f = a.spec;
    if (f.kind == fault_kind::drop && f.step == step && (f.from < 0 || f.from == rank_) &&
        (f.to < 0 || f.to == to_rank) && a.op == op) {
      v.drop = true;
      return v;
    }
  }
  const uint64_t kind = op.kind == op_kind::F ? 0 : 1;
  for (size_t i = 0; i < faults_.size(); ++i) {
    const auto& f = faults_[i].spec;
    if (f.kind != fault_kind::duplicate && f.kind != fault_kind::delay) continue;
    if (f.kind == fault_kind::delay && ((f.from >= 0 && f.from != rank_) || (f.to >= 0 && f.to != to_rank)))
      continue;
    const uint64_t draw = derive_seed(seed_, {i, static_cast<uint64_t>(step), static_cast<uint64_t>(op.mb),
                                              static_cast<uint64_t>(op.chunk), kind, static_cast<uint64_t>(rank_),
                                              static_cast<uint64_t>(replica_)});
    if (static_cast<double>(draw >> 11) * 0x1.0p-53 >= f.probability) continue;
    if (f.kind == fault_kind::duplicate) v.twice = true;
    else v.delay_ms = std::max(v.delay_ms, f.ms);
  }
  return v;
}

std::optional<std::string> fault_plan::throw_in(int64_t step, op_id op) const {
  for (const auto& a : faults_)
    if (a.spec.kind == fault_kind::throw_in_op && a.spec.step == step && a.op == op)
      return "injected fault: throw in " + a.spec.op + " at step " + std::to_string(step);
  return std::nullopt;
}

std::optional<fault_kind> fault_plan::kill_after(int64_t step, op_id op) const {
  for (const auto& a : faults_)
    if ((a.spec.kind == fault_kind::kill_stage || a.spec.kind == fault_kind::kill_process ||
         a.spec.kind == fault_kind::stop_process) &&
        a.spec.step == step &&
        a.op == op)
      return a.spec.kind;
  return std::nullopt;
}

std::optional<fault_kind> fault_plan::kill_after_update(int64_t step) const {
  for (const auto& a : faults_)
    if ((a.spec.kind == fault_kind::kill_process || a.spec.kind == fault_kind::stop_process) && a.spec.step == step &&
        a.spec.op == "update")
      return a.spec.kind;
  return std::nullopt;
}

std::optional<int64_t> fault_plan::stale_copy_from() const {
  std::optional<int64_t> from;
  for (const auto& a : faults_)
    if (a.spec.kind == fault_kind::stale_message) from = std::min(from.value_or(a.spec.step), a.spec.step);
  return from;
}

bool fault_plan::nan_at(int64_t step, int mb, nonfinite_site where) const {
  for (const auto& a : faults_) {
    const auto& f = a.spec;
    if (f.kind == fault_kind::nonfinite && f.step == step && f.where == where &&
        (where == nonfinite_site::update || f.microbatch == mb))
      return true;
  }
  return false;
}

}  // namespace actorpipe
