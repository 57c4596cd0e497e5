#include "runtime/dist/launch/launcher_pipes.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace actorpipe::launcher_detail {

namespace {

// The handlers only write the signal's number into this pipe (write() is
// async-signal-safe); the wait loop reads it. One run_workers at a time.
std::atomic<int> g_wake_fd{-1};
std::atomic<bool> g_running{false};

extern "C" void on_signal(int signo) {
  const int saved = errno;
  const int fd = g_wake_fd.load();
  if (fd >= 0) {
    const unsigned char b = static_cast<unsigned char>(signo);
    [[maybe_unused]] ssize_t n = ::write(fd, &b, 1);  // full pipe: a wake-up is already pending
  }
  errno = saved;
}

}  // namespace

signal_scope::signal_scope() {
  if (g_running.exchange(true)) throw std::runtime_error("run_workers: already running in this process");
  if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
    g_running = false;
    throw std::runtime_error(std::string("run_workers: pipe2: ") + std::strerror(errno));
  }
  g_wake_fd = fds_[1];
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int i = 0; i < 3; ++i) sigaction(signals[i], &sa, &old_[i]);
}

signal_scope::~signal_scope() {
  for (int i = 0; i < 3; ++i) sigaction(signals[i], &old_[i], nullptr);
  g_wake_fd = -1;
  ::close(fds_[0]);
  ::close(fds_[1]);
  g_running = false;
}

std::vector<int> signal_scope::wait(std::chrono::milliseconds timeout, int also) {
  pollfd p[2] = {{fds_[0], POLLIN, 0}, {also, POLLIN, 0}};
  ::poll(p, also >= 0 ? 2 : 1, static_cast<int>(timeout.count()));
  std::vector<int> got;
  unsigned char buf[64];
  for (ssize_t n; (n = ::read(fds_[0], buf, sizeof buf)) > 0;)
    for (ssize_t i = 0; i < n; ++i)
      if (buf[i] == SIGINT || buf[i] == SIGTERM) got.push_back(buf[i]);
  return got;
}

void detach_signal_pipe() { g_wake_fd = -1; }

control_pipe::control_pipe() {
  if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error(std::string("run_workers: pipe2: ") + std::strerror(errno));
}

control_pipe::~control_pipe() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

void control_pipe::close_write() {
  ::close(fds_[1]);
  fds_[1] = -1;
}

std::vector<std::string> control_pipe::lines() {
  char buf[256];
  ssize_t n = 0;
  while (!eof_ && (n = ::read(fds_[0], buf, sizeof buf)) > 0) partial_.append(buf, static_cast<size_t>(n));
  if (n == 0 && fds_[1] < 0) eof_ = true;
  std::vector<std::string> out;
  for (size_t nl; (nl = partial_.find('\n')) != std::string::npos;) {
    out.push_back(partial_.substr(0, nl));
    partial_.erase(0, nl + 1);
  }
  return out;
}

}  // namespace actorpipe::launcher_detail
