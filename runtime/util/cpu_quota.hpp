#pragma once
// How many cores this process may use under its CPU cgroup's quota: v1's
// cpu.cfs_quota_us over cpu.cfs_period_us, v2's cpu.max, the least over its
// group and every group above it. A process held to a quota runs at full
// speed while its work fits and stalls once it does not, so its speed at one
// load does not carry to another; its CPU time over this share does (what
// pipeline.rebalance measures a stage by).
#include <string>

namespace actorpipe {

/// The cores under this process's CPU quota; 0 where there is none or it
/// cannot be read.
double cpu_quota_cores();

/// The same for the process whose /proc/PID/cgroup text is `proc_cgroup`,
/// with the cgroup file systems mounted under `root` (v1: `root`/cpu or
/// `root`/cpu,cpuacct; v2: `root` itself).
double cpu_quota_cores(const std::string& proc_cgroup, const std::string& root);

/// One group's quota in cores from its files' first lines: v1 (quota_us,
/// period_us; a quota of -1 is none) or v2 (cpu.max: "max 100000" is none,
/// "50000 100000" half a core); 0 for none or text it cannot read.
double v1_quota_cores(const std::string& quota_us, const std::string& period_us);
double v2_quota_cores(const std::string& cpu_max);

}  // namespace actorpipe
