#include "runtime/dist/transport/data_channel.hpp"

#include <ATen/ATen.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "runtime/dist/transport/shm_ring.hpp"

namespace actorpipe {

namespace {

constexpr uint32_t record_magic = 0x41504f52;  // "APOR"
constexpr uint32_t record_version = 1;

struct tensor_head {
  uint8_t defined;
  int8_t dtype;
  uint8_t ndim;
  uint8_t pad[5];
  int64_t shape[op_record::max_dims];
  uint64_t bytes;
};

/// The fixed head of a record, as it crosses: plain integers only.
struct record_head {
  uint32_t magic;
  uint32_t version;
  op_ids ids;
  uint32_t count;
  uint32_t pad;
  tensor_head tensors[op_record::max_tensors];
};

static_assert(sizeof(record_head) == 184, "the head's layout is the wire format");

// -- a socket ----------------------------------------------------------------

class socket_byte_pipe final : public byte_pipe {
public:
  socket_byte_pipe(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  ~socket_byte_pipe() override {
    close();
    ::close(fd_);
  }

  void write(const void* data, size_t bytes, clock::time_point deadline) override {
    const auto* p = static_cast<const char*>(data);
    while (bytes > 0) {
      wait(POLLOUT, deadline, "writing");
      const ssize_t n = ::send(fd_, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n < 0 && (errno == ECONNRESET || errno == EPIPE)) gone_ = true;
      if (n <= 0) throw std::runtime_error(name_ + ": writing: " + std::strerror(errno));
      p += n;
      bytes -= static_cast<size_t>(n);
    }
  }

  size_t try_write(const void* data, size_t bytes) override {
    if (closed_) return 0;
    size_t done = 0;
    while (done < bytes) {
      const ssize_t n = ::send(fd_, static_cast<const char*>(data) + done, bytes - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // full, or an error the blocking write then reports
      done += static_cast<size_t>(n);
    }
    return done;
  }

  void read(void* out, size_t bytes, clock::time_point deadline) override {
    auto* p = static_cast<char*>(out);
    while (bytes > 0) {
      wait(POLLIN, deadline, "reading");
      const ssize_t n = ::recv(fd_, p, bytes, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE))) gone_ = true;
      if (n == 0) throw std::runtime_error(name_ + ": reading: the peer closed the stream");
      if (n < 0) throw std::runtime_error(name_ + ": reading: " + std::strerror(errno));
      p += n;
      bytes -= static_cast<size_t>(n);
    }
  }

  void close() override {
    if (!closed_.exchange(true)) ::shutdown(fd_, SHUT_RDWR);
  }

  std::string name() const override { return name_; }
  bool peer_gone() const override { return gone_; }

private:
  void wait(short events, clock::time_point deadline, const char* what) {
    for (;;) {
      if (closed_) throw std::runtime_error(name_ + ": " + what + ": this end is closed");
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
      if (left <= 0) throw std::runtime_error(name_ + ": " + what + ": timed out");
      pollfd p{fd_, events, 0};
      const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
      if (r > 0) return;  // ready, or an error the next call reports
      if (r < 0 && errno != EINTR) throw std::runtime_error(name_ + ": " + what + ": " + std::strerror(errno));
    }
  }

  int fd_;
  std::string name_;
  std::atomic<bool> closed_{false};
  std::atomic<bool> gone_{false};
};

// -- a shared-memory ring ----------------------------------------------------

class ring_byte_pipe final : public byte_pipe {
public:
  explicit ring_byte_pipe(std::unique_ptr<shm_ring> ring) : ring_(std::move(ring)) {}
  void write(const void* data, size_t bytes, clock::time_point deadline) override { ring_->write(data, bytes, deadline); }
  size_t try_write(const void* data, size_t bytes) override { return ring_->try_write(data, bytes); }
  bool peer_gone() const override { return !ring_->peer_gone().empty(); }
  void read(void* out, size_t bytes, clock::time_point deadline) override { ring_->read(out, bytes, deadline); }
  void close() override { ring_->close(); }
  std::string name() const override { return ring_->path(); }

private:
  std::unique_ptr<shm_ring> ring_;
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < shape.size(); ++i) o << (i ? ", " : "") << shape[i];
  o << "]";
  return o.str();
}

/// The head's tensor, checked: a garbled head is an error, never an allocation of its claim.
at::Tensor empty_for(const tensor_head& t, const std::string& pipe) {
  if (t.ndim > op_record::max_dims) throw std::runtime_error(pipe + ": a record head with " + std::to_string(t.ndim) + " dimensions");
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) throw std::runtime_error(pipe + ": a record head with shape " + shape_text(shape));
    numel *= static_cast<uint64_t>(d);
  }
  const auto dtype = static_cast<at::ScalarType>(t.dtype);
  if (t.dtype < 0 || t.dtype >= static_cast<int8_t>(at::ScalarType::NumOptions) ||
      numel * at::elementSize(dtype) != t.bytes)
    throw std::runtime_error(pipe + ": a record head whose byte count " + std::to_string(t.bytes) +
                             " does not match its shape " + shape_text(shape));
  return at::empty(shape, at::TensorOptions().dtype(dtype));
}

}  // namespace

std::unique_ptr<byte_pipe> socket_pipe(int fd, std::string name) {
  return std::make_unique<socket_byte_pipe>(fd, std::move(name));
}

std::unique_ptr<byte_pipe> ring_pipe(std::unique_ptr<shm_ring> ring) {
  return std::make_unique<ring_byte_pipe>(std::move(ring));
}

/// A record as it crosses: its head, then the bytes of its tensors.
struct data_sender::job {
  record_head head{};
  std::vector<at::Tensor> bytes;
  clock::time_point due;
  size_t done = 0;  // bytes of [head, tensors...] written so far

  /// Each piece of the record from byte `done` on, to `put(data, n)`, which
  /// says how much it took; false once one took less.
  template <class Put>
  bool each_piece(Put put) {
    size_t at = 0;
    auto piece = [&](const void* data, size_t n) {
      if (done >= at + n) {
        at += n;
        return true;
      }
      const size_t skip = done - at;
      const size_t took = put(static_cast<const char*>(data) + skip, n - skip);
      done += took;
      at += n;
      return took == n - skip;
    };
    if (!piece(&head, sizeof head)) return false;
    for (const auto& b : bytes)
      if (b.defined() && b.nbytes() > 0 && !piece(b.data_ptr(), b.nbytes())) return false;
    return true;
  }
};

namespace {

void encode(const op_record& r, record_head& h, std::vector<at::Tensor>& bytes) {
  if (r.tensors.size() > op_record::max_tensors) throw std::invalid_argument("a record holds at most two tensors");
  h.magic = record_magic;
  h.version = record_version;
  h.ids = r;
  h.count = static_cast<uint32_t>(r.tensors.size());
  bytes.assign(r.tensors.size(), at::Tensor());
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const at::Tensor& t = r.tensors[i];
    if (!t.defined()) continue;
    if (static_cast<size_t>(t.dim()) > op_record::max_dims) throw std::invalid_argument("a record's tensor has over 6 dimensions");
    bytes[i] = t.device().is_cpu() ? t.contiguous() : t.to(at::kCPU).contiguous();
    auto& th = h.tensors[i];
    th.defined = 1;
    th.dtype = static_cast<int8_t>(t.scalar_type());
    th.ndim = static_cast<uint8_t>(t.dim());
    for (int64_t d = 0; d < t.dim(); ++d) th.shape[d] = t.size(d);
    th.bytes = static_cast<uint64_t>(bytes[i].nbytes());
  }
}

}  // namespace

data_sender::data_sender(std::unique_ptr<byte_pipe> pipe, std::function<void(const std::string&, bool)> failed)
    : pipe_(std::move(pipe)), failed_(std::move(failed)) {
  thread_ = std::thread([this] { run(); });
}

data_sender::~data_sender() { close(); }

void data_sender::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    queue_.clear();
    held_.clear();
  }
  pipe_->close();
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void data_sender::send(const op_record& r, clock::time_point deadline) {
  job j;
  encode(r, j.head, j.bytes);
  std::lock_guard<std::mutex> lock(mu_);
  j.each_piece([&](const void* data, size_t n) {
    pipe_->write(data, n, deadline);
    return n;
  });
}

bool data_sender::write_now(job& j) {
  return j.each_piece([&](const void* data, size_t n) { return pipe_->try_write(data, n); });
}

void data_sender::post(op_record r, clock::time_point not_before) {
  auto j = std::make_shared<job>();
  encode(r, j->head, j->bytes);
  j->due = not_before;
  std::unique_lock<std::mutex> lock(mu_);
  if (broken_ || stopping_) return;
  if (not_before > clock::now()) {
    held_.push_back(std::move(j));
  } else if (busy_ || !queue_.empty() || !write_now(*j)) {
    queue_.push_back(std::move(j));  // after what waits; the thread writes the rest
  } else {
    return;  // all of it went on this thread
  }
  lock.unlock();
  cv_.notify_all();
}

void data_sender::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Held records that are due join the queue, earliest first.
    std::sort(held_.begin(), held_.end(), [](const auto& a, const auto& b) { return a->due < b->due; });
    const auto now = clock::now();
    while (!held_.empty() && held_.front()->due <= now) {
      queue_.push_back(held_.front());
      held_.erase(held_.begin());
    }
    if (stopping_) return;
    if (queue_.empty()) {
      if (held_.empty())
        cv_.wait(lock);
      else
        cv_.wait_until(lock, held_.front()->due);
      continue;
    }
    auto j = queue_.front();
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    std::string why;
    try {
      const auto forever = clock::now() + std::chrono::hours(24 * 365);
      j->each_piece([&](const void* data, size_t n) {
        pipe_->write(data, n, forever);
        return n;
      });
    } catch (const std::exception& e) {
      why = e.what();
    }
    lock.lock();
    busy_ = false;
    if (why.empty() || stopping_) continue;
    broken_ = true;
    queue_.clear();
    held_.clear();
    lock.unlock();
    if (failed_) failed_(why, pipe_->peer_gone());
    lock.lock();
  }
}

data_receiver::data_receiver(std::unique_ptr<byte_pipe> pipe, std::function<void(op_record)> deliver,
                             std::function<void(const std::string&, bool)> failed)
    : pipe_(std::move(pipe)), deliver_(std::move(deliver)), failed_(std::move(failed)) {
  thread_ = std::thread([this] { run(); });
}

data_receiver::~data_receiver() { stop(); }

void data_receiver::stop() {
  stopping_ = true;
  pipe_->close();
  if (thread_.joinable()) thread_.join();
}

void data_receiver::run() {
  const auto forever = [] { return byte_pipe::clock::now() + std::chrono::hours(24 * 365); };
  try {
    for (;;) {
      record_head h{};
      pipe_->read(&h, sizeof h, forever());
      if (h.magic != record_magic || h.version != record_version || h.count > op_record::max_tensors)
        throw std::runtime_error(pipe_->name() + ": a record head that is not actorpipe's (magic " +
                                 std::to_string(h.magic) + ", version " + std::to_string(h.version) + ")");
      op_record r;
      static_cast<op_ids&>(r) = h.ids;
      r.tensors.resize(h.count);
      for (uint32_t i = 0; i < h.count; ++i) {
        if (!h.tensors[i].defined) continue;
        r.tensors[i] = empty_for(h.tensors[i], pipe_->name());
        if (h.tensors[i].bytes > 0) pipe_->read(r.tensors[i].data_ptr(), h.tensors[i].bytes, forever());
      }
      if (stopping_) return;
      deliver_(std::move(r));
    }
  } catch (const std::exception& e) {
    if (!stopping_) failed_(e.what(), pipe_->peer_gone());
  }
}

std::string shape_mismatch(const std::string& what, int from_stage, int to_stage, const std::vector<int64_t>& expected,
                           const std::vector<int64_t>& got) {
  if (expected == got) return "";
  return "stage " + std::to_string(to_stage) + " expected " + what + " of shape " + shape_text(expected) +
         " from stage " + std::to_string(from_stage) + ", got " + shape_text(got);
}

}  // namespace actorpipe
