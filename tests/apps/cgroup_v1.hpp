#pragma once
// A cgroup v1 group of one controller ("cpu", "memory") for a test: made
// under the controller's root, its settings written, a process moved in;
// its tasks moved back to the root and the group removed however the test
// ends.
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace actorpipe::testing_util {

class cgroup_v1 {
public:
  explicit cgroup_v1(const std::string& controller)
      : root_("/sys/fs/cgroup/" + controller), dir_(root_ / ("actorpipe_test_" + std::to_string(::getpid()))) {
    std::error_code ec;
    std::filesystem::create_directory(dir_, ec);
    ok_ = !ec && std::filesystem::is_directory(dir_);
  }
  ~cgroup_v1() {
    for (const std::string& pid : tasks()) write_to(root_ / "cgroup.procs", pid);
    std::error_code ec;
    std::filesystem::remove(dir_, ec);
  }
  cgroup_v1(const cgroup_v1&) = delete;
  cgroup_v1& operator=(const cgroup_v1&) = delete;

  /// Whether the group exists and every setting so far was written.
  bool ok() const { return ok_; }
  cgroup_v1& set(const std::string& file, const std::string& value) {
    ok_ = ok_ && write_to(dir_ / file, value);
    return *this;
  }
  /// The first line of one of the group's files ("" when unreadable).
  std::string get(const std::string& file) const {
    std::ifstream f(dir_ / file);
    std::string line;
    std::getline(f, line);
    return line;
  }
  /// Moves process `pid` (every thread of it) into the group.
  bool hold(pid_t pid) { return write_to(dir_ / "cgroup.procs", std::to_string(pid)); }

private:
  static bool write_to(const std::filesystem::path& file, const std::string& value) {
    std::ofstream f(file);
    f << value << std::flush;
    return static_cast<bool>(f);
  }
  std::vector<std::string> tasks() const {
    std::ifstream f(dir_ / "cgroup.procs");
    std::vector<std::string> out;
    for (std::string pid; f >> pid;) out.push_back(pid);
    return out;
  }
  std::filesystem::path root_, dir_;
  bool ok_ = false;
};

}  // namespace actorpipe::testing_util
