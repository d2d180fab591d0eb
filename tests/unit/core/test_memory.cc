// available_memory over a fake /proc and /sys/fs/cgroup: the smallest limit
// wins, the cgroup's inactive page cache counts as available, a parent
// cgroup's limit binds its child, "max" / v1's huge value mean no limit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "claw/core/memory.h"

namespace claw {
namespace {

namespace fs = std::filesystem;

class FakeRoot {
 public:
  FakeRoot() : dir_(fs::temp_directory_path() / fs::path("claw_memory_" + std::to_string(::getpid()) + "_" +
                                                          ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~FakeRoot() { fs::remove_all(dir_); }
  void write(const std::string& path, const std::string& text) {
    const fs::path p = dir_ / path.substr(1);
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string root() const { return dir_.string(); }

 private:
  fs::path dir_;
};

constexpr uint64_t kGiB = uint64_t{1} << 30;

std::string meminfo(uint64_t available_kib) {
  return "MemTotal:       24684092 kB\nMemFree:        24094224 kB\nMemAvailable:   " + std::to_string(available_kib) +
         " kB\n";
}

TEST(AvailableMemory, MemAvailableAlone) {
  FakeRoot r;
  r.write("/proc/meminfo", meminfo(8 * 1024 * 1024));
  const MemoryLimit m = available_memory(r.root());
  EXPECT_EQ(m.bytes, 8 * kGiB);
  EXPECT_EQ(m.source, "MemAvailable in /proc/meminfo");
}

TEST(AvailableMemory, NothingReadable) {
  FakeRoot r;
  EXPECT_EQ(available_memory(r.root()).bytes, UINT64_MAX);
}

TEST(AvailableMemory, CgroupV2LimitBelowMemAvailable) {
  FakeRoot r;
  r.write("/proc/meminfo", meminfo(20 * 1024 * 1024));
  r.write("/proc/self/cgroup", "0::/job/step\n");
  r.write("/proc/self/mountinfo", "24 23 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
  r.write("/sys/fs/cgroup/job/step/memory.max", "max\n");
  r.write("/sys/fs/cgroup/job/step/memory.current", std::to_string(kGiB) + "\n");
  // The parent's limit binds; of its 3 GiB in use, 1 GiB is inactive page cache.
  r.write("/sys/fs/cgroup/job/memory.max", std::to_string(6 * kGiB) + "\n");
  r.write("/sys/fs/cgroup/job/memory.current", std::to_string(3 * kGiB) + "\n");
  r.write("/sys/fs/cgroup/job/memory.stat", "anon 2147483648\nactive_file 0\ninactive_file " + std::to_string(kGiB) + "\n");
  const MemoryLimit m = available_memory(r.root());
  EXPECT_EQ(m.bytes, 4 * kGiB);
  EXPECT_NE(m.source.find("cgroup v2 memory.max 6.00 GiB of /sys/fs/cgroup/job, 2.00 GiB in use"), std::string::npos)
      << m.source;
}

TEST(AvailableMemory, CgroupV1InContainerMountingItsOwnSubtree) {
  FakeRoot r;
  r.write("/proc/meminfo", meminfo(20 * 1024 * 1024));
  r.write("/proc/self/cgroup", "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n");
  r.write("/proc/self/mountinfo",
          "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
          "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
          "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n");
  r.write("/sys/fs/cgroup/memory/memory.limit_in_bytes", std::to_string(2 * kGiB) + "\n");
  r.write("/sys/fs/cgroup/memory/memory.usage_in_bytes", std::to_string(kGiB) + "\n");
  r.write("/sys/fs/cgroup/memory/memory.stat", "inactive_file 5\ntotal_inactive_file " + std::to_string(kGiB / 2) + "\n");
  const MemoryLimit m = available_memory(r.root());
  EXPECT_EQ(m.bytes, 2 * kGiB - kGiB / 2);
  EXPECT_NE(m.source.find("cgroup v1 memory.limit_in_bytes 2.00 GiB of /sys/fs/cgroup/memory"), std::string::npos)
      << m.source;
}

TEST(AvailableMemory, CgroupV1UnlimitedFallsBackToMemAvailable) {
  FakeRoot r;
  r.write("/proc/meminfo", meminfo(5 * 1024 * 1024));
  r.write("/proc/self/cgroup", "4:memory:/session\n");
  r.write("/proc/self/mountinfo", "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  r.write("/sys/fs/cgroup/memory/session/memory.limit_in_bytes", "9223372036854771712\n");
  r.write("/sys/fs/cgroup/memory/session/memory.usage_in_bytes", "350478336\n");
  const MemoryLimit m = available_memory(r.root());
  EXPECT_EQ(m.bytes, 5 * kGiB);
  EXPECT_EQ(m.source, "MemAvailable in /proc/meminfo");
}

TEST(AvailableMemory, UsageAboveLimitIsZero) {
  FakeRoot r;
  r.write("/proc/self/cgroup", "0::/\n");
  r.write("/proc/self/mountinfo", "24 23 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  r.write("/sys/fs/cgroup/memory.max", "1000\n");
  r.write("/sys/fs/cgroup/memory.current", "2000\n");
  EXPECT_EQ(available_memory(r.root()).bytes, 0u);
}

TEST(AvailableMemory, ThisMachineReportsSomething) {
  const MemoryLimit m = available_memory();
  EXPECT_GT(m.bytes, 0u);
  EXPECT_FALSE(m.source.empty());
}

}  // namespace
}  // namespace claw
