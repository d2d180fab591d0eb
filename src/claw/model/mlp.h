// Feed-forward block.
//   GELU:   h = x Wfc^T (+b);           a = gelu(h);          y = a Wproj^T (+b)
//   SwiGLU: g = x Wgate^T; u = x Wup^T;  a = silu(g) * u;      y = a Wdown^T
// Only the pre-activations (h, or g and u) are saved: the activation output
// `a` is recomputed into scratch in backward (one cheap element-wise pass
// instead of an [N, F] buffer per layer). Backward writes the gradients of
// h (or g and u) over the saved pre-activations, which are dead by then.
//
// Tensor parallelism: fc (and up) column-parallel, proj row-parallel: each
// rank holds F/TP columns of h (and the same columns of u, so SwiGLU's
// gate and up halves stay paired) and the activation is local. Input
// gathering and output reduction as in Attention.
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
#include "claw/model/tensor_parallel.h"

namespace claw::model {

class MLP {
 public:
  struct Saved {
    float* h = nullptr;  // [N, Fl] fc output (GELU) or gate output (SwiGLU); Fl = F / TP
    float* u = nullptr;  // [N, Fl] up output (SwiGLU only)
    // width: the MLP's F (0: --ffn-hidden-size).
    void layout(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t N, TpDims tp,
                int64_t width = 0);
  };

  // The MLP of layer l (--ffn-hidden-size wide).
  MLP(int layer, const ModelConfig& cfg, const HfNames& hf, const TensorParallel& tp);
  // An MLP of its own width (a MoE layer's shared expert): parameters
  // "<prefix>.gate_proj.weight", ... (GELU: fc, proj), Hugging Face names
  // "<hf_prefix>.gate_proj.weight", ... (empty: none). No LoRA adapters.
  MLP(const std::string& prefix, int64_t width, const ModelConfig& cfg, const std::string& hf_prefix,
      const TensorParallel& tp);

  // x [R, C] (the rows held); y: room for [N, C], the first R rows receive the output.
  void forward(const StepCtx& ctx, const float* x, float* y, Saved& s, Scratch& scratch) const;
  // dy [R, C] -> dx (room for [N, C]; the first R rows are overwritten). Clobbers s.h / s.u.
  void backward(const StepCtx& ctx, Saved& s, const float* x, const float* dy, float* dx, Scratch& scratch);

  void collect(std::vector<Param*>& out);
  // h (and u) rounded to 16-bit values where they are made (ModelConfig::activation_dtype).
  void set_activation_dtype(DType t) { activation_dtype_ = t; }
  void linears(std::vector<Linear*>& out) {
    out.push_back(&fc);
    if (up) out.push_back(&*up);
    out.push_back(&proj);
  }

  Linear fc;                 // GELU: c_fc; SwiGLU: gate_proj
  std::optional<Linear> up;  // SwiGLU only
  Linear proj;               // GELU: c_proj; SwiGLU: down_proj

 private:
  void activate(const StepCtx& ctx, const Saved& s, float* a) const;
  const TensorParallel& tp_;
  Mlp kind_;
  int64_t C_, F_;  // F_: local columns
  DType activation_dtype_ = DType::f32;  // f32: not rounded
};

}  // namespace claw::model
