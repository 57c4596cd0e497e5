#pragma once
// Boundary copies between two processes of one machine, through shared
// memory: the sender writes a copy into a segment (a file in /dev/shm)
// and the keeper maps it, so the bytes cross once (one copy) instead of
// through a socket (a copy into the kernel and one out of it, on cores the
// stages fill). A keeper's copy then lives in memory that neither process
// owns alone: a SIGKILLed sender leaves it readable.
//
// Each segment starts with a header whose `held` word says who may touch
// it. The sender marks a free segment held, writes the copy and its
// sequence number, and sends the keeper the line that names them. The
// keeper maps it and takes it over if it still holds that number and no
// one took it yet (a line mapped twice fails the second time, so one
// holder frees it); the segment stays held while any tensor over it lives (the keeper's boundary memory keeps a few steps),
// and the last one to go marks it free. The sender only ever writes a free
// segment, so it never writes under a copy that a heal may read.
//
// ACTORPIPE_SHM_DIR names another directory (default /dev/shm);
// ACTORPIPE_SHM_DISABLE=1 sends every copy through the socket, as
// NCCL_SHM_DISABLE does for NCCL.
#include <ATen/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace actorpipe {

/// What decides whether two processes share memory: the boot, and the
/// mount and network namespaces ("two hosts" made with `ip netns` count as
/// two). Empty where it cannot be read (then nothing is shared), or where
/// ACTORPIPE_SHM_DISABLE is set.
std::string machine_id();

/// The run's name for its segments: TORCHELASTIC_RUN_ID (which launch
/// sets) with anything but letters, digits, '-' and '_' dropped, or
/// "actorpipe-PID".
std::string segment_run_id();

/// The directory the segments go in (ACTORPIPE_SHM_DIR or /dev/shm).
std::string shm_dir();

/// The sender's segments: files `stem`.N (N, and each copy's sequence
/// number, never the same twice in the process) made as
/// needed, at most `most` of them (a free one too small for a copy grows to
/// fit); unmapped and removed when the ring goes (a
/// keeper's mapping outlives the file).
class segment_ring {
 public:
  segment_ring(std::string stem, size_t most);
  ~segment_ring();
  segment_ring(const segment_ring&) = delete;
  segment_ring& operator=(const segment_ring&) = delete;

  struct lease {
    void* data = nullptr;  ///< `bytes` writable bytes, page-aligned
    std::string path;
    uint64_t seq = 0;
    size_t index = 0;  ///< in the ring, until the next take()
  };
  /// A free segment of at least `bytes`, marked held; nullopt when every
  /// segment is held and `most` exist, or the directory refused the space
  /// (the caller sends through the socket instead; `why` says why).
  std::optional<lease> take(size_t bytes, std::string* why = nullptr);
  /// Publishes what was written under `l` (its sequence number, after the
  /// bytes): a keeper that maps it from now on finds it whole.
  void publish(const lease& l);
  /// Marks `l` free again, when its line could not be sent.
  void give_back(const lease& l);
  /// Takes over `other`'s free segments (no line to them in flight, no
  /// keeper holding them), as many as this ring has room for; how many.
  /// They are faulted in already: a copy into one runs at memory speed,
  /// where a new segment's pages cost several times the copy (45 MB: 5 ms
  /// against 34 on dev-2c). A slot whose keeper changes keeps them.
  size_t adopt_free(segment_ring& other);

  size_t size() const { return segs_.size(); }

 private:
  struct segment {
    std::string path;
    void* base = nullptr;
    size_t length = 0;
  };
  /// Makes the claimed segment `s` hold `bytes`: its file extended and
  /// mapped again; what failed ("" when it grew).
  static std::string grow(segment& s, size_t bytes);
  std::string stem_;
  size_t most_;
  std::vector<segment> segs_;
};

/// The keeper's side: maps `path` and returns a CPU tensor of `numel`
/// elements of `dtype` over its data. Throws transfer_error when the file
/// is gone, too short, not a segment, holds another copy than `seq`, or
/// was mapped for `seq` already.
/// The segment stays held while the tensor (or any view of it) lives.
at::Tensor map_segment(const std::string& path, uint64_t seq, at::ScalarType dtype, int64_t numel);

/// Removes the segments of run `run_id` from shm_dir() (the launcher, once
/// its workers are gone: a SIGKILLed sender cannot); how many.
size_t remove_segments_of(const std::string& run_id);

}  // namespace actorpipe
