#include "actors/stage_actor.hpp"

#include <caf/all.hpp>
#include <torch/torch.h>

#include <sys/prctl.h>

#if ACTORPIPE_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <thread>
#include <type_traits>

#include "messages/atoms.hpp"
#include "messages/payloads.hpp"
#include "runtime/collectives.hpp"
#include "runtime/device_stream.hpp"
#include "runtime/fault_plan.hpp"
#include "runtime/op_grid.hpp"
#include "runtime/ready_board.hpp"
#include "runtime/lr.hpp"
#include "runtime/optimizer_state.hpp"
#include "runtime/placement.hpp"
#include "runtime/policy.hpp"
#include "actors/stage_link.hpp"
#include "runtime/seed.hpp"
#include "runtime/stage_compute.hpp"

namespace actorpipe {

namespace {

using clock_type = std::chrono::steady_clock;

std::atomic<int> live_stage_count{0};

// Counts the stages alive: a member of the state, which CAF destroys when
// the actor terminates.
struct live_token {
  live_token() { ++live_stage_count; }
  ~live_token() { --live_stage_count; }
  live_token(const live_token&) = delete;
  live_token& operator=(const live_token&) = delete;
};

struct stage_state {
  live_token alive;
  stage_setup setup;
  std::shared_ptr<const policy> pol;
  std::unique_ptr<torch::optim::Optimizer> opt;
  std::vector<at::Tensor> params;                     // every chunk's, for the optimizer
  placement plc;                  // chunk <-> virtual stage
  std::unique_ptr<stage_link> link;  // sends to the other stages
  caf::actor driver;

  int64_t step = -1;
  // Ready sets, in-order promotion, duplicate detection and the policy's
  // counters for the step (shared with the simulator).
  ready_board board;
  bool split = false;  // the policy runs B and W as separate ops
  // The rest is indexed by slot = chunk * M + mb.
  std::vector<activation_msg> inputs;
  bool recheck_pending = false;
  std::vector<at::Tensor> grads_in;
  std::vector<device_mark_ptr> grads_ready;  // by slot: when grads_in's kernels are done
  // CUDA: this stage's own stream (null elsewhere), so that the stages on
  // one GPU queue their kernels side by side.
  std::unique_ptr<device_stream> queue;
  // F, B, W, the loss and the stash: what the ops compute.
  stage_compute compute;
  // Mean measured duration per op kind (ns), over the whole run: what a
  // dynamic policy estimates with.
  double measured[3] = {0.0, 0.0, 0.0};
  int64_t measured_n[3] = {0, 0, 0};
  stage_stats stats;
  bool tick_pending = false;
  // Async: versions[t] is step t's copy of weight version max(t-1, 0); its
  // .grad collects step t's gradient. At most two exist at once.
  std::map<int64_t, std::vector<at::Tensor>> versions;
  std::map<int64_t, stage_stats> step_stats;
  std::map<int64_t, double> step_loss;
  int peak_versions = 0;
  int64_t fired_total = 0;  // every op of the run, for the watchdog
  uint64_t dropped = 0;     // duplicate or stale messages since the last report
  fault_plan faults;  // from setup.faults: what to inject where
  std::chrono::steady_clock::time_point slowed_op_start;  // slow_stage: the op already slowed
  // Per op of the step, the sum of its output on the device: read once,
  // when the step's report goes out, so the hot path never syncs.
  std::vector<std::pair<op_id, at::Tensor>> finite_checks;
  std::vector<int64_t> finite_check_ns;
  at::Tensor nothing;  // null and sim devices: every activation and gradient
  int64_t round = 0;                      // lock-step: the round being fired
  std::vector<activation_msg> early_fwd;  // lock-step: sent in the current round
  std::vector<gradient_msg> early_bwd;

  static inline const char* name = "stage";
};

using stage_ptr = caf::stateful_actor<stage_state>*;

int64_t now_ns(const stage_state& s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - s.setup.origin)
      .count();
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const optimizer_config& o,
                                                        const std::vector<at::Tensor>& params) {
  if (o.type == "sgd")
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  return std::make_unique<torch::optim::Adam>(
      params, torch::optim::AdamOptions(o.lr)
                  .betas(std::make_tuple(o.beta1, o.beta2))
                  .eps(o.eps)
                  .weight_decay(o.weight_decay));
}

// Edge stages are flags: the first virtual stage takes the microbatch, the
// last one computes the loss.
bool first_virtual(const stage_state& s, int chunk) { return s.plc.first(s.setup.rank, chunk); }
bool last_virtual(const stage_state& s, int chunk) { return s.plc.last(s.setup.rank, chunk); }

int virtual_stage(const stage_state& s, int chunk) { return s.plc.virtual_stage(s.setup.rank, chunk); }
int slot(const stage_state& s, int chunk, int mb) { return chunk * s.setup.microbatches + mb; }

// Every backward (and, split, every weight gradient) of the step has run.
bool step_done(const stage_state& s) { return s.board.done(); }

void begin_step(stage_state& s, int64_t step) {
  const int m = s.setup.microbatches, slots = m * s.setup.chunks;
  s.step = step;
  s.board.reset(m, s.setup.chunks, s.split);
  s.inputs.assign(slots, activation_msg{});
  s.link->begin_step();
  s.grads_in.assign(slots, at::Tensor());
  s.grads_ready.assign(slots, nullptr);
  s.compute.begin_step();
  s.stats = stage_stats{};
  // Sized once per step: no reallocation on the firing path.
  const size_t ops = static_cast<size_t>(slots) * (s.split ? 3 : 2);
  s.stats.events.reserve(ops);
  s.stats.memory.reserve(ops);
  s.finite_checks.clear();
  s.finite_check_ns.clear();
}

// Returns false (and counts it) for a message of an older step, or one
// whose op input already arrived.
bool accept(stage_state& s, const msg_header& h, op_kind kind) {
  if (h.step < s.step || h.mb < 0 || h.mb >= s.setup.microbatches || h.chunk < 0 ||
      h.chunk >= s.setup.chunks) {
    ++s.dropped;
    return false;
  }
  if (h.step > s.step) begin_step(s, h.step);
  if (!s.board.arrive(kind, h.chunk, h.mb)) {
    ++s.dropped;
    return false;
  }
  return true;
}

void schedule_tick(stage_ptr self) {
  if (self->state.tick_pending || self->state.setup.lockstep) return;
  self->state.tick_pending = true;
  self->send(self, tick_atom::value);
}

bool computes(const stage_state& s) { return s.setup.work == stage_setup::work_kind::compute; }

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
  // slow_stage: the op takes `factor` times as long as it did (once per op:
  // pad runs again after ops that send nothing).
  if (s.slowed_op_start == start) return;
  s.slowed_op_start = start;
  if (const double factor = s.faults.slow_factor(); factor > 1.0) {
    const auto took = clock_type::now() - start;
    std::this_thread::sleep_until(start + std::chrono::duration_cast<clock_type::duration>(took * factor));
  }
}

// An injected NaN for (this step, mb, where), if the config asks for one.
bool injected(const stage_state& s, int mb, nonfinite_site where) { return s.faults.nan_at(s.step, mb, where); }

void check_finite(stage_state& s, op_id op, const at::Tensor& t) {
  if (!t.defined() || s.setup.async || !computes(s)) return;
  const int64_t at_ns = now_ns(s);
  // One reduction per op: a NaN or an infinity anywhere in t makes its sum
  // non-finite (a finite float32 tensor whose sum overflows would too: a
  // false alarm that skips one step, never a missed NaN). Half and bfloat16
  // sum in float32, where they cannot overflow.
  const auto type = t.scalar_type();
  s.finite_checks.emplace_back(
      op, type == at::kHalf || type == at::kBFloat16 ? t.detach().sum(at::kFloat) : t.detach().sum());
  s.finite_check_ns.push_back(at_ns);
}

// The first op of the step whose output held a NaN or an infinity.
nonfinite_seen first_nonfinite(const stage_state& s) {
  nonfinite_seen seen;
  if (s.finite_checks.empty()) return seen;
  std::vector<at::Tensor> flags;
  for (const auto& c : s.finite_checks) flags.push_back(c.second);
  auto bad = torch::isfinite(torch::stack(flags)).logical_not().to(torch::kCPU);
  if (!bad.any().item<bool>()) return seen;
  for (size_t i = 0; i < s.finite_checks.size(); ++i)
    if (bad[static_cast<int64_t>(i)].item<bool>()) {
      seen.mb = s.finite_checks[i].first.mb;
      seen.where = s.finite_checks[i].first.kind == op_kind::F ? "activation" : "gradient";
      seen.at_ns = s.finite_check_ns[i];
      break;
    }
  return seen;
}

// Async: the step of stream microbatch g, and the weight version it uses.
int64_t step_of(const stage_state& s, int g) { return g / s.setup.step_microbatches; }
int32_t version_of(int64_t step) { return static_cast<int32_t>(std::max<int64_t>(step - 1, 0)); }

// A host tensor (a microbatch, its targets) on this stage's device as
// `dtype`. On CUDA it goes through pinned memory without blocking: a plain
// copy from pageable memory would wait for everything queued before it.
at::Tensor on_device(const stage_state& s, const at::Tensor& t, at::ScalarType dtype) {
  if (s.queue && !t.is_cuda()) return t.pin_memory().to(torch::Device(s.setup.device), dtype, /*non_blocking=*/true);
  return t.to(torch::Device(s.setup.device), dtype);
}

std::vector<at::Tensor> snapshot(const stage_state& s) {
  std::vector<at::Tensor> out;
  for (const auto& p : s.params) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

// The stash's size after an op: the step's peaks.
void note_stash(stage_state& s) {
  s.stats.peak_stash = std::max(s.stats.peak_stash, s.compute.stashed());
  s.stats.peak_stash_bytes = std::max(s.stats.peak_stash_bytes, s.compute.stash_bytes());
}

void fire_forward(stage_ptr self, int chunk, int mb, clock_type::time_point start) {
  auto& s = self->state;
  const int k = slot(s, chunk, mb);
  const bool first = first_virtual(s, chunk), last = last_virtual(s, chunk);
  auto msg = std::move(s.inputs[k]);
  const bool work = computes(s);
  at::Tensor x = msg.x;
  if (!work)
    x = s.nothing;
  else if (first)
    x = on_device(s, x, s.setup.dtype);
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
    auto it = s.versions.find(t);
    if (it == s.versions.end())  // cannot happen with M >= S (config checks it)
      throw std::logic_error("async: step " + std::to_string(t) + " reached stage " +
                             std::to_string(s.setup.rank) + " before its weight version existed");
    weights = &it->second;
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
    s.link->send_activation(chunk, {{0, s.step, mb, 0, s.round}, work ? r.out.detach() : r.out, msg.y, nullptr});
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
  s.link->send_gradient(chunk, {{0, s.step, mb, 0, s.round}, work ? grad_in : s.nothing, nullptr});
}

// Sums this stage's gradients over its data-parallel replicas. It blocks
// this stage's thread only: the other stages go on with their cool-down.
void allreduce_grads(stage_state& s) {
  if (!s.setup.dp_group) return;
  s.stats.allreduce_start_ns = now_ns(s);
  const bool host = s.setup.dp_group->backend() == "gloo" && s.setup.device != "cpu";
  std::vector<at::Tensor> grads;
  for (auto& p : s.params) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    // The test hook still joins the collective (the peers would wait for
    // it) but gives zeros and keeps its own gradient.
    grads.push_back(s.setup.skip_allreduce ? torch::zeros_like(p, torch::kCPU)
                    : host                 ? p.grad().to(torch::kCPU)
                                           : p.grad());
  }
  auto work = s.setup.dp_group->allreduce_sum_async(grads, s.queue ? s.queue->native() : nullptr);
  if (s.setup.abandon) {
    // Poll instead of blocking, so that a torn-down attempt can call the
    // wait off: yielding at first (a peer that is nearly there), then in
    // short sleeps.
    const auto polled_from = clock_type::now();
    while (!work->ready()) {
      if (s.setup.abandon->load()) {
        // The collective may never finish: nothing may wait for it or free
        // the tensors under it. The group is kept alive by the supervisor.
        (void)work.release();
        throw std::runtime_error("allreduce abandoned: a stage of another replica stopped");
      }
      if (clock_type::now() - polled_from < std::chrono::microseconds(200))
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  work->wait();
  if (host && !s.setup.skip_allreduce) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < grads.size(); ++i) s.params[i].mutable_grad().copy_(grads[i]);
  }
  s.stats.allreduce_end_ns = now_ns(s);
}

void report_grads(stage_ptr self) {
  auto& s = self->state;
  allreduce_grads(s);
  grads_report r;
  r.rank = s.setup.rank;
  r.replica = s.setup.replica;
  r.step = s.step;
  for (const auto& chunk : s.compute.chunk_params()) {
    std::vector<at::Tensor> norms;
    for (const auto& p : chunk)
      if (p.grad().defined()) norms.push_back(p.grad().norm(2));
    r.grad_norms.push_back(norms.empty() ? torch::empty({0}) : torch::stack(norms).to(torch::kCPU, torch::kFloat));
  }
  const auto& loss = s.compute.loss_sum();
  const auto& correct = s.compute.correct_sum();
  r.loss_sum = loss.defined() ? loss.item<double>() : 0.0;
  r.correct = correct.defined() ? correct.item<int64_t>() : 0;
  r.samples = s.compute.samples();
  r.nonfinite = first_nonfinite(s);
  r.stats = std::move(s.stats);
  r.stats.duplicates = s.dropped;  // since the last report, between steps too
  s.dropped = 0;
  s.stats = stage_stats{};
  self->send(s.driver, grads_atom::value, std::move(r));
}

// Async: step t's last backward ran here. Step the weights with step t's
// gradient (computed at version t-1), drop step t's copy, and copy the new
// weights (version t+1) for step t+2.
void async_step(stage_ptr self, int64_t t) {
  auto& s = self->state;
  {
    torch::NoGradGuard no_grad;
    auto& leaves = s.versions.at(t);
    for (size_t i = 0; i < s.params.size(); ++i) s.params[i].mutable_grad() = leaves[i].grad();
    for (auto& group : s.opt->param_groups()) group.options().set_lr(lr_at(s.setup.train, t));
    s.opt->step();
    for (auto& p : s.params) p.mutable_grad() = at::Tensor();
  }
  s.versions.erase(t);
  if (t + 2 < s.setup.steps) s.versions.emplace(t + 2, snapshot(s));
  s.peak_versions = std::max(s.peak_versions, static_cast<int>(s.versions.size()));
  grads_report r;
  r.rank = s.setup.rank;
  r.step = t;
  r.loss_sum = s.step_loss[t];
  s.step_loss.erase(t);
  r.stats = std::move(s.step_stats[t]);
  s.step_stats.erase(t);
  // Peaks since the last report; counts of what was dropped.
  r.stats.peak_stash = s.stats.peak_stash;
  r.stats.peak_stash_bytes = s.stats.peak_stash_bytes;
  r.stats.duplicates = s.dropped;
  s.dropped = 0;
  r.stats.peak_versions = s.peak_versions;
  s.stats.peak_stash = s.compute.stashed();
  s.stats.peak_stash_bytes = s.compute.stash_bytes();
  s.stats.duplicates = 0;
  self->send(s.driver, grads_atom::value, std::move(r));
}

// This stage's row of the op grid for a hang report: what it fired this
// step, what is ready but not chosen, and what the next missing ops wait on.
stage_status status_of(const stage_state& s) {
  stage_status st;
  st.rank = s.setup.rank;
  st.fired = s.fired_total;
  st.done = s.step < 0 || step_done(s);
  std::vector<op_id> fired;
  for (const auto& e : s.stats.events) fired.push_back(e.op);
  const std::string label = "stage " + std::to_string(s.setup.rank) + " (step " + std::to_string(s.step) + ")";
  st.grid = op_grid_row(label, fired, st.done ? nullptr : &s.board, s.plc, s.setup.rank);
  return st;
}

// The CUDA caching allocator's view of this stage's device (only where
// LibTorch was built with CUDA; a CPU build has no allocator to ask).
void sample_cuda_memory(stage_stats& st, const std::string& device, int64_t t) {
#if ACTORPIPE_TORCH_CUDA
  if (device.rfind("cuda:", 0) != 0) return;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
      static_cast<c10::DeviceIndex>(std::stoi(device.substr(5))));
  st.cuda_memory.push_back({t, stats.allocated_bytes[0].current, stats.reserved_bytes[0].current});
#else
  (void)st, (void)device, (void)t;
#endif
}

// Fires the policy's choice, if any. Returns whether an op ran.
bool fire_one(stage_ptr self) {
  auto& s = self->state;
  if (s.step < 0 || step_done(s)) return false;
  auto op = s.pol->next(s.board.view(s.setup.rank, s.setup.stages, s.measured));
  if (!op) return false;
  if (auto what = s.faults.throw_in(s.step, *op)) throw std::runtime_error(*what);
  auto start = clock_type::now();
  int64_t start_ns = now_ns(s);
  s.board.fire(*op);
  if (op->kind == op_kind::F)
    fire_forward(self, op->chunk, op->mb, start);
  else if (op->kind == op_kind::B)
    fire_backward(self, op->chunk, op->mb, start);
  else
    s.compute.weight(op->chunk, op->mb);
  pad(s, start, op->kind);  // ops that send nothing
  int64_t end_ns = now_ns(s);
  ++s.fired_total;
  const int kind = static_cast<int>(op->kind);
  s.measured[kind] += (static_cast<double>(end_ns - start_ns) - s.measured[kind]) /
                      static_cast<double>(++s.measured_n[kind]);
  if (s.setup.async) {
    const int64_t t = step_of(s, op->mb);
    auto& st = s.step_stats[t];
    st.memory.emplace_back(end_ns, s.compute.stash_bytes());
    st.events.push_back({{op->kind, op->mb % s.setup.step_microbatches, op->chunk}, start_ns, end_ns, version_of(t)});
    st.busy_ns += end_ns - start_ns;
    if (op->kind == op_kind::B && op->mb % s.setup.step_microbatches == s.setup.step_microbatches - 1)
      async_step(self, t);
    return true;
  }
  s.stats.events.push_back({*op, start_ns, end_ns});
  if (s.faults.kill_after(s.step, *op)) {
    self->quit(caf::exit_reason::kill);  // dies right after firing the op, as the fault asks
    return false;
  }
  s.stats.memory.emplace_back(end_ns, s.compute.stash_bytes());
  sample_cuda_memory(s.stats, s.setup.device, end_ns);
  s.stats.busy_ns += end_ns - start_ns;
  if (step_done(s)) report_grads(self);
  return true;
}

// Idle with the step unfinished: if nothing fires for op_timeout, ask the
// senders of the next missing inputs to send them again.
void arm_recheck(stage_ptr self) {
  auto& s = self->state;
  if (s.setup.op_timeout_ms <= 0 || s.recheck_pending || s.step < 0 || step_done(s) || s.setup.lockstep) return;
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
  self->state.tick_pending = false;
  while (fire_one(self))
    if (!self->mailbox().empty()) {
      schedule_tick(self);
      return;
    }
  arm_recheck(self);
}

void apply_update(stage_ptr self, const apply_msg& m) {
  auto& s = self->state;
  ++s.fired_total;
  torch::NoGradGuard no_grad;
  if (m.skip) {  // a NaN or an infinity somewhere: weights and optimizer state stay as they were
    for (auto& p : s.params) p.mutable_grad() = at::Tensor();
    return;
  }
  if (m.clip_coef.defined()) {
    auto coef = on_device(s, m.clip_coef, m.clip_coef.scalar_type());
    for (auto& p : s.params)
      if (p.grad().defined()) p.grad().mul_(coef);
  }
  for (auto& group : s.opt->param_groups()) group.options().set_lr(m.lr);
  s.opt->step();
  for (auto& p : s.params) p.mutable_grad() = at::Tensor();
}

// FNV-1a over the bytes of every parameter: replicas that hold the same
// bits agree, any drift shows.
uint64_t weights_checksum(const stage_state& s) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& p : s.params) {
    auto t = p.detach().to(torch::kCPU).contiguous();
    const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
    for (size_t i = 0, n = t.numel() * t.element_size(); i < n; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return h;
}

void evaluate(stage_ptr self, eval_msg m) {
  auto& s = self->state;
  ++s.fired_total;  // progress, as far as the watchdog is concerned
  torch::NoGradGuard no_grad;
  // Later stages get their input on this device already (the sender moved it).
  if (first_virtual(s, m.chunk)) m.x = on_device(s, m.x, s.setup.dtype);
  else if (s.queue) s.queue->wait(m.ready, m.x);
  auto out = s.compute.eval_forward(m.chunk, m.x, s.setup.seed);
  if (!last_virtual(s, m.chunk)) {
    s.link->send_eval(m.chunk, eval_msg{out, m.y, 0, nullptr});
    return;
  }
  const eval_numbers n = s.compute.eval_loss(out, m.y);
  eval_result r;
  r.total = n.total;
  r.correct = n.correct;
  r.loss_sum = n.loss_sum;
  self->send(s.driver, evaluated_atom::value, r);
}

void on_activation(stage_ptr self, activation_msg& m) {
  auto& s = self->state;
  if (!accept(s, m.h, op_kind::F)) return;
  const int chunk = m.h.chunk, mb = m.h.mb;
  s.inputs[slot(s, chunk, mb)] = std::move(m);
  schedule_tick(self);
}

void on_gradient(stage_ptr self, gradient_msg& m) {
  auto& s = self->state;
  if (!accept(s, m.h, op_kind::B)) return;
  s.grads_in[slot(s, m.h.chunk, m.h.mb)] = std::move(m.g);
  s.grads_ready[slot(s, m.h.chunk, m.h.mb)] = std::move(m.ready);
  schedule_tick(self);
}

// Lock-step: hands over what was sent before `round`, keeps the rest.
template <class Msg, class Handler>
void release(std::vector<Msg>& held, int64_t round, Handler handle) {
  std::vector<Msg> keep;
  for (auto& m : held) {
    if (m.h.round < round)
      handle(m);
    else
      keep.push_back(std::move(m));
  }
  held = std::move(keep);
}

caf::behavior running(stage_ptr self);

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
  stage_state* st = &s;
  shape.to_device = [st](const at::Tensor& t, at::ScalarType type) { return on_device(*st, t, type); };
  s.compute = stage_compute(std::move(shape));
  for (const auto& chunk : s.compute.chunk_params())
    for (const auto& p : chunk) s.params.push_back(p);
  s.opt = make_optimizer(s.setup.optimizer, s.params);
  if (s.setup.optimizer_copy) restore_optimizer_state(*s.opt, s.params, *s.setup.optimizer_copy);
  if (s.setup.async) {
    if (s.split || s.setup.chunks != 1)
      throw std::invalid_argument("async runs one chunk per stage with a full backward");
    for (int64_t t = 0; t < std::min<int64_t>(2, s.setup.steps); ++t) s.versions.emplace(t, snapshot(s));
    s.peak_versions = static_cast<int>(s.versions.size());
  }
  self->set_exception_handler([](caf::scheduled_actor* a, std::exception_ptr& eptr) -> caf::error {
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      return caf::make_error(caf::sec::runtime_error, std::string("stage: ") + e.what());
    }
  });
  return {
      [=](wire_atom, std::vector<caf::actor> ranks, caf::actor driver) {
        auto& st = self->state;
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
        ls.chunks = st.setup.chunks;
        ls.plc = st.plc;
        ls.device = st.setup.device;
        ls.devices = st.setup.devices;
        ls.lockstep = st.setup.lockstep;
        ls.faults = st.faults;
        ls.queue = st.queue.get();
        ls.stats = &st.stats;
        ls.step = &st.step;
        st.link = make_local_link(self, std::move(ls));
        st.link->wire(std::move(ranks));
        st.driver = std::move(driver);
        self->become(running(self));
      },
  };
}

caf::behavior running(stage_ptr self) {
  return {
      [=](fwd_atom, activation_msg& m) {
        if (self->state.setup.lockstep && m.h.round >= self->state.round)
          self->state.early_fwd.push_back(std::move(m));
        else
          on_activation(self, m);
      },
      [=](bwd_atom, gradient_msg& m) {
        if (self->state.setup.lockstep && m.h.round >= self->state.round)
          self->state.early_bwd.push_back(std::move(m));
        else
          on_gradient(self, m);
      },
      [=](tick_atom) { on_tick(self); },
      [=](recheck_atom, int64_t fired_then, int64_t step) { on_recheck(self, fired_then, step); },
      [=](resend_atom, int32_t kind, int64_t step, int32_t mb, int32_t chunk) {
        self->state.link->resend(kind == 0 ? op_kind::F : op_kind::B, chunk, step, mb);
      },
      [=](round_atom, int64_t round) {
        auto& st = self->state;
        st.round = round;
        // What a neighbour sent in an earlier round is visible now; what it
        // sent in this round (it may already have fired) waits for the next.
        release(st.early_fwd, round, [=](activation_msg& m) { on_activation(self, m); });
        release(st.early_bwd, round, [=](gradient_msg& m) { on_gradient(self, m); });
        fire_one(self);
        self->send(self->state.driver, round_done_atom::value, round);
      },
      [=](apply_atom, const apply_msg& m) {
        const int64_t begin = now_ns(self->state);
        apply_update(self, m);
        const int64_t end = now_ns(self->state);
        const auto& su = self->state.setup;
        self->send(self->state.driver, applied_atom::value, su.replica * su.stages + su.rank, m.step,
                   m.checksum ? weights_checksum(self->state) : uint64_t{0}, begin, end);
      },
      [=](eval_atom, eval_msg& m) { evaluate(self, std::move(m)); },
      [=](status_atom) -> stage_status { return status_of(self->state); },
      [=](ckpt_atom) -> stage_snapshot {
        auto& st = self->state;
        stage_snapshot snap;
        snap.rank = st.setup.rank;
        std::vector<std::string> names;
        for (const auto& chunk : st.setup.layers)
          for (auto& [name, t] : chunk->named_parameters()) {
            snap.weights.emplace_back(name, t.detach().to(torch::kCPU).clone());
            names.push_back(name);
          }
        snap.optimizer = copy_optimizer_state(*st.opt, st.params, std::move(names));
        return snap;
      },
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

int live_stages() { return live_stage_count.load(); }

caf::actor spawn_stage(caf::actor_system& sys, stage_setup setup) {
  if (setup.shared_thread) return sys.spawn(stage_behavior, std::move(setup));
  return sys.spawn<caf::detached>(stage_behavior, std::move(setup));
}

}  // namespace actorpipe
