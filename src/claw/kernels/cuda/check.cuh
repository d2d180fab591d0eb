// Error checks and launch helpers for the CUDA backend's .cu files. A failed
// CUDA or cuBLAS call throws claw::Error naming the call, file:line and
// CUDA's reason. (claw/core/error.h compiles under nvcc with fmt's constexpr
// helpers forced on: FMT_USE_CONSTEXPR, kernels/CMakeLists.txt.)
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "claw/core/error.h"
#include "claw/kernels/cuda/context.h"

#define CLAW_CUDA_CHECK(call)                                                                              \
  do {                                                                                                     \
    cudaError_t claw_err_ = (call);                                                                        \
    if (claw_err_ != cudaSuccess)                                                                          \
      ::claw::fail("CUDA: {} failed at {}:{}: {}", #call, __FILE__, __LINE__, cudaGetErrorString(claw_err_)); \
  } while (0)

#define CLAW_CUBLAS_CHECK(call)                                                                                    \
  do {                                                                                                             \
    cublasStatus_t claw_st_ = (call);                                                                              \
    if (claw_st_ != CUBLAS_STATUS_SUCCESS)                                                                         \
      ::claw::fail("cuBLAS: {} failed at {}:{}: {}", #call, __FILE__, __LINE__, cublasGetStatusString(claw_st_)); \
  } while (0)

// After a kernel launch: a bad configuration shows up here, at its launch.
#define CLAW_CUDA_LAUNCH_CHECK() CLAW_CUDA_CHECK(cudaGetLastError())

namespace claw::kernels::cuda {
inline cudaStream_t stream_of(const GpuCtx& ctx) { return static_cast<cudaStream_t>(ctx.stream); }
inline cublasHandle_t blas_of(const GpuCtx& ctx) { return static_cast<cublasHandle_t>(ctx.blas); }
// Blocks of `threads` covering n elements, at most 2^19 (enough to fill any
// GPU several times over): kernels launched with it loop grid-stride.
inline unsigned grid_for(int64_t n, int threads) {
  constexpr int64_t kMaxBlocks = int64_t{1} << 19;
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}
}  // namespace claw::kernels::cuda
