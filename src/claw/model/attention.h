// Self-attention: q/k/v projections, rotary embedding (optional), causal
// flash-style attention (MHA or GQA), output projection.
//
// forward:  q = x Wq^T (+b), k = x Wk^T, v = x Wv^T    [N, H*D], [N, G*D], [N, G*D]
//           q, k = rope(q), rope(k)                     (in place; RoPE models only)
//           a = attention(q, k, v)                      [N, H*D], lse [B, H, T]
//           y = a Wo^T (+b)                             [N, C]
// backward is the mirror image; dq/dk/dv are un-rotated in place (RoPE's
// backward is the inverse rotation).
//
// Tensor parallelism (model/tensor_parallel.h): q/k/v are column-parallel
// (this rank's heads and KV groups), o row-parallel, so attention itself is
// local. The region's input is gathered from the sequence pieces under SP
// (and gathered again in backward for the weight gradients, not saved); its
// output and input gradient are reduced over the group. A KV group held by
// several ranks (TP > G) gets a partial dk/dv from each, summed over those
// ranks before the weight gradients.
//
// Context parallelism (model/context_parallel.h): with a CP attention set
// (use_context_parallel), the local tokens' q, k, v go to it instead of the
// flash kernel; everything else is per token. s.lse is then its saved form.
#pragma once

#include "claw/core/arena.h"
#include "claw/kernels/cuda/context.h"

#include <optional>
#include <string>
#include <vector>

#include "claw/core/arena.h"
#include "claw/model/config.h"
#include "claw/model/context_parallel.h"
#include "claw/model/hf_names.h"
#include "claw/model/linear.h"
#include "claw/model/mla.h"
#include "claw/model/scratch.h"
#include "claw/model/step.h"
#include "claw/model/tensor_parallel.h"

namespace claw::model {

// The inverse frequencies [D/2] of the model's RoPE: 1 / theta^(2i/D), then
// --rope-scaling-type's stretch, in fp32 operation by operation as Hugging
// Face computes them (rope_scaling "linear", "llama3", "yarn", "longrope":
// its long factors when `long_factors`, else its short ones).
std::vector<float> rope_inv_freqs(const ModelConfig& cfg, bool long_factors = false);

// The RoPE of --local-rotary-base's windowed layers: that theta, unscaled
// (Gemma 3's rope_local_base_freq).
ModelConfig local_rope_config(const ModelConfig& cfg);

// cos/sin tables [P, D/2] shared by all layers; longrope's [2P, D/2], the
// long factors' rows from P on (a position p of a long sequence reads row
// p + long_offset).
struct RopeTables {
  std::vector<float> cos, sin;
  int64_t long_offset = 0;  // P under longrope, else 0
  int64_t original = 0;     // longrope: the original context (longer sequences read the long rows)
  RopeTables() = default;
  explicit RopeTables(const ModelConfig& cfg);  // P = max_position_embeddings
  bool empty() const { return cos.empty(); }
  // Copies the tables to the device whose memory the model's kernels read.
  void upload(const kernels::cuda::Device& device);
  // The tables where kernels read them (the device copy after upload()).
  const float* cos_data() const { return device_cos_ ? device_cos_ : cos.data(); }
  const float* sin_data() const { return device_sin_ ? device_sin_ : sin.data(); }

 private:
  Arena device_;
  const float *device_cos_ = nullptr, *device_sin_ = nullptr;
};

class Attention {
 public:
  struct Saved {
    float* q = nullptr;    // [N, Hl*D], after RoPE (Hl, Gl: this rank's heads and KV groups)
    float* k = nullptr;    // [N, Gl*D], after RoPE
    float* v = nullptr;    // [N, Gl*D]
    float* out = nullptr;  // [N, Hl*D]
    float* lse = nullptr;  // [B, Hl, T]
    // --qk-layernorm: the projections before the norm and its 1/rms per head row.
    float* q_pre = nullptr;   // [N, Hl*D]
    float* k_pre = nullptr;   // [N, Gl*D]
    float* q_rstd = nullptr;  // [N, Hl]
    float* k_rstd = nullptr;  // [N, Gl]
    LatentProjections::Saved mla;  // --multi-latent-attention's
    void layout(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t B, int64_t T, TpDims tp);
  };

  Attention(int layer, const ModelConfig& cfg, const HfNames& hf, const RopeTables* rope, const TensorParallel& tp);
  // q, k, v and out rounded to 16-bit values where they are made (ModelConfig::activation_dtype).
  void set_activation_dtype(DType t) { activation_dtype_ = t; }

  // x: normed input [R, C] (the rows held); y: room for [N, C], of which the
  // first R rows receive the output projection. With ctx.kv_cache set the
  // cache stores the new keys and values and attends (model/kv_cache.h;
  // inference: s.lse is not needed).
  void forward(const StepCtx& ctx, const float* x, float* y, Saved& s, Scratch& scratch) const;
  // dy [R, C] -> dx (room for [N, C]; the first R rows are overwritten with
  // the input gradient). Uses scratch dq/dk/dv/datt/gathered.
  void backward(const StepCtx& ctx, const Saved& s, const float* x, const float* dy, float* dx, Scratch& scratch);

  void collect(std::vector<Param*>& out);
  bool qk_norm() const { return qk_norm_; }
  // The model's CP attention (null: none), shared by its layers.
  void use_context_parallel(CpAttention* cp) { cp_ = cp; }
  void linears(std::vector<Linear*>& out);

  // q/k/v projections, or (--multi-latent-attention) MLA's in their place.
  std::optional<Linear> q_proj, k_proj, v_proj;
  std::optional<LatentProjections> mla;
  Linear o_proj;
  Param q_norm, k_norm;  // --qk-layernorm: [D] each; --qk-layernorm-full-width: [H D], [G D] (TP: this rank's heads)

 private:
  int layer_;
  const TensorParallel& tp_;
  int64_t C_, H_, G_, D_;  // H_, G_: local heads and KV groups
  int64_t window_;          // --window-size of this layer (0: full causal)
  int64_t rotary_dim_;      // dimensions RoPE rotates (--rotary-percent)
  bool qk_norm_;
  bool full_width_;  // --qk-layernorm-full-width
  int kv_copies_;    // TP ranks holding each of this rank's KV groups
  bool one_plus_;  // --apply-layernorm-1p: the q/k norms scale by 1 + weight
  kernels::ScoreScale scale_;  // ModelConfig::attention_scale(), --attn-logit-softcapping
  double eps_;
  mutable std::vector<float> q_scale_, k_scale_;
  // --qk-layernorm's backward: dq, dk before the norm and its weight gradients.
  void qk_norm_backward(const StepCtx& ctx, const Saved& s, const float* dq_normed, const float* dk_normed, float* dq,
                        float* dk);
  std::vector<float> dk_pre_, dnorm_w_;
  // --qk-layernorm-full-width: RMSNorm of rows of `width` local columns
  // whose full row spans the TP group (each column on `copies` ranks); its
  // backward takes and gives this rank's partial gradients.
  void full_width_norm_forward(const StepCtx& ctx, float* y, float* rstd, const float* x, const float* w,
                               int64_t width, int copies) const;
  void full_width_norm_backward(const StepCtx& ctx, float* dx, float* dw, const float* dy, const float* x,
                                const float* w, const float* rstd, int64_t width, int copies);
  mutable std::vector<float> row_sums_;
  // The flash kernel's first visible key per token under the window (its
  // seg_start; ctx.seg_start itself when there is no window).
  const int32_t* visible_from(const StepCtx& ctx) const;
  // The positions RoPE reads: ctx.positions, or under longrope each token's
  // position moved to the long rows when its sequence is longer than the
  // original context (a sequence's length: its row's largest position + 1,
  // or with a cache its length once this step is cached; HF's rule).
  const int32_t* rope_positions(const StepCtx& ctx) const;
  mutable std::vector<int32_t> rope_pos_, seq_end_;
  mutable std::vector<int32_t> window_lo_;
  // --multi-latent-attention in inference: the absorbed form (model/mla.h),
  // its queries, one key/value head and output.
  void absorbed_forward(const StepCtx& ctx, const float* x, float* y, Saved& s) const;
  mutable std::vector<float> absorbed_q_, absorbed_kv_, absorbed_out_, absorbed_lse_;
  const RopeTables* rope_;
  CpAttention* cp_ = nullptr;
  DType activation_dtype_ = DType::f32;  // f32: not rounded
};

}  // namespace claw::model
