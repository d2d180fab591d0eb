// Token (+ learned position) embedding on the GPU: the CUDA side of
// cpu/embedding.h (same math; pos(b, t) = positions[b * T + t], or t when
// positions is null; dwte and dwpe accumulate, either may be null).
//
// Parallel decomposition:
//   forward    one thread per output element (n, c), grid-stride; threads of
//              a warp read consecutive channels of one row of wte/wpe.
//   backward   one thread per (n, c) adding dout[n, c] into dwte[token, c]
//              and dwpe[pos, c] with atomicAdd: repeated tokens and positions
//              meet in the atomics, so the last bit depends on their order
//              (the one non-deterministic kernel of the backend, ops.h).
#include <cstdint>

#include "claw/kernels/cuda/check.cuh"
#include "claw/kernels/cuda/ops.h"

namespace claw::kernels::cuda {
namespace {

constexpr int kThreads = 256;


__device__ inline int64_t position_of(const int32_t* positions, int64_t n, int64_t T) {
  return positions ? static_cast<int64_t>(positions[n]) : n % T;
}

__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                                         int64_t BT, int64_t T, int64_t C, const int32_t* positions) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < BT * C;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t n = i / C, c = i - n * C;
    float v = wte[static_cast<int64_t>(tokens[n]) * C + c];
    if (wpe) v += wpe[position_of(positions, n, T) * C + c];
    out[i] = v;
  }
}

__global__ void embedding_backward_kernel(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                          int64_t BT, int64_t T, int64_t C, const int32_t* positions) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < BT * C;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t n = i / C, c = i - n * C;
    const float d = dout[i];
    if (dwte) atomicAdd(dwte + static_cast<int64_t>(tokens[n]) * C + c, d);
    if (dwpe) atomicAdd(dwpe + position_of(positions, n, T) * C + c, d);
  }
}

}  // namespace

void embedding_forward(const GpuCtx& ctx, float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C, const int32_t* positions) {
  const int64_t total = B * T * C;
  if (total <= 0) return;
  embedding_forward_kernel<<<grid_for(total, kThreads), kThreads, 0, stream_of(ctx)>>>(out, tokens, wte, wpe, B * T, T, C,
                                                                               positions);
  CLAW_CUDA_LAUNCH_CHECK();
}

void embedding_backward(const GpuCtx& ctx, float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C, const int32_t* positions) {
  const int64_t total = B * T * C;
  if (total <= 0 || (!dwte && !dwpe)) return;
  embedding_backward_kernel<<<grid_for(total, kThreads), kThreads, 0, stream_of(ctx)>>>(dwte, dwpe, dout, tokens, B * T, T,
                                                                                C, positions);
  CLAW_CUDA_LAUNCH_CHECK();
}

}  // namespace claw::kernels::cuda
