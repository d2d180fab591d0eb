// Multi-head latent attention's projections (DeepSeek-V2/V3; config.h's
// MlaConfig): what Attention runs in place of its q/k/v projections when
// --multi-latent-attention is on. Per token, with r = --qk-pos-emb-head-dim:
//
//   q   = x Wq^T, or RMSNorm(x Wqa^T) Wqb^T     [H, qk + r] per head (HF: q_proj, or q_a_proj,
//                                                q_a_layernorm, q_b_proj)
//   kva = x Wkva^T = [c' | k_rope]               [kv_lora + r] (kv_a_proj_with_mqa)
//   c   = RMSNorm(c')                            [kv_lora]      (kv_a_layernorm)
//   kv  = c Wkvb^T                               [H, qk + v] per head (kv_b_proj)
//   k_h = [kv_h[:qk] | k_rope], v_h = kv_h[qk:]
//
// The attention kernels then see heads of D = qk + r dimensions, RoPE on r
// of them, every head its own key and value (G = H). forward hands them q,
// k and v in their layout: each head's r rotated dimensions first, then the
// qk others (a dot product does not care about the order), and v padded
// with zeros to D, so the flash, cached, paged and CP kernels serve MLA
// unchanged; the attention's output is cut back to v per head (compact)
// before the output projection. With --rotary-interleaved, RoPE's pairs are
// neighbouring dimensions (2i, 2i+1) of the projection's rotated part:
// they are taken apart into the kernels' halves (evens, then odds), which
// rotates the same pairs.
//
// Tensor parallelism: q (or q_b) and kv_b are column-parallel over heads;
// q_a and kv_a, the latent side, are replicated (each rank computes them
// whole from the gathered input). In backward a rank's heads give partial
// gradients of c, the q latent and k_rope: they are summed over the group
// first, so the replicated weights and norms get whole gradients on every
// rank, and their input gradient is added by the group's first rank only
// (the attention's input gradient is a sum over the group).
//
// Inference (a KV cache, or the engine's batch-invariant steps) runs the
// absorbed form instead: with Wkvb_h = [Wk_h (qk rows) | Wv_h (v rows)],
//
//   q'_h  = [q_rope_h | q_nope_h Wk_h]     [r + kv_lora]   (absorb_queries)
//   kv'   = [k_rope | c]                   one key/value head of r + kv_lora for all H
//   o'_h  = softmax(q'_h . kv' scale) kv'  (the usual kernels, G = 1)
//   out_h = o'_h[r:] Wv_h^T                [v]             (absorb_output)
//
// q'_h . kv' = q_rope_h . k_rope + q_nope_h . (Wk_h c) is the same score,
// and o'_h[r:] Wv_h^T = sum p (Wv_h c) the same output, so the caches hold
// one latent per token and layer, r + kv_lora values (held once: the paged
// cache's keys are its values), not 2 H (qk + r) expanded ones. The per-head products are loops in
// a fixed order: a row's result does not depend on its batch.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "claw/core/arena.h"
#include "claw/model/config.h"
#include "claw/model/hf_names.h"
#include "claw/model/linear.h"
#include "claw/model/param.h"
#include "claw/model/step.h"
#include "claw/model/tensor_parallel.h"

namespace claw::model {

// The canonical name of the attention's module `what` in layer `layer`
// ("layers.3.attention.q_proj"), plain or latent.
inline std::string attention_name(int layer, const char* what) {
  return "layers." + std::to_string(layer) + ".attention." + what;
}

// The latent norms' epsilon: DeepSeek's q_a_layernorm and kv_a_layernorm
// keep RMSNorm's default whatever rms_norm_eps (--norm-epsilon) says.
inline constexpr double kLatentNormEpsilon = 1e-6;

class LatentProjections {
 public:
  struct Saved {
    float* q_a = nullptr;      // [N, q_lora] the query latent before its norm (--q-lora-rank > 0)
    float* q_a_rstd = nullptr;  // [N]
    float* q_lat = nullptr;    // [N, q_lora] after it: q_b's input
    float* kv_a = nullptr;     // [N, kv_lora + r] [c' | k_rope]
    float* c_pre = nullptr;    // [N, kv_lora] c' (contiguous, the norm's input)
    float* c_rstd = nullptr;   // [N]
    float* c = nullptr;        // [N, kv_lora] kv_b's input
    float* out_v = nullptr;    // [N, Hl v] the attention's output without padding: o_proj's input
    void layout(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t N, TpDims tp);
  };

  LatentProjections(int layer, const ModelConfig& cfg, const HfNames& hf, const TensorParallel& tp);

  // x [N, C] (the gathered input) -> q, k, v [N, Hl, D] in the kernels'
  // layout (above), RoPE not yet applied.
  void forward(const StepCtx& ctx, const float* x, Saved& s, float* q, float* k, float* v) const;
  // out [N, Hl, D] -> s.out_v [N, Hl, v].
  void compact(const StepCtx& ctx, const float* out, Saved& s) const;
  // d out_v [N, Hl, v] -> d out [N, Hl, D] (zeros in the padding).
  void expand(const StepCtx& ctx, const float* dout_v, float* dout) const;
  // The absorbed form (above): q' [N, Hl, A] and kv' [N, A], A = r + kv_lora
  // (absorbed_dim), RoPE not yet applied.
  int64_t absorbed_dim() const { return r_ + kv_rank_; }
  void absorbed_forward(const StepCtx& ctx, const float* x, Saved& s, float* q, float* kv) const;
  // o' [N, Hl, A] -> s.out_v [N, Hl, v].
  void absorbed_output(const StepCtx& ctx, const float* out, Saved& s) const;
  // dq, dk, dv [N, Hl, D] (after RoPE's backward) -> the weights' gradients
  // and dx [N, C] (overwritten; this rank's part of the sum over the group).
  void backward(const StepCtx& ctx, const Saved& s, const float* x, const float* dq, const float* dk, const float* dv,
                float* dx);

  void collect(std::vector<Param*>& out);
  void linears(std::vector<Linear*>& out);

  std::optional<Linear> q_a_proj;  // --q-lora-rank > 0
  Linear q_proj;                   // q_b_proj under --q-lora-rank, else x's straight to the heads
  Linear kv_a_proj, kv_b_proj;
  Param q_a_norm, kv_a_norm;

 private:
  // The projection's head rows [qk | r] (r interleaved or not) <-> the
  // kernels' [r (halves) | qk], for `heads` heads of N tokens.
  void to_kernel_layout(const CpuCtx& cpu, const float* proj, float* q, int64_t N) const;
  void from_kernel_layout(const CpuCtx& cpu, const float* q, float* proj, int64_t N) const;
  // The queries of x in the kernels' layout, q [N, Hl, D], and the latent
  // side of s (q_a, q_lat, kv_a, c_pre, c).
  void queries_and_latent(const StepCtx& ctx, const float* x, Saved& s, float* q) const;
  // Dimension j of the rotated part in the kernels' layout comes from this
  // dimension of the projection's.
  int64_t rope_source(int64_t j) const;

  const TensorParallel& tp_;
  int64_t C_, H_, D_, qk_, r_, v_, q_rank_, kv_rank_;
  bool interleaved_;
  double eps_;
  mutable std::vector<float> kv_, dq_proj_, heads_, dkv_, dlat_, dq_lat_, dq_a_, dc_, dkv_a_;
};

}  // namespace claw::model
