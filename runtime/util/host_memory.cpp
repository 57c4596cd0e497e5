#include "runtime/util/host_memory.hpp"

#include "runtime/util/first_line.hpp"

#include <fstream>
#include <sstream>

namespace actorpipe {

namespace {

// The process's memory cgroup directory: v1's "N:memory:/path", else v2's
// "0::/path" (empty when neither is mounted where expected).
std::string memory_cgroup(std::string* version) {
  std::ifstream f("/proc/self/cgroup");
  std::string v2;
  for (std::string line; std::getline(f, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers == "memory") {
      *version = "v1";
      return "/sys/fs/cgroup/memory" + path;
    }
    if (controllers.empty() && line.rfind("0::", 0) == 0) v2 = "/sys/fs/cgroup" + path;
  }
  *version = "v2";
  return v2;
}

}  // namespace

int64_t cgroup_room(const std::string& limit, const std::string& usage) {
  try {
    if (limit.empty() || limit == "max" || usage.empty()) return -1;
    const long long l = std::stoll(limit), u = std::stoll(usage);
    if (l >= (1LL << 62)) return -1;  // v1's "unlimited" (PAGE_COUNTER_MAX pages)
    return l > u ? l - u : 0;
  } catch (const std::exception&) {
    return -1;
  }
}

memory_room available_memory() {
  memory_room room;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);)
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream is(line.substr(13));
      long long kib = 0;
      if (is >> kib) room = {kib * 1024, "MemAvailable"};
    }
  std::string version;
  const std::string dir = memory_cgroup(&version);
  if (dir.empty()) return room;
  const int64_t in_group = version == "v1" ? cgroup_room(first_line(dir + "/memory.limit_in_bytes"),
                                                         first_line(dir + "/memory.usage_in_bytes"))
                                           : cgroup_room(first_line(dir + "/memory.max"),
                                                         first_line(dir + "/memory.current"));
  if (in_group >= 0 && (room.bytes < 0 || in_group < room.bytes)) room = {in_group, "the memory cgroup's limit"};
  return room;
}

}  // namespace actorpipe
