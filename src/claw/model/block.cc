#include "claw/model/block.h"

#include <algorithm>

#include "claw/core/error.h"

#include "claw/core/philox.h"
#include "claw/kernels/cpu/bf16_gemm.h"
#include "claw/kernels/cpu/dropout.h"
#include "claw/kernels/cpu/reduce.h"

namespace claw::model {

void Block::Saved::layout_internal(ArenaLayout& L, const std::string& p, const ModelConfig& cfg, int64_t B,
                                   int64_t T, TpDims tp, int64_t layer) {
  const int64_t N = B * T, R = tp.rows(N);
  if (cfg.pre_sublayer_norm) norm1.layout(L, p + ".input_norm", cfg, R);
  attn.layout(L, p + ".attention", cfg, B, T, tp);
  x_mid = L.take<float>(p + ".x_mid", R * cfg.hidden_size);
  if (cfg.pre_sublayer_norm) norm2.layout(L, p + ".post_attention_norm", cfg, R);
  const int64_t moe_layers = cfg.moe.num_moe_layers(cfg.num_layers);
  const bool moe_here = layer >= 0 ? cfg.moe.is_moe_layer(layer, cfg.num_layers) : moe_layers > 0;
  const bool dense_here = layer >= 0 ? !moe_here : moe_layers < cfg.num_layers;
  if (dense_here) mlp.layout(L, p + ".mlp", cfg, N, tp);
  if (moe_here) moe.layout(L, p + ".mlp", cfg, N, tp);
  if (!cfg.post_sublayer_norm) return;
  attn_y = L.take<float>(p + ".attn_y", R * cfg.hidden_size);
  attn_out_norm.layout(L, p + ".attention_out_norm", cfg, R);
  mlp_y = L.take<float>(p + ".mlp_y", R * cfg.hidden_size);
  mlp_out_norm.layout(L, p + ".mlp_out_norm", cfg, R);
}

void Block::Saved::layout(ArenaLayout& L, int layer, const ModelConfig& cfg, int64_t B, int64_t T, TpDims tp) {
  const std::string p = "layers." + std::to_string(layer);
  layout_internal(L, p, cfg, B, T, tp, layer);
  out = L.take<float>(p + ".out", tp.rows(B * T) * cfg.hidden_size);
}

Block::Block(int l, const ModelConfig& cfg, const HfNames& hf, const RopeTables* rope, const TensorParallel& tp)
    : attention(l, cfg, hf, rope, tp), layer_(l), tp_(tp), C_(cfg.hidden_size), cfg_(cfg) {
  if (cfg.pre_sublayer_norm) {
    const std::string p = "layers." + std::to_string(l);
    norm1.emplace(p + ".input_norm", cfg, hf.input_norm(l, false), hf.input_norm(l, true), tp);
    norm2.emplace(p + ".post_attention_norm", cfg, hf.post_attention_norm(l, false), hf.post_attention_norm(l, true),
                  tp);
  }
  if (cfg.moe.is_moe_layer(l, cfg.num_layers))
    moe.emplace(l, cfg, hf, tp);
  else
    mlp.emplace(l, cfg, hf, tp);
  if (cfg.post_sublayer_norm) {
    const std::string p = "layers." + std::to_string(l);
    attn_out_norm.emplace(p + ".attention_out_norm", cfg, hf.output_norm(l, "attention"), HfRef{}, tp);
    mlp_out_norm.emplace(p + ".mlp_out_norm", cfg, hf.output_norm(l, "mlp"), HfRef{}, tp);
  }
  attention.set_activation_dtype(cfg.activation_dtype());
  if (mlp) mlp->set_activation_dtype(cfg.activation_dtype());
  if (moe) moe->set_activation_dtype(cfg.activation_dtype());
}

// Hidden dropout on a branch output before the residual add. The stream is
// keyed by (seed, layer, site); counters start at the global index of the
// first token held (the micro-batch's offset plus this rank's sequence
// piece), so masks are the same for any layout.
void Block::dropout_fwd(const StepCtx& ctx, float* y, const char* site) const {
  if (!ctx.training || cfg_.hidden_dropout <= 0) return;
  const int64_t N = ctx.tokens();
  RandomStream rng(ctx.seed, hash_name("layers." + std::to_string(layer_) + site));
  kernels::dropout_forward(ctx.cpu, y, y, tp_.rows(N) * C_, cfg_.hidden_dropout, rng,
                           (ctx.first_token() + tp_.first_row(N)) * C_);
}

const float* Block::branch_grad(const StepCtx& ctx, Scratch& scratch, const char* site) const {
  if (!ctx.training || cfg_.hidden_dropout <= 0) return scratch.dres;
  const int64_t N = ctx.tokens();
  RandomStream rng(ctx.seed, hash_name("layers." + std::to_string(layer_) + site));
  kernels::dropout_backward(ctx.cpu, scratch.tmp, scratch.dres, tp_.rows(N) * C_, cfg_.hidden_dropout, rng,
                            (ctx.first_token() + tp_.first_row(N)) * C_);
  return scratch.tmp;
}

float* Block::branch_output(const StepCtx& ctx, float* y, float* y_saved, const std::optional<NormLayer>& norm,
                           NormLayer::Saved& s) const {
  if (!norm) return y;
  if (ctx.cpu.gpu) fail("--post-sublayer-norm runs on the CPU only for now");
  std::copy_n(y, tp_.rows(ctx.tokens()) * C_, y_saved);
  norm->forward(ctx, y_saved, s);
  return s.out;
}

const float* Block::branch_output_grad(const StepCtx& ctx, const float* dy, const float* y_saved,
                                       std::optional<NormLayer>& norm, const NormLayer::Saved& s, Scratch& scratch) {
  if (!norm) return dy;
  norm->backward(ctx, s, y_saved, dy, scratch.dpost, /*accumulate=*/false, scratch);
  return scratch.dpost;
}

template <typename Round>
const float* Block::sublayer_input(const StepCtx& ctx, const std::optional<NormLayer>& norm, const float* x,
                                   NormLayer::Saved& s, const Round& rounded) const {
  if (!norm) return x;
  norm->forward(ctx, x, s);
  rounded(s.out);
  return s.out;
}

void Block::forward(const StepCtx& ctx, Saved& s, Scratch& scratch) const {
  const int64_t n = tp_.rows(ctx.tokens()) * C_;
  // 16-bit activations: the saved tensors are rounded where they are made.
  const bool round = cfg_.half_activations() && !ctx.kv_cache && !ctx.batch_invariant;
  const auto rounded = [&](float* a) {
    if (round) kernels::round_half_values(ctx.cpu, cfg_.activation_dtype(), a, n);
  };
  attention.forward(ctx, sublayer_input(ctx, norm1, s.x, s.norm1, rounded), scratch.tmp, s.attn, scratch);
  float* branch = branch_output(ctx, scratch.tmp, s.attn_y, attn_out_norm, s.attn_out_norm);
  dropout_fwd(ctx, branch, ".attention.dropout");
  kernels::add(ctx.cpu, s.x_mid, s.x, branch, n);
  rounded(s.x_mid);
  const float* mlp_in = sublayer_input(ctx, norm2, s.x_mid, s.norm2, rounded);
  if (moe)
    moe->forward(ctx, mlp_in, scratch.tmp, s.moe, scratch);
  else
    mlp->forward(ctx, mlp_in, scratch.tmp, s.mlp, scratch);
  branch = branch_output(ctx, scratch.tmp, s.mlp_y, mlp_out_norm, s.mlp_out_norm);
  dropout_fwd(ctx, branch, ".mlp.dropout");
  kernels::add(ctx.cpu, s.out, s.x_mid, branch, n);
}

void Block::backward(const StepCtx& ctx, Saved& s, Scratch& scratch) {
  // d(out) reaches x_mid unchanged through the skip path (dres keeps it) and
  // through the MLP branch, whose input gradient the norm adds onto dres.
  const float* dmlp =
      branch_output_grad(ctx, branch_grad(ctx, scratch, ".mlp.dropout"), s.mlp_y, mlp_out_norm, s.mlp_out_norm, scratch);
  const float* mlp_in = norm2 ? s.norm2.out : s.x_mid;
  if (moe)
    moe->backward(ctx, s.moe, mlp_in, dmlp, scratch.dnorm, scratch);
  else
    mlp->backward(ctx, s.mlp, mlp_in, dmlp, scratch.dnorm, scratch);
  sublayer_input_grad(ctx, norm2, s.norm2, s.x_mid, scratch);
  const float* dattn = branch_output_grad(ctx, branch_grad(ctx, scratch, ".attention.dropout"), s.attn_y,
                                          attn_out_norm, s.attn_out_norm, scratch);
  attention.backward(ctx, s.attn, norm1 ? s.norm1.out : s.x, dattn, scratch.dnorm, scratch);
  sublayer_input_grad(ctx, norm1, s.norm1, s.x, scratch);
}

// A sublayer's input gradient (scratch.dnorm) onto the residual stream's
// (scratch.dres), through its input norm when it has one.
void Block::sublayer_input_grad(const StepCtx& ctx, std::optional<NormLayer>& norm, const NormLayer::Saved& s,
                                const float* x, Scratch& scratch) {
  if (norm)
    norm->backward(ctx, s, x, scratch.dnorm, scratch.dres, /*accumulate=*/true, scratch);
  else
    kernels::add(ctx.cpu, scratch.dres, scratch.dres, scratch.dnorm, tp_.rows(ctx.tokens()) * C_);
}

void Block::collect(std::vector<Param*>& out) {
  if (norm1) norm1->collect(out);
  attention.collect(out);
  if (attn_out_norm) attn_out_norm->collect(out);
  if (norm2) norm2->collect(out);
  if (moe)
    moe->collect(out);
  else
    mlp->collect(out);
  if (mlp_out_norm) mlp_out_norm->collect(out);
}

std::vector<NamedSpan> Block::saved_tensors(const Saved& s, int64_t N) const {
  const std::string p = "layers." + std::to_string(layer_);
  const TpDims d = tp_.dims();
  const int64_t HD = d.heads(cfg_) * cfg_.head_dim(), GD = d.kv_groups(cfg_) * cfg_.head_dim(), F = d.ffn(cfg_),
                R = d.rows(N);
  std::vector<NamedSpan> t;
  if (norm1) t.push_back({p + ".input_norm.out", s.norm1.out, R * C_});
  t.insert(t.end(), {{p + ".attention.q", s.attn.q, N * HD},
                     {p + ".attention.k", s.attn.k, N * GD},
                     {p + ".attention.v", s.attn.v, N * GD},
                     {p + ".attention.out", s.attn.out, N * HD},
                     {p + ".x_mid", s.x_mid, R * C_}});
  if (norm2) t.push_back({p + ".post_attention_norm.out", s.norm2.out, R * C_});
  if (mlp) {
    t.push_back({p + ".mlp.h", s.mlp.h, N * F});
    if (s.mlp.u) t.push_back({p + ".mlp.u", s.mlp.u, N * F});
  } else {
    t.push_back({p + ".mlp.router_logits", s.moe.logits, N * cfg_.moe.num_experts});
  }
  t.push_back({p + ".out", s.out, R * C_});
  return t;
}

}  // namespace claw::model
