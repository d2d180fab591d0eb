#include "claw/kernels/cpu/reduce.h"
#include "claw/kernels/cpu/route.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "claw/core/storage.h"
#include "claw/kernels/cpu/vec_math.h"

namespace claw::kernels {
namespace {

// Element-wise loops below this many elements per thread are not worth a
// parallel region (~1 us to start, ~10 ns per 16 elements to run).
constexpr int64_t kGrain = 1 << 14;

// The range [0, n) cut into one chunk per thread. Reductions keep one partial
// per chunk and combine the partials in chunk order, so the result depends on
// the thread count but not on scheduling.
int64_t num_chunks(const CpuCtx& ctx, int64_t n) {
  return std::clamp<int64_t>(n / kGrain, 1, std::max(ctx.num_threads, 1));
}
int64_t chunk_begin(int64_t k, int64_t chunks, int64_t n) { return n * k / chunks; }

}  // namespace

template <typename T>
double sum_squares(const CpuCtx& ctx, const T* x, int64_t n) {
  CLAW_ROUTE_TO_GPU(ctx, T, sum_squares, x, n);
  if (n <= 0) return 0.0;
  int64_t chunks = num_chunks(ctx, n);
  std::vector<double> partial(chunks, 0.0);
  parallel_for(ctx, chunks, 1, [&](int64_t kb, int64_t ke) {
    for (int64_t k = kb; k < ke; ++k) {
      const T* xk = x + chunk_begin(k, chunks, n);
      partial[k] = lane_sum(chunk_begin(k + 1, chunks, n) - chunk_begin(k, chunks, n), [&](int64_t i) {
        double v = static_cast<double>(widen(xk[i]));
        return v * v;
      });
    }
  });
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

template <typename T>
void add(const CpuCtx& ctx, T* out, const T* a, const T* b, int64_t n) {
  CLAW_ROUTE_TO_GPU(ctx, T, add, out, a, b, n);
  parallel_for(ctx, n, kGrain, [&](int64_t lo, int64_t hi) {
    // omp simd: out may alias a or b exactly, which a compiler's overlap
    // check would send down the scalar path; same-index aliasing is safe.
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) out[i] = narrow<T>(widen(a[i]) + widen(b[i]));
  });
}

template <typename T>
void axpy(const CpuCtx& ctx, T* y, acc_t<T> alpha, const T* x, int64_t n) {
  CLAW_ROUTE_TO_GPU(ctx, T, axpy, y, alpha, x, n);
  parallel_for(ctx, n, kGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) y[i] = narrow<T>(widen(y[i]) + alpha * widen(x[i]));
  });
}

template <typename T>
void scale(const CpuCtx& ctx, T* x, acc_t<T> alpha, int64_t n) {
  CLAW_ROUTE_TO_GPU(ctx, T, scale, x, alpha, n);
  parallel_for(ctx, n, kGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) x[i] = narrow<T>(widen(x[i]) * alpha);
  });
}

template <typename T>
int64_t first_non_finite(const CpuCtx& ctx, const T* x, int64_t n) {
  CLAW_ROUTE_TO_GPU(ctx, T, first_non_finite, x, n);
  if (n <= 0) return -1;
  // Each chunk screens blocks branch-free (vectorises; an early-exit loop
  // would not) and rescans only the first block that has a hit. The answer is
  // the hit of the lowest chunk that has one.
  constexpr int64_t kBlock = 1024;
  const int64_t chunks = num_chunks(ctx, n);
  std::vector<int64_t> first(chunks, -1);
  parallel_for(ctx, chunks, 1, [&](int64_t kb, int64_t ke) {
    for (int64_t k = kb; k < ke; ++k) {
      const int64_t e = chunk_begin(k + 1, chunks, n);
      for (int64_t b = chunk_begin(k, chunks, n); b < e && first[k] < 0; b += kBlock) {
        const T* xb = x + b;
        const int64_t nb = std::min(kBlock, e - b);
        // x - x is 0 for finite x and NaN for NaN and +-Inf (never folded
        // without -ffast-math), so the block sum is 0 exactly when all are finite.
        acc_t<T> poison = 0;
#pragma omp simd reduction(+ : poison)
        for (int64_t i = 0; i < nb; ++i) poison += widen(xb[i]) - widen(xb[i]);
        if (poison == 0) continue;
        for (int64_t i = 0; i < nb; ++i)
          if (!std::isfinite(widen(xb[i]))) {
            first[k] = b + i;
            break;
          }
      }
    }
  });
  for (int64_t f : first)
    if (f >= 0) return f;
  return -1;
}

template <typename T>
double sum(const CpuCtx& ctx, const T* x, int64_t n) {
  CLAW_ROUTE_TO_GPU(ctx, T, sum, x, n);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += widen(x[i]);
  return total;
}

template <typename T>
void mul(const CpuCtx& ctx, T* x, const acc_t<T>* w, int64_t n) {
  CLAW_ROUTE_TO_GPU(ctx, T, mul, x, w, n);
  for (int64_t i = 0; i < n; ++i) x[i] = narrow<T>(widen(x[i]) * w[i]);
}

template <typename T>
void scale_rows(const CpuCtx& ctx, T* x, const acc_t<T>* w, int64_t rows, int64_t cols) {
  CLAW_ROUTE_TO_GPU(ctx, T, scale_rows, x, w, rows, cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = narrow<T>(widen(x[r * cols + c]) * w[r]);
}

#define CLAW_INSTANTIATE(T)                                                    \
  template double sum<T>(const CpuCtx&, const T*, int64_t);                    \
  template void mul<T>(const CpuCtx&, T*, const acc_t<T>*, int64_t);           \
  template void scale_rows<T>(const CpuCtx&, T*, const acc_t<T>*, int64_t, int64_t); \
  template double sum_squares<T>(const CpuCtx&, const T*, int64_t);            \
  template void add<T>(const CpuCtx&, T*, const T*, const T*, int64_t);        \
  template void axpy<T>(const CpuCtx&, T*, acc_t<T>, const T*, int64_t);       \
  template void scale<T>(const CpuCtx&, T*, acc_t<T>, int64_t);                \
  template int64_t first_non_finite<T>(const CpuCtx&, const T*, int64_t);
CLAW_INSTANTIATE(float)
CLAW_INSTANTIATE(double)
CLAW_INSTANTIATE(bfloat16)
CLAW_INSTANTIATE(float16)
#undef CLAW_INSTANTIATE

}  // namespace claw::kernels
