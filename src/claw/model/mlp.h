// Feed-forward block.
//   GELU:   h = x Wfc^T (+b);           a = gelu(h);          y = a Wproj^T (+b)
//   SwiGLU: g = x Wgate^T; u = x Wup^T;  a = silu(g) * u;      y = a Wdown^T
// Only the pre-activations (h, or g and u) are saved: the activation output
// `a` is recomputed into scratch in backward (one cheap element-wise pass
// instead of an [N, F] buffer per layer). Backward writes the gradients of
// h (or g and u) over the saved pre-activations, which are dead by then.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "claw/core/arena.h"
#include "claw/model/config.h"
#include "claw/model/hf_names.h"
#include "claw/model/linear.h"
#include "claw/model/scratch.h"
#include "claw/model/step.h"

namespace claw::model {

class MLP {
 public:
  struct Saved {
    float* h = nullptr;  // [N, F] fc output (GELU) or gate output (SwiGLU)
    float* u = nullptr;  // [N, F] up output (SwiGLU only)
    void layout(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t N);
  };

  MLP(int layer, const ModelConfig& cfg, const HfNames& hf);

  void forward(const StepCtx& ctx, const float* x, float* y, Saved& s, Scratch& scratch) const;
  // dy [N, C] -> dx [N, C] (overwritten). Clobbers s.h / s.u.
  void backward(const StepCtx& ctx, Saved& s, const float* x, const float* dy, float* dx, Scratch& scratch);

  void collect(std::vector<Param*>& out);

  Linear fc;                 // GELU: c_fc; SwiGLU: gate_proj
  std::optional<Linear> up;  // SwiGLU only
  Linear proj;               // GELU: c_proj; SwiGLU: down_proj

 private:
  void activate(const StepCtx& ctx, const Saved& s, float* a) const;
  Mlp kind_;
  int64_t F_;
};

}  // namespace claw::model
