#include "claw/kernels/cpu/rope.h"
#include "claw/kernels/cpu/route.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "claw/core/error.h"
#include "claw/core/storage.h"

namespace claw::kernels {
namespace {

// Rotates the first R dimensions of each (b, t, h) row of D in place by the
// angles of its position. sign = +1 applies the rotation, -1 its inverse
// (the transpose).
template <typename T>
void rotate(const CpuCtx& ctx, T* x, const acc_t<T>* cos, const acc_t<T>* sin, acc_t<T> sign, int64_t B,
            int64_t T_, int64_t nh, int64_t D, const int32_t* positions, int64_t R) {
  using A = acc_t<T>;
  R = R > 0 ? R : D;
  CLAW_CHECK(R % 2 == 0 && R <= D, "rope: rotary dim {} must be even and at most the head dim {}", R, D);
  const int64_t half = R / 2;
  const int64_t rows = B * T_ * nh;
  parallel_for(ctx, rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(D, 1)), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const int64_t bt = row / nh;
      const int64_t p = positions ? positions[bt] : bt % T_;
      const A* c = cos + p * half;
      const A* s = sin + p * half;
      T* lo = x + row * D;
      T* hi = lo + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        A x0 = widen(lo[i]), x1 = widen(hi[i]), si = sign * s[i];
        lo[i] = narrow<T>(x0 * c[i] - x1 * si);
        hi[i] = narrow<T>(x1 * c[i] + x0 * si);
      }
    }
  });
}

}  // namespace

float rope_inv_freq(int64_t i, int64_t D, double theta) {
  // Hugging Face: inv_freq = 1.0 / (base ** (torch.arange(0, D, 2).float() / D)), all fp32.
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(D);
  return 1.0f / std::pow(static_cast<float>(theta), exponent);
}

template <typename T>
void rope_table(T* cos, T* sin, int64_t P, int64_t D, const float* inv_freq) {
  CLAW_CHECK(D % 2 == 0, "rope head dim D={} must be even", D);
  const int64_t half = D / 2;
  for (int64_t i = 0; i < half; ++i)
    for (int64_t p = 0; p < P; ++p) {
      const double angle = static_cast<double>(p) * static_cast<double>(inv_freq[i]);
      cos[p * half + i] = static_cast<T>(std::cos(angle));
      sin[p * half + i] = static_cast<T>(std::sin(angle));
    }
}

template <typename T>
void rope_table(T* cos, T* sin, int64_t P, int64_t D, double theta) {
  CLAW_CHECK(D % 2 == 0, "rope head dim D={} must be even", D);
  std::vector<float> inv_freq(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) inv_freq[i] = rope_inv_freq(i, D, theta);
  rope_table(cos, sin, P, D, inv_freq.data());
}

template <typename T>
void rope_forward(const CpuCtx& ctx, T* x, const acc_t<T>* cos, const acc_t<T>* sin, int64_t B, int64_t T_, int64_t nh,
                  int64_t D, const int32_t* positions, int64_t rotary_dim) {
  if (ctx.gpu && rotary_dim > 0 && rotary_dim != D) fail("--rotary-percent below 1 runs on the CPU only for now");
  CLAW_ROUTE_TO_GPU(ctx, T, rope_forward, x, cos, sin, B, T_, nh, D, positions);
  rotate(ctx, x, cos, sin, acc_t<T>(1), B, T_, nh, D, positions, rotary_dim);
}

template <typename T>
void rope_backward(const CpuCtx& ctx, T* dx, const acc_t<T>* cos, const acc_t<T>* sin, int64_t B, int64_t T_, int64_t nh,
                   int64_t D, const int32_t* positions, int64_t rotary_dim) {
  if (ctx.gpu && rotary_dim > 0 && rotary_dim != D) fail("--rotary-percent below 1 runs on the CPU only for now");
  CLAW_ROUTE_TO_GPU(ctx, T, rope_backward, dx, cos, sin, B, T_, nh, D, positions);
  rotate(ctx, dx, cos, sin, acc_t<T>(-1), B, T_, nh, D, positions, rotary_dim);
}

template void rope_table<float>(float*, float*, int64_t, int64_t, double);
template void rope_table<double>(double*, double*, int64_t, int64_t, double);
template void rope_table<float>(float*, float*, int64_t, int64_t, const float*);
template void rope_table<double>(double*, double*, int64_t, int64_t, const float*);

#define CLAW_INSTANTIATE(T)                                                                                  \
  template void rope_forward<T>(const CpuCtx&, T*, const acc_t<T>*, const acc_t<T>*, int64_t, int64_t,       \
                                int64_t, int64_t, const int32_t*, int64_t);                                  \
  template void rope_backward<T>(const CpuCtx&, T*, const acc_t<T>*, const acc_t<T>*, int64_t, int64_t,      \
                                 int64_t, int64_t, const int32_t*, int64_t);
CLAW_INSTANTIATE(float)
CLAW_INSTANTIATE(double)
CLAW_INSTANTIATE(bfloat16)
CLAW_INSTANTIATE(float16)
#undef CLAW_INSTANTIATE

}  // namespace claw::kernels
