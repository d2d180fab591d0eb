// Philox-4x32-10, a counter-based RNG (Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3", SC'11). Output is a pure function of
// (key, counter), so a value keyed by (seed, purpose) and indexed by the
// *global* element index is the same whatever the parallel layout: a rank that
// holds a shard of a tensor draws exactly the numbers the single-rank run
// draws for those elements (DESIGN.md principle 7).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace claw {

struct Philox {
  using Block = std::array<uint32_t, 4>;
  // The round multipliers and the key schedule's Weyl increments (also used
  // by RandomStream::normals, which runs the rounds over blocks of counters).
  static constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  static constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;

  static constexpr Block generate(Block ctr, uint32_t k0, uint32_t k1) {
    for (int round = 0; round < 10; ++round) {
      uint64_t p0 = static_cast<uint64_t>(M0) * ctr[0];
      uint64_t p1 = static_cast<uint64_t>(M1) * ctr[2];
      ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ k0, static_cast<uint32_t>(p1),
             static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ k1, static_cast<uint32_t>(p0)};
      k0 += W0;
      k1 += W1;
    }
    return ctr;
  }
};

// A stream of random numbers for one purpose: key = (seed, purpose), counter =
// (index, offset). `index` is a global element index; each call to block()
// yields 4 independent 32-bit words for that index.
class RandomStream {
 public:
  constexpr RandomStream(uint64_t seed, uint64_t purpose)
      : k0_(static_cast<uint32_t>(seed) ^ static_cast<uint32_t>(purpose * 0x9E3779B97F4A7C15ull)),
        k1_(static_cast<uint32_t>(seed >> 32) ^ static_cast<uint32_t>((purpose * 0x9E3779B97F4A7C15ull) >> 32)) {}

  constexpr Philox::Block block(uint64_t index, uint64_t offset = 0) const {
    return Philox::generate({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                             static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)},
                            k0_, k1_);
  }

  // Uniform in [0, 1) with 24 random bits.
  float uniform(uint64_t index) const { return to_unit(block(index)[0]); }

  // Standard normal via Box-Muller on two words of the same block:
  // sqrt(-2 ln u1) cos(2 pi u2), u1 = (word0 + 1) / 2^32 in (0, 1], u2 =
  // word1 / 2^32 in [0, 1). The logarithm and cosine are claw's own
  // (philox.cc: polynomials in double, within 2 ulp of the exact values),
  // written out operation by operation with no contraction left to the
  // compiler, so the same index gives the same float on every CPU and
  // instruction set, vectorised or not.
  float normal(uint64_t index) const;
  // normal(index[i]) for i in [0, n), into out: the same values, computed
  // several at a time (model initialisation draws millions).
  void normals(const uint64_t* index, int64_t n, float* out) const;

  static constexpr float to_unit(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }
  // The Philox key, for device code that regenerates the same stream.
  constexpr uint32_t key0() const { return k0_; }
  constexpr uint32_t key1() const { return k1_; }

 private:
  uint32_t k0_, k1_;
};

namespace detail {
// normal()'s two halves (philox.cc), exposed for their tests:
// ln((b + 1) / 2^32) and cos(2 pi b / 2^32).
double log_unit(uint32_t b);
double cos_turn(uint32_t b);
}  // namespace detail

// Stable 64-bit FNV-1a hash of a name, used as an RNG purpose (e.g. a
// parameter's canonical name), so streams do not depend on creation order.
constexpr uint64_t hash_name(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace claw
