// Arenas: memory is planned, not discovered (DESIGN.md principle 6).
//
// A layer describes what it needs by adding named requests to an ArenaPlan.
// The plan is a pure function of the config, so the allocator and the
// planner/memory report call the same code and cannot drift. An Arena is then
// one allocation of plan.total() bytes; each request's pointer is base+offset.
//
//   ArenaPlan plan("activations");
//   size_t off = plan.add("blocks.0.ln1_out", bytes);
//   Arena arena(plan);                     // one mmap, 64-byte aligned pieces
//   float* p = arena.ptr<float>(off);
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "claw/core/memory_resource.h"

namespace claw {

class ArenaPlan {
 public:
  struct Entry {
    std::string name;
    size_t offset;
    size_t bytes;
  };
  explicit ArenaPlan(std::string name) : name_(std::move(name)) {}

  // Reserves `bytes` (rounded up to the alignment) and returns the offset.
  size_t add(std::string name, size_t bytes, size_t align = 64);
  template <typename T>
  size_t add_array(std::string name, int64_t count) {
    return add(std::move(name), static_cast<size_t>(count) * sizeof(T));
  }

  const std::string& name() const { return name_; }
  size_t total() const { return total_; }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::string name_;
  size_t total_ = 0;
  std::vector<Entry> entries_;
};

// Owns one zero-initialised allocation from a MemoryResource: by default an
// anonymous host mapping (pages are touched lazily, so resident memory grows
// only with use), or device memory. Move-only.
class Arena {
 public:
  Arena() = default;
  explicit Arena(const ArenaPlan& plan, const MemoryResource& memory = host_memory());
  Arena(std::string name, size_t bytes, const MemoryResource& memory = host_memory());
  ~Arena();
  Arena(Arena&& o) noexcept;
  Arena& operator=(Arena&& o) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  template <typename T>
  T* ptr(size_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }
  uint8_t* base() const { return base_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  const MemoryResource& memory() const { return *memory_; }

 private:
  void release();
  std::string name_;
  const MemoryResource* memory_ = &host_memory();
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
};

// Describes a layout once and replays it twice: in planning mode take()
// records named requests into an ArenaPlan and returns nullptr; in binding
// mode it returns pointers into an Arena built from that plan, checking that
// the requests come in the same order with the same sizes. A layer writes one
// function `layout(ArenaLayout&)` and both the allocator and the memory
// planner call it, so they cannot disagree.
class ArenaLayout {
 public:
  static ArenaLayout planning(ArenaPlan& plan) { return ArenaLayout(&plan, nullptr); }
  static ArenaLayout binding(const ArenaPlan& plan, const Arena& arena) { return ArenaLayout(const_cast<ArenaPlan*>(&plan), &arena); }

  template <typename T>
  T* take(const std::string& name, int64_t count) {
    return static_cast<T*>(take_bytes(name, static_cast<size_t>(count) * sizeof(T)));
  }
  bool binding_mode() const { return arena_ != nullptr; }
  // Names taken from now on start with `prefix` (several copies of one layout in a plan).
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }
  // While set, every take is first offered to the hook with its name (before
  // the prefix) and size: a value it returns is the take's memory, nothing
  // being reserved for it here (the hook may take other memory itself).
  using TakeHook = std::function<std::optional<void*>(const std::string& name, size_t bytes)>;
  void set_take_hook(TakeHook hook) { hook_ = std::move(hook); }

 private:
  ArenaLayout(ArenaPlan* plan, const Arena* arena) : plan_(plan), arena_(arena) {}
  void* take_bytes(const std::string& name, size_t bytes);
  ArenaPlan* plan_;
  const Arena* arena_;
  size_t next_ = 0;
  std::string prefix_;
  TakeHook hook_;
};

// "12.3 MiB"-style formatting for memory reports.
std::string format_bytes(double bytes);

// Peak and current resident set size of this process, in bytes (from /proc).
size_t peak_rss_bytes();
size_t current_rss_bytes();

}  // namespace claw
