// Rotary position embedding on the GPU: the CUDA side of cpu/rope.h
// (rotate-half convention: element i < D/2 pairs with i + D/2; cos/sin are
// device copies of rope_table's [P, D/2] tables; backward is the same
// rotation with sin negated). In place on x [B, T, nh, D].
//
// Parallel decomposition: one thread per rotated pair (row, i), row =
// (b, t, h), i < D/2, grid-stride. A warp covers consecutive i of a row, so
// the reads of x (both halves) and of the table row are coalesced. Each pair
// is read and written by one thread: in place is safe.
#include <cstdint>

#include "claw/core/error.h"
#include "claw/kernels/cuda/check.cuh"
#include "claw/kernels/cuda/ops.h"

namespace claw::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void rope_kernel(float* x, const float* cos, const float* sin, float sign, int64_t rows, int64_t T,
                            int64_t nh, int64_t half, const int32_t* positions) {
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < rows * half;
       idx += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t row = idx / half, i = idx - row * half;
    const int64_t bt = row / nh;
    const int64_t p = positions ? static_cast<int64_t>(positions[bt]) : bt % T;
    const float c = cos[p * half + i], si = sign * sin[p * half + i];
    float* lo = x + row * 2 * half;
    const float x0 = lo[i], x1 = lo[i + half];
    lo[i] = x0 * c - x1 * si;
    lo[i + half] = x1 * c + x0 * si;
  }
}

void rotate(const GpuCtx& ctx, float* x, const float* cos, const float* sin, float sign, int64_t B, int64_t T,
            int64_t nh, int64_t D, const int32_t* positions) {
  CLAW_CHECK(D % 2 == 0, "rope head dim D={} must be even", D);
  const int64_t rows = B * T * nh, half = D / 2;
  if (rows * half <= 0) return;
  rope_kernel<<<grid_for(rows * half, kThreads), kThreads, 0, stream_of(ctx)>>>(x, cos, sin, sign, rows, T, nh, half, positions);
  CLAW_CUDA_LAUNCH_CHECK();
}

}  // namespace

void rope_forward(const GpuCtx& ctx, float* x, const float* cos, const float* sin, int64_t B, int64_t T, int64_t nh,
                  int64_t D, const int32_t* positions) {
  rotate(ctx, x, cos, sin, 1.0f, B, T, nh, D, positions);
}

void rope_backward(const GpuCtx& ctx, float* dx, const float* cos, const float* sin, int64_t B, int64_t T,
                   int64_t nh, int64_t D, const int32_t* positions) {
  rotate(ctx, dx, cos, sin, -1.0f, B, T, nh, D, positions);
}

}  // namespace claw::kernels::cuda
