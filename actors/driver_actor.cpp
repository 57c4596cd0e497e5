#include "actors/driver_actor.hpp"

#include <caf/all.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "messages/atoms.hpp"
#include "messages/payloads.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/lr.hpp"
#include "runtime/model.hpp"
#include "runtime/text.hpp"

namespace actorpipe {

namespace {

using clock_type = std::chrono::steady_clock;

struct driver_state {
  driver_setup setup;
  caf::response_promise promise;
  train_result result;
  int64_t step = 0;
  double lr = 0.0;
  clock_type::time_point step_start;
  int64_t pipeline_ns = 0;
  std::vector<grads_report> reports;  // index: replica * S + rank
  std::vector<uint64_t> checksums;
  int reported = 0;
  int applied = 0;
  int64_t applying = -1;  // the step whose optimizer acks are awaited
  bool overlapped = false;  // that step's successor already started
  int eval_pending = 0;
  eval_result eval_total;
  bool finished = false;
  // Async: reports per step as they come, and when the last step closed.
  std::map<int64_t, std::vector<grads_report>> async_reports;
  clock_type::time_point last_close;
  // Watchdog: ops fired over all stages at the last check, and when that
  // count last moved.
  int64_t fired_seen = -1;
  std::string stop_reason;  // on_nonfinite: stop
  clock_type::time_point progress_at;
  int64_t round = 0;       // lock-step clock
  int rounds_pending = 0;

  static inline const char* name = "driver";
};

using driver_ptr = caf::stateful_actor<driver_state>*;

int64_t since(const driver_state& s, clock_type::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t - s.setup.origin).count();
}

void finish(driver_ptr self, caf::error err = caf::error{}) {
  auto& s = self->state;
  if (s.finished) return;
  s.finished = true;
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
  if (s.step > 0 && cfg.train.lr_schedule.type == "step" &&
      s.step % cfg.train.lr_schedule.step_size == 0)
    s.lr *= cfg.train.lr_schedule.gamma;  // chained, like torch's StepLR
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
                 activation_msg{{0, s.step, static_cast<int32_t>(i), 0, s.round}, mbs[i].x, mbs[i].y, nullptr});
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
               activation_msg{{0, 0, static_cast<int32_t>(t * s.setup.microbatches + static_cast<int64_t>(i)), 0, 0},
                              mbs[i].x, mbs[i].y, nullptr});
}

void start_eval(driver_ptr self);

// Async: every stage has stepped its weights for step `t`.
void on_async_report(driver_ptr self, grads_report& r) {
  auto& s = self->state;
  const int stages = static_cast<int>(s.setup.stages.size());
  auto& reps = s.async_reports[r.step];
  reps.push_back(std::move(r));
  if (static_cast<int>(reps.size()) < stages) return;
  const int64_t t = reps.front().step;
  std::sort(reps.begin(), reps.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  auto now = clock_type::now();
  step_record rec;
  rec.step = t;
  rec.lr = lr_at(s.setup.cfg.train, t);
  rec.grad_norm = 0.0;  // each stage steps alone; there is no global norm
  for (auto& rep : reps) rec.loss += rep.loss_sum;
  // Steps overlap: a step's time is from the previous step's close to its own.
  rec.step_s = std::chrono::duration<double>(now - s.last_close).count();
  rec.pipeline_s = rec.step_s;
  rec.start_ns = since(s, s.last_close);
  const int64_t span = std::chrono::duration_cast<std::chrono::nanoseconds>(now - s.last_close).count();
  s.last_close = now;
  for (auto& rep : reps) {
    s.result.duplicates += rep.stats.duplicates;
    rec.stages.push_back(std::move(rep.stats));
  }
  rec.bubble = measured_bubble(rec.stages, span);
  s.async_reports.erase(t);
  s.result.steps.push_back(rec);
  if (s.setup.on_step) s.setup.on_step(s.result.steps.back());
  if (t + 2 < s.setup.cfg.train.steps) feed_async_step(self, t + 2);
  if (t + 1 == s.setup.cfg.train.steps) start_eval(self);
}

void start_eval(driver_ptr self) {
  auto& s = self->state;
  const auto& d = *s.setup.data;
  int64_t n = d.test_x.defined() ? d.test_x.size(0) : 0;
  if (n == 0 || !takes_data(s)) {
    finish(self);
    return;
  }
  const int64_t chunk = std::max<int64_t>(1, s.setup.cfg.train.batch_size);
  for (int64_t i = 0; i < n; i += chunk) {
    int64_t e = std::min(n, i + chunk);
    ++s.eval_pending;
    self->send(s.setup.stages.front(), eval_atom::value,
               eval_msg{d.test_x.slice(0, i, e), d.test_y.slice(0, i, e)});
  }
}

void allreduce_figures(step_record& rec);

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
  // Global norm over every parameter in model order (virtual stage by
  // virtual stage), as torch.nn.utils.clip_grad_norm_ computes it. With
  // replicas, every one holds the summed gradients: replica 0's norms are
  // the global ones.
  std::vector<at::Tensor> norms;
  for (int k = 0; k < s.setup.plc.count(); ++k)
    norms.push_back(s.reports[s.setup.plc.rank_of(k)].grad_norms.at(s.setup.plc.chunk_of(k)));
  auto total = torch::cat(norms).norm(2);
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
    const grads_report* first = nullptr;
    for (const auto& rep : s.reports)
      if (rep.nonfinite.mb >= 0 && (!first || rep.nonfinite.at_ns < first->nonfinite.at_ns)) first = &rep;
    std::string where = first ? "first seen on " +
                                    (s.setup.dp > 1 ? "replica " + std::to_string(first->replica) + " " : std::string()) +
                                    "stage " + std::to_string(first->rank) + ", microbatch " +
                                    std::to_string(first->nonfinite.mb) + ", in a" +
                                    (first->nonfinite.where == "activation" ? "n activation" : " gradient")
                              : std::string("in the gradients");
    const bool stop = s.setup.cfg.supervision.on_nonfinite == "stop";
    step_notice = "step " + std::to_string(s.step) + ": non-finite value " + where + "; " +
                  (stop ? "stopping (supervision.on_nonfinite: stop)"
                        : "step skipped, weights and optimizer state unchanged");
    s.result.notices.push_back(step_notice);
    s.result.skipped_steps.push_back(s.step);
    if (stop) s.stop_reason = step_notice;
    // A run that skips most of its steps has not trained: say so, and stop.
    const auto& sv = s.setup.cfg.supervision;
    const auto skipped = static_cast<double>(s.result.skipped_steps.size());
    if (!stop && skipped > sv.max_skipped_fraction * static_cast<double>(s.setup.cfg.train.steps))
      s.stop_reason = step_notice + "; " + std::to_string(s.result.skipped_steps.size()) + " of the run's " +
                      std::to_string(s.setup.cfg.train.steps) +
                      " steps skipped for a NaN or an infinity, more than supervision.max_skipped_fraction " +
                      fmt("%g", sv.max_skipped_fraction) + " allows; stopping";
  }
  m.checksum = s.setup.verify_replicas && s.setup.dp > 1;
  double max_norm = s.setup.cfg.train.clip_grad_norm;
  if (max_norm > 0)
    m.clip_coef = torch::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0);
  s.result.steps.push_back(step_record{});
  auto& rec = s.result.steps.back();
  rec.step = s.step;
  rec.grad_norm = total_norm;
  rec.skipped = m.skip;
  rec.notice = step_notice;
  rec.lr = s.lr;
  int64_t correct = 0, samples = 0;
  for (auto& rep : s.reports) {
    rec.loss += rep.loss_sum;
    correct += rep.correct;
    samples += rep.samples;
  }
  if (samples > 0) rec.train_accuracy = static_cast<double>(correct) / static_cast<double>(samples);
  rec.pipeline_s = static_cast<double>(s.pipeline_ns) * 1e-9;
  rec.start_ns = since(s, s.step_start);
  for (auto& rep : s.reports) {
    s.result.duplicates += rep.stats.duplicates;
    rec.stages.push_back(std::move(rep.stats));
  }
  rec.bubble = measured_bubble(rec.stages, s.pipeline_ns);
  allreduce_figures(rec);
  s.checksums.assign(s.setup.stages.size(), 0);
  s.applied = 0;
  s.applying = s.step;
  for (auto& st : s.setup.stages) self->send(st, apply_atom::value, m);
  // The next step need not wait for the optimizer acks: every stage handles
  // this apply before anything of the next step reaches it (the driver sent
  // it first, and each stage's inputs come from stages that did the same).
  // Not where the boundary is also a snapshot, a check or the end.
  const int64_t next = s.step + 1;
  const int64_t every = s.setup.cfg.checkpoint.every;
  s.overlapped = next < s.setup.cfg.train.steps && s.stop_reason.empty() && !s.setup.last_good &&
                 !(every > 0 && next % every == 0) && !(s.setup.verify_replicas && s.setup.dp > 1) &&
                 !s.setup.cfg.pipeline.lockstep;
  if (s.overlapped) {
    s.step = next;
    start_step(self);
  }
}

// Every quarter of watchdog_s: ask each stage how many ops it has fired. No
// change for watchdog_s (or a stage that does not answer) is a hang: the run
// stops with every stage's row of the op grid, the stuck ones marked.
void watch(driver_ptr self) {
  auto& s = self->state;
  const double limit = s.setup.cfg.supervision.watchdog_s;
  if (limit <= 0 || s.finished) return;
  const auto period = std::chrono::microseconds(std::max<int64_t>(20000, static_cast<int64_t>(limit * 250000)));
  const int n = static_cast<int>(s.setup.stages.size());
  auto pending = std::make_shared<int>(n);
  auto rows = std::make_shared<std::vector<stage_status>>(n);
  auto answered = std::make_shared<std::vector<char>>(n, 0);
  auto conclude = [=] {
    auto& st = self->state;
    if (st.finished) return;
    int64_t fired = 0;
    bool all = true;
    for (int i = 0; i < n; ++i) {
      fired += (*rows)[i].fired;
      all = all && (*answered)[i];
    }
    const auto now = clock_type::now();
    if (all && fired != st.fired_seen) {
      st.fired_seen = fired;
      st.progress_at = now;
    } else if (now - st.progress_at >= std::chrono::duration<double>(limit)) {
      const int per_replica = n / st.setup.dp;
      std::string grid = "watchdog: no op fired anywhere for " + fmt("%g", limit) + " s; the op grid:\n";
      for (int i = 0; i < n; ++i) {
        const bool stuck = !(*answered)[i] || !(*rows)[i].done;
        grid += (stuck ? ">> " : "   ") +
                (st.setup.dp > 1 ? "replica " + std::to_string(i / per_replica) + " " : std::string()) +
                ((*answered)[i] ? (*rows)[i].grid
                                : "stage " + std::to_string(i % per_replica) + ": does not answer (blocked inside an op)") +
                "\n";
      }
      finish(self, caf::make_error(caf::sec::runtime_error, grid));
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
    finish(self, caf::make_error(caf::sec::runtime_error, s.stop_reason +
                                                              (s.result.checkpoints.empty()
                                                                   ? std::string()
                                                                   : "; checkpoint " + s.result.checkpoints.back())));
    return;
  }
  if (s.step < s.setup.cfg.train.steps)
    start_step(self);
  else
    start_eval(self);
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
              finish(self, caf::make_error(caf::sec::runtime_error,
                                           "the checkpoint after step " + std::to_string(c.step) +
                                               " could not be written: " + e.what() + "; " +
                                               (st.result.checkpoints.empty()
                                                    ? std::string("no checkpoint of this run is on disk")
                                                    : "the latest good one is " + st.result.checkpoints.back())));
              return;
            }
            prune_checkpoints(cc.dir, c.step, cc.keep_last);
          }
          st.result.checkpoint_s += std::chrono::duration<double>(clock_type::now() - begin).count();
          if (st.setup.last_good) *st.setup.last_good = std::move(c);
          advance(self);
        });
}

// Allreduce time per stage and how much of it overlapped the step's
// compute (the other stages' cool-down).
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

void on_applied(driver_ptr self, int index, int64_t step, uint64_t checksum, int64_t opt_begin, int64_t opt_end) {
  auto& s = self->state;
  if (step != s.applying || index < 0 || index >= static_cast<int>(s.checksums.size())) return;
  auto it = std::find_if(s.result.steps.rbegin(), s.result.steps.rend(), [&](const step_record& r) { return r.step == step; });
  if (it == s.result.steps.rend()) return;
  auto& rec = *it;
  s.checksums[index] = checksum;
  rec.stages[index].optimizer_start_ns = opt_begin;
  rec.stages[index].optimizer_end_ns = opt_end;
  if (++s.applied < static_cast<int>(s.setup.stages.size())) return;
  s.applying = -1;
  if (s.setup.verify_replicas && s.setup.dp > 1) {
    const int per_replica = static_cast<int>(s.checksums.size()) / s.setup.dp;
    for (int d = 1; d < s.setup.dp; ++d)
      for (int r = 0; r < per_replica; ++r)
        if (s.checksums[d * per_replica + r] != s.checksums[r]) {
          finish(self, caf::make_error(caf::sec::runtime_error,
                                       "replicas diverged after step " + std::to_string(step) + ": stage " +
                                           std::to_string(r) + " of replica " + std::to_string(d) +
                                           " differs from replica 0 (weight checksums " +
                                           std::to_string(s.checksums[d * per_replica + r]) + " and " +
                                           std::to_string(s.checksums[r]) + ")"));
          return;
        }
    s.result.replicas_verified = true;
  }
  rec.step_s = static_cast<double>(since(s, clock_type::now()) - rec.start_ns) * 1e-9;
  if (s.setup.on_step) s.setup.on_step(rec);
  if (s.overlapped) return;  // the next step runs already
  ++s.step;
  const int64_t every = s.setup.cfg.checkpoint.every;
  const bool to_disk =
      every > 0 && (s.step % every == 0 || s.step == s.setup.cfg.train.steps || !s.stop_reason.empty());
  if (to_disk || (s.setup.last_good && s.step < s.setup.cfg.train.steps))
    take_checkpoint(self, to_disk);
  else
    advance(self);
}

caf::behavior driver_behavior(driver_ptr self, driver_setup setup) {
  auto& s = self->state;
  s.setup = std::move(setup);
  s.step = s.setup.first_step;
  // The rate of the step before, so start_step's StepLR chain continues
  // with the same bits an uninterrupted run has.
  s.lr = s.step > 0 ? lr_at(s.setup.cfg.train, s.step - 1) : s.setup.cfg.train.optimizer.lr;
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
    if (self->state.finished) return;
    int rank = 0;
    for (size_t i = 0; i < self->state.setup.stages.size(); ++i)
      if (self->state.setup.stages[i].address() == dm.source) rank = static_cast<int>(i);
    const int per_replica = static_cast<int>(self->state.setup.stages.size()) / self->state.setup.dp;
    const std::string who = self->state.setup.dp > 1 ? "replica " + std::to_string(rank / per_replica) + " stage " +
                                                           std::to_string(rank % per_replica)
                                                     : "stage " + std::to_string(rank);
    finish(self, caf::make_error(caf::sec::runtime_error, who + " stopped at step " +
                                                              std::to_string(self->state.step) + ": " +
                                                              self->system().render(dm.reason)));
  });
  return {
      [=](run_atom) -> caf::result<train_result> {
        auto& st = self->state;
        st.promise = self->make_response_promise();
        st.progress_at = clock_type::now();
        if (st.setup.cfg.supervision.watchdog_s > 0) self->send(self, watchdog_atom::value);
        if (st.setup.cfg.train.steps <= st.step) {
          start_eval(self);
        } else if (st.setup.async) {
          st.last_close = clock_type::now();
          for (int64_t t = 0; t < std::min<int64_t>(2, st.setup.cfg.train.steps); ++t) feed_async_step(self, t);
        } else {
          start_step(self);
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
      [=](applied_atom, int index, int64_t step, uint64_t checksum, int64_t begin, int64_t end) {
        on_applied(self, index, step, checksum, begin, end);
      },
      [=](round_done_atom, int64_t round) {
        auto& st = self->state;
        if (round != st.round || --st.rounds_pending > 0) return;
        if (st.reported < static_cast<int>(st.setup.stages.size())) start_round(self);
      },
      [=](evaluated_atom, const eval_result& r) {
        auto& st = self->state;
        st.eval_total.correct += r.correct;
        st.eval_total.total += r.total;
        st.eval_total.loss_sum += r.loss_sum;
        if (--st.eval_pending > 0) return;
        st.result.test_accuracy = static_cast<double>(st.eval_total.correct) /
                                  static_cast<double>(std::max<int64_t>(1, st.eval_total.total));
        st.result.test_loss =
            st.eval_total.loss_sum / static_cast<double>(std::max<int64_t>(1, st.eval_total.total));
        finish(self);
      },
  };
}

}  // namespace

caf::actor spawn_driver(caf::actor_system& sys, driver_setup setup) {
  return sys.spawn(driver_behavior, std::move(setup));
}

}  // namespace actorpipe
