#pragma once
// Real child processes for multi-process tests and benchmarks: this binary
// re-executed (/proc/self/exe) with extra environment variables, its stdout
// and stderr captured through one pipe. Every wait is bounded; a child still
// running when its handle goes away is SIGKILLed and reaped.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace actorpipe::test_support {

/// One child process; the destructor kills (SIGKILL) and reaps it if it is
/// still there, whatever path the test took.
class child_process {
public:
  using clock = std::chrono::steady_clock;

  /// Starts /proc/self/exe with `env` added to this process's environment.
  explicit child_process(const std::map<std::string, std::string>& env) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    std::vector<std::string> strings;
    for (char** e = environ; *e; ++e) strings.emplace_back(*e);
    for (const auto& [k, v] : env) strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe";
    char* argv[] = {exe.data(), nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
    int rc = posix_spawn(&pid_, exe.c_str(), &actions, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    out_fd_ = fds[0];
    if (rc != 0) {
      pid_ = -1;
      throw std::runtime_error(std::string("posix_spawn failed: ") + std::strerror(rc));
    }
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  ~child_process() {
    kill_now();
    if (out_fd_ >= 0) ::close(out_fd_);
  }

  /// Reads output until it contains `needle` (true), or until EOF or the
  /// deadline (false).
  bool read_until(const std::string& needle, clock::time_point deadline) {
    while (output_.find(needle) == std::string::npos) {
      if (!read_some(deadline)) return output_.find(needle) != std::string::npos;
    }
    return true;
  }

  /// Reads output to EOF and reaps the child; returns its exit code, or -1
  /// when it was killed by a signal or had to be killed at the deadline.
  int finish(clock::time_point deadline) {
    while (read_some(deadline)) {
    }
    while (pid_ > 0) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      if (clock::now() >= deadline) {
        output_ += "\n[test: child killed at the deadline]\n";
        kill_now();
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

  /// SIGKILL and reap, if still running.
  void kill_now() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
      pid_ = -1;
    }
  }

  /// Everything read so far.
  const std::string& output() const { return output_; }

private:
  // One read, waiting at most until the deadline; false at EOF or deadline.
  bool read_some(clock::time_point deadline) {
    if (out_fd_ < 0) return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    if (left <= 0) return false;
    pollfd p{out_fd_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r <= 0) return r < 0 && errno == EINTR;
    char buf[4096];
    ssize_t n = ::read(out_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) return true;
    if (n <= 0) {
      ::close(out_fd_);
      out_fd_ = -1;
      return false;
    }
    output_.append(buf, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string output_;
};

// ---- a child's side ---------------------------------------------------------

/// The environment variable `name`, or `fallback` when it is not set.
inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

/// Prints one line for the parent to read, at once (stdout is a pipe).
inline void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// ---- the parent's side --------------------------------------------------------

/// The value after "PORT " in a child's output, 0 when there is none.
inline int parse_port(const std::string& output) {
  auto at = output.find("PORT ");
  if (at == std::string::npos) return 0;
  return std::atoi(output.c_str() + at + 5);
}

}  // namespace actorpipe::test_support
