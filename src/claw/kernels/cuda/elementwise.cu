// Element-wise kernels, reductions, conversions, dropout and AdamW on the
// GPU: the CUDA side of cpu/reduce.h, cpu/activations.h, cpu/dropout.h and
// cpu/adamw.h (same math and aliasing rules; see those headers).
//
// Parallel decomposition:
//   element-wise ops   one thread per element, grid-stride loops (256 threads
//                      per block), so any n fits one launch. Same-index
//                      aliasing (y == x) is safe: each element is read and
//                      written by the same thread.
//   sum, sum_squares   two passes with a fixed tree: pass 1 has a grid size
//                      that depends on n only; each thread accumulates its
//                      grid-stride elements in double, each block reduces its
//                      threads (warp shuffles, then the warps in index order)
//                      into one partial in ctx.workspace; pass 2 is one block
//                      that reduces the partials the same way. The result is
//                      the same bits run to run (not the CPU's bits: the CPU
//                      sums in another order; both are exact to ~1e-16).
//   first_non_finite   every thread takes the min index of its non-finite
//                      elements; blocks combine with an integer atomicMin on
//                      one word (order-free, hence deterministic).
//   dropout            Philox-4x32-10 on the device, the same function as
//                      core/philox.h, keyed by rng.key0()/key1() and counted
//                      by the element's global index: the CPU's masks bit
//                      for bit.
//   adamw_update       one thread per element; the scalars are formed on the
//                      host in double exactly as cpu/adamw.cc does, and every
//                      fp32 operation uses an explicitly rounded intrinsic
//                      (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn) so nvcc
//                      cannot contract a multiply-add into an FMA: PyTorch's
//                      rounding, equal to the CPU bit for bit where GCC does
//                      not contract there either (C++ builds default to
//                      -ffp-contract=fast; add -ffp-contract=off for exact parity).
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "claw/core/error.h"
#include "claw/kernels/cuda/check.cuh"
#include "claw/kernels/cuda/ops.h"

namespace claw::kernels::cuda {
namespace {

constexpr int kThreads = 256;
// Pass-1 blocks of the two-pass reductions (at most; fewer for small n).
constexpr int kReduceBlocks = 1024;

#define CLAW_GRID_STRIDE(i, n)                                                            \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)


// ---- reductions ----------------------------------------------------------------

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024) in a
// fixed order; the result is valid in thread 0.
__device__ double block_sum(double v) {
  __shared__ double warp_part[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_part[warp] = v;
  __syncthreads();
  double s = 0.0;
  if (threadIdx.x == 0) {
    const int warps = blockDim.x / 32;
    for (int w = 0; w < warps; ++w) s += warp_part[w];
  }
  return s;
}

template <bool kSquare>
__global__ void reduce_pass1(double* partial, const float* x, int64_t n) {
  double acc = 0.0;
  CLAW_GRID_STRIDE(i, n) {
    const double v = static_cast<double>(x[i]);
    acc += kSquare ? v * v : v;
  }
  const double s = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void reduce_pass2(double* result, const double* partial, int count) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  const double s = block_sum(acc);
  if (threadIdx.x == 0) *result = s;
}

template <bool kSquare>
double reduce_double(const GpuCtx& ctx, const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  CLAW_CHECK(ctx.workspace && ctx.workspace_bytes >= (kReduceBlocks + 1) * sizeof(double),
             "GPU reduction needs a workspace of at least {} bytes", (kReduceBlocks + 1) * sizeof(double));
  cudaStream_t s = stream_of(ctx);
  int64_t blocks = (n + kThreads * 8 - 1) / (kThreads * 8);  // ~8 elements per thread at least
  if (blocks > kReduceBlocks) blocks = kReduceBlocks;
  double* partial = static_cast<double*>(ctx.workspace);
  double* result = partial + kReduceBlocks;
  reduce_pass1<kSquare><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(partial, x, n);
  CLAW_CUDA_LAUNCH_CHECK();
  reduce_pass2<<<1, 1024, 0, s>>>(result, partial, static_cast<int>(blocks));
  CLAW_CUDA_LAUNCH_CHECK();
  CLAW_CUDA_CHECK(cudaMemcpyAsync(ctx.host_result, result, sizeof(double), cudaMemcpyDeviceToHost, s));
  CLAW_CUDA_CHECK(cudaStreamSynchronize(s));
  return ctx.host_result[0];
}

__global__ void first_non_finite_kernel(unsigned long long* first, const float* x, int64_t n) {
  unsigned long long mine = ~0ull;
  CLAW_GRID_STRIDE(i, n) {
    if (!isfinite(x[i])) {
      mine = static_cast<unsigned long long>(i);
      break;  // grid-stride order is increasing: the first hit is this thread's smallest
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long other = __shfl_down_sync(0xffffffffu, mine, o);
    mine = other < mine ? other : mine;
  }
  if (threadIdx.x % 32 == 0 && mine != ~0ull) atomicMin(first, mine);
}

// ---- element-wise -----------------------------------------------------------------

__global__ void add_kernel(float* out, const float* a, const float* b, int64_t n) {
  CLAW_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}
__global__ void axpy_kernel(float* y, float alpha, const float* x, int64_t n) {
  CLAW_GRID_STRIDE(i, n) y[i] += alpha * x[i];
}
__global__ void scale_kernel(float* x, float alpha, int64_t n) {
  CLAW_GRID_STRIDE(i, n) x[i] *= alpha;
}
__global__ void mul_kernel(float* x, const float* w, int64_t n) {
  CLAW_GRID_STRIDE(i, n) x[i] *= w[i];
}
__global__ void scale_rows_kernel(float* x, const float* w, int64_t rows, int64_t cols) {
  CLAW_GRID_STRIDE(i, rows * cols) x[i] *= w[i / cols];
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

// sigmoid(z) and 1 - sigmoid(z) from one exp of -|z| (cpu/activations.cc).
__device__ inline void sigmoid_pair(float z, float& s, float& one_minus_s) {
  const float e = expf(-fabsf(z));
  const float big = 1.0f / (1.0f + e), small = e * big;
  s = z >= 0.0f ? big : small;
  one_minus_s = z >= 0.0f ? small : big;
}

__global__ void gelu_forward_kernel(float* y, const float* x, int64_t n) {
  CLAW_GRID_STRIDE(i, n) {
    const float xv = x[i];
    const float u = kSqrt2OverPi * (xv + kGeluCoeff * xv * xv * xv);
    y[i] = xv / (1.0f + expf(-2.0f * u));  // x * sigmoid(2u) = 0.5 x (1 + tanh(u))
  }
}

__global__ void gelu_backward_kernel(float* dx, const float* dy, const float* x, int64_t n) {
  CLAW_GRID_STRIDE(i, n) {
    const float xv = x[i], d = dy[i];
    const float x2 = xv * xv;
    const float u = kSqrt2OverPi * (xv + kGeluCoeff * x2 * xv);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x2);
    float s, one_minus_s;
    sigmoid_pair(2.0f * u, s, one_minus_s);
    dx[i] = d * s * (1.0f + 2.0f * xv * one_minus_s * du);
  }
}

__global__ void swiglu_forward_kernel(float* y, const float* gate, const float* up, int64_t n) {
  CLAW_GRID_STRIDE(i, n) {
    const float g = gate[i];
    y[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void swiglu_backward_kernel(float* dgate, float* dup, const float* dy, const float* gate, const float* up,
                                       int64_t n) {
  CLAW_GRID_STRIDE(i, n) {
    const float g = gate[i], u = up[i], d = dy[i];
    float s, one_minus_s;
    sigmoid_pair(g, s, one_minus_s);
    dgate[i] = d * u * s * (1.0f + g * one_minus_s);
    dup[i] = d * g * s;
  }
}

// core/dtype_convert.cc's f32_to_bf16, bit for bit.
__global__ void to_bf16_kernel(uint16_t* out, const float* x, int64_t n) {
  CLAW_GRID_STRIDE(i, n) {
    uint32_t bits = __float_as_uint(x[i]);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
      out[i] = static_cast<uint16_t>((bits >> 16) | 0x40u);  // stays a (quiet) NaN
    } else {
      bits += 0x7fffu + ((bits >> 16) & 1u);
      out[i] = static_cast<uint16_t>(bits >> 16);
    }
  }
}
__global__ void from_bf16_kernel(float* out, const uint16_t* x, int64_t n) {
  CLAW_GRID_STRIDE(i, n) out[i] = __uint_as_float(static_cast<uint32_t>(x[i]) << 16);
}

// 16-bit activations (--bf16, --fp16): one element's 16-bit pattern, and back.
// bf16 as to_bf16_kernel; f16 by the hardware's IEEE conversion (nearest
// even, subnormals kept, overflow to inf), as the CPU's F16C path.
__device__ inline uint16_t to_half_bits(float v, bool f16) {
  if (f16) return __half_as_ushort(__float2half_rn(v));
  uint32_t bits = __float_as_uint(v);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}
__device__ inline float from_half_bits(uint16_t h, bool f16) {
  return f16 ? __half2float(__ushort_as_half(h)) : __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__global__ void round_half_kernel(float* x, int64_t n, bool f16) {
  CLAW_GRID_STRIDE(i, n) x[i] = from_half_bits(to_half_bits(x[i], f16), f16);
}
__global__ void pack_half_kernel(uint16_t* y, const float* x, int64_t n, bool f16) {
  CLAW_GRID_STRIDE(i, n) y[i] = to_half_bits(x[i], f16);
}
__global__ void unpack_half_kernel(float* y, const uint16_t* x, int64_t n, bool f16) {
  CLAW_GRID_STRIDE(i, n) y[i] = from_half_bits(x[i], f16);
}

// ---- dropout ------------------------------------------------------------------------

// Word 0 of Philox-4x32-10 (core/philox.h) for counter (index, 0).
__device__ inline uint32_t philox_word0(uint64_t index, uint32_t k0, uint32_t k1) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(index), c1 = static_cast<uint32_t>(index >> 32), c2 = 0, c3 = 0;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = __umulhi(M0, c0), lo0 = M0 * c0;
    const uint32_t hi1 = __umulhi(M1, c2), lo1 = M1 * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += W0;
    k1 += W1;
  }
  return c0;
}

__global__ void dropout_kernel(float* out, const float* in, int64_t n, uint32_t threshold, float scale, uint32_t k0,
                               uint32_t k1, uint64_t index0) {
  CLAW_GRID_STRIDE(i, n) {
    const uint32_t k = philox_word0(index0 + static_cast<uint64_t>(i), k0, k1) >> 8;
    const float v = in[i] * scale;
    out[i] = k >= threshold ? v : 0.0f;
  }
}

void apply_mask(const GpuCtx& ctx, float* out, const float* in, int64_t n, double p, const RandomStream& rng,
                uint64_t index0) {
  CLAW_CHECK(p >= 0.0 && p < 1.0, "dropout probability must be in [0, 1), got {}", p);
  if (n <= 0) return;
  if (p == 0.0) {
    if (out != in)
      CLAW_CUDA_CHECK(cudaMemcpyAsync(out, in, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice,
                                      stream_of(ctx)));
    return;
  }
  const uint32_t threshold = static_cast<uint32_t>(std::ceil(p * 16777216.0));
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  dropout_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(out, in, n, threshold, scale, rng.key0(),
                                                                   rng.key1(), index0);
  CLAW_CUDA_LAUNCH_CHECK();
}

// ---- AdamW ---------------------------------------------------------------------------

struct AdamWScalars {
  float grad_scale, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, bias_correction2_sqrt, eps;
};

__global__ void adamw_kernel(float* param, float* m, float* v, const float* grad, int64_t n, AdamWScalars c) {
  CLAW_GRID_STRIDE(i, n) {
    const float g = __fmul_rn(grad[i], c.grad_scale);
    const float p = __fmul_rn(param[i], c.decay);
    const float mi = __fadd_rn(__fmul_rn(m[i], c.beta1), __fmul_rn(c.one_minus_beta1, g));
    const float vi = __fadd_rn(__fmul_rn(v[i], c.beta2), __fmul_rn(__fmul_rn(c.one_minus_beta2, g), g));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), c.bias_correction2_sqrt), c.eps);
    param[i] = __fadd_rn(p, __fdiv_rn(__fmul_rn(c.neg_step_size, mi), denom));
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

double sum_squares(const GpuCtx& ctx, const float* x, int64_t n) { return reduce_double<true>(ctx, x, n); }
double sum(const GpuCtx& ctx, const float* x, int64_t n) { return reduce_double<false>(ctx, x, n); }

int64_t first_non_finite(const GpuCtx& ctx, const float* x, int64_t n) {
  if (n <= 0) return -1;
  CLAW_CHECK(ctx.workspace && ctx.workspace_bytes >= sizeof(unsigned long long),
             "first_non_finite needs a GPU workspace");
  cudaStream_t s = stream_of(ctx);
  auto* first = static_cast<unsigned long long*>(ctx.workspace);
  CLAW_CUDA_CHECK(cudaMemsetAsync(first, 0xff, sizeof *first, s));
  first_non_finite_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(first, x, n);
  CLAW_CUDA_LAUNCH_CHECK();
  CLAW_CUDA_CHECK(cudaMemcpyAsync(ctx.host_result, first, sizeof *first, cudaMemcpyDeviceToHost, s));
  CLAW_CUDA_CHECK(cudaStreamSynchronize(s));
  unsigned long long r;
  static_assert(sizeof r == sizeof(double));
  __builtin_memcpy(&r, ctx.host_result, sizeof r);
  return r == ~0ull ? -1 : static_cast<int64_t>(r);
}

#define CLAW_LAUNCH(kernel, n, ...)                                                           \
  do {                                                                                        \
    if ((n) <= 0) return;                                                                     \
    kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(__VA_ARGS__);                    \
    CLAW_CUDA_LAUNCH_CHECK();                                                                 \
  } while (0)

void add(const GpuCtx& ctx, float* out, const float* a, const float* b, int64_t n) {
  CLAW_LAUNCH(add_kernel, n, out, a, b, n);
}
void axpy(const GpuCtx& ctx, float* y, float alpha, const float* x, int64_t n) {
  CLAW_LAUNCH(axpy_kernel, n, y, alpha, x, n);
}
void scale(const GpuCtx& ctx, float* x, float alpha, int64_t n) { CLAW_LAUNCH(scale_kernel, n, x, alpha, n); }
void mul(const GpuCtx& ctx, float* x, const float* w, int64_t n) { CLAW_LAUNCH(mul_kernel, n, x, w, n); }
void scale_rows(const GpuCtx& ctx, float* x, const float* w, int64_t rows, int64_t cols) {
  CLAW_LAUNCH(scale_rows_kernel, rows * cols, x, w, rows, cols);
}
void gelu_forward(const GpuCtx& ctx, float* y, const float* x, int64_t n) {
  CLAW_LAUNCH(gelu_forward_kernel, n, y, x, n);
}
void gelu_backward(const GpuCtx& ctx, float* dx, const float* dy, const float* x, int64_t n) {
  CLAW_LAUNCH(gelu_backward_kernel, n, dx, dy, x, n);
}
void swiglu_forward(const GpuCtx& ctx, float* y, const float* gate, const float* up, int64_t n) {
  CLAW_LAUNCH(swiglu_forward_kernel, n, y, gate, up, n);
}
void swiglu_backward(const GpuCtx& ctx, float* dgate, float* dup, const float* dy, const float* gate, const float* up,
                     int64_t n) {
  CLAW_LAUNCH(swiglu_backward_kernel, n, dgate, dup, dy, gate, up, n);
}
void to_bf16(const GpuCtx& ctx, uint16_t* out, const float* x, int64_t n) { CLAW_LAUNCH(to_bf16_kernel, n, out, x, n); }
void from_bf16(const GpuCtx& ctx, float* out, const uint16_t* x, int64_t n) {
  CLAW_LAUNCH(from_bf16_kernel, n, out, x, n);
}

void round_half_values(const GpuCtx& ctx, bool f16, float* x, int64_t n) {
  CLAW_LAUNCH(round_half_kernel, n, x, n, f16);
}
void pack_half(const GpuCtx& ctx, bool f16, const float* x, uint16_t* y, int64_t n) {
  CLAW_LAUNCH(pack_half_kernel, n, y, x, n, f16);
}
void unpack_half(const GpuCtx& ctx, bool f16, const uint16_t* x, float* y, int64_t n) {
  CLAW_LAUNCH(unpack_half_kernel, n, y, x, n, f16);
}

void dropout_forward(const GpuCtx& ctx, float* y, const float* x, int64_t n, double p, const RandomStream& rng,
                     uint64_t index0) {
  apply_mask(ctx, y, x, n, p, rng, index0);
}
void dropout_backward(const GpuCtx& ctx, float* dx, const float* dy, int64_t n, double p, const RandomStream& rng,
                      uint64_t index0) {
  apply_mask(ctx, dx, dy, n, p, rng, index0);
}

void adamw_update(const GpuCtx& ctx, float* param, float* m, float* v, const float* grad, int64_t n,
                  const AdamWArgs& h) {
  CLAW_CHECK(h.step >= 1, "AdamW step counts from 1, got {}", h.step);
  // The scalars of cpu/adamw.cc, formed in double and rounded once to float.
  const double step = static_cast<double>(h.step);
  const double bias_correction1 = 1.0 - std::pow(h.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(h.beta2, step);
  AdamWScalars c;
  c.grad_scale = static_cast<float>(h.grad_scale);
  c.decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  c.beta1 = static_cast<float>(h.beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  c.beta2 = static_cast<float>(h.beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  c.neg_step_size = static_cast<float>(-(h.lr / bias_correction1));
  c.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  c.eps = static_cast<float>(h.eps);
  CLAW_LAUNCH(adamw_kernel, n, param, m, v, grad, n, c);
}

#undef CLAW_LAUNCH

}  // namespace claw::kernels::cuda
