#pragma once
// Message bodies. In one process tensors travel by handle, never copied.
// Every body has an inspect(), so CAF can serialize it for another
// process: tensors as tensor_wire blobs (messages/wire.hpp), device marks
// not at all (a mark means nothing in another process; the link that
// crosses one synchronizes before it sends). add_payload_types() registers
// them with an actor system, as every node of a distributed run must.
#include <ATen/core/Tensor.h>
#include <caf/actor_system_config.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "messages/ops.hpp"
#include "messages/wire.hpp"

namespace actorpipe {

/// An optimizer's state copied tensor by tensor (runtime/model/optimizer_state).
struct optimizer_state_copy {
  /// Per parameter, its global name ("0.weight"), where the copy knows it.
  std::vector<std::string> names;
  /// Per parameter, in the optimizer's parameter order: Adam's step count
  /// (0 for SGD) and its state tensors (Adam: exp_avg, exp_avg_sq,
  /// max_exp_avg_sq; SGD: momentum_buffer), deep copies. No tensors: that
  /// parameter has no state yet.
  std::vector<int64_t> steps;
  std::vector<std::vector<at::Tensor>> tensors;
};

/// A point in a stage's device queue (a CUDA event): the receiver's queue
/// waits for it before using the tensor it came with. Null where the device
/// runs work in host order (CPU, null, sim). Defined in runtime/model/device_stream.
struct device_mark;
using device_mark_ptr = std::shared_ptr<const device_mark>;

/// Identifies what a message belongs to; stale or duplicate ones are dropped.
struct msg_header {
  uint32_t epoch = 0;
  int64_t step = 0;
  int32_t mb = 0;
  int32_t chunk = 0;
  int64_t round = 0;  ///< lock-step test device: the sender's round
};

/// Input of F(step, mb): the activation (or the microbatch for stage 0) and
/// the targets, which ride along to the last stage.
struct activation_msg {
  msg_header h;
  at::Tensor x;
  at::Tensor y;
  device_mark_ptr ready{};  ///< x is written once this mark is passed
};

/// Input of B(step, mb): the gradient of the receiver's output.
struct gradient_msg {
  msg_header h;
  at::Tensor g;
  device_mark_ptr ready{};  ///< g is written once this mark is passed
};

/// What a stage measured during one step.
struct stage_stats {
  std::vector<op_event> events;  ///< fired ops, in firing order
  int64_t busy_ns = 0;
  /// The CPU time of the stage's own thread over its ops, timed under a CPU
  /// quota only (0 without one; its intra-op pool's threads not counted).
  int64_t cpu_ns = 0;
  /// The cores the process's CPU cgroup quota allows (0: none).
  double cpu_quota = 0.0;
  int peak_stash = 0;            ///< most microbatches stashed at once
  int64_t peak_stash_bytes = 0;  ///< most activation bytes held at once
  uint64_t duplicates = 0;       ///< duplicate or stale messages dropped
  uint64_t stale_epochs = 0;     ///< messages of another epoch (an earlier attempt) dropped
  int peak_versions = 0;         ///< async: most weight versions held at once
  uint64_t injected_duplicates = 0;  ///< messages this stage sent twice on purpose
  uint64_t injected_delays = 0;      ///< messages it held back on purpose
  uint64_t injected_drops = 0;       ///< messages it never sent, on purpose
  uint64_t resend_requests = 0;      ///< inputs it asked for again after op_timeout
  uint64_t retransmits = 0;          ///< messages it sent again when asked
  /// OVERLAP_F_B pairs whose F and B ran on two CUDA streams of the stage.
  uint64_t two_stream_pairs = 0;
  /// Data parallel: the gradient allreduce over this stage's replicas
  /// (trace time, ns; both 0 when there was none).
  int64_t allreduce_start_ns = 0;
  int64_t allreduce_end_ns = 0;
  /// The optimizer step that closed the step (0 when none, as in async).
  int64_t optimizer_start_ns = 0;
  int64_t optimizer_end_ns = 0;
  /// Activation bytes stashed after each op: (trace time ns, bytes).
  std::vector<std::pair<int64_t, int64_t>> memory;
  /// On CUDA (with a CUDA LibTorch): the caching allocator's allocated and
  /// reserved bytes on the stage's device after each op: {ns, allocated,
  /// reserved}.
  std::vector<std::array<int64_t, 3>> cuda_memory;
  /// The OS process the stage ran in (a trace shows one process per rank).
  int32_t pid = 0;
};

/// Where a stage first saw a NaN or an infinity in a step.
struct nonfinite_seen {
  int32_t mb = -1;       ///< -1: none seen
  std::string where;     ///< "activation" | "gradient"
  int64_t at_ns = 0;     ///< trace time, to order stages
};

/// stage -> driver when the step's last backward is done.
struct grads_report {
  int rank = 0;
  int replica = 0;  ///< data-parallel replica
  int64_t step = 0;
  /// Per chunk: per-parameter 2-norms (float32, CPU) in layer order.
  std::vector<at::Tensor> grad_norms;
  double loss_sum = 0.0;  ///< last stage: sum of weighted microbatch losses
  int64_t correct = 0;    ///< last stage: training samples classified right this step
  int64_t samples = 0;
  stage_stats stats;
  nonfinite_seen nonfinite;
  /// Async: the parameter or optimizer state its update of `step` left
  /// with a NaN or an infinity ("" when none; a synchronous step's update
  /// is judged by its apply's answer).
  std::string nonfinite_update;
};

/// driver -> stage: scale the gradients by clip_coef, then step with lr.
struct apply_msg {
  int64_t step = 0;
  at::Tensor clip_coef;  ///< undefined = no clipping
  double lr = 0.0;
  bool checksum = false;  ///< answer with a checksum of the new weights
  bool skip = false;      ///< a non-finite value was seen: drop the gradients, do not step
};


/// Held-out evaluation: a no-grad forward travelling down the stages.
struct eval_msg {
  at::Tensor x;
  at::Tensor y;
  int32_t chunk = 0;  ///< the receiver's chunk
  device_mark_ptr ready{};  ///< x is written once this mark is passed
  /// The weights it evaluates: those after this many updates. A stage
  /// holds the message until it has them (its close of update `after`, or
  /// under async the copy it kept of them), whatever the order in which
  /// its senders' messages arrive.
  int64_t after = 0;
  /// How many messages (batches) this evaluation sends each stage: a
  /// stage lets the weights it kept for it go after the last.
  int32_t batches = 1;
};

struct eval_result {
  int64_t correct = 0;
  int64_t total = 0;
  double loss_sum = 0.0;  ///< sum over samples of the cross-entropy
  int64_t after = 0;      ///< eval_msg::after
};

/// Parameters by global name ("0.weight"), CPU copies.
using named_params = std::vector<std::pair<std::string, at::Tensor>>;

/// stage -> driver (watchdog): ops fired so far, and this stage's row of
/// the op grid: what it fired this step, what is ready, what waits on what.
struct stage_status {
  int rank = 0;
  int64_t fired = 0;
  bool done = false;  ///< every op of its current step ran
  std::string grid;
};

/// stage -> driver: what a checkpoint needs from one stage.
struct stage_snapshot {
  int rank = 0;
  named_params weights;
  std::shared_ptr<const optimizer_state_copy> optimizer;  ///< its tensors, copied, with parameter names
  /// Defined: every tensor above is a view of this one CPU buffer, in
  /// order (the weights, then each parameter's defined optimizer tensors),
  /// and it crosses processes as one transfer.
  at::Tensor flat;
};

// -- inspection ---------------------------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, optimizer_state_copy& x) {
  return f(caf::meta::type_name("optimizer_state_copy"), x.names, x.steps, x.tensors);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, msg_header& x) {
  return f(caf::meta::type_name("msg_header"), x.epoch, x.step, x.mb, x.chunk, x.round);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, activation_msg& x) {
  return f(caf::meta::type_name("activation_msg"), x.h, x.x, x.y);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gradient_msg& x) {
  return f(caf::meta::type_name("gradient_msg"), x.h, x.g);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_stats& x) {
  return f(caf::meta::type_name("stage_stats"), x.events, x.busy_ns, x.cpu_ns, exact(x.cpu_quota), x.peak_stash,
           x.peak_stash_bytes, x.duplicates,
           x.stale_epochs, x.peak_versions, x.injected_duplicates, x.injected_delays, x.injected_drops,
           x.resend_requests, x.retransmits, x.two_stream_pairs, x.allreduce_start_ns, x.allreduce_end_ns,
           x.optimizer_start_ns, x.optimizer_end_ns, x.memory, x.cuda_memory, x.pid);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, nonfinite_seen& x) {
  return f(caf::meta::type_name("nonfinite_seen"), x.mb, x.where, x.at_ns);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, grads_report& x) {
  return f(caf::meta::type_name("grads_report"), x.rank, x.replica, x.step, x.grad_norms, exact(x.loss_sum), x.correct,
           x.samples, x.stats, x.nonfinite, x.nonfinite_update);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, apply_msg& x) {
  return f(caf::meta::type_name("apply_msg"), x.step, x.clip_coef, exact(x.lr), x.checksum, x.skip);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, eval_msg& x) {
  return f(caf::meta::type_name("eval_msg"), x.x, x.y, x.chunk, x.after, x.batches);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, eval_result& x) {
  return f(caf::meta::type_name("eval_result"), x.correct, x.total, exact(x.loss_sum), x.after);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_status& x) {
  return f(caf::meta::type_name("stage_status"), x.rank, x.fired, x.done, x.grid);
}

/// The optimizer copy is shared and const in one process; across one it
/// travels as a value (absent: a stage with no optimizer state to give).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_snapshot& x) {
  bool has = x.optimizer != nullptr;
  optimizer_state_copy copy;
  if constexpr (Inspector::reads_state) {
    if (has) copy = *x.optimizer;  // tensor handles, not their data
  }
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.optimizer = has ? std::make_shared<const optimizer_state_copy>(std::move(copy)) : nullptr;
    return caf::none;
  });
  return f(caf::meta::type_name("stage_snapshot"), x.rank, x.weights, has, copy, load);
}

template <class T>
struct payload_tag {
  using type = T;
};

/// Calls f(payload_tag<T>{}, name) for every message body type that
/// crosses processes: what add_payload_types registers, and what
/// tests/messages/wire_test holds to exact floats.
template <class F>
void for_each_payload(F&& f) {
  f(payload_tag<activation_msg>{}, "activation_msg");
  f(payload_tag<gradient_msg>{}, "gradient_msg");
  f(payload_tag<grads_report>{}, "grads_report");
  f(payload_tag<apply_msg>{}, "apply_msg");
  f(payload_tag<eval_msg>{}, "eval_msg");
  f(payload_tag<eval_result>{}, "eval_result");
  f(payload_tag<named_params>{}, "named_params");
  f(payload_tag<stage_snapshot>{}, "stage_snapshot");
  f(payload_tag<stage_status>{}, "stage_status");
  f(payload_tag<std::vector<int64_t>>{}, "std::vector<int64_t>");
  // A directory's answer to arriving_atom (the ranks whose copies it is
  // still receiving): unregistered, rank 0's heal never heard it from
  // another process and stopped waiting for a copy on its way.
  f(payload_tag<std::vector<int32_t>>{}, "std::vector<int32_t>");
}

/// Registers every message body with `cfg`: each node of a distributed run
/// calls it on its actor_system_config before starting the system.
inline void add_payload_types(caf::actor_system_config& cfg) {
  for_each_payload([&cfg](auto tag, const char* name) { cfg.add_message_type<typename decltype(tag)::type>(name); });
}

}  // namespace actorpipe
