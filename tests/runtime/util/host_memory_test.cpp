// The memory a process can still take: a cgroup's limit less its usage,
// the kernel's MemAvailable, the smaller of the two.
#include "runtime/util/host_memory.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace actorpipe {
namespace {

TEST(HostMemory, ACgroupsRoomIsItsLimitLessItsUsage) {
  EXPECT_EQ(cgroup_room("1000", "400"), 600);
  EXPECT_EQ(cgroup_room("100", "400"), 0);  // over its limit (v1 allows it briefly): no room
  EXPECT_EQ(cgroup_room("max", "400"), -1);  // v2: no limit
  EXPECT_EQ(cgroup_room("9223372036854771712", "400"), -1);  // v1: no limit
  EXPECT_EQ(cgroup_room("", "400"), -1);
  EXPECT_EQ(cgroup_room("many", "400"), -1);
}

// MemAvailable read independently here: the room is at most that.
TEST(HostMemory, TheRoomIsAtMostTheKernelsMemAvailable) {
  std::ifstream meminfo("/proc/meminfo");
  long long kib = -1;
  for (std::string line; std::getline(meminfo, line);)
    if (line.rfind("MemAvailable:", 0) == 0) std::istringstream(line.substr(13)) >> kib;
  ASSERT_GT(kib, 0);
  const memory_room room = available_memory();
  EXPECT_GT(room.bytes, 0);
  // Read moments apart: within 64 MiB of each other, at most.
  EXPECT_LE(room.bytes, kib * 1024 + (64LL << 20));
  EXPECT_FALSE(room.bound.empty());
}

}  // namespace
}  // namespace actorpipe
