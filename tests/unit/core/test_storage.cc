// The kernels' storage types: widen/narrow agree with the checkpoint
// conversions (core/dtype_convert.h) on every 16-bit pattern and on f32
// values around each rounding boundary.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "claw/core/storage.h"

namespace claw {
namespace {

static_assert(std::is_same_v<acc_t<float>, float> && std::is_same_v<acc_t<double>, double>);
static_assert(std::is_same_v<acc_t<bfloat16>, float> && std::is_same_v<acc_t<float16>, float>);
static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2);
static_assert(dtype_of<bfloat16>::value == DType::bf16 && dtype_of<float16>::value == DType::f16);

bool same_bits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

TEST(Storage, WidenIsExactForEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float b = widen(bfloat16{static_cast<uint16_t>(h)}), f = widen(float16{static_cast<uint16_t>(h)});
    const float bref = bf16_to_f32(static_cast<uint16_t>(h)), fref = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(bref)) {
      ASSERT_TRUE(std::isnan(b)) << h;
    } else {
      ASSERT_TRUE(same_bits(b, bref)) << h;
    }
    if (std::isnan(fref)) {
      ASSERT_TRUE(std::isnan(f)) << h;
    } else {
      ASSERT_TRUE(same_bits(f, fref)) << h;
    }
    // Every finite 16-bit value survives the round trip.
    if (!std::isnan(bref)) ASSERT_EQ(narrow<bfloat16>(b).bits, h) << h;
    if (!std::isnan(fref)) ASSERT_EQ(narrow<float16>(f).bits, h) << h;
  }
}

TEST(Storage, NarrowMatchesTheCheckpointConversion) {
  // Values on, just below and just above each bf16 halfway point, plus a
  // random sweep over all exponents, infinities and NaNs of both signs.
  std::vector<float> xs = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                           -std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::denorm_min(), 65504.0f, 65520.0f, 1e-8f};
  std::mt19937 gen(7);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = gen();
    xs.push_back(std::bit_cast<float>(u));
    xs.push_back(std::bit_cast<float>((u & 0xffff0000u) | 0x8000u));  // a tie for bf16
    xs.push_back(std::bit_cast<float>((u & 0xffff0000u) | 0x7fffu));
    xs.push_back(std::bit_cast<float>((u & 0xffffe000u) | 0x1000u));  // a tie for f16 (normal range)
  }
  for (float x : xs) {
    ASSERT_EQ(narrow<bfloat16>(x).bits, f32_to_bf16(x)) << x;
    ASSERT_EQ(narrow<float16>(x).bits, f32_to_f16(x)) << x;
  }
  // Ties go to even; a NaN stays a NaN with its sign.
  EXPECT_EQ(narrow<bfloat16>(std::bit_cast<float>(0x3f808000u)).bits, 0x3f80);
  EXPECT_EQ(narrow<bfloat16>(std::bit_cast<float>(0x3f818000u)).bits, 0x3f82);
  EXPECT_TRUE(std::isnan(widen(narrow<bfloat16>(-std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::signbit(widen(narrow<bfloat16>(-std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Storage, FloatAndDoubleAreTheIdentity) {
  EXPECT_EQ(widen(0.1f), 0.1f);
  EXPECT_EQ(narrow<double>(0.1), 0.1);
  EXPECT_EQ(narrow<float>(1.0f / 3.0f), 1.0f / 3.0f);
}

}  // namespace
}  // namespace claw
