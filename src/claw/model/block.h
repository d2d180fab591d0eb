// Pre-norm transformer block:
//   x_mid = x + dropout(attention(norm1(x)))
//   out   = x_mid + dropout(mlp(norm2(x_mid)))
// forward and backward are straight-line mirror images (STYLE.md #6).
#pragma once

#include <string>
#include <vector>

#include "claw/core/arena.h"
#include "claw/model/attention.h"
#include "claw/model/config.h"
#include "claw/model/hf_names.h"
#include "claw/model/mlp.h"
#include "claw/model/norm.h"
#include "claw/model/scratch.h"
#include "claw/model/step.h"

namespace claw::model {

class Block {
 public:
  struct Saved {
    const float* x = nullptr;  // block input [N, C]: the previous block's out (not owned)
    NormLayer::Saved norm1;
    Attention::Saved attn;
    float* x_mid = nullptr;  // [N, C] residual stream after attention
    NormLayer::Saved norm2;
    MLP::Saved mlp;
    float* out = nullptr;  // [N, C] block output
    // Everything backward needs except `out` (the next block's input), under
    // `prefix`; a recomputed block points these at one region shared by all
    // recomputed blocks.
    void layout_internal(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t B, int64_t T);
    void layout(ArenaLayout& L, int layer, const ModelConfig& cfg, int64_t B, int64_t T);
  };

  Block(int layer, const ModelConfig& cfg, const HfNames& hf, const RopeTables* rope);

  void forward(const StepCtx& ctx, Saved& s, Scratch& scratch) const;
  // On entry scratch.dres holds d(out); on exit it holds d(x).
  void backward(const StepCtx& ctx, Saved& s, Scratch& scratch);

  void collect(std::vector<Param*>& out);
  // Saved activations in forward order, for the non-finite report.
  std::vector<NamedSpan> saved_tensors(const Saved& s, int64_t N) const;

  NormLayer norm1;
  Attention attention;
  NormLayer norm2;
  MLP mlp;

 private:
  void dropout_fwd(const StepCtx& ctx, float* y, const char* site) const;
  // The gradient entering a branch from d(out) in scratch.dres: dres itself,
  // or a dropout-masked copy in scratch.tmp.
  const float* branch_grad(const StepCtx& ctx, Scratch& scratch, const char* site) const;
  int layer_;
  int64_t C_;
  const ModelConfig& cfg_;
};

}  // namespace claw::model
