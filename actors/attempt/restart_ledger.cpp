#include "actors/attempt/restart_ledger.hpp"

#include <algorithm>

#include "runtime/util/text.hpp"

namespace actorpipe {

restart_decision restart_ledger::decide(const run_failure& f, const config& cfg, int64_t last_good_step) {
  restart_decision d;
  d.failure = f;
  if (!restartable(f.code)) return d;
  const auto& sv = cfg.supervision;
  std::vector<int64_t> at = failed_steps_;
  at.push_back(f.step);
  int64_t recent = 0;
  for (int64_t s : at) recent += s > f.step - sv.window_steps;
  if (recent > sv.max_restarts) {
    d.failure.code = run_errc::restart_limit;
    d.failure.text = f.text + "; " + std::to_string(recent) + " restarts within " + std::to_string(sv.window_steps) +
                     " steps exceed supervision.max_restarts " + std::to_string(sv.max_restarts) +
                     (cfg.checkpoint.every > 0 ? "; the last good checkpoint is in " + cfg.checkpoint.dir : "");
    return d;
  }
  failed_steps_ = std::move(at);
  d.retry = true;
  d.resume_after = last_good_step;
  // Faults of the failed step have fired; the re-run must not meet them again.
  d.faults = faults_left(cfg.faults.inject, f.step);
  return d;
}

std::vector<fault_spec> faults_left(const std::vector<fault_spec>& faults, int64_t fired_through) {
  std::vector<fault_spec> out;
  for (const auto& fault : faults)
    if (!(info(fault.kind).ends_stage && fault.step <= fired_through)) out.push_back(fault);
  return out;
}

void merge_generations(train_result& r, std::vector<step_record> steps, std::vector<std::string> notices,
                       const std::vector<int64_t>& skip_steps, int64_t resumed_after, int restarts, double recovery_s) {
  r.steps = std::move(steps);
  // Steps skipped for a NaN by an earlier generation (before the boundary it
  // rolled back to) count too, and what it noticed there is reported.
  r.skipped_steps.clear();
  for (const auto& s : r.steps) {
    if (s.skipped && std::find(skip_steps.begin(), skip_steps.end(), s.step) == skip_steps.end())
      r.skipped_steps.push_back(s.step);
    if (s.step <= resumed_after && !s.notice.empty()) notices.push_back(s.notice);
  }
  r.notices.insert(r.notices.begin(), notices.begin(), notices.end());
  r.restarts = restarts;
  r.recovery_s = recovery_s;
}

std::string restart_notice(int n, const run_failure& f, int64_t resumed_after, double lost_s) {
  return "restart " + std::to_string(n) + ": " + f.text + "; rolled back to after step " +
         std::to_string(resumed_after) + " and re-ran from step " + std::to_string(resumed_after + 1) + " (" +
         fmt("%.1f", lost_s * 1e3) + " ms of work lost)";
}

}  // namespace actorpipe
