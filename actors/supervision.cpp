#include "actors/supervision.hpp"

#include "runtime/text.hpp"

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
  for (const auto& fault : cfg.faults.inject)
    if (!(info(fault.kind).ends_stage && fault.step <= f.step)) d.faults.push_back(fault);
  return d;
}

std::string restart_notice(int n, const run_failure& f, int64_t resumed_after, double lost_s) {
  return "restart " + std::to_string(n) + ": " + f.text + "; rolled back to after step " +
         std::to_string(resumed_after) + " and re-ran from step " + std::to_string(resumed_after + 1) + " (" +
         fmt("%.1f", lost_s * 1e3) + " ms of work lost)";
}

}  // namespace actorpipe
