// What inference tests compare against: the training forward's logits over
// whole sequences, and the relative error between two rows of logits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "claw/model/gpt.h"

namespace claw::testing {

// max_i |a_i - b_i| / max(1, |b_i|)
inline double max_rel(const float* a, const float* b, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])) / std::max(1.0, std::abs(double(b[i]))));
  return worst;
}

// Logits [B*T, V] (the real vocabulary) of B rows of T tokens from the training forward.
inline std::vector<float> reference_logits(const CpuCtx& ctx, model::GPT& m, const std::vector<int32_t>& tokens,
                                           int64_t B, int64_t T) {
  const model::ModelConfig& c = m.config();
  m.reserve(B, T);
  std::vector<int32_t> targets(B * T, 0);
  const model::StepCtx sc{.cpu = ctx, .B = B, .T = T};
  m.forward(sc, tokens.data(), targets.data(), 0.0);
  const int64_t Vp = c.padded_vocab_size(1), V = c.vocab_size;
  std::vector<float> padded(B * T * Vp), out(B * T * V);
  m.logits(sc, padded.data());
  for (int64_t r = 0; r < B * T; ++r) std::copy_n(&padded[r * Vp], V, &out[r * V]);
  return out;
}

}  // namespace claw::testing
