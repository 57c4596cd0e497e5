#include "runtime/dist/transport/shm_ring.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace actorpipe {

namespace {

constexpr uint64_t ring_magic = 0x31474e4952504100ULL;  // "\0APRING1"
constexpr size_t header_bytes = 4096;
// Bytes copied between two publications: the other side starts on a large
// record's first piece while this side copies the next (two cores copy at
// once), and a piece stays within a core's cache.
constexpr uint64_t piece_bytes = 128 << 10;

size_t page_rounded(size_t n) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t seen, std::chrono::milliseconds for_at_most) {
  timespec ts{static_cast<time_t>(for_at_most.count() / 1000), static_cast<long>((for_at_most.count() % 1000) * 1000000)};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

/// A process that exists and is not a zombie.
bool alive(int32_t pid) {
  if (pid <= 0) return true;  // not there yet: only the deadline ends the wait
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

std::string sys_error(const std::string& what, const std::string& path, int err) {
  return what + " " + path + ": " + std::strerror(err);
}

}  // namespace

/// The first page of the segment. Every field the two sides share is an
/// atomic; lock-free on every machine this runs on, so it works across
/// processes.
struct shm_ring::header {
  uint64_t magic;
  uint64_t capacity;
  std::atomic<uint64_t> written;  ///< bytes the writer has appended, ever
  std::atomic<uint64_t> taken;    ///< bytes the reader has taken, ever
  std::atomic<uint32_t> data_bell;   ///< bumped after each append; the reader sleeps on it
  std::atomic<uint32_t> space_bell;  ///< bumped after each take; the writer sleeps on it
  std::atomic<uint32_t> reader_sleeps;
  std::atomic<uint32_t> writer_sleeps;
  std::atomic<uint32_t> writer_closed;
  std::atomic<uint32_t> reader_closed;
  std::atomic<int32_t> writer_pid;
  std::atomic<int32_t> reader_pid;
};

static_assert(sizeof(shm_ring::header) <= header_bytes, "the header fits its page");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");

std::unique_ptr<shm_ring> shm_ring::create(const std::string& path, size_t capacity, std::string* why) {
  const size_t ring = page_rounded(std::max<size_t>(capacity, 1));
  const size_t length = header_bytes + ring;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (why) *why = sys_error("cannot make the shared ring", path, errno);
    return nullptr;
  }
  // Reserve the pages now: a tmpfs that is full refuses here, not with a
  // SIGBUS under a later write.
  const int reserved = ::posix_fallocate(fd, 0, static_cast<off_t>(length));
  void* base = reserved == 0 ? ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int err = reserved != 0 ? reserved : errno;
  ::close(fd);
  if (base == MAP_FAILED) {
    ::unlink(path.c_str());
    if (why) {
      std::ostringstream o;
      o << "no room for a shared ring of " << (length >> 10) << " KiB: " << sys_error("reserving", path, err);
      *why = o.str();
    }
    return nullptr;
  }
  auto* h = new (base) header{};
  h->capacity = ring;
  h->writer_pid.store(static_cast<int32_t>(::getpid()));
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = ring_magic;
  return std::unique_ptr<shm_ring>(new shm_ring(path, base, length, true));
}

std::unique_ptr<shm_ring> shm_ring::open(const std::string& path, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    if (why) *why = sys_error("cannot open the shared ring", path, errno);
    return nullptr;
  }
  struct stat st {};
  const bool sized = ::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) > header_bytes;
  void* base = sized ? ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                     : MAP_FAILED;
  const int err = errno;
  ::close(fd);
  if (base == MAP_FAILED) {
    if (why) *why = sized ? sys_error("cannot map the shared ring", path, err) : path + ": not a shared ring (too short)";
    return nullptr;
  }
  const size_t length = static_cast<size_t>(st.st_size);
  auto* h = static_cast<header*>(base);
  if (h->magic != ring_magic || h->capacity + header_bytes != length) {
    ::munmap(base, length);
    if (why) *why = path + ": not a shared ring";
    return nullptr;
  }
  h->reader_pid.store(static_cast<int32_t>(::getpid()));
  ::unlink(path.c_str());  // both ends hold it now: nothing is left behind
  return std::unique_ptr<shm_ring>(new shm_ring(path, base, length, false));
}

shm_ring::shm_ring(std::string path, void* base, size_t length, bool writer)
    : path_(std::move(path)), base_(base), length_(length), writer_(writer) {
  h_ = static_cast<header*>(base_);
  data_ = static_cast<unsigned char*>(base_) + header_bytes;
}

shm_ring::~shm_ring() {
  close();
  ::munmap(base_, length_);
}

size_t shm_ring::capacity() const { return static_cast<size_t>(h_->capacity); }

void shm_ring::close() {
  auto& closed = writer_ ? h_->writer_closed : h_->reader_closed;
  if (closed.exchange(1) != 0) return;
  // Wake the other side, whatever it waits for.
  h_->data_bell.fetch_add(1);
  h_->space_bell.fetch_add(1);
  futex_wake(&h_->data_bell);
  futex_wake(&h_->space_bell);
}

bool shm_ring::readable() const { return h_->written.load(std::memory_order_acquire) != h_->taken.load(); }

std::string shm_ring::peer_gone() const {
  const bool closed = writer_ ? h_->reader_closed.load() != 0 : h_->writer_closed.load() != 0;
  const int32_t pid = writer_ ? h_->reader_pid.load() : h_->writer_pid.load();
  const char* who = writer_ ? "reader" : "writer";
  if (closed) return std::string("the ") + who + " (pid " + std::to_string(pid) + ") closed its end";
  if (!alive(pid)) return std::string("the ") + who + " (pid " + std::to_string(pid) + ") is gone";
  return "";
}

template <class Ready>
void shm_ring::wait_for(Ready ready, bool as_writer, clock::time_point deadline, const char* what) {
  auto& bell = as_writer ? h_->space_bell : h_->data_bell;
  auto& sleeps = as_writer ? h_->writer_sleeps : h_->reader_sleeps;
  auto& mine = writer_ ? h_->writer_closed : h_->reader_closed;
  while (!ready()) {
    if (mine.load() != 0) throw shm_ring_error(path_ + ": " + what + ": this end is closed");
    const std::string gone = peer_gone();
    if (!gone.empty()) throw shm_ring_error(path_ + ": " + what + ": " + gone);
    const auto now = clock::now();
    if (now >= deadline) throw shm_ring_error(path_ + ": " + what + ": timed out");
    const uint32_t seen = bell.load();
    sleeps.store(1);
    if (!ready()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) + std::chrono::milliseconds(1);
      futex_wait(&bell, seen, std::min<std::chrono::milliseconds>(poll, left));
    }
    sleeps.store(0);
  }
}

size_t shm_ring::put(const unsigned char* from, size_t bytes) {
  const uint64_t cap = h_->capacity;
  const uint64_t written = h_->written.load(std::memory_order_relaxed);
  const uint64_t free = cap - (written - h_->taken.load(std::memory_order_acquire));
  const uint64_t at = written % cap;
  const size_t n = static_cast<size_t>(std::min<uint64_t>({free, bytes, cap - at, piece_bytes}));
  if (n == 0) return 0;
  std::memcpy(data_ + at, from, n);
  h_->written.store(written + n, std::memory_order_release);
  h_->data_bell.fetch_add(1);
  if (h_->reader_sleeps.load() != 0) futex_wake(&h_->data_bell);
  return n;
}

void shm_ring::write(const void* data, size_t bytes, clock::time_point deadline) {
  if (!writer_) throw std::logic_error("shm_ring::write on the reader's end");
  const auto* from = static_cast<const unsigned char*>(data);
  const uint64_t cap = h_->capacity;
  while (bytes > 0) {
    const uint64_t written = h_->written.load(std::memory_order_relaxed);
    wait_for([&] { return written - h_->taken.load(std::memory_order_acquire) < cap; }, true, deadline,
             "writing");
    const size_t n = put(from, bytes);
    from += n;
    bytes -= n;
  }
}

size_t shm_ring::try_write(const void* data, size_t bytes) {
  if (!writer_) throw std::logic_error("shm_ring::try_write on the reader's end");
  if (h_->writer_closed.load() != 0 || h_->reader_closed.load() != 0) return 0;
  const auto* from = static_cast<const unsigned char*>(data);
  size_t done = 0;
  while (done < bytes) {
    const size_t n = put(from + done, bytes - done);
    if (n == 0) break;
    done += n;
  }
  return done;
}

void shm_ring::read(void* out, size_t bytes, clock::time_point deadline) {
  if (writer_) throw std::logic_error("shm_ring::read on the writer's end");
  auto* to = static_cast<unsigned char*>(out);
  const uint64_t cap = h_->capacity;
  while (bytes > 0) {
    const uint64_t taken = h_->taken.load(std::memory_order_relaxed);
    wait_for([&] { return h_->written.load(std::memory_order_acquire) != taken; }, false, deadline, "reading");
    const uint64_t avail = h_->written.load(std::memory_order_acquire) - taken;
    const uint64_t at = taken % cap;
    const size_t n = static_cast<size_t>(std::min<uint64_t>({avail, bytes, cap - at, piece_bytes}));
    std::memcpy(to, data_ + at, n);
    h_->taken.store(taken + n, std::memory_order_release);
    h_->space_bell.fetch_add(1);
    if (h_->writer_sleeps.load() != 0) futex_wake(&h_->space_bell);
    to += n;
    bytes -= n;
  }
}

}  // namespace actorpipe
