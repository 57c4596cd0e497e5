// NCCL groups over the raw CUDA runtime and NCCL C API, so that this builds
// against a CPU-only LibTorch: device pointers come from at::Tensor::data_ptr().
// Compiled only when CMake found nccl.h, libnccl and libcudart.
#include "runtime/dist/collectives/collectives.hpp"
#include "runtime/dist/transport/poll_backoff.hpp"
#include "runtime/dist/transport/rendezvous.hpp"

#include <ATen/core/Tensor.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

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

namespace {

// Ranks `ranks` (of `size`) on `devices`, ranks[i] on devices[i]: two ranks
// of this process on one device, no CUDA device, or an ordinal out of range
// is a collective_error. The first is checked before touching CUDA, so its
// message is the same with or without a GPU.
void check_devices(const std::string& where, const std::string& name, const std::vector<int>& ranks, int size,
                   const std::vector<int>& devices) {
  std::map<int, int> first_rank;
  for (size_t i = 0; i < devices.size(); ++i) {
    auto [it, fresh] = first_rank.emplace(devices[i], ranks[i]);
    if (!fresh)
      throw collective_error(where + ": ranks " + std::to_string(it->second) + " and " + std::to_string(ranks[i]) +
                             " both name cuda:" + std::to_string(it->first) +
                             "; NCCL refuses two ranks on one device; use gloo");
  }
  std::string why;
  if (!nccl_available(&why)) throw collective_error(where + ": " + why + "; use gloo");
  int count = 0;
  check_cuda(cudaGetDeviceCount(&count), where, "cudaGetDeviceCount");
  for (size_t i = 0; i < devices.size(); ++i) {
    const int d = devices[i];
    if (d < 0 || d >= count)
      throw collective_error(rank_where(name, ranks[i], size) + ": cuda:" + std::to_string(d) + " does not exist (" +
                             std::to_string(count) + " CUDA devices)");
  }
}

// The groups of communicators just made, comms[i] for ranks[i] on
// devices[i], each with a stream of its own. Destroys them all on a failure.
allreduce_groups wrap(std::vector<ncclComm_t>& comms, const std::vector<int>& ranks, int size,
                      const std::vector<int>& devices, const std::string& name) {
  std::vector<cudaStream_t> streams(comms.size(), nullptr);
  for (size_t i = 0; i < comms.size(); ++i) {
    // A blocking stream: it waits for the legacy default stream, where the
    // gradients were made, and needs no LibTorch CUDA API to find it.
    cudaError_t e = cudaSetDevice(devices[i]);
    if (e == cudaSuccess) e = cudaStreamCreate(&streams[i]);
    if (e != cudaSuccess) {
      for (size_t q = 0; q < comms.size(); ++q) {
        if (comms[q]) ncclCommDestroy(comms[q]);
        if (streams[q]) cudaStreamDestroy(streams[q]);
      }
      check_cuda(e, rank_where(name, ranks[i], size), "cudaStreamCreate");
    }
  }
  allreduce_groups out;
  for (size_t i = 0; i < comms.size(); ++i)
    out.push_back(std::make_unique<nccl_group>(comms[i], streams[i], devices[i], name, ranks[i], size));
  return out;
}

std::string hex_of(const char* p, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<unsigned char>(p[i]);
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

bool bytes_of(const std::string& hex, char* out, size_t n) {
  if (hex.size() != 2 * n) return false;
  auto nibble = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  for (size_t i = 0; i < n; ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return true;
}

}  // namespace

allreduce_groups make_nccl_groups(const std::vector<int>& devices, const std::string& name) {
  const int size = static_cast<int>(devices.size());
  const std::string where = "nccl group '" + name + "'";
  if (size < 1) throw collective_error(where + ": needs at least one device");
  std::vector<int> ranks(devices.size());
  for (int r = 0; r < size; ++r) ranks[static_cast<size_t>(r)] = r;
  check_devices(where, name, ranks, size, devices);
  std::vector<ncclComm_t> comms(static_cast<size_t>(size), nullptr);
  check_nccl(ncclCommInitAll(comms.data(), size, devices.data()), where, "ncclCommInitAll");
  return wrap(comms, ranks, size, devices, name);
}

allreduce_groups join_nccl_groups(const kv_store_ptr& store, const std::string& name, const std::vector<int>& ranks,
                                  int size, const std::vector<int>& devices, std::chrono::milliseconds timeout) {
  const std::string where = "nccl group '" + name + "'";
  if (!store) throw collective_error(where + ": no store to meet through");
  if (ranks.empty() || ranks.size() != devices.size())
    throw collective_error(where + ": " + std::to_string(ranks.size()) + " ranks of this process and " +
                           std::to_string(devices.size()) + " devices; one device per rank");
  for (int r : ranks)
    if (r < 0 || r >= size)
      throw collective_error(where + ": rank " + std::to_string(r) + " is not in 0 .. " + std::to_string(size - 1));
  check_devices(where, name, ranks, size, devices);
  // The group's rank 0 makes NCCL's id and every rank reads it from the
  // store: the rendezvous the Gloo groups make through it too. `name`
  // holds the generation, so each generation's communicators are new.
  const std::string key = name + "/nccl_unique_id";
  ncclUniqueId id;
  if (std::find(ranks.begin(), ranks.end(), 0) != ranks.end()) {
    check_nccl(ncclGetUniqueId(&id), where, "ncclGetUniqueId");
    store->set(key, hex_of(id.internal, sizeof id.internal));
  } else {
    const auto until = std::chrono::steady_clock::now() + timeout;
    poll_backoff waiting(std::chrono::milliseconds(10));
    while (!store->has(key)) {
      if (std::chrono::steady_clock::now() >= until)
        throw collective_error(where + ": rank 0's NCCL id did not come within " + describe_timeout(timeout));
      waiting.pause();
    }
    if (!bytes_of(store->get(key), id.internal, sizeof id.internal))
      throw collective_error(where + ": the NCCL id in the store under " + key + " is not " +
                             std::to_string(sizeof id.internal) + " bytes in hex");
  }
  // This process's ranks in one NCCL group call: each init waits for every
  // rank of the group, those of this process included. The group is ended
  // on every path (a device that cannot be set too), and what was made
  // before a failure is destroyed.
  std::vector<ncclComm_t> comms(ranks.size(), nullptr);
  ncclResult_t r = ncclGroupStart();
  cudaError_t set = cudaSuccess;
  size_t i = 0;
  for (; i < ranks.size() && r == ncclSuccess && set == cudaSuccess; ++i) {
    set = cudaSetDevice(devices[i]);
    if (set == cudaSuccess) r = ncclCommInitRank(&comms[i], size, id, ranks[i]);
  }
  const ncclResult_t ended = ncclGroupEnd();
  if (r == ncclSuccess) r = ended;
  if (set != cudaSuccess || r != ncclSuccess) {
    for (auto c : comms)
      if (c) ncclCommDestroy(c);
    check_cuda(set, rank_where(name, ranks[i - 1], size), "cudaSetDevice");
    check_nccl(r, where, "ncclCommInitRank");
  }
  return wrap(comms, ranks, size, devices, name);
}

}  // namespace actorpipe
