// Pre-norm transformer block:
//   x_mid = x + dropout(attention(norm1(x)))
//   out   = x_mid + dropout(mlp(norm2(x_mid)))
// --post-sublayer-norm adds a norm on each branch's output before the add
// (Gemma); --no-pre-sublayer-norm then drops norm1 and norm2 (OLMo 2).
// forward and backward are straight-line mirror images (STYLE.md #6).
// The same code runs at every tensor-parallel size: x, x_mid and out hold
// the rows of the residual stream this rank holds (model/tensor_parallel.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "claw/core/arena.h"
#include "claw/model/attention.h"
#include "claw/model/config.h"
#include "claw/model/hf_names.h"
#include "claw/model/mlp.h"
#include "claw/model/moe.h"
#include "claw/model/norm.h"
#include "claw/model/scratch.h"
#include "claw/model/step.h"
#include "claw/model/tensor_parallel.h"

namespace claw::model {

class Block {
 public:
  struct Saved {
    const float* x = nullptr;  // block input [R, C]: the previous block's out (not owned)
    NormLayer::Saved norm1;
    Attention::Saved attn;
    float* x_mid = nullptr;  // [R, C] residual stream after attention
    NormLayer::Saved norm2;
    MLP::Saved mlp;        // a dense layer's
    MoELayer::Saved moe;   // a MoE layer's
    float* out = nullptr;  // [R, C] block output
    // --post-sublayer-norm: the attention's and the MLP's outputs [R, C]
    // before their norms, and the norms' own.
    float* attn_y = nullptr;
    NormLayer::Saved attn_out_norm;
    float* mlp_y = nullptr;
    NormLayer::Saved mlp_out_norm;
    // Everything backward needs except `out` (the next block's input), under
    // `prefix`, for layer `layer`; a recomputed block points these at one
    // region shared by all recomputed blocks (layer -1: room for a dense and
    // a MoE layer, whichever the model has).
    void layout_internal(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t B, int64_t T,
                         TpDims tp, int64_t layer = -1);
    void layout(ArenaLayout& L, int layer, const ModelConfig& cfg, int64_t B, int64_t T, TpDims tp);
  };

  Block(int layer, const ModelConfig& cfg, const HfNames& hf, const RopeTables* rope, const TensorParallel& tp);

  void forward(const StepCtx& ctx, Saved& s, Scratch& scratch) const;
  // On entry scratch.dres holds d(out); on exit it holds d(x).
  void backward(const StepCtx& ctx, Saved& s, Scratch& scratch);

  void collect(std::vector<Param*>& out);
  // Saved activations in forward order, for the non-finite report.
  std::vector<NamedSpan> saved_tensors(const Saved& s, int64_t N) const;

  std::optional<NormLayer> norm1;  // absent under --no-pre-sublayer-norm
  Attention attention;
  std::optional<NormLayer> norm2;
  std::optional<MLP> mlp;  // a dense layer (--moe-layer-freq says which are not)
  std::optional<MoELayer> moe;
  // --post-sublayer-norm: on the attention's and the MLP's outputs.
  std::optional<NormLayer> attn_out_norm, mlp_out_norm;

 private:
  void dropout_fwd(const StepCtx& ctx, float* y, const char* site) const;
  // The gradient entering a branch from d(out) in scratch.dres: dres itself,
  // or a dropout-masked copy in scratch.tmp.
  const float* branch_grad(const StepCtx& ctx, Scratch& scratch, const char* site) const;
  // A branch's output y (scratch.tmp, first R rows) as the residual add
  // takes it: y itself, or --post-sublayer-norm's norm of it (y kept in `y_saved`).
  float* branch_output(const StepCtx& ctx, float* y, float* y_saved, const std::optional<NormLayer>& norm,
                       NormLayer::Saved& s) const;
  // The gradient reaching a branch's output from `dy`, through its output norm when it has one.
  const float* branch_output_grad(const StepCtx& ctx, const float* dy, const float* y_saved,
                                  std::optional<NormLayer>& norm, const NormLayer::Saved& s, Scratch& scratch);
  // A sublayer's input: x, or its input norm's output (rounded to 16 bits where activations are).
  template <typename Round>
  const float* sublayer_input(const StepCtx& ctx, const std::optional<NormLayer>& norm, const float* x,
                              NormLayer::Saved& s, const Round& rounded) const;
  void sublayer_input_grad(const StepCtx& ctx, std::optional<NormLayer>& norm, const NormLayer::Saved& s,
                           const float* x, Scratch& scratch);
  int layer_;
  const TensorParallel& tp_;
  int64_t C_;
  const ModelConfig& cfg_;
};

}  // namespace claw::model
