// Error checks for the CUDA backend's .cu files. They include no fmt-based
// header (nvcc's front end rejects fmt's compile-time format checks), so a
// failure is reported through functions compiled by the host compiler
// (errors.cc), which throw claw::Error naming the call, file:line and reason.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "claw/kernels/cuda/context.h"

namespace claw::kernels::cuda {
[[noreturn]] void fail_call(const char* api, const char* call, const char* file, int line, const char* reason);
// printf-style message, thrown as claw::Error.
[[noreturn]] void fail_message(const char* format, ...) __attribute__((format(printf, 1, 2)));
}  // namespace claw::kernels::cuda

#define CLAW_CUDA_CHECK(call)                                                                                  \
  do {                                                                                                         \
    cudaError_t claw_err_ = (call);                                                                            \
    if (claw_err_ != cudaSuccess)                                                                              \
      ::claw::kernels::cuda::fail_call("CUDA", #call, __FILE__, __LINE__, cudaGetErrorString(claw_err_));      \
  } while (0)

#define CLAW_CUBLAS_CHECK(call)                                                                                \
  do {                                                                                                         \
    cublasStatus_t claw_st_ = (call);                                                                          \
    if (claw_st_ != CUBLAS_STATUS_SUCCESS)                                                                     \
      ::claw::kernels::cuda::fail_call("cuBLAS", #call, __FILE__, __LINE__, cublasGetStatusString(claw_st_));  \
  } while (0)

// After a kernel launch: a bad configuration shows up here, at its launch.
#define CLAW_CUDA_LAUNCH_CHECK() CLAW_CUDA_CHECK(cudaGetLastError())

// An invariant inside the backend (the CPU side's CLAW_CHECK).
#define CLAW_CUDA_EXPECT(cond, ...)                      \
  do {                                                   \
    if (!(cond)) ::claw::kernels::cuda::fail_message(__VA_ARGS__); \
  } while (0)

namespace claw::kernels::cuda {
inline cudaStream_t stream_of(const GpuCtx& ctx) { return static_cast<cudaStream_t>(ctx.stream); }
inline cublasHandle_t blas_of(const GpuCtx& ctx) { return static_cast<cublasHandle_t>(ctx.blas); }
// Blocks of `threads` covering n elements, capped (kernels use grid-stride loops beyond).
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (int64_t{1} << 20) ? (int64_t{1} << 20) : b));
}
}  // namespace claw::kernels::cuda
