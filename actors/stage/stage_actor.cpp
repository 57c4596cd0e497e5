#include "actors/stage/stage_actor.hpp"
#include "runtime/dist/placement/boundary_memory.hpp"
#include "runtime/dist/placement/heal_plan.hpp"

#include <sys/prctl.h>

#include <csignal>

#include <algorithm>

#include "actors/stage/stage_state.hpp"
#include "runtime/model/optimizer_state.hpp"
#include "runtime/dist/transport/p2p_group.hpp"  // transfer_error
#include "runtime/dist/transport/shared_segments.hpp"
#include "runtime/dist/transport/state_transfer.hpp"

namespace actorpipe {

namespace stage_detail {

std::atomic<int> live_stage_count{0};

}  // namespace stage_detail

namespace {

using namespace stage_detail;

caf::behavior running(stage_ptr self);
stage_snapshot snapshot_of(stage_state& st, bool for_checkpoint = false);
std::string keep_boundary(stage_ptr self, int64_t step, bool start);
std::string post_copy(stage_state& st, const stage_snapshot& snap);
void keep_after(stage_ptr self, int64_t step);
void send_copy(stage_ptr self, int64_t step, std::string described);
void copy_landed(stage_ptr self);
void apply(stage_ptr self, const apply_msg& m);

/// The initial state: waits to learn its neighbours and its driver.
caf::behavior stage_behavior(stage_ptr self, stage_setup setup) {
  auto& s = self->state;
  s.setup = std::move(setup);
  s.faults = fault_plan(s.setup.faults, s.setup.fault_seed, s.setup.rank, s.setup.replica);
  s.pol = s.setup.pol;
  if (!s.pol) throw std::invalid_argument("stage spawned without a schedule policy");
  s.split = s.pol->splits_backward();
  s.plc = s.pol->layout(s.setup.stages);
  compute_shape shape;
  shape.layers = s.setup.layers;
  shape.microbatches = s.setup.microbatches;
  shape.split = s.split;
  shape.recompute = s.setup.recompute;
  shape.work = computes(s);
  shape.batch_size = s.setup.batch_size;
  if (s.setup.compute_dtype != s.setup.dtype) shape.compute_dtype = s.setup.compute_dtype;
  stage_state* st = &s;
  shape.to_device = [st](const at::Tensor& t, at::ScalarType type) { return on_device(*st, t, type); };
  s.compute = stage_compute(std::move(shape));
  for (const auto& chunk : s.compute.chunk_params())
    for (const auto& p : chunk) s.params.push_back(p);
  for (const auto& chunk : s.setup.layers)
    for (auto& [name, t] : chunk->named_parameters()) s.param_names.push_back(name);
  s.opt = make_optimizer(s.setup.optimizer, s.params);
  if (s.setup.optimizer_copy) restore_optimizer_state(*s.opt, s.params, *s.setup.optimizer_copy);
  s.aside = s.setup.boundary && !s.setup.live_boundary && !s.setup.async && steps_aside(*s.opt) &&
            std::all_of(s.params.begin(), s.params.end(), [](const at::Tensor& p) { return p.is_cpu(); });
  if (s.setup.async) {
    if (s.split || s.setup.chunks != 1)
      throw std::invalid_argument("async runs one chunk per stage with a full backward");
    s.versions = weight_versions(s.params, s.setup.steps);
  }
  self->set_exception_handler([](caf::scheduled_actor* a, std::exception_ptr& eptr) -> caf::error {
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      return caf::make_error(caf::sec::runtime_error, std::string("stage: ") + e.what());
    }
  });
  return {
      [=](wire_atom, std::vector<caf::actor> ranks, caf::actor driver) -> caf::result<void> {
        auto& st = self->state;
        if (st.setup.keeper_stage >= 0) st.keeper = ranks.at(static_cast<size_t>(st.setup.keeper_stage));
        // Runs on this stage's own thread: the intra-op pool size is per thread.
        if (!st.setup.shared_thread) at::set_num_threads(std::max(1, st.setup.intra_op_threads));
        // A paced op should end on time: the default 50 us timer slack would
        // add to every op on the critical path.
        if (st.setup.pace_ms > 0 || st.setup.work == stage_setup::work_kind::timed)
          prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
        st.nothing = at::empty({0});
        if (computes(st)) {
          st.queue = device_stream::open(st.setup.device);
          if (st.queue) st.queue->enter();
        }
        link_setup ls;
        ls.rank = st.setup.rank;
        ls.microbatches = st.setup.microbatches;
        if (st.setup.async) ls.step_microbatches = st.setup.step_microbatches;
        ls.chunks = st.setup.chunks;
        ls.plc = st.plc;
        ls.device = st.setup.device;
        ls.devices = st.setup.devices;
        ls.lockstep = st.setup.lockstep;
        ls.epoch = st.setup.epoch;
        ls.faults = st.faults;
        ls.queue = st.queue.get();
        ls.stats = &st.stats;
        ls.step = &st.step;
        ls.process_of = st.setup.process_of;
        ls.process = st.setup.process;
        ls.replica = st.setup.replica;
        ls.plane = st.setup.plane;
        ls.in_width = st.setup.in_width;
        ls.out_width = st.setup.out_width;
        st.link = make_local_link(self, std::move(ls));
        if (st.setup.lockstep)
          st.clock = make_lockstep_clock();
        else
          st.clock = make_ticking_clock(self);
        st.link->wire(std::move(ranks));
        st.driver = std::move(driver);
        const int64_t start = st.setup.resumed_after;
        keep_boundary(self, start, true);
        self->become(running(self));
        // The keeper's copy of the start is made once the wire is answered,
        // off the path to the first step (a stage that changed keepers
        // writes a new segment: 25-35 ms for 45 MB on two cores). This
        // message is ahead of any op in the mailbox, so the copy leaves
        // before this stage's first op: a stage lost in the first step
        // heals from the keeper's memory as it would had the step waited,
        // since the copy lands as soon either way.
        if (st.keeper) self->send(self, keep_atom::value, start);
        return caf::unit;
      },
      // Every stage is wired at once: a stage's first copy may reach its
      // keeper before the keeper's own wire. It waits in the mailbox for
      // the running behavior.
      [=](keep_atom, int32_t, int64_t, const std::string&) -> caf::result<void> { return caf::skip; },
  };
}

// The stage's weights and optimizer state: the tensors themselves where
// the next update steps aside (no later write reaches them) or, for a live
// boundary, where the stage forgets them before it writes them (not for a
// checkpoint, written while the stage goes on); otherwise a copy on the
// CPU.
stage_snapshot snapshot_of(stage_state& st, bool for_checkpoint) {
  st.shared = st.aside;
  const bool share = st.aside || (st.setup.live_boundary && !for_checkpoint);
  stage_snapshot snap;
  snap.rank = st.setup.rank;
  std::vector<std::string> names;
  for (const auto& chunk : st.setup.layers)
    for (auto& [name, t] : chunk->named_parameters()) {
      snap.weights.emplace_back(name, share ? t.detach() : t.detach().to(torch::kCPU, t.scalar_type(), false, true));
      names.push_back(name);
    }
  // One tensor each, not one buffer for all: a buffer that large is a
  // fresh mapping (and page faults) every step (at dp 2 on two cores a
  // packed copy cost 27 % of a step, clones 12-19 %, shared tensors
  // nothing). A heal packs the copy it sends, once.
  snap.optimizer = copy_optimizer_state(*st.opt, st.params, std::move(names), share);
  return snap;
}

// After `step`'s update: its boundary kept and, with a keeper, the copy
// announced to it.
void keep_after(stage_ptr self, int64_t step) { send_copy(self, step, keep_boundary(self, step, false)); }

// The start of the generation (kept at the wire) to the keeper.
void keep_start(stage_ptr self, int64_t step) {
  auto& st = self->state;
  if (!st.setup.boundary) return;
  const auto snap = st.setup.boundary->at(slot_of(st), step);
  if (snap) send_copy(self, step, post_copy(st, *snap));
}

// Announces the copy of `step` that `described` names to the keeper
// (nothing when empty).
void send_copy(stage_ptr self, int64_t step, std::string described) {
  if (described.empty()) return;
  ++self->state.copies_in_flight;
  // Answered once the copy is in the keeper's memory, or failed (the keeper
  // or this process gone: a heal follows, and this generation ends).
  self->request(self->state.keeper, caf::infinite, keep_atom::value, int32_t{slot_of(self->state)}, step,
                std::move(described))
      .then([self] { copy_landed(self); }, [self](caf::error&) { copy_landed(self); });
}

// Whether the update of `step` must wait for a copy to land first: two
// are on their way (so there is a keeper), and its boundary is a lasting
// one, which goes to the keeper too.
bool waits_for_copies(const stage_state& st, int64_t step) {
  return st.copies_in_flight >= 2 && copy_rule{st.setup.copy_every}.lasting(step);
}

void copy_landed(stage_ptr self) {
  auto& st = self->state;
  --st.copies_in_flight;
  if (st.held_apply && !waits_for_copies(st, st.held_apply->step)) {
    apply_msg m = std::move(*st.held_apply);
    st.held_apply.reset();
    apply(self, m);
  }
}

// The driver's apply of `m.step`: the update, its report, and the boundary
// after it.
void apply(stage_ptr self, const apply_msg& m) {
  const int64_t begin = now_ns(self->state);
  std::string nonfinite = apply_update(self, m);
  const int64_t end = now_ns(self->state);
  // `after_op: update`: the process dies (or stops) right after it.
  if (const auto kill = self->state.faults.kill_after_update(m.step))
    ::raise(*kill == fault_kind::kill_process ? SIGKILL : SIGSTOP);
  const auto& su = self->state.setup;
  self->send(self->state.driver, applied_atom::value, su.replica * su.stages + su.rank, m.step,
             m.checksum ? weights_checksum(self->state) : uint64_t{0}, begin, end, nonfinite);
  // A finite update's state is the boundary after the step (a close
  // that undoes it keeps the state from before instead).
  if (nonfinite.empty()) keep_after(self, m.step);
}

// Healing: at a lasting boundary (the generation's start, or after every
// copy_every-th step), the state after `step` into the process's boundary
// memory and, after a step and with a keeper, its tensors posted to the
// keeper's process; the line that describes them, for the keep message
// (empty: nothing sent; the start's copy goes from keep_start).
std::string keep_boundary(stage_ptr self, int64_t step, bool start) {
  auto& st = self->state;
  if (!st.setup.boundary) return {};
  // Only lasting boundaries are kept (supervision.copy_every): the others
  // cost a copy of the stage that no heal would use. A live one costs
  // nothing and is kept after every step.
  if (!start && !st.setup.live_boundary && !copy_rule{st.setup.copy_every}.lasting(step)) return {};
  std::optional<stage_snapshot> held;
  if (start && st.setup.start_kept) held = st.setup.boundary->at(slot_of(st), step);
  stage_snapshot snap = held ? std::move(*held) : snapshot_of(st);
  std::string described = start ? std::string() : post_copy(st, snap);
  if (!held) st.setup.boundary->keep(slot_of(st), step, std::move(snap));
  return described;
}

// With a keeper: `snap`'s tensors written to shared memory or posted to
// the keeper's process; the line that describes them (empty: none).
std::string post_copy(stage_state& st, const stage_snapshot& snap) {
  std::string described;
  if (st.keeper && st.setup.copy_segments) {
    std::string why;
    described = write_shared(*st.setup.copy_segments, snap, &why);
    if (described.empty() && !st.said_why_socket) {
      st.said_why_socket = true;
      std::fprintf(stderr,
                   "actorpipe: stage %d sends a boundary copy through the socket (shared memory is tried again "
                   "for each): %s\n",
                   st.setup.rank, why.c_str());
    }
  }
  if (described.empty() && st.keeper && st.setup.copy_channel)
    described = send_snapshot(*st.setup.copy_channel, snap,
                              st.setup.process_of.at(static_cast<size_t>(st.setup.keeper_stage)));
  return described;
}

// As a keeper: receives the copy of `slot` after `step` in the background
// into this process's boundary memory. A request (the copy at wiring) is
// answered once the copy is in; a plain message is not answered.
caf::result<void> hold_copy(stage_ptr self, int32_t slot, int64_t step, const std::string& described) {
  auto& st = self->state;
  auto memory = st.setup.boundary;
  if (!memory || !st.setup.copy_channel)
    return caf::make_error(caf::sec::runtime_error, "stage " + std::to_string(st.setup.rank) +
                                                        " keeps no copies (no boundary memory or copy channel)");
  auto answer = self->make_response_promise();
  const bool asked = !answer.async();
  const uint64_t id = st.copies_asked++;
  if (asked) st.owed_copies[id] = answer;
  caf::actor me = caf::actor_cast<caf::actor>(self);
  // At dp = 1 (the only keepers) slot r is stage r of this replica.
  const int from = st.setup.process_of.at(static_cast<size_t>(slot % st.setup.stages));
  memory->expect(from);
  try {
    receive_snapshot_async(
        *st.setup.copy_channel, described,
        [memory, slot, step, asked, me, id, from](stage_snapshot s) {
          memory->keep(slot, step, std::move(s));
          memory->settle(from);
          if (asked) caf::anon_send(me, kept_atom::value, id, std::string());
        },
        [memory, asked, me, id, from](const std::string& why) {
          memory->settle(from);
          if (asked) caf::anon_send(me, kept_atom::value, id, why.empty() ? std::string("failed") : why);
        },
        [memory](const std::vector<int64_t>& shape, at::ScalarType dtype) {
          return memory->buffers().take(shape, at::TensorOptions().dtype(dtype));
        });
  } catch (const transfer_error& e) {
    memory->settle(from);
    st.owed_copies.erase(id);
    return caf::make_error(caf::sec::runtime_error, std::string("keeping a boundary copy: ") + e.what());
  }
  return answer;
}

caf::behavior running(stage_ptr self) {
  return {
      [=](fwd_atom, activation_msg& m) {
        if (stale(self->state, m.h)) return;
        if (self->state.clock->take_now(m)) on_activation(self, m);
      },
      [=](bwd_atom, gradient_msg& m) {
        if (stale(self->state, m.h)) return;
        if (self->state.clock->take_now(m)) on_gradient(self, m);
      },
      [=](tick_atom) { on_tick(self); },
      [=](recheck_atom, int64_t fired_then, int64_t step) { on_recheck(self, fired_then, step); },
      [=](resend_atom, int32_t kind, int64_t step, int32_t mb, int32_t chunk) {
        self->state.link->resend(kind == 0 ? op_kind::F : op_kind::B, chunk, step, mb);
      },
      [=](round_atom, int64_t round) {
        // What a neighbour sent in an earlier round is visible now.
        std::vector<activation_msg> fwd;
        std::vector<gradient_msg> bwd;
        self->state.clock->begin_round(round, fwd, bwd);
        for (auto& m : fwd) on_activation(self, m);
        for (auto& m : bwd) on_gradient(self, m);
        fire_one(self);
        self->send(self->state.driver, round_done_atom::value, round);
      },
      [=](apply_atom, const apply_msg& m) {
        if (waits_for_copies(self->state, m.step))
          self->state.held_apply = m;
        else
          apply(self, m);
      },
      // The driver judged every stage's update of `step`: the step closes
      // here and the next one begins, so no message of it is taken before
      // the verdict (whatever the order of arrival between this stage's
      // senders).
      [=](close_atom, int64_t step, bool undo) {
        close_update(self->state, undo);
        if (undo) keep_after(self, step);
        if (step >= self->state.step) next_step(self, step);
        release_evals(self);
      },
      [=](keep_atom, int32_t slot, int64_t step, const std::string& described) {
        return hold_copy(self, slot, step, described);
      },
      [=](keep_atom, int64_t start) { keep_start(self, start); },
      [=](kept_atom, uint64_t id, const std::string& failed) {
        auto& owed = self->state.owed_copies;
        auto it = owed.find(id);
        if (it == owed.end()) return;
        if (failed.empty())
          it->second.deliver(caf::unit);
        else
          it->second.deliver(caf::make_error(caf::sec::runtime_error, "a boundary copy did not arrive: " + failed));
        owed.erase(it);
      },
      [=](eval_atom, eval_msg& m) { evaluate(self, std::move(m)); },
      [=](status_atom) -> stage_status { return status_of(self->state); },
      [=](ckpt_atom) -> stage_snapshot { return snapshot_of(self->state, true); },
      [=](weights_atom) -> named_params {
        named_params out;
        for (const auto& chunk : self->state.setup.layers)
          for (auto& [name, t] : chunk->named_parameters())
            out.emplace_back(name, t.detach().to(torch::kCPU).clone());
        return out;
      },
  };
}

}  // namespace

int live_stages() { return stage_detail::live_stage_count.load(); }

caf::actor spawn_stage(caf::actor_system& sys, stage_setup setup) {
  if (setup.shared_thread) return sys.spawn(stage_behavior, std::move(setup));
  return sys.spawn<caf::detached>(stage_behavior, std::move(setup));
}

}  // namespace actorpipe
