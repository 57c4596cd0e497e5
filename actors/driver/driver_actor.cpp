#include "actors/driver/driver_actor.hpp"

#include <caf/all.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "actors/driver/driver_logic.hpp"
#include "actors/driver/driver_state.hpp"
#include "messages/atoms.hpp"
#include "messages/errors.hpp"
#include "messages/payloads.hpp"
#include "runtime/files/checkpoint.hpp"
#include "runtime/model/lr.hpp"
#include "runtime/model/model.hpp"

namespace actorpipe::driver_detail {


int64_t since(const driver_state& s, clock_type::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t - s.setup.origin).count();
}

void finish(driver_ptr self, caf::error err) {
  auto& s = self->state;
  if (s.finished) return;
  s.finished = true;
  // Before the run was asked for (a stage lost while the supervisor still
  // wires the stages), no promise waits: the error goes as the driver's
  // exit reason, which the supervisor reads as it would the answer.
  if (err && !s.promise.pending()) {
    self->quit(std::move(err));
    return;
  }
  if (err)
    s.promise.deliver(std::move(err));
  else
    s.promise.deliver(std::move(s.result));
  self->quit();
}

// Lock-step clock: every stage fires at most one op per round; what a
// round sends is in the receivers' mailboxes before the next round starts
// (it was enqueued before the round_done that closes the round).
void start_round(driver_ptr self) {
  auto& s = self->state;
  ++s.round;
  s.rounds_pending = static_cast<int>(s.setup.stages.size());
  for (auto& st : s.setup.stages) self->send(st, round_atom::value, s.round);
}

// The null and sim devices run no model: their microbatches are empty and
// there is nothing to evaluate.
bool takes_data(const driver_state& s) { return !is_measuring_device(s.setup.cfg.pipeline.devices.front()); }

void start_step(driver_ptr self) {
  auto& s = self->state;
  const auto& cfg = s.setup.cfg;
  s.lr = lr_at(cfg.train, s.step);  // from the step alone: a resumed run gets the same bits
  const bool data = takes_data(s);
  auto b = data ? batch_for_step(*s.setup.data, cfg, s.step) : batch{};
  // The global batch in rank order over the replicas (torch.chunk), each
  // share into its microbatches; losses are weighted by the global size.
  auto shares = s.setup.dp > 1 && data ? split_microbatches(b, s.setup.dp) : std::vector<batch>(s.setup.dp, b);
  s.reports.assign(s.setup.stages.size(), grads_report{});
  s.reported = 0;
  s.step_start = clock_type::now();
  const size_t per_replica = s.setup.stages.size() / static_cast<size_t>(s.setup.dp);
  for (size_t d = 0; d < shares.size(); ++d) {
    auto mbs = data ? split_microbatches(shares[d], s.setup.microbatches)
                    : std::vector<batch>(static_cast<size_t>(s.setup.microbatches));
    for (size_t i = 0; i < mbs.size(); ++i)
      self->send(s.setup.stages[d * per_replica], fwd_atom::value,
                 activation_msg{{s.setup.epoch, s.step, static_cast<int32_t>(i), 0, s.round}, mbs[i].x, mbs[i].y, nullptr});
  }
  if (cfg.pipeline.lockstep) start_round(self);
}

// Async: step t's microbatches join the stream as numbers t*M .. t*M+M-1.
void feed_async_step(driver_ptr self, int64_t t) {
  auto& s = self->state;
  auto mbs = takes_data(s) ? split_microbatches(batch_for_step(*s.setup.data, s.setup.cfg, t), s.setup.microbatches)
                           : std::vector<batch>(static_cast<size_t>(s.setup.microbatches));
  for (size_t i = 0; i < mbs.size(); ++i)
    self->send(s.setup.stages.front(), fwd_atom::value,
               activation_msg{{s.setup.epoch, 0, static_cast<int32_t>(t * s.setup.microbatches + static_cast<int64_t>(i)), 0, 0},
                              mbs[i].x, mbs[i].y, nullptr});
}

// Async: every stage has stepped its weights for step `t`.
void on_async_report(driver_ptr self, grads_report& r) {
  auto& s = self->state;
  const int stages = static_cast<int>(s.setup.stages.size());
  auto& reps = s.async_reports[r.step];
  reps.push_back(std::move(r));
  if (static_cast<int>(reps.size()) < stages) return;
  const int64_t t = reps.front().step;
  for (const auto& rep : reps)
    if (!rep.nonfinite_update.empty()) {
      finish(self, to_error(nonfinite_stop_failure(
                       t, async_nonfinite_update(rep.rank, t, rep.nonfinite_update), s.result.checkpoints)));
      return;
    }
  auto now = clock_type::now();
  s.result.steps.push_back(close_async_step(reps, s.setup.cfg.train, s.last_close, now, s.setup.origin, s.result.duplicates));
  s.last_close = now;
  s.async_reports.erase(t);
  s.step = t + 1;  // the first step not yet closed: what a failure names
  if (s.setup.on_step) s.setup.on_step(s.result.steps.back());
  const int64_t steps = s.setup.cfg.train.steps;
  if (t + 2 < steps) feed_async_step(self, t + 2);
  // The stream goes on while replica 0's stages evaluate the copies they
  // kept of the weights after t + 1 updates.
  if (t + 1 < steps && eval_due(s.setup.cfg.eval, t + 1, steps)) send_eval(self, t + 1, true, false);
  if (t + 1 == steps) {
    s.trained = true;
    end_of_run(self);
  }
}

void on_grads(driver_ptr self, grads_report& r) {
  auto& s = self->state;
  const int per_replica = static_cast<int>(s.reports.size()) / s.setup.dp;
  const int index = r.replica * per_replica + r.rank;
  if (r.step != s.step || r.rank < 0 || index < 0 || index >= static_cast<int>(s.reports.size())) return;
  s.reports[index] = std::move(r);
  if (++s.reported < static_cast<int>(s.reports.size())) return;
  s.pipeline_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() -
                                                                       s.step_start)
                      .count();
  auto total = global_grad_norm(s.reports, s.setup.plc);
  apply_msg m;
  m.step = s.step;
  m.lr = s.lr;
  if (std::find(s.setup.skip_steps.begin(), s.setup.skip_steps.end(), s.step) != s.setup.skip_steps.end())
    m.skip = true;
  // A NaN or an infinity anywhere makes the global norm non-finite: no
  // stage steps, and the report names where it first appeared.
  const double total_norm = total.item<double>();
  std::string step_notice;  // kept on the step's record too
  if (!std::isfinite(total_norm)) {
    m.skip = true;
    s.result.skipped_steps.push_back(s.step);
    auto verdict = judge_nonfinite(s.reports, s.setup.dp, s.step, s.setup.cfg, s.result.skipped_steps.size());
    step_notice = verdict.notice;
    s.result.notices.push_back(step_notice);
    if (!verdict.stop_reason.empty()) s.stop_reason = verdict.stop_reason;
  }
  m.checksum = s.setup.verify_replicas && s.setup.dp > 1;
  double max_norm = s.setup.cfg.train.clip_grad_norm;
  if (max_norm > 0)
    m.clip_coef = torch::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0);
  step_close close{s.step, s.lr, total_norm, m.skip, step_notice, s.pipeline_ns, since(s, s.step_start)};
  s.result.steps.push_back(close_step(s.reports, close, s.result.duplicates));
  s.checksums.assign(s.setup.stages.size(), 0);
  s.nonfinite_updates.assign(s.setup.stages.size(), std::string());
  s.applied = 0;
  s.applying = s.step;
  for (auto& st : s.setup.stages) self->send(st, apply_atom::value, m);
  if (s.setup.on_decided) s.setup.on_decided(s.step);
  if (s.setup.cfg.supervision.check_updates) return;  // the close waits for every stage's verdict
  // Unchecked updates: the step closes at once, and the next one need not
  // wait for the optimizer acks (may_overlap says when it must).
  for (auto& st : s.setup.stages) self->send(st, close_atom::value, s.step, false);
  s.overlapped = may_overlap(s.setup, s.step, !s.stop_reason.empty());
  if (s.overlapped) {
    ++s.step;
    start_step(self);
  }
}

// Every stage answered the apply of `step` (record `rec`): an update that
// left a NaN or an infinity anywhere is undone everywhere, and the step
// counts as skipped (supervision.on_nonfinite, as for a non-finite
// gradient); then the step closes on every stage.
void close_checked_step(driver_ptr self, int64_t step, step_record& rec) {
  auto& s = self->state;
  const bool undo = std::any_of(s.nonfinite_updates.begin(), s.nonfinite_updates.end(),
                                [](const std::string& t) { return !t.empty(); });
  if (undo) {
    s.result.skipped_steps.push_back(step);
    auto verdict = judge_nonfinite_update(s.nonfinite_updates, s.setup.dp, step, s.setup.cfg,
                                          s.result.skipped_steps.size());
    rec.skipped = true;
    rec.notice = verdict.notice;
    s.result.notices.push_back(verdict.notice);
    if (!verdict.stop_reason.empty()) s.stop_reason = verdict.stop_reason;
  }
  for (auto& st : s.setup.stages) self->send(st, close_atom::value, step, undo);
}

// Every quarter of watchdog_s: ask each stage how many ops it has fired. No
// change for watchdog_s (or a stage that does not answer) is a hang: the run
// stops with every stage's row of the op grid, the stuck ones marked.
void watch(driver_ptr self) {
  auto& s = self->state;
  const double limit = s.setup.cfg.supervision.watchdog_s;
  if (limit <= 0 || s.finished) return;
  const auto period = watchdog_period(limit);
  const int n = static_cast<int>(s.setup.stages.size());
  auto pending = std::make_shared<int>(n);
  auto rows = std::make_shared<std::vector<stage_status>>(n);
  auto answered = std::make_shared<std::vector<char>>(n, 0);
  auto conclude = [=] {
    auto& st = self->state;
    if (st.finished) return;
    if (st.watchdog.hung(*rows, *answered, clock_type::now(), limit)) {
      finish(self, to_error(hang_failure(st.step, op_grid(limit, *rows, *answered, st.setup.dp))));
      return;
    }
    self->delayed_send(self, period, watchdog_atom::value);
  };
  for (int i = 0; i < n; ++i)
    self->request(s.setup.stages[i], period, status_atom::value)
        .then(
            [=](stage_status& row) {
              (*rows)[i] = std::move(row);
              (*answered)[i] = 1;
              if (--*pending == 0) conclude();
            },
            [=](caf::error&) {
              if (--*pending == 0) conclude();
            });
}

void advance(driver_ptr self) {
  auto& s = self->state;
  if (!s.stop_reason.empty()) {
    // The step that stopped the run has closed: the driver is past it.
    finish(self, to_error(nonfinite_stop_failure(s.step - 1, s.stop_reason, s.result.checkpoints)));
    return;
  }
  if (s.step < s.setup.cfg.train.steps && s.setup.regroup && s.setup.regroup()) {
    // Every stage holds step s.step - 1's boundary: the generation ends
    // here, and the next one starts after it with the new placement (which
    // evaluates that boundary if an evaluation is due there).
    finish(self, to_error(run_failure{run_errc::regroup, s.step - 1, -1, -1,
                                      "re-placing the stages after step " + std::to_string(s.step - 1)}));
    return;
  }
  begin_step_or_eval(self);
}

// At a step boundary every stage holds one weight version: collect replica
// 0's weights and optimizer states, write them, go on. A checkpoint that
// cannot be written stops the run: the previous one stays the latest, and
// the older ones beyond checkpoint.keep_last go only once a newer is safe.
void take_checkpoint(driver_ptr self, bool to_disk) {
  auto& s = self->state;
  const int stages = static_cast<int>(s.setup.stages.size()) / s.setup.dp;
  auto pending = std::make_shared<int>(stages);
  auto snaps = std::make_shared<std::vector<stage_snapshot>>(stages);
  for (int r = 0; r < stages; ++r)
    self->request(s.setup.stages[r], caf::infinite, ckpt_atom::value)
        .then([=](stage_snapshot& snap) {
          (*snaps)[snap.rank] = std::move(snap);
          if (--*pending > 0) return;
          auto& st = self->state;
          const auto& cc = st.setup.cfg.checkpoint;
          checkpoint c;
          c.step = st.step - 1;
          c.optimizer_type = st.setup.cfg.train.optimizer.type;
          for (auto& sn : *snaps) {
            for (auto& w : sn.weights) c.weights.push_back(std::move(w));
            c.optimizer.push_back(std::move(sn.optimizer));
          }
          sort_by_layer(c.weights);
          const auto begin = clock_type::now();
          if (to_disk) {
            try {
              st.result.checkpoints.push_back(save_checkpoint(cc.dir, c));
            } catch (const std::exception& e) {
              finish(self, to_error(checkpoint_write_failure(c.step, e.what(), st.result.checkpoints)));
              return;
            }
            prune_checkpoints(cc.dir, c.step, cc.keep_last);
          }
          st.result.checkpoint_s += std::chrono::duration<double>(clock_type::now() - begin).count();
          if (st.setup.last_good) *st.setup.last_good = std::move(c);
          advance(self);
        });
}

void on_applied(driver_ptr self, int index, int64_t step, uint64_t checksum, int64_t opt_begin, int64_t opt_end,
                std::string nonfinite) {
  auto& s = self->state;
  if (step != s.applying || index < 0 || index >= static_cast<int>(s.checksums.size())) return;
  auto it = std::find_if(s.result.steps.rbegin(), s.result.steps.rend(), [&](const step_record& r) { return r.step == step; });
  if (it == s.result.steps.rend()) return;
  auto& rec = *it;
  s.checksums[index] = checksum;
  s.nonfinite_updates[index] = std::move(nonfinite);
  rec.stages[index].optimizer_start_ns = opt_begin;
  rec.stages[index].optimizer_end_ns = opt_end;
  if (++s.applied < static_cast<int>(s.setup.stages.size())) return;
  s.applying = -1;
  if (s.setup.cfg.supervision.check_updates) close_checked_step(self, step, rec);
  if (s.setup.verify_replicas && s.setup.dp > 1) {
    auto diverged = replica_divergence(s.checksums, s.setup.dp, step);
    if (diverged.code != run_errc::none) {
      finish(self, to_error(diverged));
      return;
    }
    s.result.replicas_verified = true;
  }
  rec.step_s = static_cast<double>(since(s, clock_type::now()) - rec.start_ns) * 1e-9;
  if (s.setup.on_step) s.setup.on_step(rec);
  if (s.overlapped) return;  // the next step runs already
  ++s.step;
  const bool to_disk = checkpoint_due(s.setup.cfg, s.step, !s.stop_reason.empty());
  if (to_disk || (s.setup.last_good && s.step < s.setup.cfg.train.steps))
    take_checkpoint(self, to_disk);
  else
    advance(self);
}

caf::behavior driver_behavior(driver_ptr self, driver_setup setup) {
  auto& s = self->state;
  s.setup = std::move(setup);
  s.step = s.setup.first_step;
  s.result.schedule = s.setup.cfg.pipeline.schedule;
  const auto& re = s.setup.cfg.pipeline.recompute;
  if (std::find(re.begin(), re.end(), true) != re.end()) s.result.schedule += "+recompute";
  s.result.stages = static_cast<int>(s.setup.stages.size()) / s.setup.dp;
  s.result.dp = s.setup.dp;
  s.result.microbatches = s.setup.microbatches;
  s.result.chunks = s.setup.cfg.pipeline.virtual_stages;
  s.result.placement = s.setup.plc.kind;
  s.result.devices = s.setup.cfg.pipeline.devices;
  s.result.partition = s.setup.cfg.pipeline.partition;
  for (auto& st : s.setup.stages) self->monitor(st);
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    if (st.finished) return;
    int index = 0;
    for (size_t i = 0; i < st.setup.stages.size(); ++i)
      if (st.setup.stages[i].address() == dm.source) index = static_cast<int>(i);
    const int per_replica = static_cast<int>(st.setup.stages.size()) / st.setup.dp;
    finish(self, to_error(stage_down(index, per_replica, st.setup.dp, st.step, dm.reason,
                                     self->system().render(dm.reason))));
  });
  return {
      [=](run_atom) -> caf::result<train_result> {
        auto& st = self->state;
        st.promise = self->make_response_promise();
        st.watchdog.progress_at = clock_type::now();
        if (st.setup.cfg.supervision.watchdog_s > 0) self->send(self, watchdog_atom::value);
        if (st.setup.async && st.step < st.setup.cfg.train.steps) {
          st.last_close = clock_type::now();
          for (int64_t t = 0; t < std::min<int64_t>(2, st.setup.cfg.train.steps); ++t) feed_async_step(self, t);
        } else {
          begin_step_or_eval(self);
        }
        return st.promise;
      },
      [=](watchdog_atom) { watch(self); },
      [=](grads_atom, grads_report& r) {
        if (self->state.setup.async)
          on_async_report(self, r);
        else
          on_grads(self, r);
      },
      [=](applied_atom, int index, int64_t step, uint64_t checksum, int64_t begin, int64_t end,
          std::string& nonfinite) { on_applied(self, index, step, checksum, begin, end, std::move(nonfinite)); },
      [=](round_done_atom, int64_t round) {
        auto& st = self->state;
        if (round != st.round || --st.rounds_pending > 0) return;
        if (st.reported < static_cast<int>(st.setup.stages.size())) start_round(self);
      },
      [=](evaluated_atom, const eval_result& r) { on_evaluated(self, r); },
  };
}

}  // namespace actorpipe::driver_detail

namespace actorpipe {

caf::actor spawn_driver(caf::actor_system& sys, driver_setup setup) {
  return sys.spawn(driver_detail::driver_behavior, std::move(setup));
}

}  // namespace actorpipe
