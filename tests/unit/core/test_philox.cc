#include <gtest/gtest.h>

#include <cmath>

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

TEST(Philox, StreamsDifferByPurposeAndSeed) {
  RandomStream a(1, 1), b(1, 2), c(2, 1);
  EXPECT_NE(a.block(0)[0], b.block(0)[0]);
  EXPECT_NE(a.block(0)[0], c.block(0)[0]);
  EXPECT_EQ(a.block(7)[2], RandomStream(1, 1).block(7)[2]);
}

}  // namespace claw
