#include "claw/kernels/cpu/layernorm.h"
#include "claw/kernels/cpu/route.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "claw/core/storage.h"
#include "claw/kernels/cpu/rows.h"
#include "claw/kernels/cpu/vec_math.h"

namespace claw::kernels {
namespace {

// Mean and variance of one row with one read of the row from memory. The row
// is cut into blocks that stay in L1; each block's mean and centred sum of
// squares come from two sweeps over the block, and blocks are merged with
// Chan, Golub & LeVeque's pairwise update (1979). Unlike E[x^2] - E[x]^2 no two
// large sums are ever subtracted, so the variance stays accurate when
// |mean| >> std (residual streams with outlier channels).
// The block sum is taken in double so the mean is exact to the rounding of T.
// The centred squares keep T's full SIMD width: x - mb is exact in T when x is
// within a factor 2 of mb, and centring on mb rounded to T adds only
// nb (mean - mb)^2 <= nb ulp(mean)^2 / 4 to the block's M2.
template <typename T>
void row_moments(const T* x, int64_t C, double& mean_out, double& var_out) {
  constexpr int64_t kBlock = 256;
  double mean = 0.0, m2 = 0.0;
  int64_t count = 0;
  for (int64_t b = 0; b < C; b += kBlock) {
    int64_t nb = std::min(kBlock, C - b);
    const T* xb = x + b;
    const double mbd =
        lane_sum(nb, [&](int64_t c) { return static_cast<double>(widen(xb[c])); }) / static_cast<double>(nb);
    using A = acc_t<T>;
    const A mb = static_cast<A>(mbd);
    A q = 0;
#pragma omp simd reduction(+ : q)
    for (int64_t c = 0; c < nb; ++c) q += (widen(xb[c]) - mb) * (widen(xb[c]) - mb);
    double delta = mbd - mean;
    int64_t merged = count + nb;
    mean += delta * static_cast<double>(nb) / static_cast<double>(merged);
    m2 += static_cast<double>(q) + delta * delta * static_cast<double>(count) * static_cast<double>(nb) /
                                       static_cast<double>(merged);
    count = merged;
  }
  mean_out = mean;
  var_out = m2 / static_cast<double>(C);
}

template <bool kAccumulate, typename T, typename A = acc_t<T>>
void backward_rows(T* dx, A* dw_part, A* db_part, const T* dy, const T* x, const T* weight, const A* mean,
                   const A* rstd, int64_t rb, int64_t re, int64_t C) {
  const A inv_c = A(1) / static_cast<A>(C);
  for (int64_t n = rb; n < re; ++n) {
    const T* xr = x + n * C;
    const T* dyr = dy + n * C;
    T* dxr = dx + n * C;
    const A m = mean[n], r = rstd[n];
    A sum_g = 0, sum_gx = 0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int64_t c = 0; c < C; ++c) {
      A g = widen(dyr[c]) * widen(weight[c]);
      sum_g += g;
      sum_gx += g * ((widen(xr[c]) - m) * r);
    }
    const A mean_g = sum_g * inv_c, mean_gx = sum_gx * inv_c;
    // The row is still in cache (L1 up to C ~ 3K): this sweep adds no memory traffic.
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      A xhat = (widen(xr[c]) - m) * r;
      A d = widen(dyr[c]);
      A v = r * (d * widen(weight[c]) - mean_g - xhat * mean_gx);
      dw_part[c] += d * xhat;
      db_part[c] += d;
      if constexpr (kAccumulate)
        dxr[c] = narrow<T>(widen(dxr[c]) + v);
      else
        dxr[c] = narrow<T>(v);
    }
  }
}

}  // namespace

template <typename T>
void layernorm_forward(const CpuCtx& ctx, T* y, acc_t<T>* mean, acc_t<T>* rstd, const T* x, const T* weight,
                       const T* bias, int64_t N, int64_t C, double eps) {
  CLAW_ROUTE_TO_GPU(ctx, T, layernorm_forward, y, mean, rstd, x, weight, bias, N, C, eps);
  using A = acc_t<T>;
  parallel_for(ctx, N, row_grain(C), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const T* xr = x + n * C;
      T* yr = y + n * C;
      double mu, var;
      row_moments(xr, C, mu, var);
      const A m = static_cast<A>(mu), r = static_cast<A>(1.0 / std::sqrt(var + eps));
      mean[n] = m;
      rstd[n] = r;
      if (bias) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yr[c] = narrow<T>((widen(xr[c]) - m) * r * widen(weight[c]) + widen(bias[c]));
      } else {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yr[c] = narrow<T>((widen(xr[c]) - m) * r * widen(weight[c]));
      }
    }
  });
}

template <typename T>
void layernorm_backward(const CpuCtx& ctx, T* dx, acc_t<T>* dweight, acc_t<T>* dbias, const T* dy, const T* x,
                        const T* weight, const acc_t<T>* mean, const acc_t<T>* rstd, int64_t N, int64_t C,
                        bool accumulate_dx) {
  CLAW_ROUTE_TO_GPU(ctx, T, layernorm_backward, dx, dweight, dbias, dy, x, weight, mean, rstd, N, C, accumulate_dx);
  using A = acc_t<T>;
  if (N <= 0) return;
  // One pass over the rows. dweight/dbias are sums over all N rows: each chunk
  // of rows (one per thread) sums blocks of kRowBlock rows in T, at full SIMD
  // width, and adds each block's sum into a double partial, so the fp32 error
  // grows with the block length and not with N. The chunks' partials are then
  // added in chunk order: the result is fixed for a given thread count.
  constexpr int64_t kRowBlock = 32;
  const int64_t chunks = std::clamp<int64_t>(N / row_grain(C), 1, std::max(ctx.num_threads, 1));
  std::vector<A> block_sum(static_cast<size_t>(chunks * 2 * C));
  std::vector<double> partial(static_cast<size_t>(chunks * 2 * C), 0.0);
  auto* rows = accumulate_dx ? &backward_rows<true, T> : &backward_rows<false, T>;
  parallel_for(ctx, chunks, 1, [&](int64_t kb, int64_t ke) {
    for (int64_t k = kb; k < ke; ++k) {
      A* dw_block = block_sum.data() + k * 2 * C;  // dweight then dbias
      double* acc = partial.data() + k * 2 * C;
      for (int64_t r0 = N * k / chunks, re = N * (k + 1) / chunks; r0 < re; r0 += kRowBlock) {
        std::fill(dw_block, dw_block + 2 * C, A(0));
        rows(dx, dw_block, dw_block + C, dy, x, weight, mean, rstd, r0, std::min(re, r0 + kRowBlock), C);
#pragma omp simd
        for (int64_t c = 0; c < 2 * C; ++c) acc[c] += static_cast<double>(dw_block[c]);
      }
    }
  });
  parallel_for(ctx, C, 1024, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      double dw = 0, db = 0;
      for (int64_t k = 0; k < chunks; ++k) {
        dw += partial[k * 2 * C + c];
        db += partial[k * 2 * C + C + c];
      }
      if (dweight) dweight[c] += static_cast<A>(dw);
      if (dbias) dbias[c] += static_cast<A>(db);
    }
  });
}

#define CLAW_INSTANTIATE(T)                                                                                     \
  template void layernorm_forward<T>(const CpuCtx&, T*, acc_t<T>*, acc_t<T>*, const T*, const T*, const T*,    \
                                     int64_t, int64_t, double);                                                 \
  template void layernorm_backward<T>(const CpuCtx&, T*, acc_t<T>*, acc_t<T>*, const T*, const T*, const T*,    \
                                      const acc_t<T>*, const acc_t<T>*, int64_t, int64_t, bool);
CLAW_INSTANTIATE(float)
CLAW_INSTANTIATE(double)
CLAW_INSTANTIATE(bfloat16)
CLAW_INSTANTIATE(float16)
#undef CLAW_INSTANTIATE

}  // namespace claw::kernels
