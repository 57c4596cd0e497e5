#include "actors/rank_agent.hpp"

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

#include "actors/trainer.hpp"
#include "messages/atoms.hpp"
#include "messages/errors.hpp"
#include "runtime/dist/join.hpp"
#include "runtime/dist/transport/rendezvous.hpp"
#include "runtime/util/text.hpp"

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
  static inline const char* name = "rank_agent";
};

using agent_ptr = caf::stateful_actor<agent_state>*;

caf::behavior serving(agent_ptr self);

// How long an orphaned rank waits for a standby to take over: the old
// coordinator's lease (about supervision.heartbeat_timeout_s), a new
// coordinator's start, and its connect to every rank.
double takeover_wait_s(const rank_context& cx) {
  return 2 * cx.cfg.supervision.heartbeat_timeout_s + cx.cfg.supervision.connect_timeout_s;
}

// Rank 0's process (the supervisor and the store) went down, or stopped
// answering for supervision.heartbeat_timeout_s: nothing can command this
// rank any more, and it trains on alone for no one. It stops (exit 5);
// the checkpoints on disk are whole (each written to a temporary name,
// then renamed).
run_error coordinator_lost(const std::string& where, const std::string& dir, const std::string& at,
                           const std::string& why, bool apart) {
  return run_error(run_failure{
      run_errc::coordinator_lost, -1, -1, -1,
      where + (apart ? " lost the coordinator (its process apart: the supervisor and the store) at "
                     : " lost rank 0 (the coordinator: the supervisor and the store) at ") +
          at + " (" + why + "); stopped. " +
          (dir.empty() ? std::string("If the run ended, it starts over (no checkpoint.dir)")
                       : "If the run ended, the same command with --resume " + dir +
                             " goes on from the newest checkpoint")});
}

run_error coordinator_lost(const rank_context& cx, const std::string& at, const std::string& why) {
  return coordinator_lost(cx.where, cx.cfg.checkpoint.dir, at, why, cx.opts.ranks.apart);
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
std::exception_ptr loss_of(const rank_runtime& rt, const rank_context& cx, std::exception_ptr e) {
  return as_coordinator_loss(rt, cx.env, cx.where, cx.cfg.checkpoint.dir, std::move(e));
}

// While the agent blocks in join_generation (a heal, a re-placement, the
// first set-up) or reads the next plan, no message reaches it: a rank 0
// that dies or stops then would leave this rank waiting on it in the
// rendezvous, the channel or the store until a timeout (or, in a store
// read that had begun, for good). A thread watches rank 0's store
// meanwhile (the store is in rank 0's process): once it has answered, two
// probes in a row that it refuses, or a store that still accepts a
// connection but answers nothing for supervision.heartbeat_timeout_s (a
// stopped process's kernel still accepts), end this process with the
// coordinator's loss (exit 5). Nothing of the run is left to save here;
// the checkpoints on disk are whole.
// (Not around the last store write of a run that ends well: its probe's
// connection would see rank 0 end.)
class coordinator_watch {
public:
  explicit coordinator_watch(const rank_context& cx) {
    const rank_env& env = cx.env;
    if (env.rank == 0 || env.master_addr.empty() || env.master_port <= 0) return;
    const std::string host = env.master_addr;
    const auto port = static_cast<uint16_t>(env.master_port);
    const std::string line =
        failure_line(run_errc::coordinator_lost,
                     coordinator_lost(cx, host + ":" + std::to_string(port), "its store: @, while a generation formed")
                         .what());
    // At least 1 s: the config's checks bound the key to [1, 86400].
    const auto answer_within =
        std::chrono::milliseconds(static_cast<int64_t>(cx.cfg.supervision.heartbeat_timeout_s * 1000));
    // The probe is a beat of this process's count alive/<RANK>
    // (runtime/dist/join.hpp), read back: a get of it answers at once from
    // a store that runs (a check or an add, unlike a get, waits for the
    // answer without end), and rank 0 sees a process that joins go on
    // beating while a generation forms (actors/rank_forming.cpp).
    const std::string prefix = env.store_prefix;
    const int home = cx.home >= 0 ? cx.home : cx.opts.ranks.rank;
    std::thread([done = done_, host, port, line, answer_within, prefix, home] {
      const auto lose = [&](const std::string& why) {
        std::string text = line;
        text.replace(text.find('@'), 1, why);
        std::fputs(text.c_str(), stderr);
        std::fflush(nullptr);
        std::_Exit(exit_code_for(run_errc::coordinator_lost));
      };
      bool seen = false;
      int refused = 0;
      kv_store_ptr probe;  // a connection of this thread's own, once the store accepted one
      while (!done->load()) {
        const std::string why = try_connect(host, port, std::chrono::milliseconds(300));
        if (done->load()) return;
        if (why.empty()) {
          seen = true, refused = 0;
          const auto asked = std::chrono::steady_clock::now();
          try {
            if (!probe) probe = open_client_store(host, port, answer_within);
            beat(*probe, prefix, home);
            probe->get(alive_key(prefix, home));  // bounded by answer_within, unlike a check or an add
          } catch (const std::exception&) {
            probe.reset();  // a refused one is seen by the next connect
            if (done->load()) return;
            if (std::chrono::steady_clock::now() - asked >= answer_within * 9 / 10)
              lose("no answer within " + describe_timeout(answer_within) +
                   " (supervision.heartbeat_timeout_s), though it accepts connections: stopped or hung");
          }
        } else if (seen && ++refused >= 2) {
          lose(why);
        }
        for (int i = 0; i < 10 && !done->load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }).detach();
  }
  ~coordinator_watch() { done_->store(true); }
  coordinator_watch(const coordinator_watch&) = delete;
  coordinator_watch& operator=(const coordinator_watch&) = delete;

private:
  std::shared_ptr<std::atomic<bool>> done_ = std::make_shared<std::atomic<bool>>(false);
};

caf::behavior joining(agent_ptr self) {
  return {[=](join_atom) {
    auto& s = self->state;
    const uint32_t g = s.hp.generation;
    const context_before before = before_forming(*s.cx);
    try {
      train_options opts = s.cx->opts;
      opts.epoch = g;
      coordinator_watch watch(*s.cx);
      armed arm(s.rt->store, g > 0 ? called_off_key(s.cx->env, g) : "");
      s.gen = join_generation(*s.rt, *s.cx, s.hp, opts);
    } catch (...) {
      std::exception_ptr e = std::current_exception();
      // Rank 0 called the generation off (a process lost while it
      // formed): back to the generation before, for rank 0's next plan.
      // A process that joined for this one has none to go back to.
      bool off = false;
      if (s.rank0) {
        coordinator_watch watch(*s.cx);  // a stopped store answers no check
        off = called_off(*s.rt, *s.cx, g);
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
          coordinator_watch watch(*s.cx);
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
      [=](takeover_atom, uint32_t epoch, std::string host, int32_t port,
          caf::actor dir) -> caf::result<uint32_t> {
        auto& s = self->state;
        if (!s.standby || epoch <= s.epoch) return caf::sec::request_receiver_down;
        const auto t0 = clock_type::now();
        try {
          s.rt->store = open_client_store(host, static_cast<uint16_t>(port), s.cx->timeout);
        } catch (const std::exception&) {
          return caf::sec::cannot_connect_to_node;
        }
        if (s.rank0) self->demonitor(s.rank0);
        s.gen.reset();  // this generation's stages go
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
          // A store that stops answering mid-read blocks it without end;
          // under a standby the launcher kills a coordinator that stopped,
          // and the read fails.
          std::optional<coordinator_watch> watch;
          if (!s.standby) watch.emplace(*s.cx);
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
    const char* etcd = std::getenv("ACTORPIPE_ETCD");
    st.standby = etcd && *etcd && o.env.apart;
    st.cx.reset(new rank_context{o.cfg, o.opts, o.env, where_of(o.env), o.timeout,
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

// as_coordinator_loss without asking whether the store was reached.
std::exception_ptr probed_loss(const rank_env& env, const std::string& where, const std::string& checkpoint_dir,
                               std::exception_ptr e) {
  if (!e || env.rank == 0 || env.master_addr.empty() || env.master_port <= 0) return e;
  std::string first;
  try {
    std::rethrow_exception(e);
  } catch (const run_error&) {
    return e;  // the run's own verdict, or the loss already named
  } catch (const peer_stopped&) {
    return e;
  } catch (const config_error&) {
    return e;
  } catch (const std::exception& x) {
    first = x.what();
  } catch (...) {
    first = "unknown error";
  }
  // A process killed a moment ago may still accept on its listening
  // socket while its others are reset: a few probes, 50 ms apart.
  std::string why;
  for (int probe = 0; probe < 5 && why.empty(); ++probe) {
    if (probe > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    why = try_connect(env.master_addr, static_cast<uint16_t>(env.master_port), std::chrono::milliseconds(300));
  }
  if (why.empty()) return e;
  return std::make_exception_ptr(coordinator_lost(where, checkpoint_dir,
                                                  env.master_addr + ":" + std::to_string(env.master_port),
                                                  "its store: " + why + "; " + first, env.apart));
}

struct lost_store_context {
  rank_env env;
  std::string where, dir;
  std::terminate_handler before = nullptr;
};

lost_store_context& lost_store() {
  static lost_store_context c;
  return c;
}

[[noreturn]] void on_terminate() {
  auto& c = lost_store();
  if (std::exception_ptr e = std::current_exception()) {
    std::exception_ptr lost = probed_loss(c.env, c.where, c.dir, e);
    if (lost != e) {
      try {
        std::rethrow_exception(lost);
      } catch (const run_error& x) {
        std::fputs(failure_line(x.code(), x.what()).c_str(), stderr);
      } catch (...) {
      }
      std::fflush(nullptr);
      std::_Exit(exit_code_for(run_errc::coordinator_lost));
    }
  }
  if (c.before) c.before();
  std::abort();
}

}  // namespace

std::exception_ptr as_coordinator_loss(const rank_runtime& rt, const rank_env& env, const std::string& where,
                                       const std::string& checkpoint_dir, std::exception_ptr e) {
  if (!rt.store && start_generation() == 0) return e;
  return probed_loss(env, where, checkpoint_dir, std::move(e));
}

void exit_5_on_a_lost_store(const rank_env& env, const std::string& where, const std::string& checkpoint_dir) {
  auto& c = lost_store();
  c.env = env;
  c.where = where;
  c.dir = checkpoint_dir;
  std::terminate_handler was = std::set_terminate(on_terminate);
  if (was != on_terminate) c.before = was;
}

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
