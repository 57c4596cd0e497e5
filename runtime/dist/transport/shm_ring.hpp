#pragma once
// One direction of a data channel between two processes of one machine: a
// ring of bytes in a shared segment (a file in /dev/shm, or
// ACTORPIPE_SHM_DIR). The writer appends records, the reader takes them in
// order; a record larger than the ring streams through it, the writer
// filling what the reader has freed. Each byte is copied twice (into the
// ring, out of it), by two processes at once.
//
// The doorbell is a futex word in the segment for each side. A side that
// finds nothing to do says it sleeps and waits on its word; the other side
// bumps the word after every change and makes the wake-up system call only
// when the sleeper said so. Nothing spins: this runs on machines with two
// cores. A sleeper wakes every `poll` to look at its peer: a peer that
// closed its end or whose process is gone (a SIGKILL) ends the wait with an
// shm_ring_error that says so, as does the caller's deadline.
//
// The segment's space is reserved when it is made (posix_fallocate), so a
// full /dev/shm is an error at creation (`why` says so), never a SIGBUS
// under a later write. The file is removed as soon as the reader has mapped
// it; one left by a process that died before that carries the run's name
// (segment_run_id()), which `actorpipe launch` removes.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace actorpipe {

class shm_ring_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class shm_ring {
public:
  using clock = std::chrono::steady_clock;

  /// The writer's end: a new segment at `path` holding `capacity` bytes of
  /// ring (rounded up to pages). Null, with `why`, when the file cannot be
  /// made or its space reserved (a full /dev/shm).
  static std::unique_ptr<shm_ring> create(const std::string& path, size_t capacity, std::string* why);
  /// The reader's end of the segment at `path`, which it then removes.
  /// Null, with `why`, when it is missing or not a ring.
  static std::unique_ptr<shm_ring> open(const std::string& path, std::string* why);

  ~shm_ring();
  shm_ring(const shm_ring&) = delete;
  shm_ring& operator=(const shm_ring&) = delete;

  /// Writer: appends `bytes` bytes, waiting for space while the reader
  /// lags; throws shm_ring_error when the reader is gone or `deadline`
  /// passes first.
  void write(const void* data, size_t bytes, clock::time_point deadline);
  /// Writer: appends what fits of `bytes` now, never waiting; how much.
  size_t try_write(const void* data, size_t bytes);
  /// Reader: the next `bytes` bytes into `out`, waiting for them; throws
  /// as write() does when the writer is gone before they are all in.
  void read(void* out, size_t bytes, clock::time_point deadline);
  /// Reader: whether a byte is waiting, without blocking.
  bool readable() const;
  /// Ends this side: the other side's waits end with an error once what
  /// was written is read.
  void close();

  /// "" while the peer is there; else why not (it closed its end, or its
  /// process is gone).
  std::string peer_gone() const;

  size_t capacity() const;
  const std::string& path() const { return path_; }
  /// How long a sleeper sleeps before it looks at its peer.
  static constexpr std::chrono::milliseconds poll{50};

  struct header;

private:
  shm_ring(std::string path, void* base, size_t length, bool writer);
  /// Waits until `ready()` or the peer is gone or `deadline`; `what` names
  /// the wait for the error.
  template <class Ready>
  void wait_for(Ready ready, bool as_writer, clock::time_point deadline, const char* what);
  /// Copies at most one piece of `bytes` into the free space; how much.
  size_t put(const unsigned char* from, size_t bytes);

  std::string path_;
  void* base_ = nullptr;
  size_t length_ = 0;
  bool writer_ = false;
  header* h_ = nullptr;
  unsigned char* data_ = nullptr;
};

}  // namespace actorpipe
