// The training data and optimizer settings shared by the parallel parity
// tests (test_data_parallel.cc, test_tensor_parallel.cc): random token
// batches keyed by step, one masked target, and this rank's slice of them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "claw/core/philox.h"
#include "claw/optim/adamw.h"
#include "claw/train/batch.h"

namespace claw::parity {

struct Data {
  std::vector<int32_t> tokens, targets;  // [sequences, T]
};

// `sequences` x T random tokens and targets below V for a step; target 5 is
// masked, so the global target count must be summed over ranks.
inline Data batch_for_step(int64_t step, int64_t sequences, int64_t T, int64_t V) {
  Data d;
  RandomStream rng(99, static_cast<uint64_t>(step));
  for (int64_t i = 0; i < sequences * T; ++i) {
    d.tokens.push_back(static_cast<int32_t>(rng.block(2 * i)[0] % V));
    d.targets.push_back(static_cast<int32_t>(rng.block(2 * i + 1)[0] % V));
  }
  d.targets[5] = -1;
  return d;
}

// This rank's samples of the global batch, in GlobalBatch's order.
inline void assign_slice(train::GlobalBatch& b, const Data& d) {
  const int64_t T = b.T();
  std::vector<int32_t> tok, tgt;
  for (int64_t k = 0; k < b.micro_batches(); ++k) {
    const int64_t first = b.sample_offset(k);
    tok.insert(tok.end(), d.tokens.begin() + first * T, d.tokens.begin() + (first + b.B()) * T);
    tgt.insert(tgt.end(), d.targets.begin() + first * T, d.targets.begin() + (first + b.B()) * T);
  }
  b.assign(tok, tgt);
}

inline optim::AdamWConfig adam() {
  return {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .clip_grad = 1.0};
}
inline double lr_at(int64_t step) { return 1e-3 * std::min(1.0, (step + 1) / 5.0); }

}  // namespace claw::parity
