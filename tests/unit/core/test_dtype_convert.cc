#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "claw/core/dtype_convert.h"
#include "claw/core/error.h"

namespace claw {
namespace {

struct Narrow {
  const char* name;
  int bits;
  float (*decode)(uint32_t);
  uint32_t (*encode)(float);
  bool nan(uint32_t h) const { return std::isnan(decode(h)); }
};

const Narrow kFormats[] = {
    {"bf16", 16, [](uint32_t h) { return bf16_to_f32(uint16_t(h)); }, [](float x) -> uint32_t { return f32_to_bf16(x); }},
    {"f16", 16, [](uint32_t h) { return f16_to_f32(uint16_t(h)); }, [](float x) -> uint32_t { return f32_to_f16(x); }},
    {"e4m3", 8, [](uint32_t h) { return e4m3_to_f32(uint8_t(h)); }, [](float x) -> uint32_t { return f32_to_e4m3(x); }},
    {"e5m2", 8, [](uint32_t h) { return e5m2_to_f32(uint8_t(h)); }, [](float x) -> uint32_t { return f32_to_e5m2(x); }},
};

// Every bit pattern widens and narrows back to itself (NaNs stay NaN).
TEST(DtypeConvert, EveryValueRoundTrips) {
  for (const Narrow& f : kFormats)
    for (uint32_t h = 0; h < (1u << f.bits); ++h) {
      const float x = f.decode(h);
      if (f.nan(h)) {
        EXPECT_TRUE(f.nan(f.encode(x))) << f.name << " " << h;
        continue;
      }
      ASSERT_EQ(f.encode(x), h) << f.name << " pattern " << h << " value " << x;
    }
}

// The inline f16 bit arithmetic equals the generic codec: every f16 pattern
// widens to the same float (bit for bit, NaN to a NaN), and every float whose
// low 12 bits are 0x000, 0x800 (the f16 ties), 0xfff or 0x001 narrows to the
// same pattern, which covers each rounding case in every binade.
TEST(DtypeConvert, FastF16EqualsTheReferenceCodec) {
  for (uint32_t h = 0; h < (1u << 16); ++h) {
    const float a = f16_to_f32(uint16_t(h)), b = f16_to_f32_reference(uint16_t(h));
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(a)) << h;
      continue;
    }
    uint32_t ua, ub;
    std::memcpy(&ua, &a, 4);
    std::memcpy(&ub, &b, 4);
    ASSERT_EQ(ua, ub) << "f16 pattern " << h;
  }
  std::vector<float> xs;
  for (uint32_t hi = 0; hi < (1u << 20); ++hi)
    for (uint32_t lo : {0x000u, 0x001u, 0x7ffu, 0x800u, 0x801u, 0xfffu}) {
      const uint32_t u = hi << 12 | lo;
      float x;
      std::memcpy(&x, &u, 4);
      xs.push_back(x);
      ASSERT_EQ(f32_to_f16(x), f32_to_f16_reference(x)) << "f32 bits " << std::hex << u;
    }
  // The bulk conversions (F16C where built for it) agree with the scalars.
  std::vector<uint16_t> hs(xs.size());
  convert(DType::f32, xs.data(), DType::f16, hs.data(), static_cast<int64_t>(xs.size()));
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(hs[i], f32_to_f16(xs[i])) << "f32 " << xs[i];
  std::vector<uint16_t> every(1u << 16);
  for (uint32_t h = 0; h < every.size(); ++h) every[h] = uint16_t(h);
  std::vector<float> wide(every.size());
  convert(DType::f16, every.data(), DType::f32, wide.data(), static_cast<int64_t>(every.size()));
  for (uint32_t h = 0; h < every.size(); ++h) {
    const float want = f16_to_f32(uint16_t(h));
    ASSERT_EQ(std::memcmp(&wide[h], &want, 4), 0) << "f16 pattern " << h;
  }
}

// Narrowing picks the nearest representable value, ties to the even pattern:
// checked on random floats against the sorted finite values of each format.
TEST(DtypeConvert, NarrowingRoundsToNearestEven) {
  std::mt19937 gen(3);
  for (const Narrow& f : kFormats) {
    std::vector<std::pair<float, uint32_t>> finite;
    for (uint32_t h = 0; h < (1u << f.bits); ++h)
      if (!f.nan(h) && std::isfinite(f.decode(h)) && !(f.decode(h) == 0 && std::signbit(f.decode(h))))
        finite.push_back({f.decode(h), h});
    std::sort(finite.begin(), finite.end());
    const float max = finite.back().first;
    std::uniform_real_distribution<float> mag(-2.0f, std::log2(max) + 0.5f);
    for (int i = 0; i < 20000; ++i) {
      const float x = (i % 2 ? -1.0f : 1.0f) * std::exp2(mag(gen) * (i % 3 ? 1.0f : 6.0f)) ;
      const float a = std::fabs(x);
      auto hi = std::lower_bound(finite.begin(), finite.end(), std::make_pair(a, 0u));
      const float got = std::fabs(f.decode(f.encode(x)));
      if (hi == finite.end()) {  // beyond the largest finite: inf (IEEE) or saturated (e4m3)
        EXPECT_TRUE(std::isinf(got) || got == max) << f.name << " " << x;
        continue;
      }
      if (hi->first == a) {
        EXPECT_EQ(got, a) << f.name;
        continue;
      }
      const float up = hi->first, down = hi == finite.begin() ? 0.0f : std::prev(hi)->first;
      const double du = double(up) - a, dd = double(a) - down;
      if (du < dd) EXPECT_EQ(got, up) << f.name << " " << x;
      if (dd < du) EXPECT_EQ(got, down) << f.name << " " << x;
      if (dd == du) EXPECT_EQ(f.encode(got) & 1, 0u) << f.name << " tie " << x;
    }
  }
}

TEST(DtypeConvert, RangeLimitsAndSpecialValues) {
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(65520.0f))));  // the tie above the largest rounds to inf
  EXPECT_EQ(f16_to_f32(f32_to_f16(std::ldexp(1.0f, -24))), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(448.0f)), 448.0f);
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(1e6f)), 448.0f);  // saturates
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(-std::numeric_limits<float>::infinity())), -448.0f);
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(std::ldexp(1.0f, -9))), std::ldexp(1.0f, -9));
  EXPECT_EQ(f32_to_e4m3(464.0f), f32_to_e4m3(448.0f));  // tie between 448 and 480 goes to the even 448
  EXPECT_EQ(e5m2_to_f32(f32_to_e5m2(57344.0f)), 57344.0f);
  EXPECT_TRUE(std::isinf(e5m2_to_f32(f32_to_e5m2(1e6f))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.00390625f)), 1.0f);  // 1 + 2^-8: a tie, to the even 1.0
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.01171875f)), 1.015625f);  // 1 + 3 * 2^-8: a tie, to the even 1 + 2^-6
}

TEST(DtypeConvert, BulkConvertMatchesScalarsAndRefusesIntegers) {
  std::vector<float> x = {0.1f, -2.5f, 3.14159f, 1e-3f, 300.0f};
  std::vector<uint16_t> b(x.size());
  convert(DType::f32, x.data(), DType::bf16, b.data(), x.size());
  std::vector<uint8_t> e(x.size());
  convert(DType::bf16, b.data(), DType::e4m3, e.data(), x.size());
  std::vector<double> back(x.size());
  convert(DType::e4m3, e.data(), DType::f64, back.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(b[i], f32_to_bf16(x[i]));
    EXPECT_EQ(e[i], f32_to_e4m3(bf16_to_f32(b[i])));
    EXPECT_EQ(back[i], double(e4m3_to_f32(e[i])));
  }
  int32_t n = 3;
  float y;
  EXPECT_THROW(convert(DType::i32, &n, DType::f32, &y, 1), Error);
}

}  // namespace
}  // namespace claw
