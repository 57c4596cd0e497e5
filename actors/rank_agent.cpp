#include "actors/rank_agent.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <exception>
#include <optional>

#include "messages/atoms.hpp"
#include "actors/trainer.hpp"
#include "messages/errors.hpp"

namespace actorpipe::rank_detail {

namespace {

// agent -> itself: join the next generation (outside the message that
// decided it, so that the state is in before the steps block).
using join_atom = caf::atom_constant<caf::atom("join")>;

struct agent_state {
  rank_runtime* rt = nullptr;
  std::optional<rank_start> start;
  std::unique_ptr<caf::scoped_actor> helper;  // this thread's, for the blocking steps
  std::unique_ptr<rank_context> cx;
  heal_plan hp;                           // the generation to join next
  std::optional<joined_generation> gen;   // the one it serves
  std::shared_ptr<std::exception_ptr> thrown;
  caf::response_promise promise;
  static inline const char* name = "rank_agent";
};

using agent_ptr = caf::stateful_actor<agent_state>*;

caf::behavior serving(agent_ptr self);

// Rank 0's process (the supervisor and the store) went down, or stopped
// answering for supervision.heartbeat_timeout_s: nothing can command this
// rank any more, and it trains on alone for no one. It stops (exit 5);
// the checkpoints on disk are whole (each written to a temporary name,
// then renamed).
run_error coordinator_lost(const rank_context& cx, const std::string& at, const std::string& why) {
  const std::string& dir = cx.cfg.checkpoint.dir;
  return run_error(run_failure{
      run_errc::coordinator_lost, -1, -1, -1,
      cx.where + " lost rank 0 (the coordinator: the supervisor and the store) at " + at + " (" + why +
          "); stopped. " +
          (dir.empty() ? std::string("If the run ended, it starts over (no checkpoint.dir)")
                       : "If the run ended, the same command with --resume " + dir +
                             " goes on from the newest checkpoint")});
}

// Ends the agent: with an exception for the caller to rethrow, or none.
void end(agent_ptr self, std::exception_ptr e = nullptr) {
  auto& s = self->state;
  s.gen.reset();  // this generation's stages go
  if (s.start && s.start->dir) self->send_exit(s.start->dir, caf::exit_reason::user_shutdown);
  if (e) *s.thrown = std::move(e);
  s.promise.deliver(caf::unit);
  self->quit();
}

caf::behavior joining(agent_ptr self) {
  return {[=](join_atom) {
    auto& s = self->state;
    try {
      train_options opts = s.cx->opts;
      opts.epoch = s.hp.generation;
      s.gen = join_generation(*s.rt, *s.cx, s.hp, opts);
    } catch (...) {
      end(self, std::current_exception());
      return;
    }
    self->monitor(s.gen->peers.dirs[0]);
    self->become(serving(self));
  }};
}

caf::behavior serving(agent_ptr self) {
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& s = self->state;
    if (!s.gen || dm.source != s.gen->peers.dirs[0].address()) return;
    end(self, std::make_exception_ptr(coordinator_lost(*s.cx, s.gen->links.met.endpoints[0],
                                                       self->system().render(dm.reason))));
  });
  return {
      [=](heal_atom, uint32_t g) {
        auto& s = self->state;
        self->demonitor(s.gen->peers.dirs[0]);
        s.hp = heal_plan::decode(s.rt->store->get(heal_key(s.cx->env, g)));
        s.gen.reset();  // this generation's stages go
        self->send(self, join_atom::value);
        self->become(joining(self));
      },
      [=](stop_atom, int32_t code) {
        auto& s = self->state;
        self->demonitor(s.gen->peers.dirs[0]);
        s.rt->store->add(s.gen->links.prefix + "/actorpipe/stopped", 1);  // rank 0 waits for it before it goes
        if (code == 0) {
          end(self);
          return;
        }
        end(self, std::make_exception_ptr(peer_stopped(
                      s.cx->where + ": stopped: rank 0 ended the run with exit code " + std::to_string(code), code)));
      },
  };
}

caf::behavior idle(agent_ptr self, rank_runtime* rt, rank_start start, std::shared_ptr<std::exception_ptr> thrown) {
  auto& s = self->state;
  s.rt = rt;
  s.start.emplace(std::move(start));
  s.thrown = std::move(thrown);
  return {[=](run_atom) -> caf::result<void> {
    auto& st = self->state;
    st.promise = self->make_response_promise();
    rank_start& o = *st.start;
    // The directory this rank publishes: rank 0's stop and heal come to
    // this agent through it.
    auto& sys = self->system();
    o.dir = spawn_directory(sys, caf::actor_cast<caf::actor>(self), o.boundary);
    auto published = sys.middleman().publish(o.dir, 0, nullptr, true);
    if (!published) {
      end(self, std::make_exception_ptr(
                    rendezvous_error(where_of(o.env) + ": cannot publish its stages: " + sys.render(published.error()))));
      return st.promise;
    }
    o.port = *published;
    st.helper = std::make_unique<caf::scoped_actor>(sys);
    st.cx.reset(new rank_context{o.cfg, o.opts, o.env, where_of(o.env), o.timeout,
                                 rank_placement(o.cfg.parallel.dp, o.cfg.pipeline.stages, o.env.world_size), o.plan,
                                 o.host, *st.helper, o.dir, o.port, find_resume(o.opts, nullptr), o.boundary});
    st.hp.generation = o.home >= 0 ? o.generation : start_generation();
    if (o.home >= 0) {  // joined a running job: its plan names this process's place
      st.cx->home = o.home;
      st.hp = heal_plan::decode(rt->store->get(heal_key(o.env, o.generation)));
    }
    self->send(self, join_atom::value);
    self->become(joining(self));
    return st.promise;
  }};
}

}  // namespace

void run_agent(rank_runtime& rt, const rank_start& start) {
  auto thrown = std::make_shared<std::exception_ptr>();
  // Detached: joining a generation blocks (the rendezvous, the groups).
  auto agent = rt.sys->spawn<caf::detached>(idle, &rt, start, thrown);
  {
    caf::scoped_actor self{*rt.sys};
    self->request(agent, caf::infinite, run_atom::value).receive([] {}, [](caf::error&) {});
  }
  if (*thrown) std::rethrow_exception(*thrown);
}

}  // namespace actorpipe::rank_detail
