#include "claw/core/memory.h"

#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "claw/core/arena.h"

namespace claw {

namespace {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The first number of a one-number file ("max" and anything else unparsable: none).
std::optional<uint64_t> read_number(const std::string& path) {
  const auto text = read_text(path);
  if (!text) return std::nullopt;
  try {
    return std::stoull(*text);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The value after `key` in "key value" lines (/proc/meminfo, memory.stat, /proc/self/status).
std::optional<uint64_t> keyed_value(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0 || line.size() == key.size() || (line[key.size()] != ' ' &&
                                                                                line[key.size()] != '\t'))
      continue;
    try {
      return std::stoull(line.substr(key.size()));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

std::string gib(uint64_t bytes) { return format_bytes(static_cast<double>(bytes)); }

struct Limits {
  MemoryLimit best;
  void offer(uint64_t bytes, std::string source) {
    if (bytes < best.bytes) best = {bytes, std::move(source)};
  }
};

// Whether a comma-separated list holds `item`.
bool has_item(const std::string& list, const std::string& item) {
  for (size_t b = 0; b <= list.size();) {
    size_t e = list.find(',', b);
    if (e == std::string::npos) e = list.size();
    if (list.compare(b, e - b, item) == 0) return true;
    b = e + 1;
  }
  return false;
}

struct Mount {
  std::string root, point;
};

// cgroup mounts from /proc/self/mountinfo: "id parent dev root point opts [tags] - fstype source superopts".
void find_mounts(const std::string& mountinfo, std::optional<Mount>& v1_memory, std::optional<Mount>& v2) {
  std::istringstream in(mountinfo);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::vector<std::string> w;
    for (std::string s; f >> s;) w.push_back(s);
    size_t dash = 0;
    while (dash < w.size() && w[dash] != "-") ++dash;
    if (w.size() < 5 || dash + 1 >= w.size()) continue;
    const std::string& fstype = w[dash + 1];
    const std::string opts = dash + 3 < w.size() ? w[dash + 3] : "";
    if (fstype == "cgroup2" && !v2) v2 = Mount{w[3], w[4]};
    if (fstype == "cgroup" && has_item(opts, "memory") && !v1_memory) v1_memory = Mount{w[3], w[4]};
  }
}

// The directory of cgroup `path` under a mount (the mount's own directory
// when the path lies outside what is mounted, as in a container without a
// cgroup namespace that mounts only its own subtree).
std::string cgroup_dir(const std::string& root, const Mount& m, const std::string& path) {
  std::string rel;
  if (m.root == "/") {
    rel = path;
  } else if (path.compare(0, m.root.size(), m.root) == 0) {
    rel = path.substr(m.root.size());
  }
  std::string dir = m.point + (rel == "/" ? "" : rel);
  if (!std::filesystem::is_directory(root + dir)) dir = m.point;
  return dir;
}

// Every cgroup from `dir` up to the mount point: a parent's limit binds its children.
void offer_cgroups(const std::string& root, const Mount& m, const std::string& dir, bool v2, Limits& limits) {
  for (std::filesystem::path d = dir;; d = d.parent_path()) {
    const std::string p = d.string();
    const std::optional<uint64_t> limit = read_number(root + p + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
    const std::optional<uint64_t> usage = read_number(root + p + (v2 ? "/memory.current" : "/memory.usage_in_bytes"));
    // cgroup v1 writes "no limit" as the largest page-aligned 63-bit value.
    if (limit && usage && *limit < (uint64_t{1} << 62)) {
      uint64_t used = *usage;
      if (const auto stat = read_text(root + p + "/memory.stat"))
        if (const auto inactive = keyed_value(*stat, v2 ? "inactive_file" : "total_inactive_file"))
          used -= std::min(used, *inactive);
      const uint64_t avail = *limit > used ? *limit - used : 0;
      limits.offer(avail, v2 ? fmt::format("cgroup v2 memory.max {} of {}, {} in use", gib(*limit), p, gib(used))
                             : fmt::format("cgroup v1 memory.limit_in_bytes {} of {}, {} in use", gib(*limit), p,
                                           gib(used)));
    }
    if (p == m.point || p.size() <= m.point.size() || d == d.parent_path()) break;
  }
}

MemoryLimit available(const std::string& root, bool rlimit) {
  Limits limits;
  if (const auto meminfo = read_text(root + "/proc/meminfo"))
    if (const auto kib = keyed_value(*meminfo, "MemAvailable:"))
      limits.offer(*kib * 1024, "MemAvailable in /proc/meminfo");

  const auto cgroups = read_text(root + "/proc/self/cgroup");
  const auto mountinfo = read_text(root + "/proc/self/mountinfo");
  if (cgroups && mountinfo) {
    std::optional<Mount> v1, v2;
    find_mounts(*mountinfo, v1, v2);
    // Lines "id:controllers:path"; v2's is "0::path", v1's memory line lists "memory".
    std::istringstream in(*cgroups);
    std::string line;
    while (std::getline(in, line)) {
      const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
      if (b == std::string::npos) continue;
      const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
      if (line.compare(0, a, "0") == 0 && controllers.empty() && v2)
        offer_cgroups(root, *v2, cgroup_dir(root, *v2, path), true, limits);
      else if (has_item(controllers, "memory") && v1)
        offer_cgroups(root, *v1, cgroup_dir(root, *v1, path), false, limits);
    }
  }

  if (rlimit) {
    struct rlimit as {};
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
      uint64_t mapped = 0;
      if (const auto status = read_text("/proc/self/status"))
        mapped = keyed_value(*status, "VmSize:").value_or(0) * 1024;
      const uint64_t cap = as.rlim_cur;
      limits.offer(cap > mapped ? cap - mapped : 0,
                   fmt::format("ulimit -v {} (RLIMIT_AS), {} of it already mapped by this process", gib(cap),
                               gib(mapped)));
    }
  }
  return limits.best;
}

}  // namespace

MemoryLimit available_memory() { return available("", true); }
MemoryLimit available_memory(const std::string& root) { return available(root, false); }

}  // namespace claw
