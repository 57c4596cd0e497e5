#pragma once
// How much memory this process can still take: the kernel's MemAvailable,
// or less where the process's memory cgroup (v1 memory.limit_in_bytes, v2
// memory.max) leaves less room than that.
#include <cstdint>
#include <string>

namespace actorpipe {

struct memory_room {
  int64_t bytes = -1;  ///< -1: unknown (no /proc/meminfo)
  std::string bound;   ///< "MemAvailable" or "the memory cgroup's limit"
};

memory_room available_memory();

/// The room left under a cgroup's `limit` text with `usage` in use; -1 for
/// no limit ("max", or v1's near-2^63 "unlimited").
int64_t cgroup_room(const std::string& limit, const std::string& usage);

}  // namespace actorpipe
