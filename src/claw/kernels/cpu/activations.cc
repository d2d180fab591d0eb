#include "claw/kernels/cpu/activations.h"
#include "claw/kernels/cpu/route.h"

#include <cmath>

#include "claw/core/error.h"
#include "claw/core/storage.h"
#include "claw/kernels/cpu/vec_math.h"

namespace claw::kernels {
namespace {

// Element-wise loops below this many elements per thread are not worth a
// parallel region.
constexpr int64_t kGrain = 1 << 14;

template <typename T>
constexpr T kSqrt2OverPi = T(0.7978845608028654);
template <typename T>
constexpr T kGeluCoeff = T(0.044715);

// sigmoid(z) and 1 - sigmoid(z) = sigmoid(-z) from one exp: with
// e = exp(-|z|) in (0, 1], never overflowing, they are 1 / (1 + e) and
// e / (1 + e) in the order given by the sign of z. Taking 1 - s by
// subtraction would be 0 or one ulp where s rounds to 1 in fp32 (z > ~16),
// an O(1) relative error in a term that is multiplied by x or g and still
// matters (1e-6 of GELU's dx at x = 5).
template <typename T>
inline void sigmoid_pair(T z, T& s, T& one_minus_s) {
  T e = fast_exp(-std::abs(z));
  T big = T(1) / (T(1) + e), small = e * big;
  s = z >= T(0) ? big : small;
  one_minus_s = z >= T(0) ? small : big;
}

// The tanh GELU of x through sigmoid(2u) (below), and its derivative
// s (1 + 2 x (1 - s) du/dx) (GeGLU's gate; gelu_backward spells it out).
template <typename A>
inline A gelu_tanh(A x) {
  const A u = kSqrt2OverPi<A> * (x + kGeluCoeff<A> * x * x * x);
  return x * fast_sigmoid(A(2) * u);
}
template <typename A>
inline A gelu_tanh_grad(A x) {
  const A x2 = x * x;
  const A u = kSqrt2OverPi<A> * (x + kGeluCoeff<A> * x2 * x);
  const A du = kSqrt2OverPi<A> * (A(1) + A(3) * kGeluCoeff<A> * x2);
  A s, one_minus_s;
  sigmoid_pair(A(2) * u, s, one_minus_s);
  return s * (A(1) + A(2) * x * one_minus_s * du);
}

}  // namespace

// GELU is evaluated through 0.5 (1 + tanh(u)) = sigmoid(2u): one exp, and no
// cancellation in 1 + tanh(u) where tanh(u) is near -1 (large negative x).
// With s = sigmoid(2u), 1 - tanh(u)^2 = 4 s (1 - s), so the header's
// derivative becomes s (1 + 2 x (1 - s) du/dx).
template <typename T>
void gelu_forward(const CpuCtx& ctx, T* y, const T* x, int64_t n) {
  CLAW_ROUTE_TO_GPU(ctx, T, gelu_forward, y, x, n);
  parallel_for(ctx, n, kGrain, [&](int64_t b, int64_t e) {
    // omp simd: y may alias x exactly; each element is read before it is written.
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i] = narrow<T>(gelu_tanh(widen(x[i])));
  });
}

template <typename T>
void gelu_backward(const CpuCtx& ctx, T* dx, const T* dy, const T* x, int64_t n) {
  CLAW_ROUTE_TO_GPU(ctx, T, gelu_backward, dx, dy, x, n);
  using A = acc_t<T>;
  parallel_for(ctx, n, kGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      A xv = widen(x[i]), d = widen(dy[i]);
      A x2 = xv * xv;
      A u = kSqrt2OverPi<A> * (xv + kGeluCoeff<A> * x2 * xv);
      A du = kSqrt2OverPi<A> * (A(1) + A(3) * kGeluCoeff<A> * x2);
      A s, one_minus_s;
      sigmoid_pair(A(2) * u, s, one_minus_s);
      dx[i] = narrow<T>(d * s * (A(1) + A(2) * xv * one_minus_s * du));
    }
  });
}

template <typename T>
void swiglu_forward(const CpuCtx& ctx, T* y, const T* gate, const T* up, int64_t n) {
  CLAW_ROUTE_TO_GPU(ctx, T, swiglu_forward, y, gate, up, n);
  using A = acc_t<T>;
  parallel_for(ctx, n, kGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      A g = widen(gate[i]);
      y[i] = narrow<T>(g * fast_sigmoid(g) * widen(up[i]));
    }
  });
}

template <typename T>
void swiglu_backward(const CpuCtx& ctx, T* dgate, T* dup, const T* dy, const T* gate, const T* up, int64_t n) {
  CLAW_ROUTE_TO_GPU(ctx, T, swiglu_backward, dgate, dup, dy, gate, up, n);
  using A = acc_t<T>;
  parallel_for(ctx, n, kGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      A g = widen(gate[i]), u = widen(up[i]), d = widen(dy[i]);
      A s, one_minus_s;
      sigmoid_pair(g, s, one_minus_s);
      dgate[i] = narrow<T>(d * u * s * (A(1) + g * one_minus_s));
      dup[i] = narrow<T>(d * g * s);
    }
  });
}

template <typename T>
void geglu_forward(const CpuCtx& ctx, T* y, const T* gate, const T* up, int64_t n) {
  if (ctx.gpu) fail("--geglu (GeGLU) runs on the CPU only for now");
  parallel_for(ctx, n, kGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i] = narrow<T>(gelu_tanh(widen(gate[i])) * widen(up[i]));
  });
}

template <typename T>
void geglu_backward(const CpuCtx& ctx, T* dgate, T* dup, const T* dy, const T* gate, const T* up, int64_t n) {
  if (ctx.gpu) fail("--geglu (GeGLU) runs on the CPU only for now");
  using A = acc_t<T>;
  parallel_for(ctx, n, kGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const A g = widen(gate[i]), d = widen(dy[i]);
      dgate[i] = narrow<T>(d * widen(up[i]) * gelu_tanh_grad(g));
      dup[i] = narrow<T>(d * gelu_tanh(g));
    }
  });
}

#define CLAW_INSTANTIATE(T)                                                                       \
  template void gelu_forward<T>(const CpuCtx&, T*, const T*, int64_t);                            \
  template void gelu_backward<T>(const CpuCtx&, T*, const T*, const T*, int64_t);                 \
  template void swiglu_forward<T>(const CpuCtx&, T*, const T*, const T*, int64_t);                \
  template void swiglu_backward<T>(const CpuCtx&, T*, T*, const T*, const T*, const T*, int64_t);        \
  template void geglu_forward<T>(const CpuCtx&, T*, const T*, const T*, int64_t);                 \
  template void geglu_backward<T>(const CpuCtx&, T*, T*, const T*, const T*, const T*, int64_t);
CLAW_INSTANTIATE(float)
CLAW_INSTANTIATE(double)
CLAW_INSTANTIATE(bfloat16)
CLAW_INSTANTIATE(float16)
#undef CLAW_INSTANTIATE

}  // namespace claw::kernels
