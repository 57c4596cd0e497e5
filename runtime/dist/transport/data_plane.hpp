#pragma once
// One process's data plane for one generation: a data channel each way to
// every process its stages exchange activations and gradients with. Two
// processes of one machine get a shared-memory ring each way (made by the
// writer, named by run, generation and ranks); two machines, or a ring
// that cannot be had (a full /dev/shm: one notice), or
// ACTORPIPE_SHM_DISABLE=1, one TCP stream each way, the writer connecting
// to the reader's listener. Which one a pair uses is the writer's word in
// the store, so both ends always agree.
//
// A record names its receiving slot (replica * stages + stage); the
// plane's reader threads hand it to what that slot attached. Records for a
// slot not attached yet wait for it.
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/dist/transport/data_channel.hpp"
#include "runtime/dist/transport/kv_store.hpp"

namespace actorpipe {

struct data_plane_options {
  int rank = 0;
  std::vector<int> peers;  ///< the processes this one exchanges ops with (both ways)
  kv_store_ptr store;
  std::string prefix;      ///< the generation's store prefix
  std::string host;        ///< the address other machines reach this one at
  std::string machine;     ///< machine_id() ("" : no shared memory with anyone)
  std::string ring_stem;   ///< shared rings are files ring_stem + ".<from>to<to>"
  size_t ring_bytes = 8 << 20;
  std::chrono::milliseconds timeout{60000};
};

class data_plane {
public:
  using clock = byte_pipe::clock;
  /// What a slot hears: a record, or (once) why its records stopped for a
  /// reason other than a peer process gone (a garbled stream), which
  /// supervision does not see on its own.
  struct inbox {
    std::function<void(op_record)> record;
    std::function<void(const std::string&)> failed;
  };

  /// Every pipe to and from opts.peers, formed through the store; throws
  /// std::runtime_error naming the peer when one cannot be had in time.
  /// A ring that could not be made is said once in `notice`.
  static std::shared_ptr<data_plane> connect(const data_plane_options& opts, std::string* notice);
  ~data_plane();
  data_plane(const data_plane&) = delete;
  data_plane& operator=(const data_plane&) = delete;

  /// `r` to process `process` (one of the peers), no earlier than
  /// `not_before`; never waits on the peer. Dropped once its pipe failed.
  void post(int process, op_record r, clock::time_point not_before = {});
  /// Where records for `slot` go from now on (and those that waited).
  void attach(int slot, inbox in);
  /// Stops every pipe and thread; nothing is delivered after it returns.
  void close();
  /// "shared memory" or "tcp": how records reach `process`.
  std::string way_to(int process) const;
  /// The peers whose stream to this process ended because they closed it
  /// or their process is gone.
  std::vector<int> gone() const;

private:
  data_plane() = default;
  void deliver(op_record r);
  void failed(int peer, const std::string& why, bool peer_gone);

  mutable std::mutex mu_;
  std::map<int, inbox> inboxes_;
  std::map<int, std::vector<op_record>> waiting_;
  std::map<int, std::unique_ptr<data_sender>> senders_;
  std::map<int, std::string> ways_;
  std::vector<std::unique_ptr<data_receiver>> receivers_;
  std::vector<int> gone_;
  bool closed_ = false;
};

}  // namespace actorpipe
