#pragma once
// A stage's link to the other stages: the one place that sends an
// activation or a gradient to virtual stage k, resends one on request,
// moves it to the receiver's device, records the CUDA mark that says when
// it is written, stamps the epoch, and lets the fault plan drop, duplicate
// or delay it. The stage says what goes where; the link says how.
//
// Between stages of one process, tensor handles pass through CAF mailboxes.
// To a stage in another process an activation or a gradient crosses as one
// record on the process pair's data channel (runtime/dist/transport/
// data_plane.hpp: shared memory on one machine, a TCP stream between two):
// the op's ids, its tensors' shapes, their bytes. The receiving side's
// reader thread checks the width and puts the message in the stage's
// mailbox: no CAF message crosses per op, and nothing waits on a handshake.
#include <caf/fwd.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "messages/payloads.hpp"
#include "runtime/dist/transport/data_channel.hpp"
#include "runtime/faults/fault_plan.hpp"
#include "runtime/schedule/placement.hpp"

namespace actorpipe {

class device_stream;
class data_plane;

class stage_link {
public:
  virtual ~stage_link() = default;
  /// Every stage by rank (known once the mesh is wired).
  virtual void wire(std::vector<caf::actor> ranks) = 0;
  /// A new step: what was sent before cannot be asked for again.
  virtual void begin_step() = 0;
  /// F's output of `chunk` (this rank's) goes to the next virtual stage.
  virtual void send_activation(int chunk, activation_msg msg) = 0;
  /// B's input gradient of `chunk` goes to the previous virtual stage.
  virtual void send_gradient(int chunk, gradient_msg msg) = 0;
  /// An evaluation forward's output of `chunk` goes on.
  virtual void send_eval(int chunk, eval_msg msg) = 0;
  /// The sender of `chunk`'s input of `kind` (F: the stage before, B: the
  /// stage after) is asked to send microbatch `mb` of `step` again.
  virtual void ask_resend(op_kind kind, int chunk, int64_t step, int mb) = 0;
  /// A receiver asked again for what `chunk` sent: its output of `kind` (F:
  /// the activation, B: the gradient) for microbatch `mb` of `step`.
  virtual void resend(op_kind kind, int chunk, int64_t step, int mb) = 0;
  /// The epoch this link stamps and a receiver accepts.
  virtual uint32_t epoch() const = 0;
};

struct link_setup {
  int rank = 0;
  int microbatches = 1;
  /// Async: the microbatches of a step in the stream (a message's mb g is
  /// microbatch g mod this of step g / this, as a fault names it); 0:
  /// synchronous, the header's step and mb are the fault's.
  int step_microbatches = 0;
  int chunks = 1;
  placement plc;
  std::string device;                ///< this stage's
  std::vector<std::string> devices;  ///< every rank's
  uint32_t epoch = 0;
  bool lockstep = false;  ///< delays count in rounds, not milliseconds
  fault_plan faults;
  const device_stream* queue = nullptr;  ///< CUDA: marks when a sent tensor is written
  stage_stats* stats = nullptr;          ///< where injected faults and resends are counted
  /// The step whose messages may still be asked for again.
  const int64_t* step = nullptr;
  /// Multi-process: the process of every rank of this replica (empty: all
  /// in this one), this process's, this stage's replica, and the data
  /// plane records to the other processes go through.
  std::vector<int> process_of;
  int process = 0;
  int replica = 0;
  std::shared_ptr<data_plane> plane;
  /// The last dimension of what reaches each chunk from another process:
  /// its input (F) and its output's gradient (B); 0: not checked.
  std::vector<int64_t> in_width, out_width;
};

/// "" when record `r` (from another process, for stage `to_stage`) has the
/// last dimension its chunk expects (`in_width` for an activation,
/// `out_width` for a gradient; 0 or missing: unchecked); else one line
/// naming both stages.
std::string record_mismatch(const op_record& r, int to_stage, const std::vector<int64_t>& in_width,
                            const std::vector<int64_t>& out_width);

/// What the data plane's reader thread does with a record for `stage`
/// (pipeline rank `rank`, on `device`): a record of the wrong width takes
/// the stage down with record_mismatch's line; any other becomes the
/// activation_msg (F) or gradient_msg (B) in the stage's mailbox, its
/// tensor on `device`.
std::function<void(op_record)> record_inbox(const caf::actor_addr& stage, int rank, std::string device,
                                            std::vector<int64_t> in_width, std::vector<int64_t> out_width);

/// The in-process link of a stage actor `self`.
std::unique_ptr<stage_link> make_local_link(caf::event_based_actor* self, link_setup setup);

}  // namespace actorpipe
