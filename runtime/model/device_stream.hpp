#pragma once
// A stage's own queue of device work, and the hand-off of tensors between
// two such queues without the host waiting.
//
// On a CUDA device (where LibTorch has CUDA) the queue is a stream from
// LibTorch's pool, made current on the stage's thread, so that the stages
// sharing one GPU queue their kernels side by side instead of in one line.
// A tensor sent to another stage travels with a mark: a CUDA event recorded
// after the kernels that wrote it. The receiver's stream waits for the mark
// on the device (the host never blocks), and the tensor's memory is kept
// from reuse until the receiver's kernels have run. OVERLAP_F_B's F may go
// on a second stream of the stage's (side), so the GPU runs it beside the
// B. Elsewhere (CPU, null, sim) there is no queue and every call below does
// nothing.
#include <memory>
#include <string>

#include "messages/payloads.hpp"

namespace actorpipe {

class device_stream {
public:
  /// The queue for a stage on `device`: nullptr where work runs in host
  /// order anyway (anything but CUDA, or a LibTorch without CUDA).
  static std::unique_ptr<device_stream> open(const std::string& device);
  virtual ~device_stream() = default;

  /// Makes this queue the current one on the calling thread.
  virtual void enter() = 0;
  /// A mark after the work queued so far on t's device.
  virtual device_mark_ptr mark(const at::Tensor& t) const = 0;
  /// Later work on the current queue (this one, or the side while it is
  /// entered) waits for `m`; t's memory is not reused before the work of
  /// either queue has run. A null mark is ignored.
  virtual void wait(const device_mark_ptr& m, const at::Tensor& t) const = 0;
  /// Later work on the side (the stage's second queue) waits for all the
  /// work queued on this one so far.
  virtual void fork() = 0;
  /// Work goes on the side (true) or on this queue (false) from here on.
  virtual void side(bool on) = 0;
  /// Later work on this queue waits for all the work queued on the side
  /// (nothing, if none went there since the last join).
  virtual void join() = 0;
  /// The raw stream (a cudaStream_t), for collectives that queue their own
  /// work after this stage's.
  virtual void* native() const = 0;
};

/// Whether this build can place stages on their own CUDA streams.
bool device_streams_available();

}  // namespace actorpipe
