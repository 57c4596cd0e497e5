#pragma once
// `actorpipe launch` in the background, for the tests that hit its workers
// from outside (kill -9, SIGSTOP) while it runs: its output goes to a file,
// its workers are found by their RANK, and it is SIGKILLed in every path
// that leaves it running.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.hpp"

namespace actorpipe::testing_util {

/// The bytes of a file ("" when it is missing).
inline std::string read_or_empty(const std::filesystem::path& file) {
  return std::filesystem::exists(file) ? slurp_file(file) : "";
}

/// While it lives, every rank but 0 of the runs started holds `ms` before
/// each generation's rendezvous (ACTORPIPE_TEST_HOLD_FORMING_MS, inherited):
/// a process hit from outside when rank 0 prints the generation's line is
/// lost while the generation forms.
struct forming_held {
  explicit forming_held(int ms) { ::setenv("ACTORPIPE_TEST_HOLD_FORMING_MS", std::to_string(ms).c_str(), 1); }
  ~forming_held() { ::unsetenv("ACTORPIPE_TEST_HOLD_FORMING_MS"); }
  forming_held(const forming_held&) = delete;
  forming_held& operator=(const forming_held&) = delete;
};

class background_launch {
public:
  /// `bin launch args...`, its stdout and stderr in `out_file`.
  background_launch(const std::string& bin, std::string out_file, std::vector<std::string> args)
      : out_(std::move(out_file)) {
    args.insert(args.begin(), {bin, "launch"});
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = ::open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~background_launch() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool started() const { return pid_ > 0; }
  /// The launcher's own pid (-1 once waited for).
  pid_t pid() const { return pid_; }
  std::string output() const { return read_or_empty(out_); }

  /// The pid of the worker with RANK=rank once the launcher has run it for
  /// `after` (-1 if none within 30 s). Never the coordinator apart
  /// (launch --coordinator process), whose RANK is 0 too.
  pid_t worker(int rank, std::chrono::milliseconds after) const {
    return child_with("actorpipe r" + std::to_string(rank), nul + "RANK=" + std::to_string(rank) + nul, after, true);
  }

  /// The pid of the coordinator apart (launch --coordinator process), -1 if
  /// none within 30 s.
  pid_t coordinator() const {
    return child_with("actorpipe c", nul + "ACTORPIPE_COORDINATOR=self" + nul, std::chrono::milliseconds(0), false);
  }

  /// The launcher's live children (its workers) now.
  std::vector<pid_t> workers() const {
    std::vector<pid_t> out;
    std::istringstream kids(read_or_empty("/proc/" + std::to_string(pid_) + "/task/" + std::to_string(pid_) + "/children"));
    for (pid_t p; kids >> p;) out.push_back(p);
    return out;
  }

  /// True once the run's output holds `text` (false after 60 s): a worker
  /// is hit only once the run trains, never during its set-up.
  bool wait_for_output(const std::string& text) const {
    for (int i = 0; i < 3000; ++i) {
      if (output().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  /// Two losses, the second while the generation after the first forms
  /// (under forming_held): a kill -9 of RANK `killed`, then, once the
  /// output holds `then`, a SIGSTOP of RANK `stopped` (its pid in
  /// `*stopped_pid`). The launcher's exit code as wait(timeout_s) gives
  /// it, or -2 when a worker was not found or `then` never came; the
  /// stopped worker is SIGKILLed after it in every path.
  int kill_then_stop(int killed, const std::string& then, int stopped, double timeout_s, pid_t* stopped_pid) {
    const pid_t victim = worker(killed, std::chrono::milliseconds(0));
    *stopped_pid = worker(stopped, std::chrono::milliseconds(0));
    if (victim <= 0 || *stopped_pid <= 0) return -2;
    ::kill(victim, SIGKILL);
    int code = -2;
    if (wait_for_output(then)) {
      ::kill(*stopped_pid, SIGSTOP);
      code = wait(timeout_s);
    }
    ::kill(*stopped_pid, SIGKILL);  // the launcher's already, unless the run failed
    return code;
  }

  /// The launcher's exit code once it ended, -1 when it did not within
  /// `timeout_s`.
  int wait(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

private:
  inline static const std::string nul = std::string(1, '\0');

  // The first child named `name` (a worker the launcher forked: its
  // /proc/PID/environ is the launcher's) or, spawned, whose environment
  // holds `entry` (NUL on both sides).
  pid_t child_with(const std::string& name, const std::string& entry, std::chrono::milliseconds after,
                   bool workers_only) const {
    const auto since = std::chrono::steady_clock::now();
    for (int i = 0; i < 600; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (std::chrono::steady_clock::now() - since < after) continue;
      for (pid_t p : workers()) {
        std::string comm = read_or_empty("/proc/" + std::to_string(p) + "/comm");
        if (!comm.empty() && comm.back() == '\n') comm.pop_back();
        if (comm == name) return p;
        if (comm.rfind("actorpipe ", 0) == 0) continue;  // forked: another one
        const std::string env = nul + read_or_empty("/proc/" + std::to_string(p) + "/environ");
        if (env.find(entry) == std::string::npos) continue;
        if (workers_only && env.find(nul + "ACTORPIPE_COORDINATOR=self" + nul) != std::string::npos) continue;
        return p;
      }
    }
    return -1;
  }

  pid_t pid_ = -1;
  std::string out_;
};

}  // namespace actorpipe::testing_util
