// LayerNorm and RMSNorm on the GPU: the CUDA side of cpu/layernorm.h and
// cpu/rmsnorm.h (same math, saved state and gradient contract: dweight and
// dbias accumulate, dx overwrites unless accumulate_dx).
//
// Parallel decomposition:
//   forward    one block of 256 threads per row; the threads stride over
//              the C channels. LayerNorm takes the mean and then the centred
//              sum of squares in double (two sweeps, the second from L1/L2),
//              so the variance has no E[x^2] - E[x]^2 cancellation; RMSNorm
//              sums squares in double. Block sums are fixed trees (warp
//              shuffles, then warps in index order).
//   backward   P blocks (P a function of N and C only, at most 1024), each
//              owning a contiguous range of rows. Per row the block reduces
//              sum(g) and sum(g xhat) (fp32, as the CPU), writes dx, and adds
//              the row's dweight/dbias terms into a per-thread fp32 slot in
//              shared memory (a thread always owns the same channels, so no
//              races); every 32 rows the slots are flushed into the block's
//              double partial in ctx.workspace. A second kernel adds the P
//              partials of each channel in block order and does
//              dweight[c] += partial. No float atomics: the same bits every run.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "claw/core/error.h"
#include "claw/kernels/cuda/check.cuh"
#include "claw/kernels/cuda/ops.h"

namespace claw::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowBlock = 32;     // rows summed in fp32 before a flush into the double partial
constexpr int kMaxPartials = 1024;

// Sum over the block in a fixed order; every thread gets the result. `red`
// is kThreads / 32 slots of shared memory; the call ends with the slots free.
template <typename V>
__device__ V block_sum_all(V v, V* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  V s = 0;
  for (int w = 0; w < kThreads / 32; ++w) s += red[w];
  __syncthreads();  // red may be reused by the next call
  return s;
}

__global__ void __launch_bounds__(kThreads)
    layernorm_forward_kernel(float* y, float* mean, float* rstd, const float* x, const float* weight,
                             const float* bias, int64_t C, double eps) {
  __shared__ double red[kThreads / 32];
  const int64_t n = blockIdx.x;
  const float* xr = x + n * C;
  float* yr = y + n * C;
  double s = 0.0;
  for (int64_t c = threadIdx.x; c < C; c += kThreads) s += static_cast<double>(xr[c]);
  const double mu = block_sum_all(s, red) / static_cast<double>(C);
  double q = 0.0;
  for (int64_t c = threadIdx.x; c < C; c += kThreads) {
    const double d = static_cast<double>(xr[c]) - mu;
    q += d * d;
  }
  const double var = block_sum_all(q, red) / static_cast<double>(C);
  const float m = static_cast<float>(mu), r = static_cast<float>(1.0 / sqrt(var + eps));
  if (threadIdx.x == 0) {
    mean[n] = m;
    rstd[n] = r;
  }
  if (bias) {
    for (int64_t c = threadIdx.x; c < C; c += kThreads) yr[c] = (xr[c] - m) * r * weight[c] + bias[c];
  } else {
    for (int64_t c = threadIdx.x; c < C; c += kThreads) yr[c] = (xr[c] - m) * r * weight[c];
  }
}

__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_kernel(float* y, float* rstd, const float* x, const float* weight, int64_t C, double eps) {
  __shared__ double red[kThreads / 32];
  const int64_t n = blockIdx.x;
  const float* xr = x + n * C;
  float* yr = y + n * C;
  double s = 0.0;
  for (int64_t c = threadIdx.x; c < C; c += kThreads) {
    const double v = static_cast<double>(xr[c]);
    s += v * v;
  }
  const double ss = block_sum_all(s, red);
  const float r = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(C) + eps));
  if (threadIdx.x == 0) rstd[n] = r;
  for (int64_t c = threadIdx.x; c < C; c += kThreads) yr[c] = xr[c] * r * weight[c];
}

// kLayer: LayerNorm (dweight and dbias, centred by mean) or RMSNorm (dweight only).
// partial: [P, kParts * C] doubles, block p's sums of its rows (kParts = 2 or 1).
template <bool kLayer>
__global__ void __launch_bounds__(kThreads)
    norm_backward_rows(float* dx, double* partial, const float* dy, const float* x, const float* weight,
                       const float* mean, const float* rstd, int64_t N, int64_t C, bool accumulate_dx) {
  constexpr int kParts = kLayer ? 2 : 1;
  extern __shared__ float slots[];  // [kParts * C]: this block's fp32 sums of the current run of rows
  __shared__ float red[kThreads / 32];
  const int64_t P = gridDim.x;
  const int64_t rb = N * blockIdx.x / P, re = N * (blockIdx.x + 1) / P;
  double* acc = partial + static_cast<int64_t>(blockIdx.x) * kParts * C;
  for (int64_t c = threadIdx.x; c < kParts * C; c += kThreads) acc[c] = 0.0;
  const float inv_c = 1.0f / static_cast<float>(C);
  for (int64_t r0 = rb; r0 < re; r0 += kRowBlock) {
    for (int64_t c = threadIdx.x; c < kParts * C; c += kThreads) slots[c] = 0.0f;
    // The rows below write slots[c] and slots[C + c] from the thread owning c,
    // which (unless C is a multiple of the block) is not the thread that
    // zeroed or flushes slots[C + c]: barriers order the three phases.
    __syncthreads();
    const int64_t r1 = min(re, r0 + kRowBlock);
    for (int64_t n = r0; n < r1; ++n) {
      const float* xr = x + n * C;
      const float* dyr = dy + n * C;
      float* dxr = dx + n * C;
      const float m = kLayer ? mean[n] : 0.0f, r = rstd[n];
      float sum_g = 0.0f, sum_gx = 0.0f;
      for (int64_t c = threadIdx.x; c < C; c += kThreads) {
        const float g = dyr[c] * weight[c];
        if constexpr (kLayer) {
          sum_g += g;
          sum_gx += g * ((xr[c] - m) * r);
        } else {
          sum_gx += g * xr[c];
        }
      }
      if constexpr (kLayer) sum_g = block_sum_all(sum_g, red);
      sum_gx = block_sum_all(sum_gx, red);
      if constexpr (kLayer) {
        const float mean_g = sum_g * inv_c, mean_gx = sum_gx * inv_c;
        for (int64_t c = threadIdx.x; c < C; c += kThreads) {
          const float xhat = (xr[c] - m) * r;
          const float d = dyr[c];
          const float v = r * (d * weight[c] - mean_g - xhat * mean_gx);
          slots[c] += d * xhat;
          slots[C + c] += d;
          dxr[c] = accumulate_dx ? dxr[c] + v : v;
        }
      } else {
        const float k = r * r * sum_gx * inv_c;
        for (int64_t c = threadIdx.x; c < C; c += kThreads) {
          const float d = dyr[c], xv = xr[c];
          const float v = r * (d * weight[c] - xv * k);
          slots[c] += d * (xv * r);
          dxr[c] = accumulate_dx ? dxr[c] + v : v;
        }
      }
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < kParts * C; c += kThreads) acc[c] += static_cast<double>(slots[c]);
    __syncthreads();
  }
}

// dst[c] += sum_p partial[p, c] (p in order) for the kParts * C columns; the
// first C go to dweight, the next C (LayerNorm) to dbias if present.
__global__ void norm_backward_columns(float* dweight, float* dbias, const double* partial, int64_t P, int64_t C,
                                      int parts) {
  const int64_t width = parts * C;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < width;
       c += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    double s = 0.0;
    for (int64_t p = 0; p < P; ++p) s += partial[p * width + c];
    if (c < C) {
      dweight[c] += static_cast<float>(s);
    } else if (dbias) {
      dbias[c - C] += static_cast<float>(s);
    }
  }
}

template <bool kLayer>
void norm_backward(const GpuCtx& ctx, float* dx, float* dweight, float* dbias, const float* dy, const float* x,
                   const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                   bool accumulate_dx) {
  if (N <= 0 || C <= 0) return;
  constexpr int kParts = kLayer ? 2 : 1;
  const size_t row_bytes = static_cast<size_t>(kParts) * static_cast<size_t>(C) * sizeof(double);
  CLAW_CHECK(ctx.workspace && ctx.workspace_bytes >= row_bytes,
             "norm backward: GPU workspace of {} bytes is too small for C={}", ctx.workspace_bytes, C);
  int64_t P = (N + kRowBlock * 2 - 1) / (kRowBlock * 2);  // at least 64 rows per block
  P = std::min<int64_t>(P, kMaxPartials);
  P = std::min<int64_t>(P, static_cast<int64_t>(ctx.workspace_bytes / row_bytes));
  P = std::max<int64_t>(P, 1);
  const size_t smem = static_cast<size_t>(kParts) * static_cast<size_t>(C) * sizeof(float);
  CLAW_CHECK(smem <= 200 * 1024, "norm backward: C={} is too wide for the shared-memory slots", C);
  auto* kernel = &norm_backward_rows<kLayer>;
  if (smem > 48 * 1024)
    CLAW_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaStream_t s = stream_of(ctx);
  double* partial = static_cast<double*>(ctx.workspace);
  kernel<<<static_cast<unsigned>(P), kThreads, smem, s>>>(dx, partial, dy, x, weight, mean, rstd, N, C,
                                                           accumulate_dx);
  CLAW_CUDA_LAUNCH_CHECK();
  norm_backward_columns<<<grid_for(kParts * C, kThreads), kThreads, 0, s>>>(dweight, dbias, partial, P, C, kParts);
  CLAW_CUDA_LAUNCH_CHECK();
}

}  // namespace

void layernorm_forward(const GpuCtx& ctx, float* y, float* mean, float* rstd, const float* x, const float* weight,
                       const float* bias, int64_t N, int64_t C, double eps) {
  if (N <= 0) return;
  CLAW_CHECK(N <= 0x7fffffff, "layernorm: N={} rows exceed one grid", N);
  layernorm_forward_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream_of(ctx)>>>(y, mean, rstd, x, weight,
                                                                                       bias, C, eps);
  CLAW_CUDA_LAUNCH_CHECK();
}

void layernorm_backward(const GpuCtx& ctx, float* dx, float* dweight, float* dbias, const float* dy, const float* x,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        bool accumulate_dx) {
  norm_backward<true>(ctx, dx, dweight, dbias, dy, x, weight, mean, rstd, N, C, accumulate_dx);
}

void rmsnorm_forward(const GpuCtx& ctx, float* y, float* rstd, const float* x, const float* weight, int64_t N,
                     int64_t C, double eps) {
  if (N <= 0) return;
  CLAW_CHECK(N <= 0x7fffffff, "rmsnorm: N={} rows exceed one grid", N);
  rmsnorm_forward_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream_of(ctx)>>>(y, rstd, x, weight, C, eps);
  CLAW_CUDA_LAUNCH_CHECK();
}

void rmsnorm_backward(const GpuCtx& ctx, float* dx, float* dweight, const float* dy, const float* x,
                      const float* weight, const float* rstd, int64_t N, int64_t C, bool accumulate_dx) {
  norm_backward<false>(ctx, dx, dweight, nullptr, dy, x, weight, nullptr, rstd, N, C, accumulate_dx);
}

}  // namespace claw::kernels::cuda
