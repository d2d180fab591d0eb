#include "claw/model/block.h"

#include "claw/core/philox.h"
#include "claw/kernels/cpu/dropout.h"
#include "claw/kernels/cpu/reduce.h"

namespace claw::model {

void Block::Saved::layout_internal(ArenaLayout& L, const std::string& p, const ModelConfig& cfg, int64_t B,
                                   int64_t T) {
  const int64_t N = B * T;
  norm1.layout(L, p + ".input_norm", cfg, N);
  attn.layout(L, p + ".attention", cfg, B, T);
  x_mid = L.take<float>(p + ".x_mid", N * cfg.hidden_size);
  norm2.layout(L, p + ".post_attention_norm", cfg, N);
  mlp.layout(L, p + ".mlp", cfg, N);
}

void Block::Saved::layout(ArenaLayout& L, int layer, const ModelConfig& cfg, int64_t B, int64_t T) {
  const std::string p = "layers." + std::to_string(layer);
  layout_internal(L, p, cfg, B, T);
  out = L.take<float>(p + ".out", B * T * cfg.hidden_size);
}

Block::Block(int l, const ModelConfig& cfg, const HfNames& hf, const RopeTables* rope)
    : norm1("layers." + std::to_string(l) + ".input_norm", cfg, hf.input_norm(l, false), hf.input_norm(l, true)),
      attention(l, cfg, hf, rope),
      norm2("layers." + std::to_string(l) + ".post_attention_norm", cfg, hf.post_attention_norm(l, false),
            hf.post_attention_norm(l, true)),
      mlp(l, cfg, hf),
      layer_(l),
      C_(cfg.hidden_size),
      cfg_(cfg) {}

// Hidden dropout on a branch output before the residual add. The stream is
// keyed by (seed, layer, site); counters start at the micro-batch's global
// token offset, so masks are the same for any layout.
void Block::dropout_fwd(const StepCtx& ctx, float* y, const char* site) const {
  if (!ctx.training || cfg_.hidden_dropout <= 0) return;
  RandomStream rng(ctx.seed, hash_name("layers." + std::to_string(layer_) + site));
  kernels::dropout_forward(ctx.cpu, y, y, ctx.tokens() * C_, cfg_.hidden_dropout, rng, ctx.sample0 * ctx.T * C_);
}

const float* Block::branch_grad(const StepCtx& ctx, Scratch& scratch, const char* site) const {
  if (!ctx.training || cfg_.hidden_dropout <= 0) return scratch.dres;
  RandomStream rng(ctx.seed, hash_name("layers." + std::to_string(layer_) + site));
  kernels::dropout_backward(ctx.cpu, scratch.tmp, scratch.dres, ctx.tokens() * C_, cfg_.hidden_dropout, rng,
                            ctx.sample0 * ctx.T * C_);
  return scratch.tmp;
}

void Block::forward(const StepCtx& ctx, Saved& s, Scratch& scratch) const {
  const int64_t n = ctx.tokens() * C_;
  norm1.forward(ctx, s.x, s.norm1);
  attention.forward(ctx, s.norm1.out, scratch.tmp, s.attn);
  dropout_fwd(ctx, scratch.tmp, ".attention.dropout");
  kernels::add(ctx.cpu, s.x_mid, s.x, scratch.tmp, n);
  norm2.forward(ctx, s.x_mid, s.norm2);
  mlp.forward(ctx, s.norm2.out, scratch.tmp, s.mlp, scratch);
  dropout_fwd(ctx, scratch.tmp, ".mlp.dropout");
  kernels::add(ctx.cpu, s.out, s.x_mid, scratch.tmp, n);
}

void Block::backward(const StepCtx& ctx, Saved& s, Scratch& scratch) {
  // d(out) reaches x_mid unchanged through the skip path (dres keeps it) and
  // through the MLP branch, whose input gradient the norm adds onto dres.
  mlp.backward(ctx, s.mlp, s.norm2.out, branch_grad(ctx, scratch, ".mlp.dropout"), scratch.dnorm, scratch);
  norm2.backward(ctx, s.norm2, s.x_mid, scratch.dnorm, scratch.dres, /*accumulate=*/true);
  attention.backward(ctx, s.attn, s.norm1.out, branch_grad(ctx, scratch, ".attention.dropout"), scratch.dnorm,
                     scratch);
  norm1.backward(ctx, s.norm1, s.x, scratch.dnorm, scratch.dres, /*accumulate=*/true);
}

void Block::collect(std::vector<Param*>& out) {
  norm1.collect(out);
  attention.collect(out);
  norm2.collect(out);
  mlp.collect(out);
}

std::vector<NamedSpan> Block::saved_tensors(const Saved& s, int64_t N) const {
  const std::string p = "layers." + std::to_string(layer_);
  const int64_t HD = cfg_.num_attention_heads * cfg_.head_dim(), GD = cfg_.kv_heads() * cfg_.head_dim();
  std::vector<NamedSpan> t = {
      {p + ".input_norm.out", s.norm1.out, N * C_},
      {p + ".attention.q", s.attn.q, N * HD},
      {p + ".attention.k", s.attn.k, N * GD},
      {p + ".attention.v", s.attn.v, N * GD},
      {p + ".attention.out", s.attn.out, N * HD},
      {p + ".x_mid", s.x_mid, N * C_},
      {p + ".post_attention_norm.out", s.norm2.out, N * C_},
      {p + ".mlp.h", s.mlp.h, N * cfg_.ffn()},
  };
  if (s.mlp.u) t.push_back({p + ".mlp.u", s.mlp.u, N * cfg_.ffn()});
  t.push_back({p + ".out", s.out, N * C_});
  return t;
}

}  // namespace claw::model
