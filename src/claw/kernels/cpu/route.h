// Routing a kernel call to the CUDA backend. The CPU kernels' entry points
// are the ops every layer calls; when the context carries a GPU
// (CpuCtx::gpu), an fp32 call goes on to the matching function of
// kernels/cuda/ops.h with the same arguments (all device pointers) and
// returns its result. A build without the backend compiles the branch away
// (the declarations exist, nothing references them). A type the backend
// lacks, or a kernel it does not have, fails loudly rather than reading device
// memory on the host.
#pragma once

#include <type_traits>

#include "claw/core/error.h"
#include "claw/core/parallel.h"
#include "claw/kernels/cuda/ops.h"

namespace claw::kernels {
template <typename T>
inline constexpr bool kGpuCapable = cuda::cuda_built() && std::is_same_v<T, float>;
}  // namespace claw::kernels

#define CLAW_ROUTE_TO_GPU(ctx, T, name, ...)                                                               \
  do {                                                                                                     \
    if constexpr (::claw::kernels::kGpuCapable<T>) {                                                       \
      if ((ctx).gpu) return ::claw::kernels::cuda::name(*(ctx).gpu, __VA_ARGS__);                          \
    } else {                                                                                               \
      CLAW_CHECK(!(ctx).gpu, "kernel {} has no CUDA version for this element type", #name);                \
    }                                                                                                      \
  } while (0)

// For kernels with no CUDA version yet.
#define CLAW_CPU_ONLY(ctx, name) \
  CLAW_CHECK(!(ctx).gpu, "kernel {} has no CUDA version yet; run it with --device cpu", #name)
