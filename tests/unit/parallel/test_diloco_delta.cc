// DiLoCo's packed parameter deltas (--diloco-delta-bits 8 and 4): the codes
// against a direct transcription of the rule (scale = block max / qmax,
// code = round-half-even(x / scale)), the error bound that gives, and the
// layout's size.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "claw/parallel/data_parallel.h"

namespace claw::parallel {
namespace {

std::vector<float> random_deltas(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    // Blocks of very different magnitudes, an all-zero block, and exact ties.
    const int64_t block = i / kDeltaBlock;
    x[i] = block == 2 ? 0.0f : normal(rng) * std::ldexp(1.0f, static_cast<int>(block % 7) * 5 - 20);
  }
  return x;
}

std::vector<float> decode(const std::vector<uint8_t>& packed, int64_t n, int bits) {
  std::vector<float> out(static_cast<size_t>(n), 0.0f);
  add_packed_delta(packed.data(), n, bits, out.data());
  return out;
}

TEST(DilocoDelta, PackedSizeIsScalesThenCodes) {
  EXPECT_EQ(packed_delta_bytes(128, 8), 4 + 128);
  EXPECT_EQ(packed_delta_bytes(129, 8), 8 + 129);
  EXPECT_EQ(packed_delta_bytes(128, 4), 4 + 64);
  EXPECT_EQ(packed_delta_bytes(129, 4), 8 + 65);
  EXPECT_EQ(packed_delta_bytes(1000000, 4), 7813 * 4 + 500000);
}

TEST(DilocoDelta, CodesFollowTheRoundingRule) {
  for (int bits : {8, 4}) {
    const float qmax = bits == 8 ? 127.0f : 7.0f;
    const int64_t n = 5 * kDeltaBlock + 37;  // a ragged last block, odd for the nibbles
    const std::vector<float> x = random_deltas(n, 7 + bits);
    std::vector<uint8_t> packed(static_cast<size_t>(packed_delta_bytes(n, bits)));
    pack_delta(x.data(), n, bits, packed.data());
    const std::vector<float> y = decode(packed, n, bits);
    for (int64_t b = 0; b * kDeltaBlock < n; ++b) {
      const int64_t lo = b * kDeltaBlock, hi = std::min(n, lo + kDeltaBlock);
      float amax = 0;
      for (int64_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(x[i]));
      float scale;
      std::memcpy(&scale, packed.data() + 4 * b, 4);
      ASSERT_EQ(scale, amax / qmax) << bits << "-bit block " << b;
      for (int64_t i = lo; i < hi; ++i) {
        const float want = amax > 0 ? std::nearbyint(x[i] * (qmax / amax)) * scale : 0.0f;
        ASSERT_EQ(y[i], want) << bits << "-bit element " << i;
        // Round to nearest: within half a step (plus the scale's own rounding).
        ASSERT_LE(std::fabs(y[i] - x[i]), 0.5f * scale * (1 + 1e-5f) + 1e-30f) << bits << "-bit element " << i;
      }
    }
  }
}

TEST(DilocoDelta, TiesRoundToEvenAndCodesAreSymmetric) {
  // Block max 7 with 4 bits: the scale is 1, so x / scale is x itself.
  std::vector<float> x = {7.0f, -7.0f, 2.5f, -2.5f, 3.5f, 0.5f, -0.5f, 1.5f};
  std::vector<uint8_t> packed(static_cast<size_t>(packed_delta_bytes(8, 4)));
  pack_delta(x.data(), 8, 4, packed.data());
  const std::vector<float> y = decode(packed, 8, 4);
  EXPECT_EQ(y, (std::vector<float>{7.0f, -7.0f, 2.0f, -2.0f, 4.0f, 0.0f, -0.0f, 2.0f}));
}

TEST(DilocoDelta, DecodingAddsIntoTheSum) {
  const int64_t n = 300;
  const std::vector<float> a = random_deltas(n, 1), b = random_deltas(n, 2);
  std::vector<uint8_t> pa(static_cast<size_t>(packed_delta_bytes(n, 8))), pb(pa.size());
  pack_delta(a.data(), n, 8, pa.data());
  pack_delta(b.data(), n, 8, pb.data());
  std::vector<float> sum(static_cast<size_t>(n), 0.0f);
  add_packed_delta(pa.data(), n, 8, sum.data());
  add_packed_delta(pb.data(), n, 8, sum.data());
  const std::vector<float> da = decode(pa, n, 8), db = decode(pb, n, 8);
  // Equal up to the rounding of one addition (the compiler may fuse the
  // decode's multiply with the add).
  for (int64_t i = 0; i < n; ++i)
    ASSERT_LE(std::fabs(sum[i] - (da[i] + db[i])), 1.2e-7f * (std::fabs(da[i]) + std::fabs(db[i]))) << i;
}

}  // namespace
}  // namespace claw::parallel
