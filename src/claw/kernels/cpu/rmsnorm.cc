#include "claw/kernels/cpu/rmsnorm.h"
#include "claw/kernels/cpu/route.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "claw/core/storage.h"
#include "claw/kernels/cpu/rows.h"
#include "claw/kernels/cpu/vec_math.h"

namespace claw::kernels {
namespace {

template <bool kAccumulate, typename T, typename A = acc_t<T>>
void rms_backward_rows(T* dx, A* dw_part, const T* dy, const T* x, const T* weight, const A* rstd, int64_t rb,
                   int64_t re, int64_t C) {
  const A inv_c = A(1) / static_cast<A>(C);
  for (int64_t n = rb; n < re; ++n) {
    const T* xr = x + n * C;
    const T* dyr = dy + n * C;
    T* dxr = dx + n * C;
    const A r = rstd[n];
    A sum_gx = 0;
#pragma omp simd reduction(+ : sum_gx)
    for (int64_t c = 0; c < C; ++c) sum_gx += widen(dyr[c]) * widen(weight[c]) * widen(xr[c]);
    const A k = r * r * sum_gx * inv_c;
    // The row is still in cache (L1 up to C ~ 3K): this sweep adds no memory traffic.
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      A d = widen(dyr[c]), xv = widen(xr[c]);
      A v = r * (d * widen(weight[c]) - xv * k);
      dw_part[c] += d * (xv * r);
      if constexpr (kAccumulate)
        dxr[c] = narrow<T>(widen(dxr[c]) + v);
      else
        dxr[c] = narrow<T>(v);
    }
  }
}

}  // namespace

template <typename T>
void rmsnorm_forward(const CpuCtx& ctx, T* y, acc_t<T>* rstd, const T* x, const T* weight, int64_t N, int64_t C,
                     double eps) {
  CLAW_ROUTE_TO_GPU(ctx, T, rmsnorm_forward, y, rstd, x, weight, N, C, eps);
  using A = acc_t<T>;
  parallel_for(ctx, N, row_grain(C), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const T* xr = x + n * C;
      T* yr = y + n * C;
      // Squares are positive, so there is no cancellation; double lanes keep
      // the fp32 sum exact to rounding for any C at negligible cost (the row
      // is in L1).
      const double ss = lane_sum(C, [&](int64_t c) {
        double v = static_cast<double>(widen(xr[c]));
        return v * v;
      });
      const A r = static_cast<A>(1.0 / std::sqrt(ss / static_cast<double>(C) + eps));
      rstd[n] = r;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = narrow<T>(widen(xr[c]) * r * widen(weight[c]));
    }
  });
}

template <typename T>
void rmsnorm_backward(const CpuCtx& ctx, T* dx, acc_t<T>* dweight, const T* dy, const T* x, const T* weight,
                      const acc_t<T>* rstd, int64_t N, int64_t C, bool accumulate_dx) {
  CLAW_ROUTE_TO_GPU(ctx, T, rmsnorm_backward, dx, dweight, dy, x, weight, rstd, N, C, accumulate_dx);
  using A = acc_t<T>;
  if (N <= 0) return;
  // One pass over the rows; dweight summed per chunk of rows in blocks of
  // kRowBlock rows in T, the blocks in double, the chunks in chunk order (fixed
  // result for a given thread count), as in layernorm_backward.
  constexpr int64_t kRowBlock = 32;
  const int64_t chunks = std::clamp<int64_t>(N / row_grain(C), 1, std::max(ctx.num_threads, 1));
  std::vector<A> block_sum(static_cast<size_t>(chunks * C));
  std::vector<double> partial(static_cast<size_t>(chunks * C), 0.0);
  auto* rows = accumulate_dx ? &rms_backward_rows<true, T> : &rms_backward_rows<false, T>;
  parallel_for(ctx, chunks, 1, [&](int64_t kb, int64_t ke) {
    for (int64_t k = kb; k < ke; ++k) {
      A* dw_block = block_sum.data() + k * C;
      double* acc = partial.data() + k * C;
      for (int64_t r0 = N * k / chunks, re = N * (k + 1) / chunks; r0 < re; r0 += kRowBlock) {
        std::fill(dw_block, dw_block + C, A(0));
        rows(dx, dw_block, dy, x, weight, rstd, r0, std::min(re, r0 + kRowBlock), C);
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) acc[c] += static_cast<double>(dw_block[c]);
      }
    }
  });
  parallel_for(ctx, C, 1024, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      double dw = 0;
      for (int64_t k = 0; k < chunks; ++k) dw += partial[k * C + c];
      if (dweight) dweight[c] += static_cast<A>(dw);
    }
  });
}

#define CLAW_INSTANTIATE(T)                                                                                      \
  template void rmsnorm_forward<T>(const CpuCtx&, T*, acc_t<T>*, const T*, const T*, int64_t, int64_t, double); \
  template void rmsnorm_backward<T>(const CpuCtx&, T*, acc_t<T>*, const T*, const T*, const T*, const acc_t<T>*, \
                                    int64_t, int64_t, bool);
CLAW_INSTANTIATE(float)
CLAW_INSTANTIATE(double)
CLAW_INSTANTIATE(bfloat16)
CLAW_INSTANTIATE(float16)
#undef CLAW_INSTANTIATE

}  // namespace claw::kernels
