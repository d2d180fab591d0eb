// Fused softmax + cross-entropy on the GPU: the CUDA side of
// cpu/cross_entropy.h (rows logits[n, 0:Vp], only the first V columns are
// classes; targets < 0 are ignored rows: loss 0, gradient 0; padding columns
// get gradient 0; dlogits may alias logits).
//
// Parallel decomposition:
//   forward    one block of 512 threads per row. Each thread runs an online
//              max / sum-of-exp over its strided columns (one expf per
//              element, a rescale only when its max grows); the block merges
//              the (max, sum) pairs in double in a fixed tree (warp
//              shuffles, then warps in index order): lse = max + log(sum).
//   backward   one block of 512 threads per row, threads striding over the
//              Vp columns; each element is read, then written, by the same
//              thread, so in place is safe.
// Targets are device memory and are not range-checked here (the CPU's
// CLAW_CHECK would need a copy back); the batch builder guarantees target < V.
#include <cmath>
#include <cstdint>

#include "claw/core/error.h"
#include "claw/kernels/cuda/check.cuh"
#include "claw/kernels/cuda/ops.h"

namespace claw::kernels::cuda {
namespace {

constexpr int kThreads = 512;

// Merges (m2, s2) into (m, s): the pair means s * exp(m).
__device__ inline void merge(double& m, double& s, double m2, double s2) {
  if (m2 == -INFINITY) return;
  if (m2 > m) {
    s = s * exp(m - m2) + s2;
    m = m2;
  } else {
    s += s2 * exp(m2 - m);
  }
}

__global__ void __launch_bounds__(kThreads)
    cross_entropy_forward_kernel(float* losses, float* lse, const float* logits, const int32_t* targets, int64_t V,
                                 int64_t Vp) {
  __shared__ double red_m[kThreads / 32], red_s[kThreads / 32];
  const int64_t n = blockIdx.x;
  const float* row = logits + n * Vp;
  float m = -INFINITY, s = 0.0f;
  for (int64_t c = threadIdx.x; c < V; c += kThreads) {
    const float x = row[c];
    if (x > m) {
      s = s * expf(m - x) + 1.0f;  // expf(-inf) = 0 on the first element
      m = x;
    } else {
      s += expf(x - m);
    }
  }
  double md = m, sd = s;
  for (int o = 16; o > 0; o >>= 1) {
    const double m2 = __shfl_down_sync(0xffffffffu, md, o), s2 = __shfl_down_sync(0xffffffffu, sd, o);
    merge(md, sd, m2, s2);
  }
  if (threadIdx.x % 32 == 0) {
    red_m[threadIdx.x / 32] = md;
    red_s[threadIdx.x / 32] = sd;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double mt = red_m[0], st = red_s[0];
    for (int w = 1; w < kThreads / 32; ++w) merge(mt, st, red_m[w], red_s[w]);
    const double l = mt + log(st);
    lse[n] = static_cast<float>(l);
    const int32_t t = targets[n];
    losses[n] = t < 0 ? 0.0f : static_cast<float>(l - static_cast<double>(row[t]));
  }
}

__global__ void __launch_bounds__(kThreads)
    cross_entropy_backward_kernel(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                                  float dloss_scale, int64_t V, int64_t Vp) {
  const int64_t n = blockIdx.x;
  const float* row = logits + n * Vp;
  float* drow = dlogits + n * Vp;
  const int32_t t = targets[n];
  if (t < 0) {
    for (int64_t c = threadIdx.x; c < Vp; c += kThreads) drow[c] = 0.0f;
    return;
  }
  const float l = lse[n];
  for (int64_t c = threadIdx.x; c < Vp; c += kThreads) {
    float d = 0.0f;
    if (c < V) {
      d = dloss_scale * expf(row[c] - l);
      if (c == t) d -= dloss_scale;
    }
    drow[c] = d;
  }
}

}  // namespace

void cross_entropy_forward(const GpuCtx& ctx, float* losses, float* lse, const float* logits, const int32_t* targets,
                           int64_t N, int64_t V, int64_t Vp) {
  CLAW_CHECK(V > 0 && V <= Vp, "cross-entropy needs 0 < V <= Vp, got V={} Vp={}", V, Vp);
  if (N <= 0) return;
  CLAW_CHECK(N <= 0x7fffffff, "cross-entropy: N={} rows exceed one grid", N);
  cross_entropy_forward_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream_of(ctx)>>>(losses, lse, logits,
                                                                                          targets, V, Vp);
  CLAW_CUDA_LAUNCH_CHECK();
}

void cross_entropy_backward(const GpuCtx& ctx, float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, float dloss_scale, int64_t N, int64_t V, int64_t Vp) {
  CLAW_CHECK(V > 0 && V <= Vp, "cross-entropy needs 0 < V <= Vp, got V={} Vp={}", V, Vp);
  if (N <= 0) return;
  CLAW_CHECK(N <= 0x7fffffff, "cross-entropy: N={} rows exceed one grid", N);
  cross_entropy_backward_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream_of(ctx)>>>(
      dlogits, logits, lse, targets, dloss_scale, V, Vp);
  CLAW_CUDA_LAUNCH_CHECK();
}

}  // namespace claw::kernels::cuda
