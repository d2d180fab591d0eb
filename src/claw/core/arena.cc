#include "claw/core/arena.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "claw/core/error.h"

namespace claw {

size_t ArenaPlan::add(std::string name, size_t bytes, size_t align) {
  CLAW_CHECK(align > 0 && (align & (align - 1)) == 0);
  size_t offset = (total_ + align - 1) & ~(align - 1);
  entries_.push_back({std::move(name), offset, bytes});
  total_ = offset + ((bytes + 63) & ~size_t{63});
  return offset;
}

namespace {
class HostMemory final : public MemoryResource {
 public:
  void* allocate(size_t bytes) const override {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("{}", std::strerror(errno));
    // Large arenas hold weights and activations streamed by GEMMs; huge pages cut TLB misses.
    if (bytes >= (size_t{2} << 20)) madvise(p, bytes, MADV_HUGEPAGE);
    return p;
  }
  void deallocate(void* p, size_t bytes) const override { munmap(p, bytes); }
  const char* name() const override { return "host"; }
  bool host_accessible() const override { return true; }
};
}  // namespace

const MemoryResource& host_memory() {
  static const HostMemory host;
  return host;
}

Arena::Arena(const ArenaPlan& plan, const MemoryResource& memory) : Arena(plan.name(), plan.total(), memory) {}

Arena::Arena(std::string name, size_t bytes, const MemoryResource& memory)
    : name_(std::move(name)), memory_(&memory), size_(bytes) {
  if (bytes == 0) return;
  try {
    base_ = static_cast<uint8_t*>(memory.allocate(bytes));
  } catch (const Error& e) {
    fail("cannot allocate arena '{}' of {} in {} memory: {}", name_, format_bytes(static_cast<double>(bytes)),
         memory.name(), e.what());
  }
}

Arena::~Arena() { release(); }

void Arena::release() {
  if (base_) memory_->deallocate(base_, size_);
  base_ = nullptr;
}

Arena::Arena(Arena&& o) noexcept
    : name_(std::move(o.name_)),
      memory_(o.memory_),
      base_(std::exchange(o.base_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::move(o.name_);
    memory_ = o.memory_;
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void* ArenaLayout::take_bytes(const std::string& base, size_t bytes) {
  if (hook_) {
    TakeHook hook = std::move(hook_);  // the hook's own takes go straight through
    hook_ = nullptr;
    const std::optional<void*> got = hook(base, bytes);
    hook_ = std::move(hook);
    if (got) return *got;
  }
  const std::string name = prefix_.empty() ? base : prefix_ + base;
  if (!arena_) {
    plan_->add(name, bytes);
    return nullptr;
  }
  const auto& entries = plan_->entries();
  CLAW_CHECK(next_ < entries.size() && entries[next_].name == name && entries[next_].bytes == bytes,
             "arena '{}' replayed out of order at '{}' ({} bytes)", plan_->name(), name, bytes);
  return arena_->base() + entries[next_++].offset;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 5) {
    bytes /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, units[u]);
}

namespace {
size_t status_field_kib(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t value = 0;
  size_t keylen = std::strlen(key);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, keylen) == 0) {
      std::sscanf(line + keylen, " %zu", &value);
      break;
    }
  }
  std::fclose(f);
  return value;
}
}  // namespace

size_t peak_rss_bytes() { return status_field_kib("VmHWM:") * 1024; }
size_t current_rss_bytes() { return status_field_kib("VmRSS:") * 1024; }

}  // namespace claw
