// Buffers shared by all layers of one micro-batch: forward temporaries and
// backward gradients that are consumed before the next layer needs them.
// Planned with the activations (one arena), sized for the widest user.
#pragma once

#include <string>

#include "claw/core/arena.h"
#include "claw/model/config.h"

namespace claw::model {

struct Scratch {
  float* tmp = nullptr;     // [N, C]  attention / MLP output projection before the residual add
  float* act = nullptr;     // [N, F]  MLP activation output (recomputed in backward, never saved)
  float* dres = nullptr;    // [N, C]  gradient of the residual stream
  float* dnorm = nullptr;   // [N, C]  gradient of a norm's output
  float* dq = nullptr;      // [N, H*D]
  float* dk = nullptr;      // [N, G*D]
  float* dv = nullptr;      // [N, G*D]
  float* datt = nullptr;    // [N, H*D] gradient of the attention output
  float* logits = nullptr;  // [chunk, Vp] one chunk of LM-head logits

  // Rows of LM-head logits computed at a time: bounds the logits buffer while
  // keeping the vocabulary GEMMs large.
  static int64_t logits_chunk(int64_t N) { return N < 256 ? N : 256; }

  void layout(ArenaLayout& L, const ModelConfig& cfg, int64_t N);
};

}  // namespace claw::model
