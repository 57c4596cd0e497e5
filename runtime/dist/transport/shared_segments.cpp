#include "runtime/dist/transport/shared_segments.hpp"

#include <ATen/ATen.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "runtime/dist/transport/p2p_group.hpp"

namespace actorpipe {

namespace {

constexpr uint64_t magic = 0x3130304753504127ULL;  // "'APSG001"
constexpr size_t data_at = 4096;                    // the header's page
constexpr uint64_t taken_bit = uint64_t{1} << 63;   // in seq: a keeper mapped it

struct header {
  uint64_t magic;
  std::atomic<uint32_t> held;  // 1 from take() until the last tensor over it goes
  uint32_t reserved;
  std::atomic<uint64_t> seq;  // the copy it holds (| taken_bit once mapped); 0 while one is written
  uint64_t bytes;             // the data after data_at
};
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "a segment's header is shared between processes");

header* header_of(void* base) { return static_cast<header*>(base); }

std::string link_of(const char* path) {
  char buf[256];
  const ssize_t n = ::readlink(path, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string errno_text() { return std::strerror(errno); }

// Segment names and copy numbers, each counted for the whole process: a
// segment that moves to another ring (adopt_free) never meets a number it
// held.
std::atomic<uint64_t> next_name{1}, next_seq{1};

}  // namespace

std::string machine_id() {
  const char* off = std::getenv("ACTORPIPE_SHM_DISABLE");
  if (off && *off && std::string(off) != "0") return {};
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(in, boot);
  const std::string mnt = link_of("/proc/self/ns/mnt"), net = link_of("/proc/self/ns/net");
  if (boot.empty() || mnt.empty() || net.empty()) return {};
  return boot + " " + mnt + " " + net;
}

std::string segment_run_id() {
  std::string id;
  if (const char* run = std::getenv("TORCHELASTIC_RUN_ID"))
    for (const char* c = run; *c; ++c)
      if (std::isalnum(static_cast<unsigned char>(*c)) || *c == '-' || *c == '_') id += *c;
  return id.empty() ? "actorpipe-" + std::to_string(::getpid()) : id;
}

std::string shm_dir() {
  const char* dir = std::getenv("ACTORPIPE_SHM_DIR");
  return dir && *dir ? dir : "/dev/shm";
}

segment_ring::segment_ring(std::string stem, size_t most) : stem_(std::move(stem)), most_(most) {}

segment_ring::~segment_ring() {
  for (auto& s : segs_) {
    ::munmap(s.base, s.length);
    ::unlink(s.path.c_str());
  }
}

std::optional<segment_ring::lease> segment_ring::take(size_t bytes, std::string* why) {
  auto refuse = [&](std::string text) {
    if (why) *why = std::move(text);
    return std::nullopt;
  };
  auto claim = [&](size_t i) {
    uint32_t free_word = 0;
    return header_of(segs_[i].base)->held.compare_exchange_strong(free_word, 1, std::memory_order_acq_rel);
  };
  std::optional<size_t> index;
  for (size_t i = 0; i < segs_.size() && !index; ++i)
    if (header_of(segs_[i].base)->bytes >= bytes && claim(i)) index = i;
  // A free one too small for this copy (a stage's first copy has no
  // optimizer state yet; a stage that took on layers) grows to fit: its
  // pages stay, and only the rest are new, where a new segment's pages all
  // are (zeroed and faulted in, several times the copy's time).
  for (size_t i = 0; i < segs_.size() && !index; ++i)
    if (claim(i)) {
      if (std::string failed = grow(segs_[i], bytes); !failed.empty()) {
        header_of(segs_[i].base)->held.store(0, std::memory_order_release);
        return refuse(std::move(failed));
      }
      index = i;
    }
  if (!index && segs_.size() >= most_) return refuse("all " + std::to_string(most_) + " segments are held");
  if (!index) {
    segment s;
    s.path = stem_ + "." + std::to_string(next_name.fetch_add(1));  // a name never used before
    s.length = data_at + bytes;
    const int fd = ::open(s.path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return refuse("cannot create " + s.path + ": " + errno_text());
    // Reserved now: a write to a mapping the file system cannot back is a
    // SIGBUS, not an error (a small /dev/shm, as in a default container).
    const int reserved = ::posix_fallocate(fd, 0, static_cast<off_t>(s.length));
    if (reserved != 0) {
      ::close(fd);
      ::unlink(s.path.c_str());
      return refuse("cannot reserve " + std::to_string(s.length) + " bytes in " + s.path + ": " +
                    std::strerror(reserved));
    }
    s.base = ::mmap(nullptr, s.length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (s.base == MAP_FAILED) {
      ::unlink(s.path.c_str());
      return refuse("cannot map " + s.path + ": " + errno_text());
    }
    auto* h = new (s.base) header{};
    h->magic = magic;
    h->bytes = bytes;
    h->held.store(1, std::memory_order_release);
    segs_.push_back(std::move(s));
    index = segs_.size() - 1;
  }
  auto* h = header_of(segs_[*index].base);
  h->seq.store(0, std::memory_order_release);  // being written
  lease l;
  l.data = static_cast<char*>(segs_[*index].base) + data_at;
  l.path = segs_[*index].path;
  l.seq = next_seq.fetch_add(1);
  l.index = *index;
  return l;
}

std::string segment_ring::grow(segment& s, size_t bytes) {
  const size_t length = data_at + bytes;
  const int fd = ::open(s.path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return "cannot open " + s.path + ": " + errno_text();
  if (const int reserved = ::posix_fallocate(fd, 0, static_cast<off_t>(length)); reserved != 0) {
    ::close(fd);
    return "cannot reserve " + std::to_string(length) + " bytes in " + s.path + ": " + std::strerror(reserved);
  }
  ::close(fd);
  // The mapping grows (moved where it must, its page tables with it): a new
  // one would fault in every page again, 18 ms of a 45 MB copy's 34 here.
  // 30 -> 45 MB and a copy took 16 ms so, against 26 with a new mapping.
  void* base = ::mremap(s.base, s.length, length, MREMAP_MAYMOVE);
  if (base == MAP_FAILED) return "cannot map " + s.path + " again at " + std::to_string(length) + " bytes: " + errno_text();
  s.base = base;
  s.length = length;
  header_of(base)->bytes = bytes;
  return {};
}

void segment_ring::publish(const lease& l) {
  header_of(segs_.at(l.index).base)->seq.store(l.seq, std::memory_order_release);
}

void segment_ring::give_back(const lease& l) {
  header_of(segs_.at(l.index).base)->held.store(0, std::memory_order_release);
}

size_t segment_ring::adopt_free(segment_ring& other) {
  size_t adopted = 0;
  for (size_t i = 0; i < other.segs_.size() && segs_.size() < most_;) {
    // Claimed first: a keeper's last tensor over it may be going now.
    uint32_t free_word = 0;
    if (!header_of(other.segs_[i].base)->held.compare_exchange_strong(free_word, 1, std::memory_order_acq_rel)) {
      ++i;
      continue;
    }
    segs_.push_back(std::move(other.segs_[i]));
    other.segs_.erase(other.segs_.begin() + static_cast<std::ptrdiff_t>(i));
    header_of(segs_.back().base)->held.store(0, std::memory_order_release);
    ++adopted;
  }
  return adopted;
}

at::Tensor map_segment(const std::string& path, uint64_t seq, at::ScalarType dtype, int64_t numel) {
  const size_t item = c10::elementSize(dtype);
  if (numel < 0 || (numel > 0 && item > (SIZE_MAX - data_at) / static_cast<size_t>(numel)))
    throw transfer_error("a shared copy of " + std::to_string(numel) + " elements does not fit in memory");
  const size_t bytes = static_cast<size_t>(numel) * item;
  // Read-write for the header's word; the data is only read.
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw transfer_error("cannot open the shared copy " + path + ": " + errno_text());
  struct stat info {};
  if (::fstat(fd, &info) != 0 || static_cast<size_t>(info.st_size) < data_at + bytes) {
    ::close(fd);
    throw transfer_error("the shared copy " + path + " is shorter than the " + std::to_string(bytes) +
                         " bytes it was said to hold");
  }
  const size_t length = static_cast<size_t>(info.st_size);
  void* base = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) throw transfer_error("cannot map the shared copy " + path + ": " + errno_text());
  struct mapping {
    void* base;
    size_t length;
    mapping(void* b, size_t n) : base(b), length(n) {}
    mapping(const mapping&) = delete;
    mapping& operator=(const mapping&) = delete;
    ~mapping() {
      header_of(base)->held.store(0, std::memory_order_release);
      ::munmap(base, length);
    }
  };
  auto* h = header_of(base);
  // The first map takes the copy over (the sender's hold becomes this
  // one's); the same line again finds it taken, so one holder frees it.
  uint64_t found = seq;
  const bool ours = h->magic == magic && h->bytes >= bytes && h->held.load(std::memory_order_acquire) == 1 &&
                    h->seq.compare_exchange_strong(found, seq | taken_bit, std::memory_order_acq_rel);
  if (!ours) {
    const bool other = h->magic == magic;
    ::munmap(base, length);
    if (!other) throw transfer_error(path + " is not a shared copy");
    throw transfer_error("the shared copy " + path + (found == (seq | taken_bit) ? " was taken already: copy "
                                                                                  : " no longer holds copy ") +
                         std::to_string(seq));
  }
  // Made in place: a temporary's destructor would free the segment.
  auto hold = std::make_shared<mapping>(base, length);
  return at::from_blob(
      static_cast<char*>(base) + data_at, {numel}, [hold](void*) mutable { hold.reset(); },
      at::TensorOptions().dtype(dtype).device(at::kCPU));
}

size_t remove_segments_of(const std::string& run_id) {
  if (run_id.empty()) return 0;
  const std::string dir = shm_dir();
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  size_t removed = 0;
  const std::string prefix = run_id + ".";
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) == 0 && ::unlink((dir + "/" + name).c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

}  // namespace actorpipe
