#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "claw/core/error.h"
#include "claw/kernels/cpu/dropout.h"
#include "fd.h"

namespace claw::kernels {
namespace {

using claw::testing::random_vector;

const CpuCtx ctx{2};
constexpr int64_t kN = 200003;  // several parallel chunks, odd
constexpr uint64_t kIndex0 = 123456789012ull;  // above 2^32: both counter words matter
const RandomStream rng(42, hash_name("test.dropout"));

std::vector<float> random_floats(int64_t n, uint64_t seed) {
  auto d = random_vector(n, seed);
  return {d.begin(), d.end()};
}

TEST(Dropout, ZeroProbabilityIsIdentity) {
  auto x = random_floats(kN, 1);
  std::vector<float> y(kN, -1.f);
  dropout_forward(ctx, y.data(), x.data(), kN, 0.0, rng, kIndex0);
  EXPECT_EQ(y, x);
  auto z = x;
  dropout_forward(ctx, z.data(), z.data(), kN, 0.0, rng, kIndex0);
  EXPECT_EQ(z, x);
  dropout_backward(ctx, y.data(), x.data(), kN, 0.0, rng, kIndex0);
  EXPECT_EQ(y, x);
}

// The mask is exactly the header's definition: keep iff uniform(index0 + i) >= p,
// and kept values are scaled by 1 / (1 - p). p = 0.5 is an exact 24-bit
// threshold and p = 0.3 is not, covering both cases of the integer test.
TEST(Dropout, MatchesDefinition) {
  auto x = random_floats(kN, 2);
  for (double p : {0.5, 0.3}) {
    std::vector<float> y(kN);
    dropout_forward(ctx, y.data(), x.data(), kN, p, rng, kIndex0);
    const float scale = static_cast<float>(1.0 / (1.0 - p));
    for (int64_t i = 0; i < kN; ++i) {
      bool keep = rng.uniform(kIndex0 + i) >= p;
      ASSERT_EQ(y[i], keep ? x[i] * scale : 0.f) << "p=" << p << " i=" << i;
    }
  }
}

// The boundary of the integer threshold: an element whose uniform draw u
// equals p exactly is kept (u >= p), and dropped for p just above u.
TEST(Dropout, DrawEqualToProbabilityIsKept) {
  constexpr int64_t i0 = 11;
  const double u = rng.uniform(kIndex0 + i0);
  ASSERT_GT(u, 0.0);
  std::vector<float> ones(16, 1.f), y(16);
  dropout_forward(ctx, y.data(), ones.data(), 16, u, rng, kIndex0);
  EXPECT_NE(y[i0], 0.f);
  dropout_forward(ctx, y.data(), ones.data(), 16, u + 0.5 / 16777216.0, rng, kIndex0);
  EXPECT_EQ(y[i0], 0.f);
}

// Kept fraction ~ 1 - p: a binomial count has std sqrt(n p (1-p)), i.e. a
// fraction std of ~7e-4 for n = 2e5 and p = 0.1; 5 sigma = 3.5e-3 fails with
// probability < 1e-6 (and the seed is fixed, so the test is deterministic).
TEST(Dropout, KeptFractionIsOneMinusP) {
  std::vector<float> ones(kN, 1.f), y(kN);
  for (double p : {0.1, 0.5, 0.9}) {
    dropout_forward(ctx, y.data(), ones.data(), kN, p, rng, kIndex0);
    int64_t kept = 0;
    for (float v : y) kept += v != 0.f;
    double frac = static_cast<double>(kept) / kN;
    EXPECT_NEAR(frac, 1.0 - p, 5 * std::sqrt(p * (1 - p) / kN)) << "p=" << p;
  }
}

// Backward regenerates the forward's mask: the same elements are zeroed.
TEST(Dropout, ForwardAndBackwardMasksAgree) {
  auto x = random_floats(kN, 3), dy = random_floats(kN, 4);
  std::vector<float> y(kN), dx(kN);
  dropout_forward(ctx, y.data(), x.data(), kN, 0.2, rng, kIndex0);
  dropout_backward(ctx, dx.data(), dy.data(), kN, 0.2, rng, kIndex0);
  int64_t dropped = 0;
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(y[i] == 0.f, dx[i] == 0.f) << i;
    dropped += y[i] == 0.f;
  }
  EXPECT_GT(dropped, 0);
  // In place (dx over dy) gives the same.
  auto dx_inplace = dy;
  dropout_backward(ctx, dx_inplace.data(), dx_inplace.data(), kN, 0.2, rng, kIndex0);
  EXPECT_EQ(dx_inplace, dx);
}

// Given its mask dropout is linear, so backward is checked like any other:
// L = sum(w * dropout(x)) against central differences in double.
TEST(Dropout, BackwardMatchesFiniteDifferences) {
  constexpr int64_t n = 37;
  auto x = random_vector(n, 6), w = random_vector(n, 7);
  std::vector<double> y(n), dx(n);
  auto loss = [&] {
    dropout_forward(ctx, y.data(), x.data(), n, 0.3, rng, kIndex0);
    return claw::testing::dot(w, y);
  };
  dropout_backward(ctx, dx.data(), w.data(), n, 0.3, rng, kIndex0);
  EXPECT_LT(claw::testing::fd_max_error(x, dx, loss), 1e-6);
}

// Layout independence: two halves of a tensor, each with its global index0,
// drop exactly what the whole tensor drops, whatever the thread count.
TEST(Dropout, SplitTensorMatchesWhole) {
  auto x = random_floats(kN, 5);
  std::vector<float> whole(kN), parts(kN);
  dropout_forward(ctx, whole.data(), x.data(), kN, 0.25, rng, kIndex0);
  const int64_t half = kN / 2 + 7;
  dropout_forward(CpuCtx{1}, parts.data(), x.data(), half, 0.25, rng, kIndex0);
  dropout_forward(ctx, parts.data() + half, x.data() + half, kN - half, 0.25, rng, kIndex0 + half);
  EXPECT_EQ(parts, whole);
  // A different index0 or seed gives a different mask.
  std::vector<float> shifted(kN), reseeded(kN);
  dropout_forward(ctx, shifted.data(), x.data(), kN, 0.25, rng, kIndex0 + 1);
  dropout_forward(ctx, reseeded.data(), x.data(), kN, 0.25, RandomStream(43, hash_name("test.dropout")), kIndex0);
  EXPECT_NE(shifted, whole);
  EXPECT_NE(reseeded, whole);
}

TEST(Dropout, ProbabilityOutOfRangeIsRejected) {
  std::vector<double> x(4);
  EXPECT_THROW(dropout_forward(ctx, x.data(), x.data(), 4, 1.0, rng, 0), Error);
  EXPECT_THROW(dropout_forward(ctx, x.data(), x.data(), 4, -0.1, rng, 0), Error);
}

}  // namespace
}  // namespace claw::kernels
