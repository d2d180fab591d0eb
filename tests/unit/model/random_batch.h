// Random token ids and targets below a vocabulary size, for model tests.
#pragma once

#include <cstdint>
#include <vector>

#include "claw/core/philox.h"

namespace claw::model {

struct Batch {
  std::vector<int32_t> tokens, targets;
};

inline Batch random_batch(int64_t n, int64_t vocab, uint64_t seed) {
  Batch b{std::vector<int32_t>(n), std::vector<int32_t>(n)};
  RandomStream rng(seed, 7);
  for (int64_t i = 0; i < n; ++i) {
    b.tokens[i] = static_cast<int32_t>(rng.block(i)[0] % vocab);
    b.targets[i] = static_cast<int32_t>(rng.block(i)[1] % vocab);
  }
  return b;
}

}  // namespace claw::model
