// The cores a process may use under its CPU cgroup: v1's quota over its
// period, v2's cpu.max, the least over the group and those above it; and,
// where this machine's cgroup v1 cpu controller is writable, what a process
// moved into a group held to a quota reads.
#include "runtime/util/cpu_quota.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/apps/cgroup_v1.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;

TEST(CpuQuota, OneGroupsFilesReadAsCores) {
  EXPECT_DOUBLE_EQ(v1_quota_cores("3333", "10000"), 0.3333);
  EXPECT_DOUBLE_EQ(v1_quota_cores("200000", "100000"), 2.0);
  EXPECT_EQ(v1_quota_cores("-1", "100000"), 0.0);  // none
  EXPECT_EQ(v1_quota_cores("", "100000"), 0.0);
  EXPECT_EQ(v1_quota_cores("5000", "0"), 0.0);
  EXPECT_DOUBLE_EQ(v2_quota_cores("50000 100000"), 0.5);
  EXPECT_EQ(v2_quota_cores("max 100000"), 0.0);
  EXPECT_EQ(v2_quota_cores(""), 0.0);
}

void put(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text << "\n";
}

TEST(CpuQuota, TheLeastOverTheGroupAndThoseAboveIt) {
  const fs::path root = testing_util::test_dir("actorpipe_cpu_quota_test");
  // v1, cpu and cpuacct mounted together: the job's group holds 1.5 cores,
  // the rank's group under it 4: the job's bounds it.
  const fs::path v1 = root / "v1" / "cpu,cpuacct";
  put(v1 / "cpu.cfs_period_us", "100000");
  put(v1 / "cpu.cfs_quota_us", "-1");
  put(v1 / "job/cpu.cfs_period_us", "100000");
  put(v1 / "job/cpu.cfs_quota_us", "150000");
  put(v1 / "job/rank1/cpu.cfs_period_us", "10000");
  put(v1 / "job/rank1/cpu.cfs_quota_us", "40000");
  const std::string v1_proc = "4:memory:/elsewhere\n2:cpuacct,cpu:/job/rank1\n0::/\n";
  EXPECT_DOUBLE_EQ(cpu_quota_cores(v1_proc, (root / "v1").string()), 1.5);
  put(v1 / "job/rank1/cpu.cfs_quota_us", "3333");
  EXPECT_DOUBLE_EQ(cpu_quota_cores(v1_proc, (root / "v1").string()), 0.3333);
  EXPECT_EQ(cpu_quota_cores("2:cpuacct,cpu:/\n", (root / "v1").string()), 0.0);
  // v2 only.
  const fs::path v2 = root / "v2";
  put(v2 / "cpu.max", "max 100000");
  put(v2 / "a/cpu.max", "max 100000");
  put(v2 / "a/b/cpu.max", "25000 100000");
  EXPECT_DOUBLE_EQ(cpu_quota_cores("0::/a/b\n", v2.string()), 0.25);
  EXPECT_EQ(cpu_quota_cores("0::/a\n", v2.string()), 0.0);
  // Nothing mounted where it is looked for, or no cgroup at all.
  EXPECT_EQ(cpu_quota_cores(v1_proc, (root / "none").string()), 0.0);
  EXPECT_EQ(cpu_quota_cores("", v2.string()), 0.0);
}

// This process, moved into a group of the real controller for a moment
// (one and a half cores: nothing is throttled), reads that quota, and none
// once it is back.
TEST(CpuQuota, AProcessInAThrottledGroupReadsItsQuota) {
  const double outside = cpu_quota_cores();
  {
    testing_util::cgroup_v1 group("cpu");
    group.set("cpu.cfs_period_us", "100000").set("cpu.cfs_quota_us", "150000");
    if (!group.ok() || !group.hold(::getpid())) GTEST_SKIP() << "the cgroup v1 cpu controller is not writable here";
    const double inside = cpu_quota_cores();
    EXPECT_DOUBLE_EQ(inside, outside > 0 && outside < 1.5 ? outside : 1.5);
  }
  EXPECT_EQ(cpu_quota_cores(), outside);
}

}  // namespace
}  // namespace actorpipe
