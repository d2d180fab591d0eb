#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "claw/core/error.h"
#include "claw/kernels/cpu/cross_entropy.h"
#include "fd.h"

namespace claw::kernels {
namespace {

using claw::testing::fd_max_error;
using claw::testing::max_rel_diff;
using claw::testing::random_vector;

const CpuCtx ctx{2};

// Reference in double: max-shifted log-sum-exp over the first V columns.
double naive_lse(const double* row, int64_t V) {
  double m = *std::max_element(row, row + V), s = 0;
  for (int64_t c = 0; c < V; ++c) s += std::exp(row[c] - m);
  return m + std::log(s);
}

// Fills the vocabulary padding with values that would dominate the softmax
// (or poison it) if the kernel looked at them.
template <typename T>
void poison_padding(std::vector<T>& logits, int64_t N, int64_t V, int64_t Vp) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = V; c < Vp; ++c)
      logits[n * Vp + c] = (c % 2) ? T(1e4) : std::numeric_limits<T>::quiet_NaN();
}

// L = dloss_scale * sum_n losses_n; d/dlogits over all Vp columns (padding
// columns must get exactly 0), with an ignored row.
TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  constexpr int64_t N = 5, V = 7, Vp = 9;
  const std::vector<int32_t> targets = {3, 0, -100, 6, 3};
  const double scale = 0.37;
  auto logits = random_vector(N * Vp, 1, -3.0, 3.0);
  for (int64_t n = 0; n < N; ++n) logits[n * Vp + 7] = 1e3;  // huge but finite: FD can perturb it
  std::vector<double> losses(N), lse(N);
  auto loss = [&] {
    cross_entropy_forward(ctx, losses.data(), lse.data(), logits.data(), targets.data(), N, V, Vp);
    double s = 0;
    for (double l : losses) s += scale * l;
    return s;
  };
  loss();
  std::vector<double> dlogits(N * Vp, std::numeric_limits<double>::quiet_NaN());
  cross_entropy_backward(ctx, dlogits.data(), logits.data(), lse.data(), targets.data(), scale, N, V, Vp);
  EXPECT_LT(fd_max_error(logits, dlogits, loss), 1e-6);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < Vp; ++c)
      if (c >= V || targets[n] < 0) {
        EXPECT_EQ(dlogits[n * Vp + c], 0.0) << n << "," << c;
      }
  EXPECT_EQ(losses[2], 0.0);
}

// One row, V = 1 (the softmax of a single class is 1: loss 0, gradient 0).
TEST(CrossEntropy, SingleRowSingleClass) {
  std::vector<float> logits = {3.5f, 1e4f}, losses(1), lse(1), dlogits(2, 7.f);
  const std::vector<int32_t> targets = {0};
  cross_entropy_forward(ctx, losses.data(), lse.data(), logits.data(), targets.data(), 1, 1, 2);
  cross_entropy_backward(ctx, dlogits.data(), logits.data(), lse.data(), targets.data(), 1.f, 1, 1, 2);
  EXPECT_EQ(lse[0], 3.5f);
  EXPECT_EQ(losses[0], 0.f);
  EXPECT_EQ(dlogits[0], 0.f);
  EXPECT_EQ(dlogits[1], 0.f);
}

// Rows wider than the kernel's 2048-column block (V = 5000: 3 blocks) with the
// row maximum in the first, middle or last block, large offsets (e^1000
// overflows any naive sum) and poisoned padding.
TEST(CrossEntropy, ForwardMatchesNaiveLogSumExp) {
  constexpr int64_t N = 4, V = 5000, Vp = 5056;
  const std::vector<int32_t> targets = {0, 4999, 2500, -1};
  auto logits = random_vector(N * Vp, 2, -10.0, 10.0);
  logits[0 * Vp + 10] = 30.0;
  logits[1 * Vp + 2100] = 30.0;
  logits[2 * Vp + 4990] = 30.0;
  for (int64_t c = 0; c < V; ++c) logits[3 * Vp + c] += 1000.0;
  poison_padding(logits, N, V, Vp);
  std::vector<double> losses(N), lse(N);
  cross_entropy_forward(ctx, losses.data(), lse.data(), logits.data(), targets.data(), N, V, Vp);
  for (int64_t n = 0; n < N; ++n) {
    double ref = naive_lse(logits.data() + n * Vp, V);
    // Same math up to summation order over 5000 terms: ~1e-13 relative.
    EXPECT_NEAR(lse[n], ref, 1e-12 * std::abs(ref)) << n;
    double loss_ref = targets[n] < 0 ? 0.0 : ref - logits[n * Vp + targets[n]];
    EXPECT_NEAR(losses[n], loss_ref, 1e-12 * std::max(1.0, std::abs(ref))) << n;
  }
}

// fp32 (fast_exp) against fp64 at GPT-2's vocabulary, padded to 50304.
TEST(CrossEntropy, Fp32MatchesFp64AtGpt2Vocab) {
  constexpr int64_t N = 3, V = 50257, Vp = 50304;
  const std::vector<int32_t> targets = {17, 50256, -1};
  auto logits_d = random_vector(N * Vp, 3, -8.0, 8.0);
  std::vector<float> logits(logits_d.begin(), logits_d.end());
  poison_padding(logits, N, V, Vp);
  std::vector<double> ref(logits.begin(), logits.end());
  std::vector<float> losses(N), lse(N), dlogits(N * Vp);
  std::vector<double> losses_d(N), lse_d(N), dlogits_d(N * Vp);
  const double scale = 1.0 / 1024;
  cross_entropy_forward(ctx, losses.data(), lse.data(), logits.data(), targets.data(), N, V, Vp);
  cross_entropy_backward(ctx, dlogits.data(), logits.data(), lse.data(), targets.data(), static_cast<float>(scale),
                         N, V, Vp);
  cross_entropy_forward(ctx, losses_d.data(), lse_d.data(), ref.data(), targets.data(), N, V, Vp);
  cross_entropy_backward(ctx, dlogits_d.data(), ref.data(), lse_d.data(), targets.data(), scale, N, V, Vp);
  // lse ~ 14: fp32 holds it to 1e-6; the block sums of 2048 exps carry ~1e-6
  // more. 1e-5 relative has margin and catches any lost or extra term (> 1e-5
  // of the sum for these logits).
  EXPECT_LT(max_rel_diff(lse, lse_d), 1e-5);
  EXPECT_LT(max_rel_diff(losses, losses_d), 1e-5);
  // Each softmax term exp(x - lse) inherits lse's absolute error (1e-6 at
  // lse ~ 14) as a relative error, plus fast_exp's few ulp: 1e-5 relative to
  // each element (floor far below the entries' size, ~1e-9 scaled).
  EXPECT_LT(max_rel_diff(dlogits, dlogits_d, 1e-15), 1e-5);
}

// dlogits may alias logits: the in-place gradient equals the out-of-place one.
TEST(CrossEntropy, InPlaceGradientMatchesOutOfPlace) {
  constexpr int64_t N = 6, V = 3001, Vp = 3072;
  const std::vector<int32_t> targets = {0, 3000, -5, 1234, 7, 2999};
  auto ld = random_vector(N * Vp, 4, -5.0, 5.0);
  std::vector<float> logits(ld.begin(), ld.end());
  poison_padding(logits, N, V, Vp);
  std::vector<float> losses(N), lse(N), dlogits(N * Vp);
  cross_entropy_forward(ctx, losses.data(), lse.data(), logits.data(), targets.data(), N, V, Vp);
  cross_entropy_backward(ctx, dlogits.data(), logits.data(), lse.data(), targets.data(), 0.5f, N, V, Vp);
  cross_entropy_backward(ctx, logits.data(), logits.data(), lse.data(), targets.data(), 0.5f, N, V, Vp);
  EXPECT_EQ(logits, dlogits);
  // Each kept row's gradient sums to dloss * (1 - 1) = 0. In fp32 the
  // probabilities sum to 1 within lse's error (half an ulp of lse ~ 11 is
  // 4.8e-7, plus ~1e-6 from the block sums), so |sum| <= 0.5 * 2e-6.
  for (int64_t n = 0; n < N; ++n) {
    double s = 0;
    for (int64_t c = 0; c < Vp; ++c) s += dlogits[n * Vp + c];
    EXPECT_NEAR(s, 0.0, 1e-6) << n;
  }
}

// The exact forward (an RL learner's): each loss is the sampler's
// log-probability negated (LogSoftmaxRow, to the bit), lse its max + log_z,
// both within fp32 rounding of the fast kernel's; padding columns unread.
TEST(CrossEntropy, ExactForwardIsTheLogSoftmaxRowsFigure) {
  constexpr int64_t N = 3, V = 5000, Vp = 5056;
  const std::vector<int32_t> targets = {3, 4999, -1};
  auto logits_d = random_vector(N * Vp, 5, -10.0, 10.0);
  std::vector<float> logits(logits_d.begin(), logits_d.end());
  poison_padding(logits, N, V, Vp);
  std::vector<float> losses(N), lse(N), fast_losses(N), fast_lse(N);
  cross_entropy_forward_exact(ctx, losses.data(), lse.data(), logits.data(), targets.data(), N, V, Vp);
  cross_entropy_forward(ctx, fast_losses.data(), fast_lse.data(), logits.data(), targets.data(), N, V, Vp);
  for (int64_t n = 0; n < N; ++n) {
    const LogSoftmaxRow norm(logits.data() + n * Vp, V);
    EXPECT_EQ(lse[n], static_cast<float>(norm.max + norm.log_z)) << n;
    if (targets[n] >= 0)
      EXPECT_EQ(-losses[n], static_cast<float>(norm.logprob(logits[n * Vp + targets[n]]))) << n;
    else
      EXPECT_EQ(losses[n], 0.0f);
    EXPECT_NEAR(lse[n], fast_lse[n], 1e-5 * std::abs(fast_lse[n])) << n;
    EXPECT_NEAR(losses[n], fast_losses[n], 1e-5 * std::max(1.0f, std::abs(fast_losses[n]))) << n;
  }
  EXPECT_THROW(cross_entropy_forward_exact(ctx, losses.data(), lse.data(), logits.data(),
                                           std::vector<int32_t>{1, 5000, 2}.data(), N, V, Vp),
               Error);
}

TEST(CrossEntropy, TargetOutsideVocabularyIsRejected) {
  std::vector<float> logits(2 * 8, 0.f), losses(2), lse(2);
  std::vector<int32_t> targets = {1, 6};  // 6 >= V: a padding column
  EXPECT_THROW(cross_entropy_forward(ctx, losses.data(), lse.data(), logits.data(), targets.data(), 2, 6, 8), Error);
}

}  // namespace
}  // namespace claw::kernels
