#include "claw/model/attention.h"

#include <cmath>

#include "claw/kernels/cpu/attention.h"
#include "claw/kernels/cpu/rope.h"

namespace claw::model {

RopeTables::RopeTables(int64_t max_positions, int64_t head_dim, double theta)
    : cos(max_positions * head_dim / 2), sin(max_positions * head_dim / 2) {
  kernels::rope_table(cos.data(), sin.data(), max_positions, head_dim, theta);
}

void Attention::Saved::layout(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t B,
                              int64_t T) {
  const int64_t N = B * T, HD = cfg.num_attention_heads * cfg.head_dim(), GD = cfg.kv_heads() * cfg.head_dim();
  q = L.take<float>(prefix + ".q", N * HD);
  k = L.take<float>(prefix + ".k", N * GD);
  v = L.take<float>(prefix + ".v", N * GD);
  out = L.take<float>(prefix + ".out", N * HD);
  lse = L.take<float>(prefix + ".lse", N * cfg.num_attention_heads);
}

namespace {
std::string attn_name(int layer, const char* what) { return "layers." + std::to_string(layer) + ".attention." + what; }
}  // namespace

// Output projections (o_proj here, the MLP's down projection) start with a
// smaller std, init_std / sqrt(2 L), so the residual stream's variance does
// not grow with depth (GPT-2 paper sec. 2.3; Megatron's scaled_init_method).
Attention::Attention(int l, const ModelConfig& cfg, const HfNames& hf, const RopeTables* rope)
    : q_proj(attn_name(l, "q_proj"), cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim(), cfg.add_bias_linear,
             cfg.init_method_std, hf.attention(l, 'q', false), hf.attention(l, 'q', true)),
      k_proj(attn_name(l, "k_proj"), cfg.hidden_size, cfg.kv_heads() * cfg.head_dim(), cfg.add_bias_linear,
             cfg.init_method_std, hf.attention(l, 'k', false), hf.attention(l, 'k', true)),
      v_proj(attn_name(l, "v_proj"), cfg.hidden_size, cfg.kv_heads() * cfg.head_dim(), cfg.add_bias_linear,
             cfg.init_method_std, hf.attention(l, 'v', false), hf.attention(l, 'v', true)),
      o_proj(attn_name(l, "o_proj"), cfg.num_attention_heads * cfg.head_dim(), cfg.hidden_size, cfg.add_bias_linear,
             cfg.init_method_std / std::sqrt(2.0 * cfg.num_layers), hf.attention(l, 'o', false),
             hf.attention(l, 'o', true)),
      H_(cfg.num_attention_heads),
      G_(cfg.kv_heads()),
      D_(cfg.head_dim()),
      rope_(rope && !rope->empty() ? rope : nullptr) {}

void Attention::forward(const StepCtx& ctx, const float* x, float* y, Saved& s) const {
  q_proj.forward(ctx, x, s.q);
  k_proj.forward(ctx, x, s.k);
  v_proj.forward(ctx, x, s.v);
  if (rope_) {
    const float *cos = rope_->cos.data(), *sin = rope_->sin.data();
    kernels::rope_forward(ctx.cpu, s.q, cos, sin, ctx.B, ctx.T, H_, D_, ctx.positions);
    kernels::rope_forward(ctx.cpu, s.k, cos, sin, ctx.B, ctx.T, G_, D_, ctx.positions);
  }
  kernels::attention_forward(ctx.cpu, s.out, s.lse, s.q, s.k, s.v, ctx.B, ctx.T, H_, G_, D_, 1.0 / std::sqrt(double(D_)),
                             ctx.seg_start);
  o_proj.forward(ctx, s.out, y);
}

void Attention::backward(const StepCtx& ctx, const Saved& s, const float* x, const float* dy, float* dx,
                         Scratch& scratch) {
  o_proj.backward_weight(ctx, dy, s.out);
  o_proj.backward_input(ctx, dy, scratch.datt, false);
  kernels::attention_backward(ctx.cpu, scratch.dq, scratch.dk, scratch.dv, scratch.datt, s.q, s.k, s.v, s.out, s.lse,
                              ctx.B, ctx.T, H_, G_, D_, 1.0 / std::sqrt(double(D_)), ctx.seg_start);
  if (rope_) {
    const float *cos = rope_->cos.data(), *sin = rope_->sin.data();
    kernels::rope_backward(ctx.cpu, scratch.dq, cos, sin, ctx.B, ctx.T, H_, D_, ctx.positions);
    kernels::rope_backward(ctx.cpu, scratch.dk, cos, sin, ctx.B, ctx.T, G_, D_, ctx.positions);
  }
  q_proj.backward_weight(ctx, scratch.dq, x);
  k_proj.backward_weight(ctx, scratch.dk, x);
  v_proj.backward_weight(ctx, scratch.dv, x);
  q_proj.backward_input(ctx, scratch.dq, dx, false);
  k_proj.backward_input(ctx, scratch.dk, dx, true);
  v_proj.backward_input(ctx, scratch.dv, dx, true);
}

void Attention::collect(std::vector<Param*>& out) {
  q_proj.collect(out);
  k_proj.collect(out);
  v_proj.collect(out);
  o_proj.collect(out);
}

}  // namespace claw::model
