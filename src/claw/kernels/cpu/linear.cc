#include "claw/kernels/cpu/linear.h"
#include "claw/kernels/cpu/route.h"
#include "claw/kernels/cpu/staging.h"

#include <algorithm>
#include <vector>

#include "claw/core/storage.h"
#include "claw/kernels/cpu/blas.h"

namespace claw::kernels {

template <typename T>
void linear_forward(const CpuCtx& ctx, T* out, const T* inp, const T* weight, const T* bias, int64_t M,
                    int64_t K, int64_t N) {
  CLAW_ROUTE_TO_GPU(ctx, T, linear_forward, out, inp, weight, bias, M, K, N);
  if constexpr (is_half_storage_v<T>) {
    std::vector<float> x = widened(ctx, inp, M * K), w = widened(ctx, weight, N * K), b = widened(ctx, bias, N);
    std::vector<float> y(static_cast<size_t>(M * N));
    linear_forward<float>(ctx, y.data(), x.data(), w.data(), data_or_null(b), M, K, N);
    narrow_into(ctx, y, out);
  } else {
    T beta = 0;
    if (bias) {
      // Broadcast the bias into out, then let the GEMM accumulate onto it.
      parallel_for(ctx, M, 64, [&](int64_t b, int64_t e) {
        for (int64_t m = b; m < e; ++m) std::copy(bias, bias + N, out + m * N);
      });
      beta = 1;
    }
    gemm(false, true, M, N, K, T(1), inp, K, weight, K, beta, out, N);
  }
}

template <typename T>
void linear_backward_input(const CpuCtx& ctx, T* dinp, const T* dout, const T* weight, int64_t M, int64_t K,
                           int64_t N, bool accumulate) {
  CLAW_ROUTE_TO_GPU(ctx, T, linear_backward_input, dinp, dout, weight, M, K, N, accumulate);
  if constexpr (is_half_storage_v<T>) {
    std::vector<float> dy = widened(ctx, dout, M * N), w = widened(ctx, weight, N * K);
    std::vector<float> dx = accumulate ? widened(ctx, dinp, M * K) : std::vector<float>(static_cast<size_t>(M * K));
    gemm(false, false, M, K, N, 1.0f, dy.data(), N, w.data(), K, accumulate ? 1.0f : 0.0f, dx.data(), K);
    narrow_into(ctx, dx, dinp);
  } else {
    gemm(false, false, M, K, N, T(1), dout, N, weight, K, accumulate ? T(1) : T(0), dinp, K);
  }
}

template <typename T>
void linear_backward_weight(const CpuCtx& ctx, acc_t<T>* dweight, acc_t<T>* dbias, const T* dout, const T* inp,
                            int64_t M, int64_t K, int64_t N) {
  CLAW_ROUTE_TO_GPU(ctx, T, linear_backward_weight, dweight, dbias, dout, inp, M, K, N);
  if constexpr (is_half_storage_v<T>) {
    std::vector<float> dy = widened(ctx, dout, M * N), x = widened(ctx, dweight ? inp : nullptr, M * K);
    linear_backward_weight<float>(ctx, dweight, dbias, dy.data(), data_or_null(x), M, K, N);
  } else {
    if (dweight) gemm(true, false, N, K, M, T(1), dout, N, inp, K, T(1), dweight, K);
    if (dbias) {
      // Column sums: each thread owns a slice of the N columns, so no reduction
      // between threads is needed and the order of summation is fixed.
      parallel_for(ctx, N, 256, [&](int64_t b, int64_t e) {
        for (int64_t m = 0; m < M; ++m) {
          const T* row = dout + m * N;
          for (int64_t n = b; n < e; ++n) dbias[n] += row[n];
        }
      });
    }
  }
}

#define CLAW_INSTANTIATE(T)                                                                              \
  template void linear_forward<T>(const CpuCtx&, T*, const T*, const T*, const T*, int64_t, int64_t, int64_t); \
  template void linear_backward_input<T>(const CpuCtx&, T*, const T*, const T*, int64_t, int64_t, int64_t, bool); \
  template void linear_backward_weight<T>(const CpuCtx&, acc_t<T>*, acc_t<T>*, const T*, const T*, int64_t,   \
                                          int64_t, int64_t);
CLAW_INSTANTIATE(float)
CLAW_INSTANTIATE(double)
CLAW_INSTANTIATE(bfloat16)
CLAW_INSTANTIATE(float16)
#undef CLAW_INSTANTIATE

}  // namespace claw::kernels
