#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "claw/core/block_formats.h"
#include "claw/core/dtype_convert.h"
#include "claw/core/philox.h"

namespace claw {
namespace {

// The fast grid rounding of the training casts equals the exact casts of
// dtype_convert.h (saturating like e4m3 does) on every code and on random
// floats of every exponent.
TEST(BlockFormats, QuantizeRneEqualsTheExactCasts) {
  std::mt19937 gen(5);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> xs;
  for (uint32_t h = 0; h < 256; ++h) xs.push_back(e4m3_to_f32(uint8_t(h))), xs.push_back(e5m2_to_f32(uint8_t(h)));
  for (uint32_t h = 0; h < 65536; ++h) xs.push_back(f16_to_f32(uint16_t(h)));
  for (int i = 0; i < 300000; ++i) xs.push_back(std::bit_cast<float>(bits(gen)));
  for (float x : xs) {
    const float e4 = std::fabs(x) > 448 && std::isfinite(x) ? std::copysign(448.0f, x) : e4m3_to_f32(f32_to_e4m3(x));
    const float e5 = e5m2_to_f32(f32_to_e5m2(std::fmin(std::fmax(x, -57344.0f), 57344.0f)));
    const float h = f16_to_f32(f32_to_f16(std::fmin(std::fmax(x, -65504.0f), 65504.0f)));
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(quantize_rne(ElemFormat::e4m3, x)));
      continue;
    }
    ASSERT_EQ(quantize_rne(ElemFormat::e4m3, x), e4) << x;
    ASSERT_EQ(quantize_rne(ElemFormat::e5m2, x), e5) << x;
    ASSERT_EQ(quantize_rne(ElemFormat::f16, x), h) << x;
    ASSERT_EQ(e2m1_to_f32(f32_to_e2m1(x)), quantize_rne(ElemFormat::e2m1, x)) << x;
  }
}

TEST(BlockFormats, E2M1RoundsToNearestEven) {
  const std::pair<float, float> cases[] = {{0.25f, 0.0f}, {0.26f, 0.5f}, {0.75f, 1.0f}, {1.25f, 1.0f}, {1.75f, 2.0f},
                                           {2.5f, 2.0f},  {3.5f, 4.0f},  {5.0f, 4.0f},  {5.01f, 6.0f}, {100.0f, 6.0f},
                                           {-2.5f, -2.0f}, {-INFINITY, -6.0f}};
  for (auto [x, want] : cases) EXPECT_EQ(e2m1_to_f32(f32_to_e2m1(x)), want) << x;
}

// E[SR(x)] = x: for values between neighbours of each format, the mean of n
// stochastic roundings is within 5 standard errors (the rounding of one
// value has standard deviation at most gap / 2, so the mean's is at most
// gap / (2 sqrt(n))); at n = 20000 a biased rule (say always up with 51%
// probability at the midpoint) would sit 2.8 standard errors off per value,
// and the summed bias over all values is checked at 5 too.
TEST(BlockFormats, StochasticRoundingIsUnbiased) {
  const RandomStream rng(7, 11);
  std::mt19937 gen(9);
  const int n = 20000;
  uint64_t counter = 0;
  for (ElemFormat f : {ElemFormat::e4m3, ElemFormat::e5m2, ElemFormat::e2m1}) {
    std::uniform_real_distribution<float> mag(-3.0f, std::log2(elem_spec(f).max) - 0.1f);
    double z_sum = 0;
    const int values = 60;
    for (int v = 0; v < values; ++v) {
      const float x = (v % 2 ? -1.0f : 1.0f) * std::exp2(mag(gen));
      const float alt = quantize_stochastic(f, x, 0.999999f);
      const double gap = std::fabs(static_cast<double>(alt) - quantize_stochastic(f, x, 0.0f));
      double sum = 0;
      for (int i = 0; i < n; ++i) {
        const float r = quantize_stochastic(f, x, rng.uniform(counter++));
        ASSERT_TRUE(r == quantize_stochastic(f, x, 0.0f) || r == alt) << x << " -> " << r;
        sum += r;
      }
      if (gap == 0) continue;  // x is representable
      const double se = gap / (2 * std::sqrt(double(n)));
      const double z = (sum / n - x) / se;
      EXPECT_LT(std::fabs(z), 5.0) << elem_format_name(f) << " x=" << x;
      z_sum += z;
    }
    EXPECT_LT(std::fabs(z_sum / std::sqrt(double(values))), 5.0) << elem_format_name(f);
  }
}

TEST(BlockFormats, MxScaleChoice) {
  // floor: 2^(floor(log2 amax) - emax); 448 -> 2^0, 449 -> 2^0 (saturates), 512 -> 2^1.
  EXPECT_EQ(mx_scale_code(ElemFormat::e4m3, 448.0f, MxScaleRule::floor), 127);
  EXPECT_EQ(mx_scale_code(ElemFormat::e4m3, 511.0f, MxScaleRule::floor), 127);
  EXPECT_EQ(mx_scale_code(ElemFormat::e4m3, 512.0f, MxScaleRule::floor), 128);
  EXPECT_EQ(mx_scale_code(ElemFormat::e4m3, 449.0f, MxScaleRule::rceil), 128);  // 449 / 2^0 > 448
  EXPECT_EQ(mx_scale_code(ElemFormat::e4m3, 448.0f, MxScaleRule::rceil), 127);
  EXPECT_EQ(mx_scale_code(ElemFormat::e5m2, 1.0f, MxScaleRule::floor), 127 - 15);
  EXPECT_EQ(mx_scale_code(ElemFormat::e4m3, 0.0f, MxScaleRule::floor), 0);      // 2^-127
  EXPECT_EQ(mx_scale_code(ElemFormat::e4m3, 1e-40f, MxScaleRule::floor), 0);    // clamped
  EXPECT_EQ(mx_scale_code(ElemFormat::e4m3, NAN, MxScaleRule::floor), 0xff);
  EXPECT_EQ(mx_scale_code(ElemFormat::e4m3, INFINITY, MxScaleRule::floor), 0xff);
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xff)));
}

// A round trip through MXFP8 keeps each element within half an element
// quantum of its block's scale (rceil: no saturation), and a block with a
// NaN decodes to NaN.
TEST(BlockFormats, MxRoundTrip) {
  std::mt19937 gen(3);
  std::normal_distribution<float> nd;
  std::vector<float> x(32 * 64), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(gen) * std::exp2(float(int(i / 32) - 32));
  x[40] = NAN;
  std::vector<uint8_t> codes(x.size()), scales(x.size() / 32);
  mx_quantize(ElemFormat::e4m3, x.data(), int64_t(x.size()), codes.data(), scales.data(), 32, MxScaleRule::rceil);
  mx_dequantize(ElemFormat::e4m3, codes.data(), scales.data(), int64_t(x.size()), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    if (i / 32 == 1) {
      EXPECT_TRUE(std::isnan(y[i]));
      continue;
    }
    const float X = e8m0_to_f32(scales[i / 32]);
    const float a = std::fabs(x[i]);
    const float tol = a >= 0.015625f * X ? a / 16 : X * std::ldexp(1.0f, -10);  // 3 mantissa bits, or the subnormal quantum
    EXPECT_LE(std::fabs(y[i] - x[i]), tol * 1.0001f) << i;
  }
}

TEST(BlockFormats, Nvfp4RoundTrip) {
  std::mt19937 gen(4);
  std::normal_distribution<float> nd;
  std::vector<float> x(16 * 50), y(x.size());
  for (float& v : x) v = nd(gen);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  std::vector<uint8_t> codes(x.size()), scales(x.size() / 16);
  nvfp4_quantize(x.data(), int64_t(x.size()), amax, codes.data(), scales.data());
  nvfp4_dequantize(codes.data(), scales.data(), int64_t(x.size()), amax, y.data());
  const float s_enc = nvfp4_tensor_scale(amax);
  for (size_t i = 0; i < x.size(); ++i) {
    // The block's step is at most d / s_enc (between 4 and 6) and d holds the
    // block amax / 6 to E4M3's 1/16: half a step plus the scale's rounding.
    const float d = e4m3_to_f32(scales[i / 16]) / s_enc;
    EXPECT_LE(std::fabs(y[i] - x[i]), d * 1.0f + 1e-6f) << i;
  }
  EXPECT_FLOAT_EQ(s_enc, 2688.0f / amax);
}

}  // namespace
}  // namespace claw
