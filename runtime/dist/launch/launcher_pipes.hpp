#pragma once
// Inside runtime/dist/launcher (not a public header): the launcher's two
// pipes. Its SIGINT/SIGTERM/SIGCHLD handlers write into a self-pipe that
// its wait loop polls, and rank 0 writes its lines ("heal", "respawn R G")
// into the control pipe.
#include <chrono>
#include <string>
#include <vector>

#include <signal.h>

namespace actorpipe::launcher_detail {

// The self-pipe and SIGINT/SIGTERM/SIGCHLD handlers for one run, restored
// on every way out. SIGCHLD is caught (not left SIG_IGN, which would make
// the kernel reap the workers before waitpid sees their status) to wake
// the loop when a worker exits. One at a time in a process.
class signal_scope {
public:
  signal_scope();
  ~signal_scope();
  signal_scope(const signal_scope&) = delete;
  signal_scope& operator=(const signal_scope&) = delete;

  /// Waits up to `timeout` for a signal (or for `also` to be readable);
  /// returns the SIGINT/SIGTERM ones that arrived (SIGCHLD only wakes).
  std::vector<int> wait(std::chrono::milliseconds timeout, int also = -1);

  static constexpr int signals[3] = {SIGINT, SIGTERM, SIGCHLD};

private:
  int fds_[2] = {-1, -1};
  struct sigaction old_[3] {};
};

/// In a child forked from the launcher: the inherited handlers write into
/// no pipe any more (before the child resets them).
void detach_signal_pipe();

// Rank 0's lines on the control pipe ("heal", "respawn R G"), as they
// come; a partial line waits for the rest.
class control_pipe {
public:
  control_pipe();
  ~control_pipe();
  control_pipe(const control_pipe&) = delete;
  control_pipe& operator=(const control_pipe&) = delete;

  /// -1 once rank 0's end is closed (rank 0 exited): nothing more to poll.
  int read_fd() const { return eof_ ? -1 : fds_[0]; }
  int write_fd() const { return fds_[1]; }
  /// After rank 0 started: the launcher keeps no write end, so that rank
  /// 0's end is the only one.
  void close_write();
  std::vector<std::string> lines();

private:
  int fds_[2] = {-1, -1};
  bool eof_ = false;
  std::string partial_;
};

}  // namespace actorpipe::launcher_detail
