// Buffers shared by all layers of one micro-batch: forward temporaries and
// backward gradients that are consumed before the next layer needs them.
// Planned with the activations (one arena), sized for the widest user.
// Shapes are this rank's: N = B*T tokens, R = rows of the residual stream
// (N, or N/TP under sequence parallelism), Hl/Gl/Fl/Vl the local heads, KV
// groups, FFN columns and vocabulary rows (model/tensor_parallel.h).
#pragma once

#include <string>

#include "claw/core/arena.h"
#include "claw/model/config.h"
#include "claw/model/tensor_parallel.h"

namespace claw::model {

struct Scratch {
  float* tmp = nullptr;       // [N, C]   attention / MLP output projection (partial sums before the reduction)
  float* act = nullptr;       // [N, Fl]  MLP activation output (recomputed in backward, never saved)
  float* dres = nullptr;      // [R, C]   gradient of the residual stream
  float* dnorm = nullptr;     // [N, C]   gradient of a norm's output (partial sums before the reduction)
  float* dq = nullptr;        // [N, Hl*D]
  float* dk = nullptr;        // [N, Gl*D]
  float* dv = nullptr;        // [N, Gl*D]
  float* datt = nullptr;      // [N, Hl*D] gradient of the attention output
  float* logits = nullptr;    // [chunk, Vl] one chunk of LM-head logits
  float* gathered = nullptr;  // [N, C]   sequence parallelism: an all-gathered input or output gradient
  float* dnorm_w = nullptr;   // [2C]     sequence parallelism: a norm's partial weight gradients
  float* dpost = nullptr;     // [R, C]   --post-sublayer-norm: the gradient before an output norm
  // MoE layers (model/moe.h; R tokens on this rank, M = R k dispatched
  // rows, Rin = M EP the rows its experts may receive, Fe an expert's width):
  float* moe_rows = nullptr;    // [Rin, C]  the dispatched tokens, then the rows' input gradients
  float* moe_act = nullptr;     // [Rin, Fe] the experts' activations, then their gradient
  float* moe_drows = nullptr;   // [Rin, C]  gradient of the expert outputs
  float* moe_shared = nullptr;  // [N, C]  the shared expert's output, then its input gradient
  float* moe_dlogits = nullptr; // [R, E]
  float* moe_dprob = nullptr;   // [R, k]
  float* moe_drouter = nullptr; // [E, C]  under SP: this rank's part of the router's gradient

  // Rows of LM-head logits computed at a time: bounds the logits buffer while
  // keeping the vocabulary GEMMs large.
  static int64_t logits_chunk(int64_t N) { return N < 256 ? N : 256; }

  void layout(ArenaLayout& L, const ModelConfig& cfg, int64_t N, TpDims tp);
};

}  // namespace claw::model
