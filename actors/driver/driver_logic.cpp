#include "actors/driver/driver_logic.hpp"

#include <caf/atom.hpp>
#include <torch/torch.h>

#include <algorithm>

#include "runtime/model/lr.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe {

std::string stage_label(int index, int per_replica, int dp) {
  return dp > 1 ? "replica " + std::to_string(index / per_replica) + " stage " + std::to_string(index % per_replica)
                : "stage " + std::to_string(index);
}

run_failure stage_down(int index, int per_replica, int dp, int64_t step, const caf::error& reason,
                       const std::string& rendered) {
  run_failure f;
  // An op that threw ends its stage with the error (caf::sec) that the
  // stage's exception handler made of it; a kill is an exit reason.
  f.code = reason && reason.category() == caf::atom("system") ? run_errc::op_threw : run_errc::stage_died;
  f.step = step;
  f.replica = dp > 1 ? index / per_replica : -1;
  f.stage = dp > 1 ? index % per_replica : index;
  f.text = stage_label(index, per_replica, dp) + " stopped at step " + std::to_string(step) + ": " + rendered;
  return f;
}

at::Tensor global_grad_norm(const std::vector<grads_report>& reports, const placement& plc) {
  std::vector<at::Tensor> norms;
  for (int k = 0; k < plc.count(); ++k) norms.push_back(reports[plc.rank_of(k)].grad_norms.at(plc.chunk_of(k)));
  return torch::cat(norms).norm(2);
}

nonfinite_verdict judge_nonfinite(const std::vector<grads_report>& reports, int dp, int64_t step,
                                  const config& cfg, size_t skipped) {
  const grads_report* first = nullptr;
  for (const auto& rep : reports)
    if (rep.nonfinite.mb >= 0 && (!first || rep.nonfinite.at_ns < first->nonfinite.at_ns)) first = &rep;
  std::string where = first ? "first seen on " + (dp > 1 ? "replica " + std::to_string(first->replica) + " " : std::string()) +
                                  "stage " + std::to_string(first->rank) + ", microbatch " +
                                  std::to_string(first->nonfinite.mb) + ", in a" +
                                  (first->nonfinite.where == "activation" ? "n activation" : " gradient")
                            : std::string("in the gradients");
  return nonfinite_policy("step " + std::to_string(step) + ": non-finite value " + where, cfg, skipped);
}

nonfinite_verdict nonfinite_policy(const std::string& seen, const config& cfg, size_t skipped) {
  const auto& sv = cfg.supervision;
  const bool stop = sv.on_nonfinite == "stop";
  nonfinite_verdict v;
  v.notice = seen + "; " +
             (stop ? "stopping (supervision.on_nonfinite: stop)"
                   : "step skipped, weights and optimizer state unchanged" +
                         std::string(sv.check_updates ? ""
                                                      : " (supervision.check_updates is off: an earlier update "
                                                        "may have left them non-finite)"));
  if (stop) v.stop_reason = v.notice;
  // A run that skips most of its steps has not trained: say so, and stop.
  if (!stop && static_cast<double>(skipped) > sv.max_skipped_fraction * static_cast<double>(cfg.train.steps))
    v.stop_reason = v.notice + "; " + std::to_string(skipped) + " of the run's " + std::to_string(cfg.train.steps) +
                    " steps skipped for a NaN or an infinity, more than supervision.max_skipped_fraction " +
                    fmt("%g", sv.max_skipped_fraction) + " allows; stopping";
  return v;
}

nonfinite_verdict judge_nonfinite_update(const std::vector<std::string>& nonfinite, int dp, int64_t step,
                                         const config& cfg, size_t skipped) {
  const int per_replica = static_cast<int>(nonfinite.size()) / std::max(1, dp);
  std::string where;
  for (size_t i = 0; i < nonfinite.size(); ++i)
    if (!nonfinite[i].empty()) {
      where = stage_label(static_cast<int>(i), per_replica, dp) + "'s update left one in " + nonfinite[i];
      break;
    }
  return nonfinite_policy("step " + std::to_string(step) + ": non-finite value: " + where, cfg, skipped);
}

std::string async_nonfinite_update(int rank, int64_t step, const std::string& tensor) {
  return "step " + std::to_string(step) + ": non-finite value: stage " + std::to_string(rank) +
         "'s update left one in " + tensor + "; an async step cannot be undone (later microbatches run on it), " +
         "so the run stops whatever supervision.on_nonfinite says";
}

step_record close_step(std::vector<grads_report>& reports, const step_close& c, uint64_t& duplicates) {
  step_record rec;
  rec.step = c.step;
  rec.grad_norm = c.grad_norm;
  rec.skipped = c.skipped;
  rec.notice = c.notice;
  rec.lr = c.lr;
  int64_t correct = 0, samples = 0;
  for (auto& rep : reports) {
    rec.loss += rep.loss_sum;
    correct += rep.correct;
    samples += rep.samples;
  }
  if (samples > 0) rec.train_accuracy = static_cast<double>(correct) / static_cast<double>(samples);
  rec.pipeline_s = static_cast<double>(c.pipeline_ns) * 1e-9;
  rec.start_ns = c.start_ns;
  for (auto& rep : reports) {
    duplicates += rep.stats.duplicates;
    rec.stages.push_back(std::move(rep.stats));
  }
  rec.bubble = measured_bubble(rec.stages, c.pipeline_ns);
  allreduce_figures(rec);
  return rec;
}

void allreduce_figures(step_record& rec) {
  int64_t compute_end = 0, total = 0, hidden = 0;
  int count = 0;
  for (const auto& st : rec.stages)
    for (const auto& e : st.events) compute_end = std::max(compute_end, e.end_ns);
  for (const auto& st : rec.stages) {
    if (st.allreduce_end_ns <= 0) continue;
    ++count;
    total += st.allreduce_end_ns - st.allreduce_start_ns;
    hidden += std::max<int64_t>(0, std::min(st.allreduce_end_ns, compute_end) - st.allreduce_start_ns);
  }
  if (count == 0) return;
  rec.allreduce_s = static_cast<double>(total) / count * 1e-9;
  rec.allreduce_hidden = total > 0 ? static_cast<double>(hidden) / static_cast<double>(total) : 0.0;
}

bool may_overlap(const driver_setup& setup, int64_t step, bool stopping) {
  // Every stage handles the apply before anything of the next step reaches
  // it (the driver sent it first, and each stage's inputs come from stages
  // that did the same).
  const int64_t next = step + 1;
  const int64_t every = setup.cfg.checkpoint.every;
  return next < setup.cfg.train.steps && !stopping && !setup.last_good && !(every > 0 && next % every == 0) &&
         !(setup.verify_replicas && setup.dp > 1) && !setup.cfg.pipeline.lockstep &&
         !eval_due(setup.cfg.eval, next, setup.cfg.train.steps);
}

std::vector<eval_msg> eval_batches(const dataset& d, int64_t batch_size, int64_t batches, int64_t after) {
  const int64_t n = d.test_x.defined() ? d.test_x.size(0) : 0;
  const int64_t rows = std::max<int64_t>(1, batch_size);
  const int64_t all = (n + rows - 1) / rows;
  const int64_t count = batches > 0 ? std::min(batches, all) : all;
  std::vector<eval_msg> out;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t b = i * rows, e = std::min(n, b + rows);
    eval_msg m{d.test_x.slice(0, b, e), d.test_y.slice(0, b, e)};
    m.after = after;
    m.batches = static_cast<int32_t>(count);
    out.push_back(std::move(m));
  }
  return out;
}

eval_record close_eval(const eval_result& sum, int64_t after, double seconds) {
  eval_record e;
  e.step = after;
  e.positions = sum.total;
  const double n = static_cast<double>(std::max<int64_t>(1, sum.total));
  e.loss = sum.loss_sum / n;
  e.accuracy = static_cast<double>(sum.correct) / n;
  e.seconds = seconds;
  return e;
}

bool checkpoint_due(const config& cfg, int64_t next, bool stopping) {
  const int64_t every = cfg.checkpoint.every;
  return every > 0 && (next % every == 0 || next == cfg.train.steps || stopping);
}

run_failure replica_divergence(const std::vector<uint64_t>& checksums, int dp, int64_t step) {
  run_failure f;
  f.code = run_errc::none;
  if (dp <= 1) return f;
  const int per_replica = static_cast<int>(checksums.size()) / dp;
  for (int d = 1; d < dp; ++d)
    for (int r = 0; r < per_replica; ++r)
      if (checksums[d * per_replica + r] != checksums[r]) {
        f.code = run_errc::replicas_diverged;
        f.step = step;
        f.replica = d;
        f.stage = r;
        f.text = "replicas diverged after step " + std::to_string(step) + ": stage " + std::to_string(r) +
                 " of replica " + std::to_string(d) + " differs from replica 0 (weight checksums " +
                 std::to_string(checksums[d * per_replica + r]) + " and " + std::to_string(checksums[r]) + ")";
        return f;
      }
  return f;
}

step_record close_async_step(std::vector<grads_report>& reps, const train_config& train,
                             driver_clock::time_point last_close, driver_clock::time_point now,
                             driver_clock::time_point origin, uint64_t& duplicates) {
  std::sort(reps.begin(), reps.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  step_record rec;
  rec.step = reps.front().step;
  rec.lr = lr_at(train, rec.step);
  rec.grad_norm = 0.0;  // each stage steps alone; there is no global norm
  for (auto& rep : reps) rec.loss += rep.loss_sum;
  rec.step_s = std::chrono::duration<double>(now - last_close).count();
  rec.pipeline_s = rec.step_s;
  rec.start_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(last_close - origin).count();
  const int64_t span = std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_close).count();
  for (auto& rep : reps) {
    duplicates += rep.stats.duplicates;
    rec.stages.push_back(std::move(rep.stats));
  }
  rec.bubble = measured_bubble(rec.stages, span);
  return rec;
}

std::chrono::microseconds watchdog_period(double limit_s) {
  return std::chrono::microseconds(std::max<int64_t>(20000, static_cast<int64_t>(limit_s * 250000)));
}

bool watchdog_ledger::hung(const std::vector<stage_status>& rows, const std::vector<char>& answered,
                           driver_clock::time_point now, double limit_s) {
  int64_t fired = 0;
  bool all = true;
  for (size_t i = 0; i < rows.size(); ++i) {
    fired += rows[i].fired;
    all = all && answered[i];
  }
  if (all && fired != fired_seen) {
    fired_seen = fired;
    progress_at = now;
    return false;
  }
  return now - progress_at >= std::chrono::duration<double>(limit_s);
}

std::string op_grid(double limit_s, const std::vector<stage_status>& rows, const std::vector<char>& answered, int dp) {
  const int n = static_cast<int>(rows.size());
  const int per_replica = n / dp;
  std::string grid = "watchdog: no op fired anywhere for " + fmt("%g", limit_s) + " s; the op grid:\n";
  for (int i = 0; i < n; ++i) {
    const bool stuck = !answered[i] || !rows[i].done;
    grid += (stuck ? ">> " : "   ") + (dp > 1 ? "replica " + std::to_string(i / per_replica) + " " : std::string()) +
            (answered[i] ? rows[i].grid
                         : "stage " + std::to_string(i % per_replica) + ": does not answer (blocked inside an op)") +
            "\n";
  }
  return grid;
}

run_failure hang_failure(int64_t step, std::string grid) {
  run_failure f;
  f.code = run_errc::hang;
  f.step = step;
  f.text = std::move(grid);
  return f;
}

run_failure nonfinite_stop_failure(int64_t step, const std::string& reason, const std::vector<std::string>& checkpoints) {
  run_failure f;
  f.code = run_errc::nonfinite_stop;
  f.step = step;
  f.text = reason + (checkpoints.empty() ? std::string() : "; checkpoint " + checkpoints.back());
  return f;
}

run_failure checkpoint_write_failure(int64_t step, const std::string& why, const std::vector<std::string>& checkpoints) {
  run_failure f;
  f.code = run_errc::checkpoint_write;
  f.step = step;
  f.text = "the checkpoint after step " + std::to_string(step) + " could not be written: " + why + "; " +
           (checkpoints.empty() ? std::string("no checkpoint of this run is on disk")
                                : "the latest good one is " + checkpoints.back());
  return f;
}

}  // namespace actorpipe
