#include "claw/kernels/cpu/rowwise_linear.h"

#include <algorithm>

#include "claw/kernels/cpu/fixed_order_dot.h"

namespace claw::kernels {
namespace {

using fixed_order::fold;
using fixed_order::load;
using fixed_order::V16;

// out[i][j] = dot(x_i, w_j) + bias_j for MR rows of x and NR rows of w.
template <int MR, int NR>
void tile(float* out, int64_t ldo, const float* x, const float* w, const float* bias, int64_t K) {
  V16 acc[MR][NR] = {};
  const int64_t K16 = K / 16 * 16;
  for (int64_t k = 0; k < K16; k += 16) {
    V16 xv[MR], wv[NR];
    for (int i = 0; i < MR; ++i) xv[i] = load(x + i * K + k);
    for (int j = 0; j < NR; ++j) wv[j] = load(w + j * K + k);
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] += xv[i] * wv[j];
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      float s = fold(acc[i][j]);  // then the tail, as fixed_order::dot does
      for (int64_t k = K16; k < K; ++k) s += x[i * K + k] * w[j * K + k];
      out[i * ldo + j] = bias ? s + bias[j] : s;
    }
}

template <int MR>
void row_tile(float* out, int64_t ldo, const float* x, const float* w, const float* bias, int64_t K, int nr) {
  switch (nr) {
    case 4: return tile<MR, 4>(out, ldo, x, w, bias, K);
    case 3: return tile<MR, 3>(out, ldo, x, w, bias, K);
    case 2: return tile<MR, 2>(out, ldo, x, w, bias, K);
    default: return tile<MR, 1>(out, ldo, x, w, bias, K);
  }
}

void any_tile(float* out, int64_t ldo, const float* x, const float* w, const float* bias, int64_t K, int mr, int nr) {
  switch (mr) {
    case 4: return row_tile<4>(out, ldo, x, w, bias, K, nr);
    case 3: return row_tile<3>(out, ldo, x, w, bias, K, nr);
    case 2: return row_tile<2>(out, ldo, x, w, bias, K, nr);
    default: return row_tile<1>(out, ldo, x, w, bias, K, nr);
  }
}

}  // namespace

void rowwise_linear_forward(const CpuCtx& ctx, float* out, const float* inp, const float* weight, const float* bias,
                            int64_t M, int64_t K, int64_t N) {
  constexpr int64_t kMr = 4, kNr = 4;
  // A task is a panel of weight rows (~256 KiB, kept in L2 while every input
  // row passes over it), smaller when there are fewer panels than threads.
  const int64_t panel = std::max<int64_t>(kNr, (256 << 10) / (4 * std::max<int64_t>(K, 1)) / kNr * kNr);
  const int64_t share = (N + ctx.num_threads - 1) / std::max(ctx.num_threads, 1);
  const int64_t per = std::clamp<int64_t>((share + kNr - 1) / kNr * kNr, kNr, panel);
  const int64_t chunks = (N + per - 1) / per;
  parallel_for_dynamic(ctx, chunks, [&](int64_t c) {
    const int64_t n0 = c * per, n1 = std::min(N, n0 + per);
    for (int64_t m = 0; m < M; m += kMr) {
      const int mr = static_cast<int>(std::min(kMr, M - m));
      for (int64_t n = n0; n < n1; n += kNr) {
        const int nr = static_cast<int>(std::min(kNr, n1 - n));
        any_tile(out + m * N + n, N, inp + m * K, weight + n * K, bias ? bias + n : nullptr, K, mr, nr);
      }
    }
  });
}

}  // namespace claw::kernels
