// NCCL groups over the raw CUDA runtime and NCCL C API, so that this builds
// against a CPU-only LibTorch: device pointers come from at::Tensor::data_ptr().
// Compiled only when CMake found nccl.h, libnccl and libcudart.
#include "runtime/dist/collectives.hpp"

#include <ATen/core/Tensor.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <map>

namespace actorpipe {

namespace {

std::string rank_where(const std::string& name, int rank, int size) {
  return "nccl group '" + name + "' rank " + std::to_string(rank) + "/" + std::to_string(size);
}

void check_cuda(cudaError_t e, const std::string& where, const char* what) {
  if (e != cudaSuccess) throw collective_error(where + ": " + what + ": " + cudaGetErrorString(e));
}

void check_nccl(ncclResult_t r, const std::string& where, const char* what) {
  if (r != ncclSuccess) throw collective_error(where + ": " + what + ": " + ncclGetErrorString(r));
}

bool nccl_type(at::ScalarType t, ncclDataType_t* out) {
  switch (t) {
    case at::kFloat: *out = ncclFloat32; return true;
    case at::kDouble: *out = ncclFloat64; return true;
    case at::kHalf: *out = ncclFloat16; return true;
#if NCCL_VERSION_CODE >= 21000
    case at::kBFloat16: *out = ncclBfloat16; return true;
#endif
    case at::kInt: *out = ncclInt32; return true;
    case at::kLong: *out = ncclInt64; return true;
    case at::kChar: *out = ncclInt8; return true;
    case at::kByte: *out = ncclUint8; return true;
    default: return false;
  }
}

class nccl_work : public allreduce_work {
public:
  nccl_work(cudaEvent_t done, int device, std::string where, std::vector<at::Tensor> keep)
    : done_(done), device_(device), where_(std::move(where)), keep_(std::move(keep)) {}
  ~nccl_work() override {
    if (done_) {
      // Never free the tensors under a running kernel.
      cudaSetDevice(device_);
      cudaEventSynchronize(done_);
      cudaEventDestroy(done_);
    }
  }

  void wait() override {
    if (!done_) return;
    check_cuda(cudaSetDevice(device_), where_, "cudaSetDevice");
    cudaError_t e = cudaEventSynchronize(done_);
    cudaEventDestroy(done_);
    done_ = nullptr;
    keep_.clear();
    check_cuda(e, where_, "allreduce failed");
  }

  bool ready() override {
    if (!done_) return true;
    cudaSetDevice(device_);
    return cudaEventQuery(done_) != cudaErrorNotReady;
  }

private:
  cudaEvent_t done_;
  int device_;
  std::string where_;
  std::vector<at::Tensor> keep_;
};

class nccl_group : public allreduce_group {
public:
  nccl_group(ncclComm_t comm, cudaStream_t stream, int device, std::string name, int rank, int size)
    : comm_(comm), stream_(stream), device_(device), where_(rank_where(name, rank, size)), rank_(rank),
      size_(size) {}

  ~nccl_group() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  std::unique_ptr<allreduce_work> allreduce_sum_async(std::vector<at::Tensor>& tensors, void* after) override {
    std::vector<ncclDataType_t> types(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& t = tensors[i];
      std::string which = where_ + ": tensor " + std::to_string(i);
      if (!t.defined()) throw collective_error(which + " is undefined");
      if (!t.device().is_cuda() || t.device().index() != device_)
        throw collective_error(which + " is on " + t.device().str() + ", not on this rank's cuda:" +
                               std::to_string(device_));
      if (!t.is_contiguous()) throw collective_error(which + " is not contiguous");
      if (!nccl_type(t.scalar_type(), &types[i]))
        throw collective_error(which + ": NCCL cannot sum " + std::string(c10::toString(t.scalar_type())));
    }
    check_cuda(cudaSetDevice(device_), where_, "cudaSetDevice");
    cudaEvent_t done = nullptr;
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), where_, "cudaEventCreate");
    if (after) {
      // The producer's kernels first: this rank's stream waits on the device
      // for what is queued on `after` so far (the host does not block).
      cudaError_t e = cudaEventRecord(done, static_cast<cudaStream_t>(after));
      if (e == cudaSuccess) e = cudaStreamWaitEvent(stream_, done, 0);
      if (e != cudaSuccess) {
        cudaEventDestroy(done);
        check_cuda(e, where_, "waiting for the producer's stream");
      }
    }
    // One group call: NCCL fuses the launches, and every rank enqueues the
    // same sequence.
    ncclResult_t r = ncclGroupStart();
    for (size_t i = 0; i < tensors.size() && r == ncclSuccess; ++i) {
      void* p = tensors[i].data_ptr();
      r = ncclAllReduce(p, p, static_cast<size_t>(tensors[i].numel()), types[i], ncclSum, comm_, stream_);
    }
    ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess) r = end;
    if (r != ncclSuccess) {
      cudaEventDestroy(done);
      check_nccl(r, where_, "ncclAllReduce");
    }
    cudaError_t e = cudaEventRecord(done, stream_);
    if (e != cudaSuccess) {
      cudaStreamSynchronize(stream_);
      cudaEventDestroy(done);
      check_cuda(e, where_, "cudaEventRecord");
    }
    return std::make_unique<nccl_work>(done, device_, where_, tensors);
  }

  std::string backend() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

private:
  ncclComm_t comm_;
  cudaStream_t stream_;
  int device_;
  std::string where_;
  int rank_;
  int size_;
};

}  // namespace

bool nccl_available(std::string* reason) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (reason) *reason = std::string("no CUDA device: cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return false;
  }
  if (count == 0) {
    if (reason) *reason = "no CUDA device: cudaGetDeviceCount found 0";
    return false;
  }
  if (reason) reason->clear();
  return true;
}

allreduce_groups make_nccl_groups(const std::vector<int>& devices, const std::string& name) {
  const int size = static_cast<int>(devices.size());
  const std::string where = "nccl group '" + name + "'";
  if (size < 1) throw collective_error(where + ": needs at least one device");
  // Checked before touching CUDA, so the message is the same with or without a GPU.
  std::map<int, int> first_rank;
  for (int r = 0; r < size; ++r) {
    auto [it, fresh] = first_rank.emplace(devices[static_cast<size_t>(r)], r);
    if (!fresh)
      throw collective_error(where + ": ranks " + std::to_string(it->second) + " and " + std::to_string(r) +
                             " both name cuda:" + std::to_string(it->first) +
                             "; NCCL refuses two ranks on one device; use gloo");
  }
  std::string why;
  if (!nccl_available(&why)) throw collective_error(where + ": " + why + "; use gloo");
  int count = 0;
  check_cuda(cudaGetDeviceCount(&count), where, "cudaGetDeviceCount");
  for (int r = 0; r < size; ++r) {
    int d = devices[static_cast<size_t>(r)];
    if (d < 0 || d >= count)
      throw collective_error(rank_where(name, r, size) + ": cuda:" + std::to_string(d) + " does not exist (" +
                             std::to_string(count) + " CUDA devices)");
  }

  std::vector<ncclComm_t> comms(static_cast<size_t>(size), nullptr);
  check_nccl(ncclCommInitAll(comms.data(), size, devices.data()), where, "ncclCommInitAll");
  std::vector<cudaStream_t> streams(static_cast<size_t>(size), nullptr);
  for (int r = 0; r < size; ++r) {
    // A blocking stream: it waits for the legacy default stream, where the
    // gradients were made, and needs no LibTorch CUDA API to find it.
    cudaError_t e = cudaSetDevice(devices[static_cast<size_t>(r)]);
    if (e == cudaSuccess) e = cudaStreamCreate(&streams[static_cast<size_t>(r)]);
    if (e != cudaSuccess) {
      for (int q = 0; q < size; ++q) {
        ncclCommDestroy(comms[static_cast<size_t>(q)]);
        if (streams[static_cast<size_t>(q)]) cudaStreamDestroy(streams[static_cast<size_t>(q)]);
      }
      check_cuda(e, rank_where(name, r, size), "cudaStreamCreate");
    }
  }
  allreduce_groups out;
  for (int r = 0; r < size; ++r) {
    size_t i = static_cast<size_t>(r);
    out.push_back(std::make_unique<nccl_group>(comms[i], streams[i], devices[i], name, r, size));
  }
  return out;
}

}  // namespace actorpipe
