// Self-attention: q/k/v projections, rotary embedding (optional), causal
// flash-style attention (MHA or GQA), output projection.
//
// forward:  q = x Wq^T (+b), k = x Wk^T, v = x Wv^T    [N, H*D], [N, G*D], [N, G*D]
//           q, k = rope(q), rope(k)                     (in place; RoPE models only)
//           a = attention(q, k, v)                      [N, H*D], lse [B, H, T]
//           y = a Wo^T (+b)                             [N, C]
// backward is the mirror image; dq/dk/dv are un-rotated in place (RoPE's
// backward is the inverse rotation).
#pragma once

#include <string>
#include <vector>

#include "claw/core/arena.h"
#include "claw/model/config.h"
#include "claw/model/hf_names.h"
#include "claw/model/linear.h"
#include "claw/model/scratch.h"
#include "claw/model/step.h"

namespace claw::model {

// cos/sin tables [P, D/2] shared by all layers.
struct RopeTables {
  std::vector<float> cos, sin;
  RopeTables() = default;
  RopeTables(int64_t max_positions, int64_t head_dim, double theta);
  bool empty() const { return cos.empty(); }
};

class Attention {
 public:
  struct Saved {
    float* q = nullptr;    // [N, H*D], after RoPE
    float* k = nullptr;    // [N, G*D], after RoPE
    float* v = nullptr;    // [N, G*D]
    float* out = nullptr;  // [N, H*D]
    float* lse = nullptr;  // [B, H, T]
    void layout(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t B, int64_t T);
  };

  Attention(int layer, const ModelConfig& cfg, const HfNames& hf, const RopeTables* rope);

  // x: normed input [N, C]; y: output projection [N, C].
  void forward(const StepCtx& ctx, const float* x, float* y, Saved& s) const;
  // dy [N, C] -> dx [N, C] (overwritten). Uses scratch dq/dk/dv/datt.
  void backward(const StepCtx& ctx, const Saved& s, const float* x, const float* dy, float* dx, Scratch& scratch);

  void collect(std::vector<Param*>& out);

  Linear q_proj, k_proj, v_proj, o_proj;

 private:
  int64_t H_, G_, D_;
  const RopeTables* rope_;
};

}  // namespace claw::model
