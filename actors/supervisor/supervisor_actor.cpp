#include "actors/supervisor/supervisor_actor.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <exception>
#include <optional>

#include "actors/attempt/restart_ledger.hpp"
#include "messages/atoms.hpp"
#include "messages/errors.hpp"
#include "runtime/model/model.hpp"

namespace actorpipe {

namespace {

// supervisor -> itself: every actor of the generation went before the
// state that waits for them began.
using gone_atom = caf::atom_constant<caf::atom("gone")>;

struct supervisor_state {
  std::function<std::unique_ptr<generation_host>()> make_host;
  std::unique_ptr<generation_host> host;
  train_options opts;  // the caller's
  // Written by the driver's thread as steps close; read once it answered.
  std::shared_ptr<supervision_log> log = std::make_shared<supervision_log>();
  uint32_t number = 0;  // the next generation's
  std::optional<generation> gen;
  std::vector<caf::actor_addr> alive;  // the generation's actors here, monitored, not down yet
  train_output out;
  int pending = 0;  // replies still awaited (wire, weights)
  bool answered = false;  // the driver answered the run (it quits after that, as it should)
  run_failure failure{run_errc::none, -1, -1, -1, {}};  // the current generation's first
  std::shared_ptr<std::exception_ptr> thrown;  // set-up's exception, for the caller
  caf::response_promise promise;
  static inline const char* name = "supervisor";
};

using supervisor_ptr = caf::stateful_actor<supervisor_state>*;

caf::behavior running(supervisor_ptr self);
caf::behavior winding_down(supervisor_ptr self, const char* name, std::function<void(supervisor_ptr)> then);

void enter(supervisor_ptr self, const char* state) { self->state.log->states.emplace_back(state); }

// Ends the supervisor with what set-up threw: the caller rethrows it.
void fail_with_exception(supervisor_ptr self, std::exception_ptr e) {
  *self->state.thrown = std::move(e);
  self->state.promise.deliver(make_error(run_errc::failed));
  self->quit();
}

// The host builds the next generation; every actor of it here is monitored.
void start_generation(supervisor_ptr self) {
  auto& s = self->state;
  s.gen = s.host->start(self->system(), s.number++, *s.log);
  s.alive.clear();
  for (auto& a : s.gen->local) {
    self->monitor(a);
    s.alive.push_back(a.address());
  }
  s.out = train_output{};
  s.answered = false;
  s.failure = run_failure{run_errc::none, -1, -1, -1, {}};
}

// Gives up with `f`: the other processes are told, this one's actors go.
void give_up(supervisor_ptr self, run_failure f) {
  auto& s = self->state;
  s.host->finish(exit_code_for(f.code));
  s.host->stop(*s.gen);
  self->become(winding_down(self, "giving_up", [f = std::move(f)](supervisor_ptr me) {
    me->state.promise.deliver(to_error(f));
    me->quit();
  }));
}

// The generation failed with s.failure: the host decides while its actors
// still run (a heal asks them what they hold), then they go.
void on_failed(supervisor_ptr self) {
  auto& s = self->state;
  host_decision next;
  try {
    next = s.host->decide(*s.gen, s.failure, *s.log);
  } catch (...) {
    s.host->stop(*s.gen);
    fail_with_exception(self, std::current_exception());
    return;
  }
  if (!next.retry) {
    give_up(self, std::move(next.failure));
    return;
  }
  s.host->stop(*s.gen);
  self->become(winding_down(self, "healing", [](supervisor_ptr me) {
    try {
      start_generation(me);
    } catch (...) {
      fail_with_exception(me, std::current_exception());
      return;
    }
    me->become(running(me));
  }));
}

// A reply's error, the generation's first failure: the generation ends.
void fail(supervisor_ptr self, const caf::error& err) {
  auto& s = self->state;
  if (!s.gen || s.failure.code != run_errc::none) return;
  s.failure = failure_of(self->system(), err);
  on_failed(self);
}

// Every actor is gone: the output, with the generations merged.
void deliver_output(supervisor_ptr self) {
  auto& s = self->state;
  auto& out = s.out;
  out.result.allreduce = s.gen->backend;
  out.result.split_backward = s.gen->plan.pol->splits_backward();
  out.result.resumed_from = s.gen->resumed_from;
  s.host->complete(out);
  out.result.supervisor_states = s.log->states;
  if (s.host->supervised()) {
    merge_generations(out.result, std::move(s.log->steps), std::move(s.log->notices), s.opts.skip_steps,
                      s.gen->resumed_after, s.log->restarts, s.log->recovery_s);
    out.result.evals = std::move(s.log->evals);
  }
  s.promise.deliver(std::move(out));
  self->quit();
}

// Replica 0's weights (the others hold the same, --verify-replicas), in
// model order whatever stage or chunk held a layer; then every process is
// told the run is done, and every actor goes.
void collect_weights(supervisor_ptr self) {
  auto& s = self->state;
  auto& g = *s.gen;
  s.pending = g.plan.stages;
  for (int r = 0; r < g.plan.stages; ++r)
    self->request(g.stages[static_cast<size_t>(r)], s.host->request_timeout(), weights_atom::value)
        .then(
            [=](named_params& w) {
              auto& st = self->state;
              for (auto& p : w) st.out.weights.push_back(std::move(p));
              if (--st.pending > 0) return;
              sort_by_layer(st.out.weights);
              st.host->finish(0);
              st.host->stop(*st.gen);
              self->become(winding_down(self, "closing", deliver_output));
            },
            [=](caf::error& err) { fail(self, err); });
}

// Wires every replica's stages, then runs the driver.
void run_generation(supervisor_ptr self) {
  auto& g = *self->state.gen;
  const int S = g.plan.stages;
  self->state.pending = S * g.plan.dp;
  for (int d = 0; d < g.plan.dp; ++d) {
    std::vector<caf::actor> replica(g.stages.begin() + d * S, g.stages.begin() + (d + 1) * S);
    for (int r = 0; r < S; ++r)
      self->request(replica[static_cast<size_t>(r)], self->state.host->request_timeout(), wire_atom::value, replica,
                    g.driver)
          .then(
              [=] {
                auto& st = self->state;
                if (--st.pending > 0 || st.failure.code != run_errc::none) return;
                self->request(st.gen->driver, caf::infinite, run_atom::value)
                    .then(
                        [=](train_result& r) {
                          self->state.answered = true;
                          self->state.out.result = std::move(r);
                          collect_weights(self);
                        },
                        [=](caf::error& err) { fail(self, err); });
              },
              [=](caf::error& err) { fail(self, err); });
  }
}

// An actor of the current generation went down: no longer waited for. In
// running, the driver notices a stage's death itself (it fails the run,
// naming the stage); the driver's own is a failure here.
bool forget(supervisor_ptr self, const caf::down_msg& dm) {
  auto& alive = self->state.alive;
  auto it = std::find(alive.begin(), alive.end(), dm.source);
  if (it == alive.end()) return false;
  alive.erase(it);
  return true;
}

caf::behavior running(supervisor_ptr self) {
  enter(self, "running");
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& s = self->state;
    if (!forget(self, dm)) return;
    // The driver quits once it answered the run: only a driver gone before
    // that is a failure. One that failed before the run was asked for (a
    // stage lost while the stages were wired) quits with the run's error.
    if (dm.source == s.gen->driver.address() && !s.answered && s.failure.code == run_errc::none) {
      if (!read_failure(dm.reason, s.failure))
        s.failure =
            run_failure{run_errc::failed, -1, -1, -1, "the driver stopped: " + self->system().render(dm.reason)};
      on_failed(self);
    }
  });
  run_generation(self);
  return {[](run_atom) {}};  // the run is under way; a second request is ignored
}

// Waits until every actor of the generation here is down, then `then`.
caf::behavior winding_down(supervisor_ptr self, const char* name, std::function<void(supervisor_ptr)> then) {
  auto finish_if_done = [=] {
    if (self->state.alive.empty()) then(self);
  };
  self->set_down_handler([=](caf::down_msg& dm) {
    if (forget(self, dm)) finish_if_done();
  });
  enter(self, name);
  // Every actor went before this state began: act once the state is in.
  if (self->state.alive.empty()) self->send(self, gone_atom::value);
  return {[=](gone_atom) { finish_if_done(); }};
}

caf::behavior idle(supervisor_ptr self, std::function<std::unique_ptr<generation_host>()> make_host,
                   train_options opts, std::shared_ptr<std::exception_ptr> thrown) {
  auto& s = self->state;
  s.make_host = std::move(make_host);
  s.opts = std::move(opts);
  s.thrown = std::move(thrown);
  return {[=](run_atom) -> caf::result<train_output> {
    auto& st = self->state;
    st.promise = self->make_response_promise();
    try {
      st.host = st.make_host();
      start_generation(self);
    } catch (...) {
      fail_with_exception(self, std::current_exception());
      return st.promise;
    }
    self->become(running(self));
    return st.promise;
  }};
}

}  // namespace

train_output supervise(caf::actor_system& sys, std::function<std::unique_ptr<generation_host>()> make_host,
                       const train_options& opts) {
  auto thrown = std::make_shared<std::exception_ptr>();
  // Detached: set-up (building a generation's model, groups, a rendezvous)
  // blocks.
  auto sup = sys.spawn<caf::detached>(idle, std::move(make_host), opts, thrown);
  train_output out;
  run_failure failure{run_errc::none, -1, -1, -1, {}};
  {
    caf::scoped_actor self{sys};
    self->request(sup, caf::infinite, run_atom::value)
        .receive([&](train_output& o) { out = std::move(o); },
                 [&](caf::error& err) { failure = failure_of(sys, err); });
  }
  if (*thrown) std::rethrow_exception(*thrown);
  if (failure.code != run_errc::none) throw_run_error(std::move(failure));
  return out;
}

}  // namespace actorpipe
