#include "claw/data/index_shuffle.h"

#include <bit>

#include "claw/core/error.h"

namespace claw::data {

IndexShuffle::IndexShuffle(uint64_t n, uint64_t seed, uint64_t purpose) : n_(n), rng_(seed, purpose) {
  int bits = n <= 4 ? 2 : std::bit_width(n - 1);
  bits += bits & 1;
  half_bits_ = bits / 2;  // <= 32, so one Philox word covers a half
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
}

uint64_t IndexShuffle::operator()(uint64_t i) const {
  CLAW_CHECK(i < n_, "index {} of a permutation of {}", i, n_);
  uint64_t x = i;
  do {
    uint64_t left = x >> half_bits_, right = x & half_mask_;
    for (int round = 0; round < kRounds; ++round) {
      uint64_t f = rng_.block(right, static_cast<uint64_t>(round))[0] & half_mask_;
      uint64_t next_right = left ^ f;
      left = right;
      right = next_right;
    }
    x = (left << half_bits_) | right;
  } while (x >= n_);
  return x;
}

}  // namespace claw::data
