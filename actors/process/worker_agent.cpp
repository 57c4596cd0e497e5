#include "actors/process/worker_agent.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "actors/process/coordinator_watch.hpp"
#include "actors/attempt/run_options.hpp"
#include "actors/process/directory.hpp"
#include "actors/process/forming.hpp"
#include "actors/process/join_generation.hpp"
#include "messages/atoms.hpp"
#include "messages/errors.hpp"
#include "runtime/dist/launch/join.hpp"
#include "runtime/dist/transport/rendezvous.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe::rank_detail {

namespace {

// agent -> itself: join the next generation (outside the message that
// decided it, so that the state is in before the steps block).
using join_atom = caf::atom_constant<caf::atom("join")>;

struct agent_state {
  process_runtime* rt = nullptr;
  std::optional<process_start> start;
  std::unique_ptr<caf::scoped_actor> helper;  // this thread's, for the blocking steps
  std::unique_ptr<process_context> cx;
  heal_plan hp;                           // the generation to join next
  std::optional<joined_generation> gen;   // the one it serves
  caf::actor rank0;                       // rank 0's directory, once a generation formed
  std::string rank0_at;                   // its endpoint
  std::string prefix;                     // the store prefix of the last generation that formed
  std::shared_ptr<std::exception_ptr> thrown;
  caf::response_promise promise;
  // launch --coordinator etcd://: a standby takes over when the
  // coordinator is lost, and this rank waits for it (orphaned) rather
  // than stop; `epoch` counts the takeovers it accepted.
  bool standby = false;
  bool orphaned = false;
  uint32_t epoch = 0;
  // The generation this rank's context is of, and the other one it could
  // be taken over in: the record in etcd names the generation rank 0 last
  // wrote, which a rank may not have (the coordinator lost after its
  // formed word but before its record, or before a slow rank heard the
  // word). The takeover names it, and this rank takes that context.
  std::optional<uint32_t> formed;
  std::optional<std::pair<uint32_t, context_before>> other;
  static inline const char* name = "rank_agent";
};

using agent_ptr = caf::stateful_actor<agent_state>*;

caf::behavior serving(agent_ptr self);

// How long an orphaned rank waits for a standby to take over: the old
// coordinator's lease (about supervision.heartbeat_timeout_s), a new
// coordinator's start, and its connect to every rank.
double takeover_wait_s(const process_context& cx) {
  return 2 * cx.cfg.supervision.heartbeat_timeout_s + cx.cfg.supervision.connect_timeout_s;
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

// A step between generations (the next plan read, a generation formed)
// that failed while rank 0's store no longer answers lost the coordinator.
std::exception_ptr loss_of(const process_runtime& rt, const process_context& cx, std::exception_ptr e) {
  return as_coordinator_loss(rt, cx.env, cx.where, cx.cfg.checkpoint.dir, std::move(e));
}

void orphan(agent_ptr self, const std::string& why);

// The text of an exception.
std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown error";
  }
}

caf::behavior joining(agent_ptr self) {
  return {[=](join_atom) {
    auto& s = self->state;
    const uint32_t g = s.hp.generation;
    const context_before before = before_forming(*s.cx);
    // Outside the try: under a standby, the catch asks it whether it took
    // the coordinator for lost.
    std::optional<coordinator_watch> watch(std::in_place, *s.cx, s.standby);
    if (s.start->beating) std::exchange(s.start->beating, nullptr)();  // one beater from here on
    try {
      train_options opts = s.cx->opts;
      opts.epoch = g;
      armed arm(s.rt->store, g > 0 ? called_off_key(s.cx->env, g) : "");
      s.gen = join_generation(*s.rt, *s.cx, s.hp, opts);
    } catch (...) {
      std::exception_ptr e = std::current_exception();
      const bool judged_lost = watch->judged_lost();
      watch.reset();
      // Rank 0 called the generation off (a process lost while it
      // formed): back to the generation before, for rank 0's next plan.
      // A process that joined for this one has none to go back to.
      bool off = false;
      if (s.rank0) {
        coordinator_watch asking(*s.cx, s.standby);  // a stopped store answers no check
        off = called_off(*s.rt, *s.cx, g);
      }
      // Under a standby, the coordinator lost while the generation formed:
      // back to the generation before, which its record in etcd names and
      // a standby takes over. A re-partition may have begun to rewrite the
      // boundary memory, which then goes: the takeover starts from disk.
      if (!off && s.standby && s.rank0) {
        if (judged_lost || loss_of(*s.rt, *s.cx, e) != e) {
          if (!s.cx->moved_from.empty() && s.cx->boundary) s.cx->boundary->clear();
          s.other.emplace(g, before_forming(*s.cx));  // rank 0 may have formed it
          put_back(*s.cx, before);
          self->become(serving(self));
          orphan(self, what_of(e) + ", while generation " + std::to_string(g) + " formed");
          return;
        }
      }
      if (off) {
        put_back(*s.cx, before);
        self->monitor(s.rank0);
        self->become(serving(self));
        return;
      }
      // A process that joined for it waits to be taken in again (rank 0
      // does so at a later boundary when no joiner was lost).
      if (g > 0 && !s.rank0 && s.cx->home >= 0) {
        std::optional<uint32_t> again;
        try {
          coordinator_watch watch(*s.cx, s.standby);
          if (called_off(*s.rt, *s.cx, g)) {
            put_back(*s.cx, before);
            const rank_env& env = s.cx->opts.ranks;
            join_ticket t;
            t.rank = s.cx->home;
            t.apart = env.apart;
            if (s.cx->opts.on_notice)
              s.cx->opts.on_notice("RANK " + env.shown_text(s.cx->home) + ": generation " + std::to_string(g) +
                                   " was called off while it formed (a process was lost); waiting to be taken in again");
            again = wait_placed_again(*s.rt->store, env.store_prefix, t, g,
                                      env.master_addr + ":" + std::to_string(env.master_port));
            // Its plan names this process's place, as at its first join.
            s.hp = heal_plan::decode(s.rt->store->get(heal_key(s.cx->env, *again)));
          }
        } catch (...) {
          e = std::current_exception();
        }
        if (again) {
          self->send(self, join_atom::value);
          return;
        }
      }
      end(self, loss_of(*s.rt, *s.cx, e));
      return;
    }
    watch.reset();
    if (s.formed)
      s.other.emplace(*s.formed, before);
    else
      s.other.reset();  // a joiner's stand-in context is of no generation
    s.formed = g;
    s.rank0 = s.gen->peers.dirs[0];
    s.rank0_at = s.gen->links.met.endpoints[0];
    s.prefix = s.gen->links.prefix;
    self->monitor(s.rank0);
    self->become(serving(self));
  }};
}

// After a takeover only the coordinator that took this rank over
// commands it: a heal or stop from another node (an older coordinator, cut
// off and not yet stopped) is dropped, and said.
bool fenced_off(agent_ptr self) {
  auto& s = self->state;
  if (s.epoch == 0) return false;
  const auto& from = self->current_sender();
  if (from && s.rank0 && from->node() == s.rank0.node()) return false;
  if (s.cx->opts.on_notice)
    s.cx->opts.on_notice(s.cx->where + ": ignored a command from a coordinator other than takeover " +
                         std::to_string(s.epoch) + "'s (fenced off)");
  return true;
}

// launch --coordinator etcd://: the coordinator is gone; this rank's
// stages go, its boundary memory stays, and it waits for the standby that
// wins the election (takeover_atom) -- up to takeover_wait_s, then it stops
// as without etcd (exit 5).
void orphan(agent_ptr self, const std::string& why) {
  auto& s = self->state;
  self->demonitor(s.rank0);
  s.gen.reset();
  s.orphaned = true;
  const double wait = takeover_wait_s(*s.cx);
  if (s.cx->opts.on_notice)
    s.cx->opts.on_notice(s.cx->where + " lost the coordinator at " + s.rank0_at + " (" + why +
                         "); its stages stopped, its boundary memory kept; waiting up to " + fmt("%.0f", wait) +
                         " s for a standby to take the run over");
  self->delayed_send(self, std::chrono::milliseconds(static_cast<int64_t>(wait * 1000)), takeover_atom::value,
                     s.epoch);
}

// A takeover of the generation this rank's context is not of: it takes the
// other one it knows. Boundary memory laid out by another partition goes
// (the takeover then starts from disk).
void take_context_of(agent_ptr self, uint32_t taken) {
  auto& s = self->state;
  context_before now = before_forming(*s.cx);
  if (now.plan.parts != s.other->second.plan.parts && s.cx->boundary) s.cx->boundary->clear();
  put_back(*s.cx, s.other->second);
  if (s.cx->opts.on_notice)
    s.cx->opts.on_notice(s.cx->where + ": the takeover is of generation " + std::to_string(taken) + ", not " +
                         (s.formed ? std::to_string(*s.formed) : std::string("none")) +
                         ": it takes that generation's place");
  s.other.emplace(s.formed.value_or(0), std::move(now));
  s.formed = taken;
}

// Between two generations too (one called off): rank 0's next plan or its
// stop comes here.
caf::behavior serving(agent_ptr self) {
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& s = self->state;
    if (!s.rank0 || dm.source != s.rank0.address()) return;
    if (s.standby) {
      orphan(self, self->system().render(dm.reason));
      return;
    }
    end(self, std::make_exception_ptr(coordinator_lost(*s.cx, s.rank0_at, self->system().render(dm.reason))));
  });
  return {
      // A coordinator that won the election in etcd takes the run over:
      // this rank's stages go (it keeps its boundary memory), its store
      // is the new coordinator's, and only that coordinator commands it
      // from now on. An epoch not above the last one accepted is fenced
      // off: an older coordinator's.
      [=](takeover_atom, uint32_t epoch, std::string host, int32_t port, caf::actor dir,
          uint32_t taken) -> caf::result<uint32_t> {
        auto& s = self->state;
        if (!s.standby || epoch <= s.epoch) return caf::sec::request_receiver_down;
        if (s.formed != taken && !(s.other && s.other->first == taken)) {
          if (s.cx->opts.on_notice)
            s.cx->opts.on_notice(s.cx->where + ": refused takeover " + std::to_string(epoch) + " of generation " +
                                 std::to_string(taken) + ": this process holds no place in it");
          return caf::sec::request_receiver_down;
        }
        const auto t0 = clock_type::now();
        try {
          s.rt->store = open_client_store(host, static_cast<uint16_t>(port), s.cx->timeout);
        } catch (const std::exception&) {
          return caf::sec::cannot_connect_to_node;
        }
        if (s.rank0) self->demonitor(s.rank0);
        s.gen.reset();  // this generation's stages go
        if (s.formed != taken) take_context_of(self, taken);
        s.epoch = epoch;
        s.orphaned = false;
        s.cx->env.master_addr = host;
        s.cx->env.master_port = port;
        exit_5_on_a_lost_store(s.cx->env, s.cx->where, s.cx->cfg.checkpoint.dir);
        s.rank0 = std::move(dir);
        s.rank0_at = host + ":" + std::to_string(port);
        self->monitor(s.rank0);
        if (s.cx->opts.on_notice)
          s.cx->opts.on_notice(s.cx->where + ": taken over by the coordinator at " + s.rank0_at + " (takeover " +
                               std::to_string(epoch) + ", its store reached in " +
                               fmt("%.0f", ms_between(t0, clock_type::now())) + " ms)");
        return epoch;
      },
      // No coordinator took over in time.
      [=](takeover_atom, uint32_t epoch) {
        auto& s = self->state;
        if (!s.orphaned || epoch != s.epoch) return;
        end(self, std::make_exception_ptr(coordinator_lost(
                      *s.cx, s.rank0_at, "no standby took over within " + fmt("%.0f", takeover_wait_s(*s.cx)) + " s")));
      },
      [=](heal_atom, uint32_t g) {
        auto& s = self->state;
        if (fenced_off(self)) return;
        self->demonitor(s.rank0);
        try {
          // A store that stops answering mid-read blocks it without end:
          // the watch ends this process, or under a standby cuts the
          // connection, and the read fails.
          coordinator_watch watch(*s.cx, s.standby);
          s.hp = heal_plan::decode(s.rt->store->get(heal_key(s.cx->env, g)));
        } catch (const std::exception& e) {
          if (s.standby) {  // the coordinator died as it healed: a standby takes over
            orphan(self, std::string("its store gave no plan for generation ") + std::to_string(g) + ": " + e.what());
            return;
          }
          end(self, loss_of(*s.rt, *s.cx, std::current_exception()));
          return;
        }
        s.gen.reset();  // this generation's stages go
        self->send(self, join_atom::value);
        self->become(joining(self));
      },
      [=](stop_atom, int32_t code) {
        auto& s = self->state;
        if (fenced_off(self)) return;
        self->demonitor(s.rank0);
        s.rt->store->add(s.prefix + "/actorpipe/stopped", 1);  // rank 0 waits for it before it goes
        if (code == 0) {
          end(self);
          return;
        }
        end(self, std::make_exception_ptr(peer_stopped(
                      s.cx->where + ": stopped: rank 0 ended the run with exit code " + std::to_string(code), code)));
      },
  };
}

caf::behavior idle(agent_ptr self, process_runtime* rt, process_start start, std::shared_ptr<std::exception_ptr> thrown) {
  auto& s = self->state;
  s.rt = rt;
  s.start.emplace(std::move(start));
  s.thrown = std::move(thrown);
  return {[=](run_atom) -> caf::result<void> {
    auto& st = self->state;
    st.promise = self->make_response_promise();
    process_start& o = *st.start;
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
    const char* etcd = std::getenv("ACTORPIPE_ETCD");
    st.standby = etcd && *etcd && o.env.apart;
    st.cx.reset(new process_context{o.cfg, o.opts, o.env, where_of(o.env), o.timeout,
                                 rank_placement::first(o.cfg.parallel.dp, o.cfg.pipeline.stages, o.env.workers(),
                                                       o.env.apart),
                                 o.plan,
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

void run_agent(process_runtime& rt, const process_start& start) {
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
