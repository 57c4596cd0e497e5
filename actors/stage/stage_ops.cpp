// The stage's ops: a step begins, inputs arrive, the policy's choice
// fires, and what it produced goes on through the link.
#include <sys/prctl.h>
#include <time.h>

#include <cmath>
#include <csignal>
#include <limits>
#include <thread>

#include "actors/stage/stage_state.hpp"

namespace actorpipe::stage_detail {

namespace {

// This thread's CPU time: an op's, against its wall time, tells a stage
// held to a CPU quota from one with more work (stage_stats::cpu_ns).
int64_t thread_cpu_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// The sim device's op ends on time: a sleep overshoots by tens of
// microseconds here, so the last stretch is a yielding spin.
void sim_wait(clock_type::time_point deadline) {
  constexpr auto spin = std::chrono::microseconds(100);
  if (deadline - clock_type::now() > spin) std::this_thread::sleep_until(deadline - spin);
  while (clock_type::now() < deadline) std::this_thread::yield();
}

// pace_ms: the op's results leave the stage only once its padded time is
// over, as they would from a slower device. The sim device's op takes its
// time the same way.
void pad(stage_state& s, clock_type::time_point start, op_kind kind) {
  if (s.setup.work == stage_setup::work_kind::timed)
    sim_wait(start + std::chrono::nanoseconds(static_cast<int64_t>(s.setup.sim_ms[static_cast<int>(kind)] * 1e6)));
  if (s.setup.pace_ms > 0)
    std::this_thread::sleep_until(
        start + std::chrono::microseconds(static_cast<int64_t>(s.setup.pace_ms * 1000)));
  // slow_stage: the op takes `factor` times as long as it did.
  s.padded = true;
  if (const double factor = s.faults.slow_factor(); factor > 1.0) {
    const auto took = clock_type::now() - start;
    std::this_thread::sleep_until(start + std::chrono::duration_cast<clock_type::duration>(took * factor));
  }
}

// An injected NaN for (this step, mb, where), if the config asks for one.
bool injected(const stage_state& s, int mb, nonfinite_site where) {
  const op_id op{op_kind::F, mb, 0};
  return s.faults.nan_at(fault_step(s, op), fault_op(s, op).mb, where);
}

void check_finite(stage_state& s, op_id op, const at::Tensor& t) {
  if (t.defined() && !s.setup.async && computes(s)) s.finite.add(op, t, now_ns(s));
}

// The stash's size after an op: the step's peaks.
void note_stash(stage_state& s) {
  s.stats.peak_stash = std::max(s.stats.peak_stash, s.compute.stashed());
  s.stats.peak_stash_bytes = std::max(s.stats.peak_stash_bytes, s.compute.stash_bytes());
}

// OVERLAP_F_B on CUDA: the pair's F and B go on two streams of the stage.
// A B's kernels run on the stream its F's ran on (autograd's rule), so the
// F takes the one its partner's F did not: the side, or the stage's own.
// Returns whether it takes the side.
bool pair_on_side(stage_state& s) {
  const auto b = s.pol->next(s.board.view(s.setup.rank, s.setup.stages, s.measured));
  return !b || !s.on_side[static_cast<size_t>(slot(s, b->chunk, b->mb))];
}

// Work queued while it lives goes on the queue's side.
struct side_scope {
  device_stream* q;
  side_scope(device_stream* queue, bool on) : q(on ? queue : nullptr) {
    if (q) q->side(true);
  }
  ~side_scope() {
    if (q) q->side(false);
  }
  side_scope(const side_scope&) = delete;
  side_scope& operator=(const side_scope&) = delete;
};

void fire_forward(stage_ptr self, int chunk, int mb, clock_type::time_point start) {
  auto& s = self->state;
  const int k = slot(s, chunk, mb);
  const bool first = first_virtual(s, chunk), last = last_virtual(s, chunk);
  auto msg = std::move(s.inputs[k]);
  const bool work = computes(s);
  // The pair starts after the work queued so far, on either stream.
  const bool paired = s.pair_open && s.queue && work;
  const bool side = paired && pair_on_side(s);
  if (paired) {
    s.queue->fork();
    s.on_side[static_cast<size_t>(k)] = side;
    s.pair_b_side = !side;
    ++s.stats.two_stream_pairs;
  }
  side_scope on(s.queue.get(), side);
  at::Tensor x = msg.x;
  if (!work)
    x = s.nothing;
  else if (first)
    x = on_device(s, x, s.setup.compute_dtype);
  else {
    if (s.queue) s.queue->wait(msg.ready, x);
    x = x.detach().requires_grad_(true);
  }
  forward_ctx ctx{s.setup.seed, s.step, mb, true};
  const std::vector<at::Tensor>* weights = nullptr;
  if (s.setup.async) {
    const int64_t t = step_of(s, mb);
    ctx.step = t;
    ctx.mb = mb % s.setup.step_microbatches;
    weights = &s.versions.for_step(t, s.setup.rank);
  }
  auto r = s.compute.forward(chunk, mb, ctx, x, msg.y, first, last, weights,
                             injected(s, mb, nonfinite_site::activation), !s.setup.async);
  check_finite(s, {op_kind::F, mb, chunk}, r.out);
  if (last) {
    if (work && s.setup.async) s.step_loss[step_of(s, mb)] += r.loss.item<double>();
    s.board.arrive(op_kind::B, chunk, mb);  // the loss starts the backward right here
  } else {
    // The op's results leave once its padded time is over.
    pad(s, start, op_kind::F);
    s.link->send_activation(chunk, {{0, s.step, mb, 0, s.clock->round()}, work ? r.out.detach() : r.out, msg.y, nullptr});
  }
  note_stash(s);
}

void fire_backward(stage_ptr self, int chunk, int mb, clock_type::time_point start) {
  auto& s = self->state;
  const int k = slot(s, chunk, mb);
  const bool last = last_virtual(s, chunk), first = first_virtual(s, chunk);
  const bool work = computes(s);
  if (work && s.queue && !last) s.queue->wait(s.grads_ready[k], s.grads_in[k]);
  s.grads_ready[k] = nullptr;
  auto grad_in = s.compute.backward(chunk, mb, std::move(s.grads_in[k]), first, last,
                                    work && injected(s, mb, nonfinite_site::grad));
  s.grads_in[k] = at::Tensor();
  note_stash(s);
  if (first) return;
  if (work) check_finite(s, {op_kind::B, mb, chunk}, grad_in);
  // The gradient of B(mb)'s input goes up once the op's time is over.
  pad(s, start, op_kind::B);
  s.link->send_gradient(chunk, {{0, s.step, mb, 0, s.clock->round()}, work ? grad_in : s.nothing, nullptr});
}

}  // namespace

void begin_step(stage_state& s, int64_t step) {
  const int m = s.setup.microbatches, slots = m * s.setup.chunks;
  s.step = step;
  s.board.reset(m, s.setup.chunks, s.split);
  s.inputs.assign(slots, activation_msg{});
  s.link->begin_step();
  s.grads_in.assign(slots, at::Tensor());
  s.grads_ready.assign(slots, nullptr);
  s.on_side.assign(s.queue ? slots : 0, 0);
  s.compute.begin_step();
  s.stats = stage_stats{};
  // Sized once per step: no reallocation on the firing path.
  const size_t ops = static_cast<size_t>(slots) * (s.split ? 3 : 2);
  s.stats.events.reserve(ops);
  s.stats.memory.reserve(ops);
  s.finite.clear();
}

bool stale(stage_state& s, const msg_header& h) {
  if (h.epoch == s.link->epoch()) return false;
  ++s.stale;
  return true;
}

// Drops (and counts) a message of an older step, or one whose op input
// already arrived. Its epoch was checked on arrival (stale), before
// anything else. The first message of an attempt begins its first step;
// a later step begins with the apply that closes the one before
// (next_step), and its messages wait until then.
arrival accept(stage_state& s, const msg_header& h, op_kind kind) {
  if (h.step < s.step || h.mb < 0 || h.mb >= s.setup.microbatches || h.chunk < 0 ||
      h.chunk >= s.setup.chunks) {
    ++s.dropped;
    return arrival::drop;
  }
  if (s.step < 0) begin_step(s, h.step);
  if (h.step > s.step) return arrival::hold;
  if (!s.board.arrive(kind, h.chunk, h.mb)) {
    ++s.dropped;
    return arrival::drop;
  }
  return arrival::take;
}

void next_step(stage_ptr self, int64_t step) {
  auto& s = self->state;
  begin_step(s, step + 1);
  auto fwd = std::move(s.ahead_fwd);
  auto bwd = std::move(s.ahead_bwd);
  s.ahead_fwd.clear();
  s.ahead_bwd.clear();
  for (auto& m : fwd) on_activation(self, m);
  for (auto& m : bwd) on_gradient(self, m);
}

void schedule_tick(stage_ptr self) { self->state.clock->poke(); }

// Fires the policy's choice, if any. Returns whether an op ran.
namespace {

// Dies right after firing `op` where a fault asks: the stage, or its whole
// process as a `kill -9` would (or stops it, as a hung host).
bool die_after(stage_ptr self, const op_id& op) {
  auto& s = self->state;
  const auto kill = s.faults.kill_after(fault_step(s, op), fault_op(s, op));
  if (!kill) return false;
  if (*kill == fault_kind::kill_process) ::raise(SIGKILL);
  if (*kill == fault_kind::stop_process) ::raise(SIGSTOP);
  self->quit(caf::exit_reason::kill);
  return true;
}

}  // namespace

bool fire_one(stage_ptr self) {
  auto& s = self->state;
  if (s.step < 0 || step_done(s)) return false;
  const auto view = s.board.view(s.setup.rank, s.setup.stages, s.measured);
  auto op = s.pol->next(view);
  if (!op) return false;
  // An overlapped F and B is one action: on a CPU one runs after the
  // other, with nothing in between; on CUDA they go on two streams.
  const bool closes = s.pair_open;  // op is the B of the pair
  s.pair_open = s.pol->overlaps_next(view);
  if (auto what = s.faults.throw_in(fault_step(s, *op), fault_op(s, *op))) throw std::runtime_error(*what);
  // One clock read: the trace's start is the instant the op's padding and
  // the sim device's time count from (two reads drift apart under load).
  const auto start = clock_type::now();
  const int64_t start_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(start - s.setup.origin).count();
  // Timed only under a CPU quota, what it is for (stage_stats::cpu_ns
  // stays 0 otherwise): a read costs about 0.7 us, a tenth of a null
  // device's op.
  const bool timed_cpu = s.quota_cores > 0;
  const int64_t cpu_start = timed_cpu ? thread_cpu_ns() : 0;
  s.board.fire(*op);
  s.padded = false;
  if (op->kind == op_kind::F) {
    // What a side F wrote (the loss sums) is read by the next F, whichever
    // stream that takes: the side's work so far goes first.
    if (s.queue) s.queue->join();
    fire_forward(self, op->chunk, op->mb, start);
  } else if (op->kind == op_kind::B) {
    // A pair's B whose kernels go on the side runs with the side current,
    // else autograd would start them after the F on the stage's stream.
    const bool side = closes && s.queue && s.pair_b_side;
    {
      side_scope on(s.queue.get(), side);
      fire_backward(self, op->chunk, op->mb, start);
    }
    if (side) s.queue->join();
  } else {
    s.compute.weight(op->chunk, op->mb);
  }
  if (!s.padded) pad(s, start, op->kind);  // an op that sent nothing: padded here, once
  int64_t end_ns = now_ns(s);
  const int64_t cpu_ns = timed_cpu ? thread_cpu_ns() - cpu_start : 0;
  ++s.fired_total;
  const int kind = static_cast<int>(op->kind);
  s.measured[kind] += (static_cast<double>(end_ns - start_ns) - s.measured[kind]) /
                      static_cast<double>(++s.measured_n[kind]);
  if (s.setup.async) {
    const int64_t t = step_of(s, op->mb);
    auto& st = s.step_stats[t];
    st.memory.emplace_back(end_ns, s.compute.stash_bytes());
    st.events.push_back({{op->kind, op->mb % s.setup.step_microbatches, op->chunk}, start_ns, end_ns, weight_versions::version_of(t)});
    st.busy_ns += end_ns - start_ns;
    st.cpu_ns += cpu_ns;
    if (die_after(self, *op)) return false;
    if (op->kind == op_kind::B && op->mb % s.setup.step_microbatches == s.setup.step_microbatches - 1)
      async_step(self, t);
    return true;
  }
  s.stats.events.push_back({*op, start_ns, end_ns});
  if (die_after(self, *op)) return false;
  s.stats.memory.emplace_back(end_ns, s.compute.stash_bytes());
  sample_cuda_memory(s.stats, s.setup.device, end_ns);
  s.stats.busy_ns += end_ns - start_ns;
  s.stats.cpu_ns += cpu_ns;
  if (step_done(s)) {
    if (s.queue) s.queue->join();  // before the allreduce, the sums and the update
    report_grads(self);
  }
  return true;
}

// Idle with the step unfinished: if nothing fires for op_timeout, ask the
// senders of the next missing inputs to send them again.
void arm_recheck(stage_ptr self) {
  auto& s = self->state;
  if (s.setup.op_timeout_ms <= 0 || s.recheck_pending || s.step < 0 || step_done(s) || !s.clock->rechecks())
    return;
  s.recheck_pending = true;
  self->delayed_send(caf::actor_cast<caf::actor>(self), std::chrono::microseconds(static_cast<int64_t>(s.setup.op_timeout_ms * 1000)),
                     recheck_atom::value, s.fired_total, s.step);
}

void on_recheck(stage_ptr self, int64_t fired_then, int64_t step) {
  auto& s = self->state;
  s.recheck_pending = false;
  if (s.step < 0 || step_done(s)) return;
  if (s.step != step || s.fired_total != fired_then) {  // armed earlier; look again from now
    arm_recheck(self);
    return;
  }
  const int m = s.setup.microbatches;
  for (int c = 0; c < s.setup.chunks; ++c) {
    const int k = virtual_stage(s, c);
    const int f = s.board.next(op_kind::F, c), b = s.board.next(op_kind::B, c);
    if (k > 0 && f < m && !s.board.arrived(op_kind::F, c, f)) s.link->ask_resend(op_kind::F, c, s.step, f);
    if (!last_virtual(s, c) && b < m && !s.board.arrived(op_kind::B, c, b))
      s.link->ask_resend(op_kind::B, c, s.step, b);
  }
  arm_recheck(self);
}

// Fires ops while nothing new is waiting. A waiting message (an input, a
// status request) may change the next choice or must be answered, so then
// the tick goes behind it; with none, firing on saves a self-message (and
// its allocation) per op.
void on_tick(stage_ptr self) {
  self->state.clock->ticked();
  while (fire_one(self))
    if (!self->state.pair_open && !self->mailbox().empty()) {
      schedule_tick(self);
      return;
    }
  arm_recheck(self);
}

void on_activation(stage_ptr self, activation_msg& m) {
  auto& s = self->state;
  switch (accept(s, m.h, op_kind::F)) {
    case arrival::drop: return;
    case arrival::hold: s.ahead_fwd.push_back(std::move(m)); return;
    case arrival::take: break;
  }
  const int chunk = m.h.chunk, mb = m.h.mb;
  s.inputs[slot(s, chunk, mb)] = std::move(m);
  schedule_tick(self);
}

void on_gradient(stage_ptr self, gradient_msg& m) {
  auto& s = self->state;
  switch (accept(s, m.h, op_kind::B)) {
    case arrival::drop: return;
    case arrival::hold: s.ahead_bwd.push_back(std::move(m)); return;
    case arrival::take: break;
  }
  s.grads_in[slot(s, m.h.chunk, m.h.mb)] = std::move(m.g);
  s.grads_ready[slot(s, m.h.chunk, m.h.mb)] = std::move(m.ready);
  schedule_tick(self);
}

}  // namespace actorpipe::stage_detail
