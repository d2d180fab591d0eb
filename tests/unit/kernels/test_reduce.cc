#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "claw/kernels/cpu/reduce.h"
#include "fd.h"

namespace claw::kernels {
namespace {

using claw::testing::random_vector;

const CpuCtx ctx1{1}, ctx2{2};
// Larger than two parallel grains (2 x 16K), odd, so both threads get work
// and the split is uneven.
constexpr int64_t kLarge = 100003;

TEST(Reduce, SumSquaresAccumulatesInDouble) {
  auto xd = random_vector(kLarge, 1, -3.0, 3.0);
  std::vector<float> x(xd.begin(), xd.end());
  long double ref = 0;
  for (float v : x) ref += static_cast<long double>(v) * v;
  // Double accumulation of n squares of fp32 values: relative error <= n * 2^-53
  // (~1e-11) in the worst case; an fp32 accumulator would be off by ~1e-4.
  for (const CpuCtx& c : {ctx1, ctx2}) {
    double s = sum_squares(c, x.data(), kLarge);
    EXPECT_NEAR(s, static_cast<double>(ref), 1e-11 * static_cast<double>(ref));
  }
  // Fixed order for a given thread count: bitwise repeatable.
  EXPECT_EQ(sum_squares(ctx2, x.data(), kLarge), sum_squares(ctx2, x.data(), kLarge));
  EXPECT_EQ(sum_squares(ctx2, x.data(), 0), 0.0);
  EXPECT_EQ(sum_squares(ctx2, xd.data(), 1), xd[0] * xd[0]);
}

TEST(Reduce, AddAxpyScaleMatchNaiveIncludingAliasing) {
  for (int64_t n : {int64_t{1}, int64_t{17}, kLarge}) {
    auto a = random_vector(n, 2), b = random_vector(n, 3);
    std::vector<double> out(n, 0.0);
    add(ctx2, out.data(), a.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]);

    auto a2 = a;  // out aliases a
    add(ctx2, a2.data(), a2.data(), b.data(), n);
    EXPECT_EQ(a2, out);
    auto b2 = b;  // out aliases b
    add(ctx2, b2.data(), a.data(), b2.data(), n);
    EXPECT_EQ(b2, out);

    auto y = b;
    axpy(ctx2, y.data(), 0.75, a.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_DOUBLE_EQ(y[i], b[i] + 0.75 * a[i]);

    auto z = a;
    scale(ctx2, z.data(), -2.5, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(z[i], -2.5 * a[i]);
  }
}

template <typename T>
void check_first_non_finite() {
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  const T big = std::numeric_limits<T>::max();
  std::vector<T> x(kLarge, T(1));
  x[5] = big;  // the largest finite value is finite
  x[6] = -big;
  for (const CpuCtx& c : {ctx1, ctx2}) {
    EXPECT_EQ(first_non_finite(c, x.data(), kLarge), -1);
    EXPECT_EQ(first_non_finite(c, x.data(), 0), -1);
    for (T bad : {nan, inf, -inf}) {
      for (int64_t at : {int64_t{0}, int64_t{1023}, int64_t{1024}, kLarge / 2, kLarge - 1}) {
        auto y = x;
        y[at] = bad;
        EXPECT_EQ(first_non_finite(c, y.data(), kLarge), at) << "value " << bad << " at " << at;
      }
    }
    // Several: the lowest index wins, also across the two threads' halves and
    // inside one block.
    auto y = x;
    y[kLarge - 2] = nan;
    y[kLarge / 2 + 3] = inf;
    y[kLarge / 2 - 3] = -inf;
    EXPECT_EQ(first_non_finite(c, y.data(), kLarge), kLarge / 2 - 3);
    y[kLarge / 2 - 10] = nan;
    EXPECT_EQ(first_non_finite(c, y.data(), kLarge), kLarge / 2 - 10);
  }
}

TEST(Reduce, FirstNonFiniteFindsNanAndInfFloat) { check_first_non_finite<float>(); }
TEST(Reduce, FirstNonFiniteFindsNanAndInfDouble) { check_first_non_finite<double>(); }

}  // namespace
}  // namespace claw::kernels
