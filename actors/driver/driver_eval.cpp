// The driver's evaluations: during training (eval.every) at the step
// boundaries they follow, and the run's held-out figures at its end. A
// synchronous run waits for an evaluation; under async the stages evaluate
// the copies of the weights they kept while the stream goes on.
#include <chrono>

#include "actors/driver/driver_state.hpp"
#include "messages/atoms.hpp"

namespace actorpipe::driver_detail {

namespace {

void after_eval(driver_ptr self, int64_t after);

}  // namespace

// The evaluation after `after` updates goes out (see driver_state::eval_run).
void send_eval(driver_ptr self, int64_t after, bool record, bool final) {
  auto& s = self->state;
  const auto& cfg = s.setup.cfg;
  if (record) s.evaluated = after;
  if (final) s.final_sent = true;
  auto msgs = takes_data(s) ? eval_batches(*s.setup.data, cfg.train.batch_size, final ? 0 : cfg.eval.batches, after)
                            : std::vector<eval_msg>{};
  if (msgs.empty()) {  // nothing held out: nothing to record
    if (final) s.final_done = true;
    after_eval(self, after);
    return;
  }
  auto& run = s.evals[after];
  run = driver_state::eval_run{};
  run.pending = static_cast<int>(msgs.size());
  run.started = clock_type::now();
  run.record = record;
  run.final = final;
  for (auto& m : msgs) self->send(s.setup.stages.front(), eval_atom::value, std::move(m));
}

// Training is over (every step closed): the last evaluation (eval.every),
// the held-out figures over the whole split, then the end, once no
// evaluation is on its way. One pass serves both evaluations when
// eval.batches takes the whole split.
void end_of_run(driver_ptr self) {
  auto& s = self->state;
  const auto& cfg = s.setup.cfg;
  const int64_t steps = s.setup.async ? cfg.train.steps : s.step;  // the updates done
  if (eval_due(cfg.eval, steps, steps) && s.evaluated < steps && s.evals.count(steps) == 0) {
    send_eval(self, steps, true, cfg.eval.batches == 0);
    return;
  }
  if (!s.final_sent && s.evals.count(steps) == 0) {
    send_eval(self, steps, false, true);
    return;
  }
  if (s.final_done && s.evals.empty()) finish(self);
}

// Every answer of the evaluation after `after` updates is in.
void on_evaluated(driver_ptr self, const eval_result& r) {
  auto& s = self->state;
  auto it = s.evals.find(r.after);
  if (it == s.evals.end()) return;
  auto& run = it->second;
  run.sum.correct += r.correct;
  run.sum.total += r.total;
  run.sum.loss_sum += r.loss_sum;
  if (--run.pending > 0) return;
  const driver_state::eval_run done = std::move(run);
  s.evals.erase(it);
  if (done.record) {
    const double seconds = std::chrono::duration<double>(clock_type::now() - done.started).count();
    const eval_record rec = close_eval(done.sum, r.after, seconds);
    record_eval(s.result.evals, rec);  // async evaluations may end out of order
    if (s.setup.on_eval) s.setup.on_eval(rec);
  }
  if (done.final) {
    const double n = static_cast<double>(std::max<int64_t>(1, done.sum.total));
    s.result.test_accuracy = static_cast<double>(done.sum.correct) / n;
    s.result.test_loss = done.sum.loss_sum / n;
    s.final_done = true;
  }
  after_eval(self, r.after);
}

namespace {

// What follows the evaluation after `after` updates: a synchronous run
// waits for it and goes on with its next step; an async stream went on
// meanwhile. After the last update, the end of the run.
void after_eval(driver_ptr self, int64_t after) {
  auto& s = self->state;
  if (s.setup.async) {
    if (s.trained) end_of_run(self);
  } else if (after >= s.setup.cfg.train.steps || s.trained) {
    end_of_run(self);
  } else {
    start_step(self);
  }
}

}  // namespace

// At a step boundary (or a generation's start): the evaluation due after
// the updates done so far, if not sent yet, then the next step; or, with
// every step done, the end of the run.
void begin_step_or_eval(driver_ptr self) {
  auto& s = self->state;
  const int64_t steps = s.setup.cfg.train.steps;
  if (s.step >= steps) {
    s.trained = true;
    end_of_run(self);
    return;
  }
  if (eval_due(s.setup.cfg.eval, s.step, steps) && s.evaluated < s.step) {
    send_eval(self, s.step, true, false);
    return;
  }
  start_step(self);
}

}  // namespace actorpipe::driver_detail
