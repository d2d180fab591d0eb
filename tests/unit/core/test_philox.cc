#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "claw/core/philox.h"

namespace claw {

// Known-answer test from the Random123 distribution (philox4x32_10, kat_vectors).
TEST(Philox, KnownAnswer) {
  auto out = Philox::generate({0, 0, 0, 0}, 0, 0);
  EXPECT_EQ(out[0], 0x6627e8d5u);
  EXPECT_EQ(out[1], 0xe169c58du);
  EXPECT_EQ(out[2], 0xbc57ac4cu);
  EXPECT_EQ(out[3], 0x9b00dbd8u);
  out = Philox::generate({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(out[0], 0x408f276du);
  EXPECT_EQ(out[1], 0x41c83b0eu);
  EXPECT_EQ(out[2], 0xa20bc7c6u);
  EXPECT_EQ(out[3], 0x6d5451fdu);
}

TEST(Philox, NormalMoments) {
  RandomStream rng(1234, hash_name("test"));
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double x = rng.normal(i);
    s += x;
    s2 += x * x;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.01);
}

// normal()'s own logarithm and cosine against libm's in long double on
// every edge (u = 2^-32 and 1; each quadrant's ends and
// middle) and on a million random words: the logarithm within 2 ulp, the
// cosine within 2e-16.
TEST(Philox, LogAndCosineMatchLibm) {
  // References in long double (64-bit significands), whose arguments are exact.
  auto log_ulps = [](uint32_t b) {
    const long double exact = std::log((static_cast<long double>(b) + 1.0L) * 0x1p-32L);
    if (exact == 0.0L) return detail::log_unit(b) == 0.0 ? 0.0 : 1e9;
    const double e = static_cast<double>(exact);
    return static_cast<double>(std::fabs(detail::log_unit(b) - exact)) / (std::nextafter(std::fabs(e), 1e300) - std::fabs(e));
  };
  auto cos_err = [](uint32_t b) {
    const long double two_pi = 6.283185307179586476925286766559L;
    return static_cast<double>(std::fabs(detail::cos_turn(b) - std::cos(two_pi * (static_cast<long double>(b) * 0x1p-32L))));
  };
  std::vector<uint32_t> words = {0u, 1u, 2u, 0x7FFFFFFFu, 0x80000000u, 0xB504F333u, 0xFFFFFFFEu, 0xFFFFFFFFu};
  for (uint32_t q = 0; q < 4; ++q)
    for (uint32_t f : {0u, 1u, 0x1FFFFFFFu, 0x20000000u, 0x20000001u, 0x3FFFFFFFu}) words.push_back(q << 30 | f);
  const RandomStream rng(99, hash_name("test.libm"));
  for (uint64_t i = 0; i < 1000000; ++i) words.push_back(rng.block(i)[0]);
  double worst_log = 0, worst_cos = 0;
  for (uint32_t b : words) {
    worst_log = std::max(worst_log, log_ulps(b));
    worst_cos = std::max(worst_cos, cos_err(b));
  }
  EXPECT_LE(worst_log, 2.0);
  EXPECT_LE(worst_cos, 2e-16);
  EXPECT_EQ(detail::log_unit(0xFFFFFFFFu), 0.0);  // u = 1: radius 0
  EXPECT_EQ(detail::cos_turn(0u), 1.0);
  EXPECT_EQ(detail::cos_turn(0x80000000u), -1.0);
}

// The deviates are those of the exact formula rounded to float (libm's
// Box-Muller differs from it in about one in ten million), and normals()
// gives normal()'s values bit for bit.
TEST(Philox, NormalIsTheRoundedBoxMullerAndBatchesAgree) {
  const RandomStream rng(7, hash_name("test.normal"));
  constexpr int64_t n = 1000003;  // not a multiple of any vector width
  std::vector<uint64_t> index(n);
  for (int64_t i = 0; i < n; ++i) index[i] = static_cast<uint64_t>(i) * 2654435761u;
  std::vector<float> batch(n);
  rng.normals(index.data(), n, batch.data());
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float one = rng.normal(index[i]);
    ASSERT_EQ(std::memcmp(&one, &batch[i], sizeof one), 0) << "index " << index[i];
    const Philox::Block w = rng.block(index[i]);
    const float libm = static_cast<float>(std::sqrt(-2.0 * std::log((static_cast<double>(w[0]) + 1.0) * 0x1p-32)) *
                                          std::cos(6.283185307179586476925 * (static_cast<double>(w[1]) * 0x1p-32)));
    if (one != libm) {
      ++differ;
      EXPECT_LE(std::fabs(one - libm), std::fabs(std::nextafter(libm, 2 * libm) - libm)) << "more than an ulp apart";
    }
  }
  EXPECT_LE(differ, 10) << differ << " of " << n << " deviates differ from libm's in their last bit";
}

TEST(Philox, StreamsDifferByPurposeAndSeed) {
  RandomStream a(1, 1), b(1, 2), c(2, 1);
  EXPECT_NE(a.block(0)[0], b.block(0)[0]);
  EXPECT_NE(a.block(0)[0], c.block(0)[0]);
  EXPECT_EQ(a.block(7)[2], RandomStream(1, 1).block(7)[2]);
}

}  // namespace claw
