#pragma once
// Allreduce (sum) across data-parallel replicas that live in this process,
// one rank per thread: the hybrid data x pipeline supervisor keeps one group
// per pipeline stage and sums that stage's gradients over its replicas.
//
// Backends: Gloo (CPU tensors; c10d's ProcessGroupGloo over loopback TCP) and,
// when built with NCCL (ACTORPIPE_HAS_NCCL), raw NCCL over one CUDA device per
// rank. Each rank's thread must issue the same collectives in the same order.
//
// LibTorch and c10d headers stay out of this file: they compile slowly.
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/dist/transport/kv_store.hpp"

#ifndef ACTORPIPE_HAS_NCCL
#define ACTORPIPE_HAS_NCCL 0
#endif

namespace at {
class Tensor;
}

namespace actorpipe {

/// True when this build contains the NCCL backend (it may still find no GPU).
constexpr bool nccl_compiled = ACTORPIPE_HAS_NCCL != 0;

/// A collective failed or a group could not be built. The message names the
/// backend, the group and the rank.
class collective_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// An allreduce in flight. The tensors must stay alive and untouched until
/// wait() returns.
class allreduce_work {
public:
  virtual ~allreduce_work() = default;
  /// Blocks until the sums are in the tensors; throws collective_error.
  virtual void wait() = 0;
  /// Whether wait() would return at once (done or failed). Never blocks.
  virtual bool ready() = 0;
};

/// One rank of a group. Not thread-safe: one thread drives one rank.
class allreduce_group {
public:
  virtual ~allreduce_group() = default;

  /// Starts summing `tensors` in place over all ranks. Every rank passes the
  /// same number of tensors with the same shapes and dtypes, in the same order.
  /// `after`, when given, is the CUDA stream (a cudaStream_t) whose queued
  /// kernels write the tensors: NCCL starts behind them, without the host
  /// waiting. Gloo sums CPU tensors, already written, and ignores it.
  virtual std::unique_ptr<allreduce_work> allreduce_sum_async(std::vector<at::Tensor>& tensors, void* after) = 0;
  std::unique_ptr<allreduce_work> allreduce_sum_async(std::vector<at::Tensor>& tensors) {
    return allreduce_sum_async(tensors, nullptr);
  }

  /// allreduce_sum_async, then wait.
  void allreduce_sum(std::vector<at::Tensor>& tensors) { allreduce_sum_async(tensors)->wait(); }

  /// "gloo" or "nccl".
  virtual std::string backend() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
};

using allreduce_groups = std::vector<std::unique_ptr<allreduce_group>>;

/// All `size` ranks of one Gloo group, rank i at index i. Blocks until the
/// ranks have connected. `name` tells groups apart in errors; groups are
/// independent, so one per stage may exist at once. A collective that waits
/// longer than `timeout` for its peers fails instead of hanging.
allreduce_groups make_gloo_groups(int size, const std::string& name,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(60));

/// Ranks `ranks` (the group's ranks of this process, each in 0 .. size - 1)
/// of a Gloo group whose other ranks live in other processes: all of them
/// meet through `store` under the key prefix `name`, and bind `hostname`
/// (this host's address the others reach). Blocks until every rank joined;
/// the ranks given are built concurrently. Same sums, bit for bit, as
/// make_gloo_groups with the same size.
allreduce_groups join_gloo_groups(const kv_store_ptr& store, const std::string& name, const std::vector<int>& ranks,
                                  int size, const std::string& hostname,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(60));

/// Whether NCCL can run here: built in and at least one CUDA device. When
/// not, `reason` (if given) says why.
bool nccl_available(std::string* reason = nullptr);

/// One NCCL rank per entry of `devices` (CUDA ordinals), rank i on
/// devices[i]. Throws collective_error when NCCL is not built in, there is
/// no CUDA device, an ordinal is out of range, or two ranks name one device.
/// The ranks' tensors must be contiguous and on their rank's device. The
/// allreduce runs on a stream of its own that waits for the legacy default
/// stream (where LibTorch works unless told otherwise); tensors made on other
/// streams must be synchronized by the caller first.
allreduce_groups make_nccl_groups(const std::vector<int>& devices, const std::string& name = "nccl");

/// Ranks `ranks` (this process's, each in 0 .. size - 1) of an NCCL group
/// whose other ranks live in other processes, ranks[i] on CUDA device
/// devices[i]. The group's rank 0 makes NCCL's unique id and sets it in
/// `store` under `name`; every other rank waits for it (at most `timeout`)
/// and joins with ncclCommInitRank, this process's ranks in one NCCL group
/// call. Give each generation its own `name`: its communicators are new,
/// as the Gloo groups are. Throws collective_error when NCCL is not built
/// in, there is no CUDA device, an ordinal is out of range, two ranks of
/// this process name one device, or the id does not come. A rank that
/// never joins holds the others in NCCL's init (it has no timeout).
allreduce_groups join_nccl_groups(const kv_store_ptr& store, const std::string& name, const std::vector<int>& ranks,
                                  int size, const std::vector<int>& devices,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(60));

/// One rank per device ("cpu" or "cuda:N"). `backend` is "gloo", "nccl" or
/// "auto": NCCL when every device is a distinct GPU and NCCL is available,
/// else Gloo (which sums CPU tensors only).
allreduce_groups make_allreduce_groups(const std::string& backend, const std::vector<std::string>& devices,
                                       const std::string& name);

}  // namespace actorpipe
