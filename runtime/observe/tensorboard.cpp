#include "runtime/observe/tensorboard.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <string_view>

#include "runtime/files/file_io.hpp"
#include "runtime/util/crc32c.hpp"

namespace actorpipe {

namespace {

// --- the protobuf wire format, the little of it an Event needs ----------

void put_varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7f) | 0x80);
  out += static_cast<char>(v);
}

void put_little_endian(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

void put_double(std::string& out, char tag, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  out += tag;
  put_little_endian(out, bits, 8);
}

void put_float(std::string& out, char tag, float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  out += tag;
  put_little_endian(out, bits, 4);
}

void put_bytes(std::string& out, char tag, std::string_view s) {
  out += tag;
  put_varint(out, s.size());
  out += s;
}

// Field tags: (field number << 3) | wire type.
constexpr char event_wall_time = 0x09;     // 1, fixed64
constexpr char event_step = 0x10;          // 2, varint
constexpr char event_file_version = 0x1a;  // 3, length-delimited
constexpr char event_summary = 0x2a;       // 5, length-delimited
constexpr char summary_value = 0x0a;       // Summary 1, repeated message
constexpr char value_tag = 0x0a;           // Summary.Value 1, string
constexpr char value_simple = 0x15;        // Summary.Value 2, fixed32

std::string version_event(double wall_time) {
  std::string e;
  put_double(e, event_wall_time, wall_time);
  put_bytes(e, event_file_version, "brain.Event:2");
  return e;
}

std::string scalar_event(int64_t step, const std::vector<std::pair<std::string, double>>& values,
                         double wall_time) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    put_bytes(value, value_tag, tag);
    put_float(value, value_simple, static_cast<float>(v));
    put_bytes(summary, summary_value, value);
  }
  std::string e;
  put_double(e, event_wall_time, wall_time);
  e += event_step;
  put_varint(e, static_cast<uint64_t>(step));  // a negative step takes ten bytes, as in protobuf
  put_bytes(e, event_summary, summary);
  return e;
}

/// TFRecord: length (u64 LE), its masked crc (u32 LE), data, its masked crc.
std::string framed(const std::string& data) {
  std::string r;
  r.reserve(data.size() + 16);
  put_little_endian(r, data.size(), 8);
  put_little_endian(r, masked_crc32c(r.data(), 8), 4);
  r += data;
  put_little_endian(r, masked_crc32c(data.data(), data.size()), 4);
  return r;
}

// --- the directory and the file -------------------------------------------

[[noreturn]] void fail(const std::string& dir, const std::string& why) {
  throw io_error("tensorboard directory " + dir + ": " + why);
}

/// mkdir -p, saying which component is in the way.
void make_directories(const std::string& dir) {
  if (dir.empty()) fail("''", "an empty path is no directory");
  for (size_t end = 0; end != std::string::npos;) {
    end = dir.find('/', end + 1);
    const std::string prefix = dir.substr(0, end);
    const std::string which = end == std::string::npos ? "" : prefix + ": ";  // the component in the way
    struct stat st {};
    if (::stat(prefix.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) fail(dir, which + std::strerror(ENOTDIR));
      continue;
    }
    if (errno != ENOENT) fail(dir, which + std::strerror(errno));
    // EEXIST: another process made it between the stat and here.
    if (::mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST)
      fail(dir, "cannot create " + prefix + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) fail(dir, std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) fail(dir, std::strerror(ENOTDIR));
  if (::access(dir.c_str(), W_OK | X_OK) != 0) fail(dir, std::string("not writable: ") + std::strerror(errno));
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string h = buf;
  for (auto& c : h)
    if (c == '/') c = '_';  // it becomes part of a file name
  return h;
}

}  // namespace

double tensorboard_writer::now() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void tensorboard_writer::check_writable(const std::string& dir) { make_directories(dir); }

tensorboard_writer::tensorboard_writer(const std::string& dir) {
  make_directories(dir);
  const double t = now();
  const std::string base = dir + (dir.back() == '/' ? "" : "/") + "events.out.tfevents." +
                           std::to_string(static_cast<int64_t>(std::floor(t))) + "." + hostname();
  // O_EXCL: never append to another writer's file; a taken name gets .1, .2, ...
  for (int n = 0; fd_ < 0; ++n) {
    path_ = n == 0 ? base : base + "." + std::to_string(n);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || n >= 1000))
      fail(dir, "cannot create " + path_ + ": " + std::strerror(errno));
  }
  try {
    append(version_event(t));
  } catch (...) {
    ::close(fd_);
    ::unlink(path_.c_str());  // a file without its version record is no event file
    throw;
  }
}

tensorboard_writer::~tensorboard_writer() {
  if (fd_ < 0) return;
  ::fdatasync(fd_);  // once per file; a destructor has no one to report a failure to
  ::close(fd_);
}

void tensorboard_writer::scalar(const std::string& tag, int64_t step, double value, double wall_time) {
  scalars(step, {{tag, value}}, wall_time);
}

void tensorboard_writer::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values,
                                 double wall_time) {
  if (values.empty()) return;
  append(scalar_event(step, values, wall_time));
}

void tensorboard_writer::flush() {
  if (::fdatasync(fd_) != 0) throw io_error(path_ + ": cannot sync: " + std::strerror(errno));
}

void tensorboard_writer::append(const std::string& event) {
  const std::string record = framed(event);
  // One write for the whole record; the loop only continues a short write
  // (a full disk, a signal), which leaves a cut record either way.
  const char* p = record.data();
  size_t left = record.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw io_error(path_ + ": cannot write: " + std::strerror(errno));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace actorpipe
