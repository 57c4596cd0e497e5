#pragma once
// Inside the stage actor (not a public header): its state, split by owner
// into the ready board, the compute, the link, the fault plan, the weight
// versions and the NaN watch, and the functions that act on it. The
// behaviors are in stage_actor.cpp, firing in stage_ops.cpp, the step
// boundary (allreduce, report, apply, evaluation) in stage_boundary.cpp.
#include <caf/all.hpp>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/stage/stage_actor.hpp"
#include "actors/stage/stage_clock.hpp"
#include "actors/stage/stage_link.hpp"
#include "messages/atoms.hpp"
#include "messages/payloads.hpp"
#include "runtime/model/device_stream.hpp"
#include "runtime/faults/fault_plan.hpp"
#include "runtime/faults/finite_watch.hpp"
#include "runtime/schedule/placement.hpp"
#include "runtime/schedule/policy.hpp"
#include "runtime/model/optimizer_state.hpp"
#include "runtime/schedule/ready_board.hpp"
#include "runtime/model/stage_compute.hpp"
#include "runtime/model/weight_versions.hpp"

namespace actorpipe::stage_detail {

using clock_type = std::chrono::steady_clock;

extern std::atomic<int> live_stage_count;

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
  // Healing at dp = 1: the stage whose process keeps a copy of this one's
  // boundary state (null: none); as a keeper, the answers owed to copies
  // asked with a request, by number.
  caf::actor keeper;
  std::map<uint64_t, caf::response_promise> owed_copies;
  uint64_t copies_asked = 0;
  bool said_why_socket = false;  // a copy that could not go through shared memory, said once
  // Copies sent to the keeper and not yet in its memory. A heal can use
  // only the three newest lasting boundaries (runtime/dist/placement/heal_plan.hpp):
  // an update whose boundary would send a third waits here until one is in
  // (a keeper slower than the copies, under load or a CPU quota, would
  // otherwise hold none of them when the stage's process dies).
  int copies_in_flight = 0;
  std::optional<apply_msg> held_apply;

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
  std::unique_ptr<stage_clock> clock;  // self-ticking, or the driver's lock-step rounds
  weight_versions versions;  // async: each step's copy of the weights it computes with
  // Boundaries are kept and the update can leave the old tensors alone
  // (step_aside: a flushing schedule, Adam or SGD, weights on the CPU):
  // a boundary copy is then the weights and state themselves, not clones,
  // and `shared` says that one holds them now, so that the next update
  // steps aside (into the pool's buffers: the process's boundary memory's
  // where it has one, else this one) rather than in place.
  bool aside = false;
  bool shared = false;
  tensor_pool pool;
  // check_updates: what the update being judged replaced (the parameters'
  // data and the optimizer state, the tensors themselves: the update
  // stepped aside), until the driver's close keeps or undoes it.
  struct replaced {
    std::vector<at::Tensor> weights;
    std::shared_ptr<const optimizer_state_copy> optimizer;
  };
  std::optional<replaced> before_update;
  std::vector<std::string> param_names;  // global names ("3.weight"), as params
  std::map<int64_t, stage_stats> step_stats;
  std::map<int64_t, double> step_loss;
  int64_t fired_total = 0;  // every op of the run, for the watchdog
  uint64_t dropped = 0;     // duplicate or stale messages since the last report
  uint64_t stale = 0;       // messages of another epoch since the last report
  double quota_cores = 0;  // the process's CPU quota (cpu_quota_cores), as last read
  clock_type::time_point quota_read_at{};
  // Messages of a step this stage has not begun (it begins with the apply
  // that closes the step before): they wait here, so that no mailbox order
  // between different senders is assumed.
  std::vector<activation_msg> ahead_fwd;
  std::vector<gradient_msg> ahead_bwd;
  // Evaluations whose weights this stage does not hold yet (eval_msg::after).
  std::vector<eval_msg> held_evals;
  // Async, eval.every: the weights after k updates, by k, until every
  // batch of k's evaluation has read them (`read` counts them).
  struct eval_copy {
    std::vector<at::Tensor> weights;
    int32_t read = 0;
  };
  std::map<int64_t, eval_copy> eval_copies;
  fault_plan faults;  // from setup.faults: what to inject where
  /// The op just fired opened an overlapped F and B (OVERLAP_F_B): its B
  /// fires next, before any message is looked at.
  bool pair_open = false;
  /// CUDA, by slot: its F ran on the queue's side (and so, autograd's rule,
  /// do its B and W). Empty elsewhere.
  std::vector<char> on_side;
  bool pair_b_side = false;  // CUDA: the open pair's B goes on the side
  bool padded = false;  // the op being fired was padded before it sent (pad runs once per op)
  finite_watch finite;  // which op first produced a NaN or an infinity
  at::Tensor nothing;  // null and sim devices: every activation and gradient

  static inline const char* name = "stage";
};

using stage_ptr = caf::stateful_actor<stage_state>*;

inline int64_t now_ns(const stage_state& s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - s.setup.origin)
      .count();
}

// Edge stages are flags: the first virtual stage takes the microbatch, the
// last one computes the loss.
inline bool first_virtual(const stage_state& s, int chunk) { return s.plc.first(s.setup.rank, chunk); }
inline bool last_virtual(const stage_state& s, int chunk) { return s.plc.last(s.setup.rank, chunk); }
inline int virtual_stage(const stage_state& s, int chunk) { return s.plc.virtual_stage(s.setup.rank, chunk); }
inline int slot(const stage_state& s, int chunk, int mb) { return chunk * s.setup.microbatches + mb; }
// The stage's slot in boundary memory: replica d, stage r at d S + r.
inline int slot_of(const stage_state& s) { return s.setup.replica * s.setup.stages + s.setup.rank; }
// Every backward (and, split, every weight gradient) of the step has run.
inline bool step_done(const stage_state& s) { return s.board.done(); }
inline bool computes(const stage_state& s) { return s.setup.work == stage_setup::work_kind::compute; }
// Async: the step of stream microbatch g, and the weight version it uses.
inline int64_t step_of(const stage_state& s, int g) { return g / s.setup.step_microbatches; }
// The step and the op a fault names for `op`: under async the stream's
// microbatch g is microbatch g mod M of step g / M (a fault fires at the
// first op of a microbatch of its step, as in a synchronous run).
inline int64_t fault_step(const stage_state& s, const op_id& op) {
  return s.setup.async ? step_of(s, op.mb) : s.step;
}
inline op_id fault_op(const stage_state& s, op_id op) {
  if (s.setup.async) op.mb %= s.setup.step_microbatches;
  return op;
}

// A host tensor (a microbatch, its targets) on this stage's device as
// `dtype`. On CUDA it goes through pinned memory without blocking: a plain
// copy from pageable memory would wait for everything queued before it.
// Integer tensors (tokens, targets) keep their type.
inline at::Tensor on_device(const stage_state& s, const at::Tensor& t, at::ScalarType dtype) {
  if (!t.is_floating_point()) dtype = t.scalar_type();
  if (s.queue && !t.is_cuda()) return t.pin_memory().to(torch::Device(s.setup.device), dtype, /*non_blocking=*/true);
  return t.to(torch::Device(s.setup.device), dtype);
}

// stage_ops.cpp: the step's ops.
void begin_step(stage_state& s, int64_t step);
/// What becomes of an arriving input: taken, dropped (counted), or held
/// until its step begins.
enum class arrival { take, drop, hold };
arrival accept(stage_state& s, const msg_header& h, op_kind kind);
/// True (and counted) for a message of another epoch: an earlier attempt's
/// or generation's. Asked once, on arrival, before anything else.
/// accept() takes what passed it.
bool stale(stage_state& s, const msg_header& h);
/// The step after `step` begins (its apply ran); what waited for it arrives.
void next_step(stage_ptr self, int64_t step);
void schedule_tick(stage_ptr self);
bool fire_one(stage_ptr self);
void arm_recheck(stage_ptr self);
void on_recheck(stage_ptr self, int64_t fired_then, int64_t step);
void on_tick(stage_ptr self);
void on_activation(stage_ptr self, activation_msg& m);
void on_gradient(stage_ptr self, gradient_msg& m);

// stage_boundary.cpp: the step boundary and the driver's questions.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const optimizer_config& o,
                                                        const std::vector<at::Tensor>& params);
void report_grads(stage_ptr self);
void async_step(stage_ptr self, int64_t t);
nonfinite_seen first_nonfinite(const stage_state& s);
stage_status status_of(const stage_state& s);
void sample_cuda_memory(stage_stats& st, const std::string& device, int64_t t);
/// The optimizer step of apply `m`; with check_updates, stepped aside and
/// checked: the parameter or optimizer state it left with a NaN or an
/// infinity ("3.weight", "3.weight (exp_avg_sq)"), "" when none.
std::string apply_update(stage_ptr self, const apply_msg& m);
/// The driver's verdict on the update: undo it (back to the weights and
/// optimizer state from before it) or keep it.
void close_update(stage_state& s, bool undo);
uint64_t weights_checksum(const stage_state& s);
/// Evaluates `m` now if this stage holds the weights it asks for, else
/// holds it until release_evals finds them here.
void evaluate(stage_ptr self, eval_msg m);
/// After a close (or, async, a step): the held evaluations that can run now.
void release_evals(stage_ptr self);

}  // namespace actorpipe::stage_detail
