#include "runtime/model/device_stream.hpp"

#if ACTORPIPE_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace actorpipe {

#if ACTORPIPE_TORCH_CUDA

struct device_mark {
  // Timing off: recording and waiting stay cheap. Mutable: waiting on it
  // (block) is not const in LibTorch, though it changes nothing here.
  mutable at::cuda::CUDAEvent event;
};

namespace {

// A second stream of the pool, not the stage's own (the pool hands its
// streams round robin, so the next one differs).
c10::cuda::CUDAStream other_than(const c10::cuda::CUDAStream& own) {
  auto s = c10::cuda::getStreamFromPool(false, own.device_index());
  return s == own ? c10::cuda::getStreamFromPool(false, own.device_index()) : s;
}

class cuda_stream final : public device_stream {
public:
  explicit cuda_stream(c10::DeviceIndex index)
      : stream_(c10::cuda::getStreamFromPool(false, index)), side_(other_than(stream_)), current_(stream_) {}

  void enter() override {
    c10::cuda::set_device(stream_.device_index());
    // Once, before the first op: the weights were copied here on another
    // thread's stream, which this one does not otherwise wait for.
    c10::cuda::device_synchronize();
    c10::cuda::setCurrentCUDAStream(stream_);
  }

  device_mark_ptr mark(const at::Tensor& t) const override {
    if (!t.defined() || !t.is_cuda()) return nullptr;
    auto m = std::make_shared<device_mark>();
    // The stream that wrote t on its device: this stage's own (or its side),
    // or (after a copy to another GPU) that device's current stream on this
    // thread.
    m->event.record(c10::cuda::getCurrentCUDAStream(t.device().index()));
    return m;
  }

  void wait(const device_mark_ptr& m, const at::Tensor& t) const override {
    if (m) m->event.block(current_);
    // t was allocated on the sender's stream: without this, the caching
    // allocator could hand its memory to the sender's next kernel while
    // this stage's kernels have yet to read it. Once the side has been
    // used, either stream may read it: autograd runs a backward on the
    // stream its forward ran on.
    if (t.defined() && t.is_cuda() && t.has_storage()) {
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
      if (sided_) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), side_);
    }
  }

  void fork() override {
    to_side_.record(stream_);
    to_side_.block(side_);
  }

  void side(bool on) override {
    current_ = on ? side_ : stream_;
    if (on) sided_ = pending_ = true;
    c10::cuda::setCurrentCUDAStream(current_);
  }

  void join() override {
    if (!pending_) return;
    from_side_.record(side_);
    from_side_.block(stream_);
    pending_ = false;
  }

  void* native() const override { return stream_.stream(); }

private:
  c10::cuda::CUDAStream stream_;
  c10::cuda::CUDAStream side_;     // OVERLAP_F_B: one of the pair
  c10::cuda::CUDAStream current_;  // stream_, or side_ while side(true)
  at::cuda::CUDAEvent to_side_, from_side_;
  bool sided_ = false;    // the side was used: received tensors are kept for it too
  bool pending_ = false;  // work went on the side since the last join
};

}  // namespace

std::unique_ptr<device_stream> device_stream::open(const std::string& device) {
  if (device.rfind("cuda", 0) != 0) return nullptr;
  const auto colon = device.find(':');
  const auto index = static_cast<c10::DeviceIndex>(colon == std::string::npos ? 0 : std::stoi(device.substr(colon + 1)));
  return std::make_unique<cuda_stream>(index);
}

bool device_streams_available() { return true; }

#else

struct device_mark {};

std::unique_ptr<device_stream> device_stream::open(const std::string&) { return nullptr; }

bool device_streams_available() { return false; }

#endif

}  // namespace actorpipe
