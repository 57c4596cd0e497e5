// The first line of a small text file (/proc, /sys/fs/cgroup).
#pragma once

#include <fstream>
#include <string>

namespace actorpipe {

/// The file's first line without its newline; "" when it cannot be read.
inline std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

}  // namespace actorpipe
