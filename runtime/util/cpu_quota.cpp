#include "runtime/util/cpu_quota.hpp"

#include "runtime/util/first_line.hpp"

#include <fstream>
#include <sstream>
#include <vector>

namespace actorpipe {

namespace {

bool exists(const std::string& path) { return static_cast<bool>(std::ifstream(path)); }

// A positive number of microseconds, or -1.
double micros(const std::string& text) {
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    return used > 0 && v > 0 ? static_cast<double>(v) : -1.0;
  } catch (const std::exception&) {
    return -1.0;
  }
}

// `path` ("/a/b") and every group above it, the group itself first.
std::vector<std::string> up_from(std::string path) {
  std::vector<std::string> out;
  while (!path.empty() && path.back() == '/') path.pop_back();
  for (;;) {
    out.push_back(path);
    const size_t slash = path.rfind('/');
    if (path.empty() || slash == std::string::npos) break;
    path = path.substr(0, slash);
  }
  return out;
}

// The least quota (> 0) of the groups from `dir` up; 0 for none.
template <class Quota>
double least_up(const std::string& mount, const std::string& path, Quota quota) {
  double least = 0;
  for (const std::string& group : up_from(path)) {
    const double q = quota(mount + group);
    if (q > 0 && (least == 0 || q < least)) least = q;
  }
  return least;
}

}  // namespace

double v1_quota_cores(const std::string& quota_us, const std::string& period_us) {
  const double q = micros(quota_us), p = micros(period_us);
  return q > 0 && p > 0 ? q / p : 0.0;
}

double v2_quota_cores(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota, period;
  in >> quota >> period;
  return v1_quota_cores(quota, period);
}

double cpu_quota_cores(const std::string& proc_cgroup, const std::string& root) {
  std::istringstream in(proc_cgroup);
  std::string v2_path;
  bool v2 = false;
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty() && line.rfind("0::", 0) == 0) {
      v2 = true, v2_path = path;
      continue;
    }
    std::istringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');)
      if (name == "cpu") {
        for (const std::string& mount : {root + "/cpu", root + "/cpu,cpuacct"})
          if (exists(mount + "/cpu.cfs_period_us"))
            return least_up(mount, path, [](const std::string& dir) {
              return v1_quota_cores(first_line(dir + "/cpu.cfs_quota_us"), first_line(dir + "/cpu.cfs_period_us"));
            });
        return 0.0;
      }
  }
  if (!v2) return 0.0;
  return least_up(root, v2_path, [](const std::string& dir) { return v2_quota_cores(first_line(dir + "/cpu.max")); });
}

double cpu_quota_cores() {
  std::ifstream f("/proc/self/cgroup");
  std::stringstream text;
  text << f.rdbuf();
  return cpu_quota_cores(text.str(), "/sys/fs/cgroup");
}

}  // namespace actorpipe
