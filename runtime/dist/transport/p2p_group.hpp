#pragma once
// Point-to-point tensor transfer between processes: one p2p_group per OS
// process, over c10d's ProcessGroupGloo send/recv (TCP). Pipeline stages in
// separate processes pass activations and gradients to their neighbours with
// it; the tensors' bytes never go through CAF's serializer.
//
// Every transfer is two Gloo messages on two slots derived from the caller's
// tag: a fixed 96-byte header (dtype, shape, byte count), then the payload
// (left out when it has no bytes). The receiver checks the header against the
// buffer it was given before it posts the payload receive, because Gloo
// matches a send with a receive by peer and slot alone and does not guard
// unequal byte counts. Checked with Debian's libgloo under c10d 1.13, two
// ranks over loopback TCP: a message shorter than the posted buffer
// completes "successfully" with only its bytes written (the tail keeps stale
// data); a longer one fails GLOO_ENFORCE ("op.preamble.length <= op.nbytes")
// on Gloo's event-loop thread, which terminates the receiving process. A
// mismatch here instead drains the payload into scratch memory (so the
// sender's send completes and the group stays usable) and throws a
// transfer_error naming both ranks and the tag. The header itself has one
// fixed size, so it cannot mismatch.
//
// c10d and Gloo headers stay out of this file (they need USE_C10D_GLOO,
// which only actorpipe_core's own sources get).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "runtime/dist/transport/kv_store.hpp"
#include "runtime/dist/transport/transfer_tag.hpp"

namespace at {
class Tensor;
}

namespace actorpipe {

/// A transfer or the group itself failed: connecting, a timeout, a peer
/// that died, or a header that does not match the receive buffer. The
/// message names this rank, the peer rank and the tag.
class transfer_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A send or receive in flight. Tensors handed to the group stay referenced
/// by the handle until wait() returns. Destroying a handle that was not
/// waited for waits for it (bounded by the group's timeout) and drops any
/// error.
class transfer_handle {
public:
  class impl;
  explicit transfer_handle(std::unique_ptr<impl> p);
  transfer_handle(transfer_handle&&) noexcept;
  transfer_handle& operator=(transfer_handle&&) noexcept;
  ~transfer_handle();

  /// Blocks until the transfer is complete: for a send, the bytes are handed
  /// to the transport and the tensor may be changed again; for a receive,
  /// the bytes are in the buffer. Throws transfer_error on a mismatch, a
  /// timeout (the group's timeout, per Gloo message) or a broken peer; after
  /// a timeout or a broken peer the group is unusable (Gloo closes every pair
  /// of the group). A second call returns at once (or throws the same error).
  void wait();

private:
  std::unique_ptr<impl> impl_;
};

/// How one process joins a group.
struct p2p_options {
  std::string master_addr = "127.0.0.1";  ///< host of the c10d TCPStore
  uint16_t master_port = 0;               ///< its port; 0 on the master = any free port
  int rank = 0;                           ///< this process's rank, 0 .. world_size - 1
  int world_size = 2;                     ///< number of processes in the group
  bool is_master = false;                 ///< this process hosts the TCPStore
  std::string store_prefix = "p2p";       ///< key prefix: groups sharing a store stay apart
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};  ///< connect and every wait
  std::string hostname = "127.0.0.1";     ///< address the Gloo device binds (this host's)
  /// Called on the master once its store listens, with the actual port,
  /// before connect() waits for the other ranks (so a launcher can hand an
  /// ephemeral port on). Ignored on other ranks.
  std::function<void(uint16_t)> on_store_listening;
  /// A store the ranks share already (the rendezvous's): used instead of
  /// starting or reaching one at master_addr:master_port, which are then
  /// ignored.
  kv_store_ptr store;
};

/// This process's member of a point-to-point group. Handles in flight keep
/// the connection alive, so the group may be destroyed before them. Sends
/// and receives may be posted from several threads (posting is serialized);
/// each handle is waited for by one thread. Tags are per pair of ranks: the
/// same tag used between other ranks does not collide. Between two ranks, a
/// tag may carry one transfer at a time: reuse it once the earlier transfer
/// under it has been waited for (a receive posts its payload slot only in
/// wait(), so two receives in flight under one tag could swap payloads).
class p2p_group {
public:
  /// Joins the group: the master starts the TCPStore, every rank then
  /// connects to every other through Gloo. Blocks until all ranks joined;
  /// throws transfer_error after options.timeout or on bad options.
  static p2p_group connect(const p2p_options& options);

  p2p_group(p2p_group&&) noexcept;
  p2p_group& operator=(p2p_group&&) noexcept;
  ~p2p_group();

  /// Starts sending `tensor` (CPU, any dtype and shape, up to 8 dims) to rank
  /// `dst` under `tag` (0 .. max_transfer_tag). A non-contiguous tensor is
  /// copied first. Throws transfer_error for bad arguments.
  transfer_handle send(const at::Tensor& tensor, int dst, uint32_t tag);

  /// Starts receiving from rank `src` under `tag` into `buffer`, which must
  /// be defined, contiguous, on the CPU and of the sender's dtype and shape
  /// (the buffer may be reused across receives). A header that disagrees
  /// makes wait() throw. Throws transfer_error for bad arguments.
  transfer_handle recv_into(at::Tensor& buffer, int src, uint32_t tag);

  /// This process's rank.
  int rank() const;
  /// The number of ranks in the group.
  int world_size() const;
  /// The port the group's TCPStore listens on (the actual one when the
  /// master was given port 0).
  uint16_t store_port() const;
  /// The timeout of connect and of every wait.
  std::chrono::milliseconds timeout() const;

  class impl;

private:
  explicit p2p_group(std::shared_ptr<impl> p);
  std::shared_ptr<impl> impl_;  // shared with the handles in flight
};

}  // namespace actorpipe
