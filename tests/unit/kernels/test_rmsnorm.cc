#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "claw/kernels/cpu/rmsnorm.h"
#include "fd.h"

namespace claw::kernels {
namespace {

using claw::testing::dot;
using claw::testing::fd_max_error;
using claw::testing::max_rel_diff;
using claw::testing::random_vector;

const CpuCtx ctx{2};
constexpr double kEps = 1e-6;

struct Size {
  int64_t N, C;
};
// N = 1, odd N, C not a multiple of 16.
const Size kSizes[] = {{1, 17}, {5, 40}, {3, 301}};

TEST(RMSNorm, ForwardMatchesNaive) {
  for (auto [N, C] : kSizes) {
    auto x = random_vector(N * C, 1, -2.0, 3.0), w = random_vector(C, 2);
    std::vector<double> y(N * C), rstd(N);
    rmsnorm_forward(ctx, y.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
    for (int64_t n = 0; n < N; ++n) {
      double ss = 0;
      for (int64_t c = 0; c < C; ++c) ss += x[n * C + c] * x[n * C + c];
      double r = 1.0 / std::sqrt(ss / C + kEps);
      // Same math in double up to summation order: ~C * 2^-53.
      EXPECT_NEAR(rstd[n], r, 1e-13 * r);
      for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(y[n * C + c], x[n * C + c] * r * w[c], 1e-13);
    }
  }
}

// L = sum(w_out * rmsnorm(x)); checks dx and dweight.
TEST(RMSNorm, BackwardMatchesFiniteDifferences) {
  for (auto [N, C] : kSizes) {
    auto x = random_vector(N * C, 3, -2.0, 3.0), w = random_vector(C, 4), wout = random_vector(N * C, 5);
    std::vector<double> y(N * C), rstd(N);
    auto loss = [&] {
      rmsnorm_forward(ctx, y.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
      return dot(wout, y);
    };
    loss();
    std::vector<double> dx(N * C), dw(C, 0.0);
    rmsnorm_backward(ctx, dx.data(), dw.data(), wout.data(), x.data(), w.data(), rstd.data(), N, C, false);
    EXPECT_LT(fd_max_error(x, dx, loss), 1e-6) << N << "x" << C;
    EXPECT_LT(fd_max_error(w, dw, loss), 1e-6) << N << "x" << C;
  }
}

// Gradient contract: dweight accumulates; dx overwrites unless accumulate_dx.
TEST(RMSNorm, BackwardTwiceAccumulatesParamsOverwritesInput) {
  constexpr int64_t N = 7, C = 33;
  auto x = random_vector(N * C, 6), w = random_vector(C, 7), dy = random_vector(N * C, 8);
  std::vector<double> y(N * C), rstd(N);
  rmsnorm_forward(ctx, y.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  std::vector<double> dx(N * C, 123.0), dw(C, 0.0);
  auto backward = [&](bool acc) {
    rmsnorm_backward(ctx, dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C, acc);
  };
  backward(false);
  auto dx1 = dx, dw1 = dw;
  backward(false);
  EXPECT_EQ(dx, dx1);
  for (int64_t c = 0; c < C; ++c) EXPECT_EQ(dw[c], 2 * dw1[c]);
  backward(true);
  for (int64_t i = 0; i < N * C; ++i) EXPECT_EQ(dx[i], 2 * dx1[i]);
}

// fp32 against fp64 at a Llama-like width. Tolerance 1e-5 (relative, absolute
// below 1): fp32 rounding is 6e-8 and the row sums over C = 4096 add ~sqrt(C)
// roundings typically; a wrong formula is off by O(1).
TEST(RMSNorm, Fp32MatchesFp64) {
  constexpr int64_t N = 9, C = 4096;
  auto x = random_vector(N * C, 9, -2.0, 3.0), w = random_vector(C, 10), dy = random_vector(N * C, 11);
  std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end()), dyf(dy.begin(), dy.end());
  std::vector<double> xr(xf.begin(), xf.end()), wr(wf.begin(), wf.end()), dyr(dyf.begin(), dyf.end());
  std::vector<float> y(N * C), rstd(N), dx(N * C), dw(C, 0.f);
  rmsnorm_forward(ctx, y.data(), rstd.data(), xf.data(), wf.data(), N, C, kEps);
  rmsnorm_backward(ctx, dx.data(), dw.data(), dyf.data(), xf.data(), wf.data(), rstd.data(), N, C, false);
  std::vector<double> y_d(N * C), rstd_d(N), dx_d(N * C), dw_d(C, 0.0);
  rmsnorm_forward(ctx, y_d.data(), rstd_d.data(), xr.data(), wr.data(), N, C, kEps);
  rmsnorm_backward(ctx, dx_d.data(), dw_d.data(), dyr.data(), xr.data(), wr.data(), rstd_d.data(), N, C, false);
  EXPECT_LT(max_rel_diff(y, y_d), 1e-5);
  EXPECT_LT(max_rel_diff(rstd, rstd_d), 1e-5);
  EXPECT_LT(max_rel_diff(dx, dx_d), 1e-5);
  EXPECT_LT(max_rel_diff(dw, dw_d), 1e-5);
}

}  // namespace
}  // namespace claw::kernels
