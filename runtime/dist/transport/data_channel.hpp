#pragma once
// The data plane between two processes, one direction: each activation or
// gradient crosses as one record (a fixed head naming the op, its tensors'
// dtypes and shapes, then their bytes back to back) on one byte pipe: a
// shared-memory ring on one machine (shm_ring), a TCP stream between two.
// No handshake per record: the head and the bytes go in one stream, and
// the receiver reads the head first and allocates from it.
//
// The receiving side runs one reader thread per pipe, which hands each
// record, its tensors filled, to a callback (a stage's mailbox). A pipe
// that fails (the peer gone, a garbled head) ends that thread with a
// one-line reason to the failure callback; nothing is delivered after it.
//
// The sending side never blocks its caller on a slow or frozen peer
// (post): what fits goes at once on the caller's thread, the rest (and
// anything after it) on a thread of the sender's. runtime/dist/transport/
// data_plane.hpp joins one pipe each way per pair of processes.
#include <ATen/Tensor.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace actorpipe {

/// A stream of bytes between two processes, one direction.
class byte_pipe {
public:
  using clock = std::chrono::steady_clock;
  virtual ~byte_pipe() = default;
  /// Throws std::runtime_error naming the pipe and the peer when it fails.
  virtual void write(const void* data, size_t bytes, clock::time_point deadline) = 0;
  /// What fits of `bytes` now, never waiting (0 when closed); how much.
  virtual size_t try_write(const void* data, size_t bytes) = 0;
  virtual void read(void* out, size_t bytes, clock::time_point deadline) = 0;
  virtual void close() = 0;
  virtual std::string name() const = 0;
  /// Whether the other end closed or its process is gone (what a failed
  /// read or write then was), as opposed to a timeout or a garbled stream.
  virtual bool peer_gone() const = 0;
};

/// A connected stream socket (TCP, or a UNIX socketpair in tests); the pipe
/// owns `fd`. Both directions of a socket may serve as two pipes only
/// through two objects over dup()ed descriptors.
std::unique_ptr<byte_pipe> socket_pipe(int fd, std::string name);
/// The writer's or the reader's end of a shared-memory ring.
class shm_ring;
std::unique_ptr<byte_pipe> ring_pipe(std::unique_ptr<shm_ring> ring);

/// What a record says of its op, as it crosses (plain integers, no
/// padding). Opaque to the channel.
struct op_ids {
  int32_t kind = 0;      ///< the caller's (F = 0, B = 1, ...)
  int32_t to = 0;        ///< the receiving stage, as the caller numbers them
  int32_t from = 0;      ///< the sending stage
  uint32_t epoch = 0;
  int64_t step = 0;
  int32_t mb = 0;
  int32_t chunk = 0;
  int64_t round = 0;
};
static_assert(sizeof(op_ids) == 40, "op_ids is part of the wire format");

/// An op's ids and its tensors.
struct op_record : op_ids {
  std::vector<at::Tensor> tensors;  ///< at most max_tensors; CPU, any dtype; undefined ones allowed
  static constexpr size_t max_tensors = 2;
  static constexpr size_t max_dims = 6;
};

/// The sending end: records go out whole and in order. Thread-safe.
class data_sender {
public:
  using clock = byte_pipe::clock;
  /// `failed` hears once why the pipe failed under post() (on the
  /// sender's thread); what was posted after that is dropped.
  explicit data_sender(std::unique_ptr<byte_pipe> pipe, std::function<void(const std::string&, bool peer_gone)> failed = {});
  ~data_sender();
  data_sender(const data_sender&) = delete;
  data_sender& operator=(const data_sender&) = delete;
  /// Writes `r` (tensors made contiguous CPU copies where they are not),
  /// waiting for room; throws when the pipe fails or the record does not
  /// fit a head. Not mixed with post() on one sender.
  void send(const op_record& r, clock::time_point deadline);
  /// Queues `r` to go after everything posted before it that is due, no
  /// earlier than `not_before` (a held-back record lets later ones pass).
  /// Never waits on the peer: what fits now is written on this thread,
  /// the rest on the sender's. Throws only for a record that does not fit
  /// a head.
  void post(op_record r, clock::time_point not_before = {});
  /// Ends the pipe and the sender's thread; what is queued is dropped.
  void close();

  struct job;

private:
  void run();
  bool write_now(job& j);

  std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<byte_pipe> pipe_;
  std::function<void(const std::string&, bool)> failed_;
  std::deque<std::shared_ptr<job>> queue_;   // due, in order
  std::vector<std::shared_ptr<job>> held_;   // not yet due
  bool busy_ = false;                        // the thread is writing one
  bool broken_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

/// The receiving end: a thread that reads records until the pipe fails or
/// stop() is called, handing each to `deliver` on that thread.
class data_receiver {
public:
  data_receiver(std::unique_ptr<byte_pipe> pipe, std::function<void(op_record)> deliver,
                std::function<void(const std::string&, bool peer_gone)> failed);
  data_receiver(std::unique_ptr<byte_pipe> pipe, std::function<void(op_record)> deliver,
                std::function<void(const std::string&)> failed)
      : data_receiver(std::move(pipe), std::move(deliver),
                      [f = std::move(failed)](const std::string& why, bool) { f(why); }) {}
  ~data_receiver();
  data_receiver(const data_receiver&) = delete;
  data_receiver& operator=(const data_receiver&) = delete;
  /// Ends the thread (closing the pipe); no callback runs after it returns.
  void stop();

private:
  void run();

  std::unique_ptr<byte_pipe> pipe_;
  std::function<void(op_record)> deliver_;
  std::function<void(const std::string&, bool)> failed_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

/// "" when `got` has the shape the receiving stage expects, else one line
/// naming both stages: "stage 2 expected an activation of shape [16, 128]
/// from stage 1, got [16, 64]".
std::string shape_mismatch(const std::string& what, int from_stage, int to_stage, const std::vector<int64_t>& expected,
                           const std::vector<int64_t>& got);

}  // namespace actorpipe
