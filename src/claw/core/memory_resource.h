// Where an Arena's bytes come from. The default is host memory (an anonymous
// mapping); the CUDA backend provides device memory (kernels/cuda/context.h).
// Either way the bytes start zeroed.
#pragma once

#include <cstddef>

namespace claw {

class MemoryResource {
 public:
  virtual ~MemoryResource() = default;
  virtual void* allocate(size_t bytes) const = 0;  // zero-filled; throws claw::Error when out of memory
  virtual void deallocate(void* p, size_t bytes) const = 0;
  virtual const char* name() const = 0;  // "host", "cuda:0"
  virtual bool host_accessible() const = 0;
};

// The host's anonymous mappings (what Arena uses by default).
const MemoryResource& host_memory();

}  // namespace claw
