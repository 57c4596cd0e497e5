#pragma once
// A stage's boundary copy (weights and optimizer state) sent to a process
// that was started again, so that it heals from a live peer's memory. The
// tensors go over the tensor channel (Gloo send/recv), never through CAF;
// what describes them (names, the optimizer's structure, each transfer's
// tag, dtype and shape) is one line of text the caller passes on: through
// the store to a process started again, or in a CAF message with the
// background copy a stage leaves with its keeper after every step.
#include <functional>
#include <string>

#include "messages/payloads.hpp"
#include "runtime/dist/transport/tensor_channel.hpp"

namespace actorpipe {

/// Makes `s` own a copy of its tensors in one CPU buffer (s.flat, every
/// tensor a view of it, in the order a transfer names them) and returns
/// true, when they all have one dtype; otherwise leaves `s` as it is and
/// returns false.
bool pack_snapshot(stage_snapshot& s);

/// Starts sending `s` to process `to`; the line that describes it. A
/// packed snapshot (s.flat) goes as one transfer, and arrives packed; so
/// does any other with `pack` that pack_snapshot can pack, after a packed
/// copy of it is made here (one more copy, and a fresh buffer: for a
/// transfer made once, as a heal's, not every step); otherwise one
/// transfer per tensor.
std::string send_snapshot(tensor_channel& channel, const stage_snapshot& s, int to, bool pack = false);

class segment_ring;

/// Writes `s` into a free segment of `ring` (runtime/dist/transport/shared_segments:
/// one copy, no socket) for a process of this machine, and returns the line
/// that describes it (receive_snapshot_async reads it as the others). Empty,
/// holding nothing, when it cannot: the tensors have more than one dtype, or
/// no segment can be had (`why` says which); the caller then sends it.
std::string write_shared(segment_ring& ring, const stage_snapshot& s, std::string* why = nullptr);

/// Receives what `described` (send_snapshot's line) describes, blocking
/// until every tensor is in. Throws transfer_error for a peer gone, a
/// timeout, or a line that does not parse.
stage_snapshot receive_snapshot(tensor_channel& channel, const std::string& described);

/// Starts receiving what `described` describes, and returns at once; once
/// every tensor is in, `done` is called with the snapshot, or `failed` with
/// the first receive's reason, on one of the channel's receiving threads.
/// A snapshot sent tensor by tensor lands in `into`'s buffers where given
/// (a packed one in a new buffer). A line that does not parse throws
/// transfer_error here, before any receive starts.
void receive_snapshot_async(tensor_channel& channel, const std::string& described,
                            std::function<void(stage_snapshot)> done,
                            std::function<void(const std::string&)> failed,
                            tensor_channel::buffer_for into = nullptr);

}  // namespace actorpipe
