#pragma once
// A pipeline stage: owns its layers, its optimizer and its stashed
// activations, and fires ready ops under its policy.
//
//   wiring --(wire: every stage by rank, driver)--> running
//   running: fwd/bwd messages fill the ready set; a tick fires one op chosen
//            by the policy, then ticks again after the mailbox drained;
//            the step's last B (dp > 1: then the allreduce over this
//            stage's replicas) sends grads_report to the driver;
//            apply clips and steps the optimizer; eval runs a no-grad F;
//            weights hands CPU copies of the parameters to the asker.
//   async: no apply messages; the step's last B steps the weights here and
//          reports the step; forwards of step t use weight version t-1.
//   lockstep: no self-ticks; each round message fires at most one op and
//            is answered with round_done.
#include <caf/fwd.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/config/config.hpp"
#include "runtime/model/model.hpp"
#include "runtime/schedule/policy.hpp"

namespace actorpipe {
class allreduce_group;
struct optimizer_state_copy;
class segment_ring;
class data_plane;
class tensor_channel;
class boundary_memory;
}

namespace actorpipe {

/// Everything a stage needs, decided before it is spawned.
struct stage_setup {
  int rank = 0;
  int stages = 1;
  int microbatches = 1;     ///< per step, as torch.chunk splits the batch (async: the whole run's)
  /// Async schedules (pol->flushes() false): the run is one stream of
  /// steps x step_microbatches microbatches; microbatch g belongs to step
  /// g / step_microbatches, and the stage steps its own weights after each
  /// step's last backward, at train.lr_schedule's rate.
  bool async = false;
  int step_microbatches = 1;
  int64_t steps = 0;
  train_config train;
  /// eval.every: under async, the stage keeps a copy of its weights after
  /// each update an evaluation follows, for that evaluation to read while
  /// the stream goes on.
  eval_config eval;
  int64_t batch_size = 1;   ///< loss of a microbatch is weighted by size / batch_size
  std::string device = "cpu";
  at::ScalarType dtype = at::kFloat;  ///< the parameters' (model.dtype)
  /// What the layers compute in and activations cross stages in: dtype,
  /// or bfloat16 under model.mixed_precision (the weights cast for each
  /// step's forwards, the loss in float32). Inputs are cast to it.
  at::ScalarType compute_dtype = at::kFloat;
  std::vector<std::string> devices;  ///< every rank's, to place what is sent there
  int intra_op_threads = 1;
  double pace_ms = 0.0;
  /// What an op does: run the layers, nothing (the null device: empty
  /// activations, only the runtime is left), or nothing for sim_ms[kind]
  /// (the sim device; a full backward's time includes W's).
  enum class work_kind { compute, none, timed };
  work_kind work = work_kind::compute;
  double sim_ms[3] = {0.0, 0.0, 0.0};  ///< by op_kind: F, B, W
  /// Run on CAF's shared scheduler instead of a thread of its own (the null
  /// device: its ops never block).
  bool shared_thread = false;
  /// Activation recomputation: F stashes only its input, B runs F again.
  bool recompute = false;
  bool lockstep = false;  ///< fire only on the driver's round messages
  uint64_t seed = 0;
  /// The schedule. Policies are pure and const, so every stage shares one.
  std::shared_ptr<const policy> pol;
  int chunks = 1;  ///< model chunks; pol->layout() says which virtual stage each is
  optimizer_config optimizer;
  std::vector<std::shared_ptr<layer_stack>> layers;  ///< one per chunk
  std::chrono::steady_clock::time_point origin;  ///< trace time zero
  /// Data parallel: this stage's rank in the group of its replicas (null
  /// when dp = 1). The step's gradients are summed over it as soon as this
  /// stage's own last backward ran.
  std::shared_ptr<allreduce_group> dp_group;
  /// A tied embedding and lm_head (model.tie_*): the positions in this
  /// stage's parameters (every chunk's, in order) of the copies it holds
  /// (-1: none). Once the step's backwards ran, the copies' gradients are
  /// summed: here when it holds both, else over `tie_group` with the stage
  /// that holds the other; then the replicas' allreduce. The head's copy
  /// is left out of the gradient norm, so the tied weight counts once.
  int tie_embedding_param = -1, tie_head_param = -1;
  std::shared_ptr<allreduce_group> tie_group;
  /// With replicas: set when the attempt is torn down (a stage died or the
  /// run hung), so a stage waiting in its allreduce for a peer that will
  /// never come gives up instead of blocking its thread.
  std::shared_ptr<std::atomic<bool>> abandon;
  int replica = 0;
  /// The attempt this stage belongs to: stamped on what it sends; a message
  /// of another epoch is dropped and counted.
  uint32_t epoch = 0;
  /// Test hook: this replica adds zeros to the sum and keeps its own
  /// gradient (the replicas then drift apart, which --verify-replicas and
  /// the tests must catch).
  bool skip_allreduce = false;
  /// Injected faults for this stage (nonfinite: a NaN into an activation or
  /// a gradient of one microbatch of one step).
  std::vector<fault_spec> faults;
  uint64_t fault_seed = 0;  ///< faults.seed: which messages a probability picks
  double op_timeout_ms = 0.0;  ///< ask again for an input missing this long (0: never)
  /// supervision.check_updates: each update steps aside, keeps what it
  /// replaced and is checked for a NaN or an infinity; the driver's close
  /// (close_atom) then keeps it or undoes it. false: in place, unchecked.
  bool check_updates = true;
  /// Resuming: the optimizer's state from a checkpoint on disk or a
  /// supervised run's in-memory snapshot (null: fresh).
  std::shared_ptr<const optimizer_state_copy> optimizer_copy;
  /// Multi-process: the process (rank) of each stage of this replica (empty:
  /// all in this one), this one's, and the data plane that carries
  /// activations and gradients to the others.
  std::vector<int> process_of;
  int process = 0;
  std::shared_ptr<data_plane> plane;
  /// What a record from another process must measure in its last
  /// dimension, per chunk: the input (F), the output's gradient (B); 0 or
  /// empty: not checked.
  std::vector<int64_t> in_width, out_width;
  /// Healing across processes: a copy of this stage's weights and optimizer
  /// state goes here at every step boundary, after step `resumed_after`
  /// once wired and after each apply (null: none kept).
  std::shared_ptr<boundary_memory> boundary;
  int64_t resumed_after = -1;
  /// The boundary after resumed_after is in `boundary` already, and it is
  /// what this stage starts from (a heal from memory): the wire keeps that
  /// copy rather than copy the stage again.
  bool start_kept = false;
  /// Healing at dp = 1: the stage of this replica (in another process)
  /// that keeps a copy of this stage's boundary state: sent after every
  /// step in the background, and once when wired, before the wire is
  /// answered (-1: none). The copies travel on `copy_channel`, a channel
  /// of their own, so that they never hold up an activation or a gradient
  /// queued behind them.
  int keeper_stage = -1;
  std::shared_ptr<tensor_channel> copy_channel;
  /// Where the keeper is on this machine: the copies go through these
  /// shared-memory segments instead (one copy, no socket), and through
  /// `copy_channel` only when no segment can be had.
  std::shared_ptr<segment_ring> copy_segments;
  /// Only the boundaries after every copy_every-th step (and the one when
  /// wired) are kept, and go to the keeper (supervision.copy_every;
  /// copy_rule in runtime/dist/placement/heal_plan.hpp).
  int copy_every = 1;
  /// With `boundary`, at dp > 1: the boundary kept is the stage's live
  /// state itself, after every step (copy_every does not apply), forgotten
  /// just before each update writes it; a heal rolls forward to the step
  /// rank 0 decided rather than back to the one before
  /// (runtime/dist/placement/boundary_memory.hpp).
  bool live_boundary = false;
};

/// Stage actors alive in this process, over every run (a restart's old
/// generation must be gone before the new one starts).
int live_stages();

/// Spawns a stage on its own thread (or, shared_thread, on the scheduler).
caf::actor spawn_stage(caf::actor_system& sys, stage_setup setup);

}  // namespace actorpipe
