// How much memory this process can still allocate, read before a command
// allocates its arenas so that a plan larger than the machine is refused with
// a message instead of ending in the OOM killer (DESIGN.md principle 8).
//
// The figure is the smallest of the limits that apply:
//   MemAvailable in /proc/meminfo   the kernel's estimate of what can be allocated
//                                   without swapping (free + reclaimable cache)
//   each memory cgroup of this      cgroup v2: memory.max - (memory.current - inactive_file);
//   process, up to its root         v1: memory.limit_in_bytes - (memory.usage_in_bytes -
//                                   total_inactive_file). Inactive page cache is reclaimed
//                                   before the cgroup's OOM killer runs, so it counts as
//                                   available (as the kubelet's working set does).
//   RLIMIT_AS (ulimit -v)           minus this process's address space (VmSize)
// Files that are missing or unreadable are skipped: a machine without cgroups
// is limited by MemAvailable alone.
#pragma once

#include <cstdint>
#include <string>

namespace claw {

struct MemoryLimit {
  uint64_t bytes = UINT64_MAX;  // what can still be allocated (UINT64_MAX: nothing found)
  std::string source;           // where `bytes` comes from, e.g. "cgroup v2 memory.max of /sys/fs/cgroup/job"
};

// The machine this process runs on.
MemoryLimit available_memory();
// The same with every file read below `root` (tests give a fake /proc and
// /sys/fs/cgroup); the address-space limit is not consulted.
MemoryLimit available_memory(const std::string& root);

}  // namespace claw
