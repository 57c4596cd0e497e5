#include "runtime/device_stream.hpp"

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

class cuda_stream final : public device_stream {
public:
  explicit cuda_stream(c10::DeviceIndex index) : stream_(c10::cuda::getStreamFromPool(false, index)) {}

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
    // The stream that wrote t on its device: this stage's own, or (after a
    // copy to another GPU) that device's current stream on this thread.
    m->event.record(c10::cuda::getCurrentCUDAStream(t.device().index()));
    return m;
  }

  void wait(const device_mark_ptr& m, const at::Tensor& t) const override {
    if (m) m->event.block(stream_);
    // t was allocated on the sender's stream: without this, the caching
    // allocator could hand its memory to the sender's next kernel while
    // this stream's kernels have yet to read it.
    if (t.defined() && t.is_cuda() && t.has_storage())
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
  }

  void* native() const override { return stream_.stream(); }

private:
  c10::cuda::CUDAStream stream_;
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
