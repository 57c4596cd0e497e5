#pragma once
// The real binary as a child process, under limits: a wall-clock timeout
// (the child is killed past it, in every path), an optional address-space
// cap, and its peak resident memory read back from wait4.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/test_util.hpp"

namespace actorpipe::testing_util {

struct child_limits {
  double timeout_s = 600;        ///< killed (SIGKILL) past this
  uint64_t address_space = 0;    ///< RLIMIT_AS in bytes; 0: none
};

struct child_result {
  int code = -1;                 ///< exit code, or 128 + signal
  std::string out, err;
  double wall_s = 0;
  int64_t max_rss_kb = 0;        ///< the child's peak resident memory
  bool timed_out = false;
};

namespace detail {

/// Forks; the child, its stdin from /dev/null and its stdout and stderr to
/// files (no pipe can fill up), runs `in_child(argv)`, which does not
/// return. Waits for it under `limits`.
template <class InChild>
child_result run_forked(std::vector<std::string> all, const child_limits& limits, InChild in_child) {
  static int counter = 0;
  const auto base = std::filesystem::path(::testing::TempDir()) /
                    ("actorpipe_child_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
  const std::string out_file = base.string() + ".out", err_file = base.string() + ".err";
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  child_result r;
  std::fflush(nullptr);  // nothing buffered here is written by the child too
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork failed";
    return r;
  }
  if (pid == 0) {  // only async-signal-safe calls before in_child
    const int in = open("/dev/null", O_RDONLY);
    const int out = open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(127);
    if (limits.address_space > 0) {
      const rlimit lim{limits.address_space, limits.address_space};
      setrlimit(RLIMIT_AS, &lim);
    }
    in_child(argv.data());
  }
  int status = 0;
  rusage usage{};
  for (;;) {
    const pid_t done = wait4(pid, &status, WNOHANG, &usage);
    if (done == pid) break;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (done < 0 || elapsed > limits.timeout_s) {
      r.timed_out = done >= 0;
      kill(pid, SIGKILL);
      wait4(pid, &status, 0, &usage);
      break;
    }
    usleep(5000);
  }
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.max_rss_kb = usage.ru_maxrss;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp_file(out_file);
  r.err = slurp_file(err_file);
  std::filesystem::remove(out_file);
  std::filesystem::remove(err_file);
  return r;
}

}  // namespace detail

/// Runs `program args...` with stdin from /dev/null and stdout and stderr
/// captured to files, and waits for it.
inline child_result run_child(const std::string& program, const std::vector<std::string>& args,
                              const child_limits& limits = {}) {
  std::vector<std::string> all = {program};
  all.insert(all.end(), args.begin(), args.end());
  return detail::run_forked(std::move(all), limits, [&program](char** argv) {
    execv(program.c_str(), argv);  // only async-signal-safe calls until here
    _exit(127);
  });
}

/// The same without an exec: the forked child calls `main_like(argc, argv)`
/// (argv[0] is `name`) and exits with what it returns, its output flushed.
/// For a command whose process start (LibTorch's load, 0.7 s) would cost
/// more than the command.
template <class Main>
child_result run_in_fork(const std::string& name, const std::vector<std::string>& args, Main main_like,
                         const child_limits& limits = {}) {
  std::vector<std::string> all = {name};
  all.insert(all.end(), args.begin(), args.end());
  const int argc = static_cast<int>(all.size());
  return detail::run_forked(std::move(all), limits, [&main_like, argc](char** argv) {
    int rc = 127;
    try {
      rc = main_like(argc, argv);
    } catch (...) {
    }
    std::fflush(nullptr);
    _exit(rc);
  });
}

/// A child's exit and output, for a failed expectation's message.
inline std::string describe(const child_result& r) {
  return "exit " + std::to_string(r.code) + (r.timed_out ? " (timed out)" : "") + "\n--- stdout:\n" + r.out +
         "--- stderr:\n" + r.err;
}

/// A directory named after `stem`, made fresh on the first call of each
/// test and the same one on its later calls.
inline std::filesystem::path dir_per_test(const std::string& stem) {
  static std::string made_for;
  static std::filesystem::path dir;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = std::string(info->test_suite_name()) + "." + info->name();
  if (name != made_for) {
    dir = test_dir(stem);
    made_for = name;
  }
  return dir;
}

}  // namespace actorpipe::testing_util
