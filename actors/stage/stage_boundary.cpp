// The stage's step boundary: the gradients summed over the replicas and
// reported, the update applied, the async step, evaluation, and the
// answers to the driver's questions (status, checksum).
#if ACTORPIPE_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <csignal>
#include <limits>
#include <thread>

#include <unistd.h>

#include "actors/stage/stage_state.hpp"
#include "runtime/dist/placement/boundary_memory.hpp"
#include "runtime/util/cpu_quota.hpp"
#include "runtime/util/fnv1a.hpp"
#include "runtime/dist/collectives/collectives.hpp"
#include "runtime/model/adamw.hpp"
#include "runtime/model/lr.hpp"
#include "runtime/schedule/op_grid.hpp"
#include "runtime/model/optimizer_state.hpp"

namespace actorpipe::stage_detail {

namespace {

// Waits for a collective of this stage's. With replicas, a torn-down
// attempt can call the wait off.
void finish(stage_state& s, std::unique_ptr<allreduce_work> work) {
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
}

// The tied embedding's and head's gradients, summed: both copies then step
// alike. Between two stages the sum is a two-rank allreduce; a + b is b + a,
// so both hold the same bits.
void sum_tied_grads(stage_state& s) {
  const int e = s.setup.tie_embedding_param, h = s.setup.tie_head_param;
  if ((e < 0 && h < 0) || !computes(s)) return;
  torch::NoGradGuard no_grad;
  auto grad_of = [&](int i) -> at::Tensor& {
    auto& p = s.params[static_cast<size_t>(i)];
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    return p.mutable_grad();
  };
  if (e >= 0 && h >= 0) {  // one stage holds both: no communication
    auto sum = grad_of(e) + grad_of(h);
    grad_of(e) = sum;
    grad_of(h) = sum.clone();
    return;
  }
  auto& g = grad_of(e >= 0 ? e : h);
  const bool host = s.setup.tie_group->backend() == "gloo" && s.setup.device != "cpu";
  std::vector<at::Tensor> grads{host ? g.to(torch::kCPU) : g};
  finish(s, s.setup.tie_group->allreduce_sum_async(grads, s.queue ? s.queue->native() : nullptr));
  if (host) g.copy_(grads[0]);
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
  finish(s, s.setup.dp_group->allreduce_sum_async(grads, s.queue ? s.queue->native() : nullptr));
  if (host && !s.setup.skip_allreduce) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < grads.size(); ++i) s.params[i].mutable_grad().copy_(grads[i]);
  }
  s.stats.allreduce_end_ns = now_ns(s);
}

// A `nonfinite` fault with `where: update`: a NaN in the stage's first
// parameter, as if its update of `step` had written it.
void inject_update_nan(stage_state& s, int64_t step) {
  if (!computes(s) || s.params.empty() || !s.faults.nan_at(step, 0, nonfinite_site::update)) return;
  torch::NoGradGuard no_grad;
  s.params.front().detach().view(-1)[0].fill_(std::numeric_limits<float>::quiet_NaN());
}

// The process's CPU quota (cores; 0: none), what pipeline.rebalance
// measures a throttled process by. Read again at most once a second: a
// process can be moved into a group, or its quota changed, mid-run.
double cpu_quota(stage_state& s) {
  const auto now = clock_type::now();
  if (s.quota_read_at == clock_type::time_point{} || now - s.quota_read_at > std::chrono::seconds(1)) {
    s.quota_cores = cpu_quota_cores();
    s.quota_read_at = now;
  }
  return s.quota_cores;
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const optimizer_config& o,
                                                        const std::vector<at::Tensor>& params) {
  if (o.type == "sgd")
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  const auto options = torch::optim::AdamOptions(o.lr).betas(std::make_tuple(o.beta1, o.beta2)).eps(o.eps);
  if (o.type == "adamw") return std::make_unique<adamw>(params, options, adamw_decays(o, params));
  return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(options).weight_decay(o.weight_decay));
}

void report_grads(stage_ptr self) {
  auto& s = self->state;
  sum_tied_grads(s);
  allreduce_grads(s);
  grads_report r;
  r.rank = s.setup.rank;
  r.replica = s.setup.replica;
  r.step = s.step;
  const at::Tensor* head_copy =
      s.setup.tie_head_param >= 0 ? &s.params[static_cast<size_t>(s.setup.tie_head_param)] : nullptr;
  for (const auto& chunk : s.compute.chunk_params()) {
    std::vector<at::Tensor> norms;
    for (const auto& p : chunk)
      if (p.grad().defined())  // the tied weight counts once, as the embedding's
        norms.push_back(head_copy && p.is_same(*head_copy) ? torch::zeros({}, p.grad().options()) : p.grad().norm(2));
    r.grad_norms.push_back(norms.empty() ? torch::empty({0}) : torch::stack(norms).to(torch::kCPU, torch::kFloat));
  }
  const auto& loss = s.compute.loss_sum();
  const auto& correct = s.compute.correct_sum();
  r.loss_sum = loss.defined() ? loss.item<double>() : 0.0;
  r.correct = correct.defined() ? correct.item<int64_t>() : 0;
  r.samples = s.compute.samples();
  r.nonfinite = first_nonfinite(s);
  r.stats = std::move(s.stats);
  r.stats.pid = static_cast<int32_t>(::getpid());
  r.stats.cpu_quota = cpu_quota(s);
  r.stats.duplicates = s.dropped;  // since the last report, between steps too
  s.dropped = 0;
  r.stats.stale_epochs = s.stale;
  s.stale = 0;
  s.stats = stage_stats{};
  self->send(s.driver, grads_atom::value, std::move(r));
}

nonfinite_seen first_nonfinite(const stage_state& s) {
  nonfinite_seen seen;
  if (auto bad = s.finite.first()) {
    seen.mb = bad->op.mb;
    seen.where = bad->op.kind == op_kind::F ? "activation" : "gradient";
    seen.at_ns = bad->at_ns;
  }
  return seen;
}

namespace {

// Async, eval.every: the weights after `updates` updates, kept for the
// evaluation that reads them while the stream goes on (replica 0's stages
// evaluate; after the last update the live weights are those).
void keep_for_eval(stage_state& s, int64_t updates) {
  if (s.setup.replica != 0 || !computes(s) || updates >= s.setup.steps ||
      !eval_due(s.setup.eval, updates, s.setup.steps))
    return;
  torch::NoGradGuard no_grad;
  auto& copy = s.eval_copies[updates];
  for (const auto& p : s.params) copy.weights.push_back(p.detach().clone());
}

}  // namespace

// Async: step t's last backward ran here. Step the weights with step t's
// gradient (computed at version t-1), drop step t's copy, and copy the new
// weights (version t+1) for step t+2.
void async_step(stage_ptr self, int64_t t) {
  auto& s = self->state;
  s.versions.step(t, *s.opt, s.params, lr_at(s.setup.train, t));
  s.compute.weights_changed();
  // `after_op: update`: the process dies (or stops) right after it.
  if (const auto kill = s.faults.kill_after_update(t)) ::raise(*kill == fault_kind::kill_process ? SIGKILL : SIGSTOP);
  inject_update_nan(s, t);
  keep_for_eval(s, t + 1);
  grads_report r;
  // No step of an async run can be undone (the next ones run already on
  // these weights): a non-finite update stops it.
  if (s.setup.check_updates && computes(s)) r.nonfinite_update = first_nonfinite_state(*s.opt, s.params, s.param_names);
  r.rank = s.setup.rank;
  r.step = t;
  r.loss_sum = s.step_loss[t];
  s.step_loss.erase(t);
  r.stats = std::move(s.step_stats[t]);
  r.stats.pid = static_cast<int32_t>(::getpid());
  r.stats.cpu_quota = cpu_quota(s);
  s.step_stats.erase(t);
  // Peaks since the last report; counts of what was dropped.
  r.stats.peak_stash = s.stats.peak_stash;
  r.stats.peak_stash_bytes = s.stats.peak_stash_bytes;
  r.stats.duplicates = s.dropped;
  s.dropped = 0;
  r.stats.stale_epochs = s.stale;
  s.stale = 0;
  r.stats.peak_versions = s.versions.peak();
  s.stats.peak_stash = s.compute.stashed();
  s.stats.peak_stash_bytes = s.compute.stash_bytes();
  s.stats.duplicates = 0;
  self->send(s.driver, grads_atom::value, std::move(r));
  release_evals(self);
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

std::string apply_update(stage_ptr self, const apply_msg& m) {
  auto& s = self->state;
  ++s.fired_total;
  torch::NoGradGuard no_grad;
  s.before_update.reset();
  if (m.skip) {  // a NaN or an infinity somewhere: weights and optimizer state stay as they were
    for (auto& p : s.params) p.mutable_grad() = at::Tensor();
    return {};
  }
  if (m.clip_coef.defined()) {
    auto coef = on_device(s, m.clip_coef, m.clip_coef.scalar_type());
    for (auto& p : s.params)
      if (p.grad().defined()) p.grad().mul_(coef);
  }
  for (auto& group : s.opt->param_groups()) group.options().set_lr(m.lr);
  // A live boundary shares these tensors: gone from memory before they
  // change (the next one is kept once the update is done).
  if (s.setup.live_boundary) s.setup.boundary->forget(slot_of(s));
  const bool check = s.setup.check_updates && computes(s);
  if (check) {
    // Aside, the tensors from before the step stay as they are: kept
    // until the driver's close says whether the update counts.
    stage_state::replaced before;
    for (const auto& p : s.params) before.weights.push_back(p.detach());
    before.optimizer = copy_optimizer_state(*s.opt, s.params, {}, /*share=*/true);
    s.before_update = std::move(before);
  }
  // Aside: the boundary copy that shares the tensors before this step
  // keeps them as they are. Into the process's pool where it has one: it
  // outlives the generation (tensor_pool).
  if (check || s.shared)
    step_aside(*s.opt, s.setup.boundary ? &s.setup.boundary->buffers() : &s.pool);
  else
    s.opt->step();
  s.shared = false;
  s.compute.weights_changed();
  for (auto& p : s.params) p.mutable_grad() = at::Tensor();
  inject_update_nan(s, m.step);
  return check ? first_nonfinite_state(*s.opt, s.params, s.param_names) : std::string();
}

void close_update(stage_state& s, bool undo) {
  if (undo && s.before_update) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < s.params.size(); ++i) s.params[i].set_data(s.before_update->weights[i]);
    restore_optimizer_state(*s.opt, s.params, *s.before_update->optimizer);
    s.compute.weights_changed();
  }
  s.before_update.reset();
}

// FNV-1a over the bytes of every parameter: replicas that hold the same
// bits agree, any drift shows.
uint64_t weights_checksum(const stage_state& s) {
  fnv1a h;
  for (const auto& p : s.params) {
    auto t = p.detach().to(torch::kCPU).contiguous();
    h.bytes(t.data_ptr(), t.numel() * t.element_size());
  }
  return h.digest();
}

namespace {

// The weights an evaluation reads here (`weights`: null for the live
// ones); false while this stage does not hold them yet. Synchronous: the
// live weights, once no update waits for the driver's verdict (a close
// that undoes it may still come). Async: the copy kept after `after`
// updates, or the live weights after the last one.
bool eval_weights(stage_state& s, const eval_msg& m, const std::vector<at::Tensor>*& weights) {
  weights = nullptr;
  if (!s.setup.async) return !s.before_update;
  if (m.after >= s.setup.steps || !computes(s)) return true;
  auto it = s.eval_copies.find(m.after);
  if (it == s.eval_copies.end()) return false;
  weights = &it->second.weights;
  return true;
}

// The batch has read the copy it evaluated with; after the last, it goes.
void done_with_copy(stage_state& s, const eval_msg& m) {
  auto it = s.eval_copies.find(m.after);
  if (it != s.eval_copies.end() && ++it->second.read >= m.batches) s.eval_copies.erase(it);
}

}  // namespace

void evaluate(stage_ptr self, eval_msg m) {
  auto& s = self->state;
  const std::vector<at::Tensor>* weights = nullptr;
  if (!eval_weights(s, m, weights)) {
    s.held_evals.push_back(std::move(m));
    return;
  }
  ++s.fired_total;  // progress, as far as the watchdog is concerned
  torch::NoGradGuard no_grad;
  // A later stage's input is on this device already when the sender is in
  // this process (it moved it); from another process it comes on the host.
  if (first_virtual(s, m.chunk)) {
    m.x = on_device(s, m.x, s.setup.compute_dtype);
  } else if (m.x.device() != torch::Device(s.setup.device)) {
    m.x = m.x.to(torch::Device(s.setup.device));
  } else if (s.queue) {
    s.queue->wait(m.ready, m.x);
  }
  auto out = s.compute.eval_forward(m.chunk, m.x, s.setup.seed, weights);
  if (weights) done_with_copy(s, m);
  if (!last_virtual(s, m.chunk)) {
    eval_msg next{out, m.y, 0, nullptr, m.after, m.batches};
    s.link->send_eval(m.chunk, std::move(next));
    return;
  }
  const eval_numbers n = s.compute.eval_loss(out, m.y);
  eval_result r;
  r.total = n.total;
  r.correct = n.correct;
  r.loss_sum = n.loss_sum;
  r.after = m.after;
  self->send(s.driver, evaluated_atom::value, r);
}

void release_evals(stage_ptr self) {
  auto& s = self->state;
  if (s.held_evals.empty()) return;
  auto held = std::move(s.held_evals);
  s.held_evals.clear();
  for (auto& m : held) evaluate(self, std::move(m));
}

}  // namespace actorpipe::stage_detail
