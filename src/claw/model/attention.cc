#include "claw/model/attention.h"

#include "claw/kernels/cpu/bf16_gemm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "claw/core/error.h"
#include "claw/model/kv_cache.h"

#include "claw/kernels/cpu/attention.h"
#include "claw/kernels/cpu/attention_offset.h"
#include "claw/kernels/cpu/paged_attention.h"
#include "claw/kernels/cpu/rope.h"

namespace claw::model {

RopeTables::RopeTables(int64_t max_positions, int64_t head_dim, double theta)
    : cos(max_positions * head_dim / 2), sin(max_positions * head_dim / 2) {
  kernels::rope_table(cos.data(), sin.data(), max_positions, head_dim, theta);
}

void RopeTables::upload(const kernels::cuda::Device& device) {
  const size_t bytes = cos.size() * sizeof(float);
  device_ = Arena("rope tables", 2 * bytes, device.memory());
  float* c = device_.ptr<float>(0);
  float* s = device_.ptr<float>(bytes);
  kernels::cuda::copy_to_device(device.ctx(), c, cos.data(), bytes);
  kernels::cuda::copy_to_device(device.ctx(), s, sin.data(), bytes);
  device_cos_ = c;
  device_sin_ = s;
}

void Attention::Saved::layout(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t B,
                              int64_t T, TpDims tp) {
  const int64_t N = B * T, HD = tp.heads(cfg) * cfg.head_dim(), GD = tp.kv_groups(cfg) * cfg.head_dim();
  q = L.take<float>(prefix + ".q", N * HD);
  k = L.take<float>(prefix + ".k", N * GD);
  v = L.take<float>(prefix + ".v", N * GD);
  out = L.take<float>(prefix + ".out", N * HD);
  lse = L.take<float>(prefix + ".lse", N * tp.heads(cfg));
}

namespace {
std::string attn_name(int layer, const char* what) { return "layers." + std::to_string(layer) + ".attention." + what; }

// k/v: this rank's KV groups, or the one group it shares with TP/G - 1 others.
LinearSplit kv_split(const ModelConfig& cfg, const TensorParallel& tp) {
  const int replicas = tp.dims().kv_replicas(cfg);
  if (replicas == 1) return {.kind = TpSplit::column};
  return {.kind = TpSplit::column, .count = static_cast<int>(cfg.kv_heads()), .index = tp.rank() / replicas,
          .replicas = replicas};
}
}  // namespace

// Output projections (o_proj here, the MLP's down projection) start with a
// smaller std, init_std / sqrt(2 L), so the residual stream's variance does
// not grow with depth (GPT-2 paper sec. 2.3; Megatron's scaled_init_method).
Attention::Attention(int l, const ModelConfig& cfg, const HfNames& hf, const RopeTables* rope,
                     const TensorParallel& tp)
    : q_proj(attn_name(l, "q_proj"), cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim(), cfg.add_bias_linear,
             cfg.init_method_std, hf.attention(l, 'q', false), hf.attention(l, 'q', true), tp,
             {.kind = TpSplit::column}),
      k_proj(attn_name(l, "k_proj"), cfg.hidden_size, cfg.kv_heads() * cfg.head_dim(), cfg.add_bias_linear,
             cfg.init_method_std, hf.attention(l, 'k', false), hf.attention(l, 'k', true), tp, kv_split(cfg, tp)),
      v_proj(attn_name(l, "v_proj"), cfg.hidden_size, cfg.kv_heads() * cfg.head_dim(), cfg.add_bias_linear,
             cfg.init_method_std, hf.attention(l, 'v', false), hf.attention(l, 'v', true), tp, kv_split(cfg, tp)),
      o_proj(attn_name(l, "o_proj"), cfg.num_attention_heads * cfg.head_dim(), cfg.hidden_size, cfg.add_bias_linear,
             cfg.init_method_std / std::sqrt(2.0 * cfg.num_layers), hf.attention(l, 'o', false),
             hf.attention(l, 'o', true), tp, {.kind = TpSplit::row}),
      layer_(l),
      tp_(tp),
      C_(cfg.hidden_size),
      H_(tp.dims().heads(cfg)),
      G_(tp.dims().kv_groups(cfg)),
      D_(cfg.head_dim()),
      rope_(rope && !rope->empty() ? rope : nullptr) {
  if (!cfg.lora.enabled()) return;
  // Hugging Face's module names: GPT-2 fuses q, k, v into c_attn.
  const bool gpt2 = cfg.position_embedding_type == Position::learned;
  const std::pair<Linear*, std::pair<const char*, const char*>> targets[] = {
      {&q_proj, {"linear_qkv", gpt2 ? "c_attn" : "q_proj"}},
      {&k_proj, {"linear_qkv", gpt2 ? "c_attn" : "k_proj"}},
      {&v_proj, {"linear_qkv", gpt2 ? "c_attn" : "v_proj"}},
      {&o_proj, {"linear_proj", gpt2 ? "c_proj" : "o_proj"}}};
  for (const auto& [linear, names] : targets)
    if (cfg.lora.targets(names.first, names.second))
      linear->enable_lora(cfg.lora.rank, cfg.lora.scale(), cfg.lora.dropout);
  // One adapter on GPT-2's fused c_attn, as PEFT makes it: q, k and v read
  // one A (named for the fused layer) and each has its rows of B.
  if (gpt2 && q_proj.has_lora()) {
    q_proj.lora_a.spec.name = attn_name(l, "linear_qkv") + ".lora_A.weight";
    k_proj.share_lora_a(q_proj);
    v_proj.share_lora_a(q_proj);
  }
}

void Attention::forward(const StepCtx& ctx, const float* x_rows, float* y, Saved& s, Scratch& scratch) const {
  const float* x = tp_.gather_rows(scratch.gathered, x_rows, ctx.B, ctx.T, C_);
  q_proj.forward(ctx, x, s.q);
  k_proj.forward(ctx, x, s.k);
  v_proj.forward(ctx, x, s.v);
  if (rope_) {
    const float *cos = rope_->cos_data(), *sin = rope_->sin_data();
    kernels::rope_forward(ctx.cpu, s.q, cos, sin, ctx.B, ctx.T, H_, D_, ctx.positions);
    kernels::rope_forward(ctx.cpu, s.k, cos, sin, ctx.B, ctx.T, G_, D_, ctx.positions);
  }
  const bool round = activation_dtype_ != DType::f32 && !ctx.kv_cache && !ctx.batch_invariant;
  if (round) {
    kernels::round_half_values(ctx.cpu, activation_dtype_, s.q, ctx.tokens() * H_ * D_);
    kernels::round_half_values(ctx.cpu, activation_dtype_, s.k, ctx.tokens() * G_ * D_);
    kernels::round_half_values(ctx.cpu, activation_dtype_, s.v, ctx.tokens() * G_ * D_);
  }
  if (cp_)
    cp_->forward(ctx.cpu, s.out, s.lse, s.q, s.k, s.v, ctx.seg_start);
  else if (ctx.kv_cache)
    ctx.kv_cache->attend(ctx.cpu, layer_, s.q, s.k, s.v, s.out, s.lse, ctx.B, ctx.T, H_, G_, D_);
  else if (ctx.batch_invariant && !ctx.cpu.gpu)  // the engine's order: its log-probabilities to the bit
    kernels::fixed_order_attention_forward(ctx.cpu, s.out, s.lse, s.q, s.k, s.v, ctx.B, ctx.T, H_, G_, D_,
                                           1.0 / std::sqrt(double(D_)), ctx.seg_start);
  else
    kernels::attention_forward(ctx.cpu, s.out, s.lse, s.q, s.k, s.v, ctx.B, ctx.T, H_, G_, D_,
                               1.0 / std::sqrt(double(D_)), ctx.seg_start);
  if (round) kernels::round_half_values(ctx.cpu, activation_dtype_, s.out, ctx.tokens() * H_ * D_);
  o_proj.forward(ctx, s.out, y);
}

void Attention::backward(const StepCtx& ctx, const Saved& s, const float* x_rows, const float* dy_rows, float* dx,
                         Scratch& scratch) {
  const float* dy = o_proj.output_grad(ctx, dy_rows, scratch.gathered);
  o_proj.backward_weight(ctx, dy, s.out);
  o_proj.backward_input(ctx, dy, scratch.datt, false);
  if (cp_)
    cp_->backward(ctx.cpu, scratch.dq, scratch.dk, scratch.dv, scratch.datt, s.q, s.k, s.v, s.out, s.lse,
                  ctx.seg_start);
  else
    kernels::attention_backward(ctx.cpu, scratch.dq, scratch.dk, scratch.dv, scratch.datt, s.q, s.k, s.v, s.out,
                                s.lse, ctx.B, ctx.T, H_, G_, D_, 1.0 / std::sqrt(double(D_)), ctx.seg_start);
  if (rope_) {
    const float *cos = rope_->cos_data(), *sin = rope_->sin_data();
    kernels::rope_backward(ctx.cpu, scratch.dq, cos, sin, ctx.B, ctx.T, H_, D_, ctx.positions);
    kernels::rope_backward(ctx.cpu, scratch.dk, cos, sin, ctx.B, ctx.T, G_, D_, ctx.positions);
  }
  // The input gradient takes each rank's partial dk/dv (their sum over the
  // group is the whole); the weight gradients of a shared KV group need the
  // sum over the ranks holding it.
  q_proj.backward_input(ctx, scratch.dq, dx, false);
  k_proj.backward_input(ctx, scratch.dk, dx, true);
  v_proj.backward_input(ctx, scratch.dv, dx, true);
  if (tp_.kv_group && tp_.kv_group->size() > 1) {
    tp_.kv_group->all_reduce(scratch.dk, ctx.tokens() * G_ * D_, DType::f32);
    tp_.kv_group->all_reduce(scratch.dv, ctx.tokens() * G_ * D_, DType::f32);
  }
  const float* x = tp_.gather_rows(scratch.gathered, x_rows, ctx.B, ctx.T, C_);
  q_proj.backward_weight(ctx, scratch.dq, x);
  k_proj.backward_weight(ctx, scratch.dk, x);
  v_proj.backward_weight(ctx, scratch.dv, x);
  tp_.reduce_rows(dx, ctx.B, ctx.T, C_);
}

void Attention::collect(std::vector<Param*>& out) {
  q_proj.collect(out);
  k_proj.collect(out);
  v_proj.collect(out);
  o_proj.collect(out);
}

}  // namespace claw::model
