#pragma once
// Inside the driver actor (not a public header): its state, and the
// functions that the driver's two files share. The behavior and the step
// boundary are in driver_actor.cpp, evaluation during training and the end
// of the run in driver_eval.cpp; the bookkeeping that decides without
// sending is in driver_logic.hpp.
#include <caf/all.hpp>

#include <map>
#include <string>
#include <vector>

#include "actors/driver/driver_actor.hpp"
#include "actors/driver/driver_logic.hpp"

namespace actorpipe::driver_detail {

using clock_type = driver_clock;

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
  std::vector<std::string> nonfinite_updates;  // by stage index: what its update left non-finite
  int reported = 0;
  int applied = 0;
  int64_t applying = -1;  // the step whose optimizer acks are awaited
  bool overlapped = false;  // that step's successor already started
  // Evaluations on their way, by the updates they follow: the answers'
  // sums and how many batches are still out. `record`: one of the run's
  // evals (eval.every); `final`: the run's held-out figures (the whole
  // split), after which the run ends.
  struct eval_run {
    eval_result sum;
    int pending = 0;
    clock_type::time_point started;
    bool record = false;
    bool final = false;
  };
  std::map<int64_t, eval_run> evals;
  int64_t evaluated = -1;  // the last update count an eval.every evaluation was sent for
  bool trained = false;    // every step closed
  bool final_sent = false, final_done = false;
  bool finished = false;
  // Async: reports per step as they come, and when the last step closed.
  std::map<int64_t, std::vector<grads_report>> async_reports;
  clock_type::time_point last_close;
  watchdog_ledger watchdog;
  std::string stop_reason;  // on_nonfinite: stop
  int64_t round = 0;       // lock-step clock
  int rounds_pending = 0;

  static inline const char* name = "driver";
};

using driver_ptr = caf::stateful_actor<driver_state>*;

// driver_actor.cpp
/// The run's promise gets the result, or the error that ended the run.
void finish(driver_ptr self, caf::error err = caf::error{});
/// The null and sim devices run no model: no data, nothing to evaluate.
bool takes_data(const driver_state& s);
/// Sends step s.step's microbatches (its rate from the step alone).
void start_step(driver_ptr self);

// driver_eval.cpp
/// The evaluation after `after` updates goes out: `record` one of the run's
/// evals (eval.every), `final` the run's held-out figures.
void send_eval(driver_ptr self, int64_t after, bool record, bool final);
/// Training is over: the last evaluations, then the end of the run.
void end_of_run(driver_ptr self);
/// One stage's answer to an evaluation batch.
void on_evaluated(driver_ptr self, const eval_result& r);
/// At a step boundary or a generation's start: the evaluation due, then the
/// next step; or the end of the run.
void begin_step_or_eval(driver_ptr self);

}  // namespace actorpipe::driver_detail
