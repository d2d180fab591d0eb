// A pseudo-random permutation of [0, n), evaluated one index at a time in
// O(1) time and memory: the epoch order of a dataset's samples without
// materialising (or agreeing across ranks on) a shuffled array.
//
// Construction: a balanced Feistel network on b-bit integers (b = bit width
// of n - 1 rounded up to even, at least 2), whose round function is
// Philox-4x32-10 keyed by (seed, purpose) and counted by (half-block, round)
// (core/philox.h); then "cycle walking" (Black & Rogaway, "Ciphers with
// Arbitrary Finite Domains", CT-RSA 2002): re-apply the network until the
// value falls below n. A Feistel network is a bijection of [0, 2^b) for any
// round function, and cycle walking restricts a bijection to [0, n), so the
// result is a permutation by construction; 2^b < 4n makes the expected
// number of walks below 4. Six rounds: Luby-Rackoff needs four for a strong
// pseudo-random permutation; the extra two are cheap margin for the small
// domains (b of a few bits) where those bounds are loose.
//
// The output is fully specified by (n, seed, purpose) and this algorithm;
// unlike std::shuffle it does not depend on the standard library.
//
// Thread-safety: immutable; operator() may be called concurrently.
#pragma once

#include <cstdint>

#include "claw/core/philox.h"

namespace claw::data {

class IndexShuffle {
 public:
  IndexShuffle(uint64_t n, uint64_t seed, uint64_t purpose);

  // The image of i < n (CLAW_CHECK).
  uint64_t operator()(uint64_t i) const;
  uint64_t size() const { return n_; }

 private:
  static constexpr int kRounds = 6;
  uint64_t n_;
  int half_bits_ = 1;
  uint64_t half_mask_ = 1;
  RandomStream rng_;
};

}  // namespace claw::data
