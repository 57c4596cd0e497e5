#pragma once
// Tensors of one process that go to another beside a control message: the
// state handed over in a heal (runtime/dist/transport/state_transfer.hpp)
// travels over the process's p2p_group (Gloo send/recv), never through
// CAF's serializer. The control message carries a remote_tensor instead
// of the data: who sends it, under which tag, its dtype and shape.
// (Activations and gradients go on the data plane: data_plane.hpp.)
//
// Tags are per transfer: a counter per destination process, so a message
// sent twice (a duplicate, a resend after a drop) is two transfers that can
// never swap payloads. Every posted send is matched by exactly one receive,
// posted when its control message arrives, whatever the receiving stage
// does with it after (a duplicate is received, then dropped).
//
// Nothing here blocks the caller: post() hands the send to Gloo and a
// reaper thread waits for it; fetch() queues the receive on the thread of
// the sending process (one per peer, off CAF's scheduler threads), which
// calls back when the bytes are in.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "messages/wire.hpp"
#include "runtime/dist/transport/p2p_group.hpp"

namespace actorpipe {

class tensor_channel {
public:
  explicit tensor_channel(p2p_group group);
  ~tensor_channel();
  tensor_channel(const tensor_channel&) = delete;
  tensor_channel& operator=(const tensor_channel&) = delete;

  /// This process's rank in the group.
  int rank() const;

  /// Starts sending `t` (any device: it is copied to the CPU) to process
  /// `to`; what the control message carries in its place.
  remote_tensor post(const at::Tensor& t, int to);

  /// Where a receive lands: a CPU tensor of the shape and dtype asked for.
  using buffer_for = std::function<at::Tensor(const std::vector<int64_t>& shape, at::ScalarType dtype)>;

  /// Receives the tensor `d` describes (a CPU tensor of its dtype and
  /// shape: `into`'s, or a new one), then calls `done` with it, or
  /// `failed` with a one-line reason (a peer gone, a timeout, a header
  /// that does not match), on the receiving thread of d.from.
  void fetch(const remote_tensor& d, std::function<void(at::Tensor)> done,
             std::function<void(const std::string&)> failed, buffer_for into = nullptr);

  /// Blocks until every send posted before it has finished or failed, and
  /// the channel holds none of their tensors (a shared copy sent on is
  /// free again once the caller drops it too).
  void wait_sent();

  /// The first failed send, empty when none failed.
  std::string send_failure() const;

  class impl;

private:
  std::unique_ptr<impl> impl_;
};

}  // namespace actorpipe
