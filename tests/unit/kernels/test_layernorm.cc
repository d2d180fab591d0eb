#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "claw/kernels/cpu/layernorm.h"
#include "fd.h"

namespace claw::kernels {
namespace {

using claw::testing::dot;
using claw::testing::fd_max_error;
using claw::testing::max_rel_diff;
using claw::testing::random_vector;

const CpuCtx ctx{2};
constexpr double kEps = 1e-5;

struct Size {
  int64_t N, C;
};
// N = 1, odd N, C not a multiple of 16, and C above the 256-wide block of the
// one-pass moments so that blocks are merged (300 = 256 + 44, 777 = 3 * 256 + 9).
const Size kSizes[] = {{1, 17}, {5, 40}, {3, 300}, {2, 777}};

// Two-pass reference in double: mean, then the centred variance.
void naive_forward(std::vector<double>& y, std::vector<double>& mean, std::vector<double>& rstd,
                   const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                   int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    double r = 1.0 / std::sqrt(v / C + kEps);
    mean[n] = m;
    rstd[n] = r;
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = (x[n * C + c] - m) * r * w[c] + b[c];
  }
}

TEST(LayerNorm, ForwardMatchesTwoPassReference) {
  for (auto [N, C] : kSizes) {
    auto x = random_vector(N * C, 1, -2.0, 3.0), w = random_vector(C, 2), b = random_vector(C, 3);
    std::vector<double> y(N * C), mean(N), rstd(N), y_ref(N * C), mean_ref(N), rstd_ref(N);
    layernorm_forward(ctx, y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, kEps);
    naive_forward(y_ref, mean_ref, rstd_ref, x, w, b, N, C);
    // Same math in double up to summation order: ~C * 2^-53.
    EXPECT_LT(max_rel_diff(mean, mean_ref), 1e-13) << N << "x" << C;
    EXPECT_LT(max_rel_diff(rstd, rstd_ref), 1e-13) << N << "x" << C;
    EXPECT_LT(max_rel_diff(y, y_ref), 1e-13) << N << "x" << C;
  }
}

// L = sum(w_out * layernorm(x)); checks dx, dweight and dbias, with and without bias.
TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  for (auto [N, C] : kSizes) {
    for (bool with_bias : {true, false}) {
      auto x = random_vector(N * C, 4, -2.0, 3.0), w = random_vector(C, 5), b = random_vector(C, 6);
      auto wout = random_vector(N * C, 7);
      std::vector<double> y(N * C), mean(N), rstd(N);
      const double* bias = with_bias ? b.data() : nullptr;
      auto loss = [&] {
        layernorm_forward(ctx, y.data(), mean.data(), rstd.data(), x.data(), w.data(), bias, N, C, kEps);
        return dot(wout, y);
      };
      loss();
      std::vector<double> dx(N * C), dw(C, 0.0), db(C, 0.0);
      layernorm_backward(ctx, dx.data(), dw.data(), with_bias ? db.data() : nullptr, wout.data(), x.data(),
                         w.data(), mean.data(), rstd.data(), N, C, false);
      EXPECT_LT(fd_max_error(x, dx, loss), 1e-6) << N << "x" << C;
      EXPECT_LT(fd_max_error(w, dw, loss), 1e-6) << N << "x" << C;
      if (with_bias) {
        EXPECT_LT(fd_max_error(b, db, loss), 1e-6) << N << "x" << C;
      }
    }
  }
}

// Gradient contract: dweight/dbias accumulate; dx overwrites unless accumulate_dx.
TEST(LayerNorm, BackwardTwiceAccumulatesParamsOverwritesInput) {
  constexpr int64_t N = 7, C = 33;
  auto x = random_vector(N * C, 8), w = random_vector(C, 9), b = random_vector(C, 10);
  auto dy = random_vector(N * C, 11);
  std::vector<double> y(N * C), mean(N), rstd(N);
  layernorm_forward(ctx, y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, kEps);
  std::vector<double> dx(N * C, 123.0), dw(C, 0.0), db(C, 0.0);
  auto backward = [&](bool acc) {
    layernorm_backward(ctx, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                       rstd.data(), N, C, acc);
  };
  backward(false);
  auto dx1 = dx, dw1 = dw, db1 = db;
  backward(false);
  EXPECT_EQ(dx, dx1);
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(dw[c], 2 * dw1[c]);
    EXPECT_EQ(db[c], 2 * db1[c]);
  }
  backward(true);
  for (int64_t i = 0; i < N * C; ++i) EXPECT_EQ(dx[i], 2 * dx1[i]);
}

// The fp32 kernel against the fp64 kernel at a GPT-2 width. fp32 rounding is
// 6e-8; the row sums over C = 768 add at most a few hundred roundings in
// the worst case and ~sqrt(C) typically, so 1e-5 (relative, absolute below 1)
// has margin and still catches any formula or indexing error (O(1) off).
TEST(LayerNorm, Fp32MatchesFp64) {
  constexpr int64_t N = 33, C = 768;
  auto x = random_vector(N * C, 12, -2.0, 3.0), w = random_vector(C, 13), b = random_vector(C, 14);
  auto dy = random_vector(N * C, 15);
  std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end()), bf(b.begin(), b.end()),
      dyf(dy.begin(), dy.end());
  // The reference sees the same (fp32-rounded) inputs.
  std::vector<double> xr(xf.begin(), xf.end()), wr(wf.begin(), wf.end()), br(bf.begin(), bf.end()),
      dyr(dyf.begin(), dyf.end());

  std::vector<float> y(N * C), mean(N), rstd(N), dx(N * C), dw(C, 0.f), db(C, 0.f);
  layernorm_forward(ctx, y.data(), mean.data(), rstd.data(), xf.data(), wf.data(), bf.data(), N, C, kEps);
  layernorm_backward(ctx, dx.data(), dw.data(), db.data(), dyf.data(), xf.data(), wf.data(), mean.data(),
                     rstd.data(), N, C, false);
  std::vector<double> y_d(N * C), mean_d(N), rstd_d(N), dx_d(N * C), dw_d(C, 0.0), db_d(C, 0.0);
  layernorm_forward(ctx, y_d.data(), mean_d.data(), rstd_d.data(), xr.data(), wr.data(), br.data(), N, C, kEps);
  layernorm_backward(ctx, dx_d.data(), dw_d.data(), db_d.data(), dyr.data(), xr.data(), wr.data(), mean_d.data(),
                     rstd_d.data(), N, C, false);
  EXPECT_LT(max_rel_diff(y, y_d), 1e-5);
  EXPECT_LT(max_rel_diff(mean, mean_d), 1e-5);
  EXPECT_LT(max_rel_diff(rstd, rstd_d), 1e-5);
  EXPECT_LT(max_rel_diff(dx, dx_d), 1e-5);
  // dweight/dbias sum N = 33 rows of O(1) terms: relative to their O(sqrt(N)) size.
  EXPECT_LT(max_rel_diff(dw, dw_d), 1e-5);
  EXPECT_LT(max_rel_diff(db, db_d), 1e-5);
}

// Rows far from zero (|mean| = 1000 std, like outlier channels of a residual
// stream). E[x^2] - E[x]^2 in fp32 would lose ~log2(10^6) = 20 of 24 bits of
// the variance (error ~6%); the one-pass blocked moments keep rstd to fp32
// rounding: 1e-5 relative, as above.
TEST(LayerNorm, Fp32VarianceAccurateFarFromZero) {
  constexpr int64_t N = 4, C = 1000;
  auto x = random_vector(N * C, 16, 999.0, 1001.0);
  std::vector<float> xf(x.begin(), x.end()), wf(C, 1.f), bf(C, 0.f), y(N * C), mean(N), rstd(N);
  std::vector<double> xr(xf.begin(), xf.end()), wr(C, 1.0), br(C, 0.0), y_ref(N * C), mean_ref(N), rstd_ref(N);
  layernorm_forward(ctx, y.data(), mean.data(), rstd.data(), xf.data(), wf.data(), bf.data(), N, C, kEps);
  naive_forward(y_ref, mean_ref, rstd_ref, xr, wr, br, N, C);
  EXPECT_LT(max_rel_diff(rstd, rstd_ref), 1e-5);
  EXPECT_LT(max_rel_diff(mean, mean_ref), 1e-7);
  // y = (x - mean) * rstd is limited by the fp32 mean itself: half an ulp of
  // 1000 (3.1e-5) times rstd (~1.7), plus the rstd error above.
  EXPECT_LT(max_rel_diff(y, y_ref), 1e-4);
}

}  // namespace
}  // namespace claw::kernels
