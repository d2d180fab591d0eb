#include "claw/model/gpt.h"

#include "claw/core/error.h"
#include "claw/kernels/cpu/reduce.h"

namespace claw::model {

void Activations::layout(ArenaLayout& L, const ModelConfig& cfg, int64_t B, int64_t T, Recompute recompute) {
  const int64_t N = B * T;
  embedding = L.take<float>("embedding.out", N * cfg.hidden_size);
  Block::Saved shared;
  if (recompute.layers > 0) shared.layout_internal(L, "recompute", cfg, B, T);
  blocks.resize(cfg.num_layers);
  const float* x = embedding;
  for (int l = 0; l < cfg.num_layers; ++l) {
    if (l < recompute.layers) {
      blocks[l] = shared;
      blocks[l].out = L.take<float>("layers." + std::to_string(l) + ".out", N * cfg.hidden_size);
    } else {
      blocks[l].layout(L, l, cfg, B, T);
    }
    blocks[l].x = x;
    x = blocks[l].out;
  }
  final_norm.layout(L, "final_norm", cfg, N);
  output.layout(L, cfg, N);
  scratch.layout(L, cfg, N);
}

ArenaPlan plan_activations(const ModelConfig& cfg, int64_t B, int64_t T, Recompute recompute) {
  ArenaPlan plan("activations");
  ArenaLayout L = ArenaLayout::planning(plan);
  Activations a;
  a.layout(L, cfg, B, T, recompute);
  return plan;
}

GPT::GPT(ModelConfig cfg)
    : cfg_((cfg.validate(), std::move(cfg))),
      hf_(cfg_),
      rope_(cfg_.position_embedding_type == Position::rope
                ? RopeTables(cfg_.max_position_embeddings, cfg_.head_dim(), cfg_.rotary_base)
                : RopeTables()),
      embedding_(cfg_, hf_),
      final_norm_("final_norm", cfg_, hf_.final_norm(false), hf_.final_norm(true)),
      output_(cfg_, hf_, cfg_.tied() ? &embedding_.word : nullptr) {
  for (int l = 0; l < cfg_.num_layers; ++l) blocks_.push_back(std::make_unique<Block>(l, cfg_, hf_, &rope_));
  store_ = std::make_unique<ParamStore>(params());
}

std::vector<Param*> GPT::params() {
  std::vector<Param*> out;
  embedding_.collect(out);
  for (auto& b : blocks_) b->collect(out);
  final_norm_.collect(out);
  output_.collect(out);
  return out;
}

void GPT::reserve(int64_t B, int64_t T, Recompute recompute) {
  if (recompute.layers < 0 || recompute.layers > cfg_.num_layers)
    fail("--recompute-num-layers {} must be in [0, --num-layers {}]", recompute.layers, cfg_.num_layers);
  if (B == B_ && T == T_ && recompute.layers == recompute_.layers) return;
  if (T > cfg_.max_position_embeddings)
    fail("--seq-length {} exceeds --max-position-embeddings {} (the position table); use at most {} or raise "
         "--max-position-embeddings",
         T, cfg_.max_position_embeddings, cfg_.max_position_embeddings);
  act_plan_ = plan_activations(cfg_, B, T, recompute);
  act_arena_ = Arena(act_plan_);
  ArenaLayout L = ArenaLayout::binding(act_plan_, act_arena_);
  acts_ = Activations();
  acts_.layout(L, cfg_, B, T, recompute);
  B_ = B;
  T_ = T;
  recompute_ = recompute;
}

double GPT::forward(const StepCtx& ctx, const int32_t* tokens, const int32_t* targets, double dloss_scale) {
  CLAW_CHECK(ctx.B == B_ && ctx.T == T_, "forward on [{}, {}] but activations are reserved for [{}, {}]", ctx.B,
             ctx.T, B_, T_);
  embedding_.forward(ctx, tokens, acts_.embedding);
  for (size_t l = 0; l < blocks_.size(); ++l) blocks_[l]->forward(ctx, acts_.blocks[l], acts_.scratch);
  const float* x = blocks_.empty() ? acts_.embedding : acts_.blocks.back().out;
  final_norm_.forward(ctx, x, acts_.final_norm);
  return output_.forward(ctx, acts_.final_norm.out, targets, dloss_scale, acts_.output, acts_.scratch);
}

void GPT::backward(const StepCtx& ctx, const int32_t* tokens) {
  const float* x = blocks_.empty() ? acts_.embedding : acts_.blocks.back().out;
  final_norm_.backward(ctx, acts_.final_norm, x, acts_.output.dx, acts_.scratch.dres, /*accumulate=*/false);
  for (size_t l = blocks_.size(); l-- > 0;) {
    // The last recomputed block's values are still in the shared region from
    // the forward pass; the others are re-run. Forward uses only scratch
    // tmp/act, never the gradients in dres/dnorm.
    if (static_cast<int64_t>(l) + 1 < recompute_.layers) blocks_[l]->forward(ctx, acts_.blocks[l], acts_.scratch);
    blocks_[l]->backward(ctx, acts_.blocks[l], acts_.scratch);
  }
  embedding_.backward(ctx, tokens, acts_.scratch.dres);
}

void GPT::logits(const StepCtx& ctx, float* out) const { output_.logits(ctx, acts_.final_norm.out, out); }

namespace {
bool finite(const CpuCtx& ctx, const float* p, int64_t n) { return kernels::first_non_finite(ctx, p, n) < 0; }
}  // namespace

std::string GPT::first_non_finite(const CpuCtx& ctx) const {
  const int64_t N = B_ * T_, C = cfg_.hidden_size;
  auto bad_params = [&](std::initializer_list<const Param*> ps) -> std::string {
    for (const Param* p : ps)
      if (p->value.defined() && !finite(ctx, p->data(), p->spec.shape.numel())) return p->spec.name + " (parameter)";
    return "";
  };
  if (auto s = bad_params({&embedding_.word, &embedding_.position}); !s.empty()) return s;
  if (N > 0 && !finite(ctx, acts_.embedding, N * C)) return "embedding.out (activation)";
  for (size_t l = 0; l < blocks_.size(); ++l) {
    std::vector<Param*> ps;
    blocks_[l]->collect(ps);
    for (const Param* p : ps)
      if (!finite(ctx, p->data(), p->spec.shape.numel())) return p->spec.name + " (parameter)";
    if (N == 0) continue;
    for (const NamedSpan& t : blocks_[l]->saved_tensors(acts_.blocks[l], N)) {
      // A recomputed block's internals live in the shared region (they hold
      // the last recomputed block's values); only its output is its own.
      bool own = static_cast<int64_t>(l) >= recompute_.layers || t.data == acts_.blocks[l].out;
      if (own && !finite(ctx, t.data, t.numel)) return t.name + " (activation)";
    }
  }
  if (auto s = bad_params({&final_norm_.weight, &final_norm_.bias, &output_.own_weight}); !s.empty()) return s;
  if (N > 0 && !finite(ctx, acts_.final_norm.out, N * C)) return "final_norm.out (activation)";
  if (N > 0 && !finite(ctx, acts_.output.lse, N)) return "output.logits (activation: log-sum-exp of the logits)";
  if (N > 0 && !finite(ctx, acts_.output.losses, N)) return "output.losses (activation)";
  return "";
}

std::string GPT::first_non_finite_grad(const CpuCtx& ctx) const {
  for (const Param* p : store_->params())
    if (!finite(ctx, p->gdata(), p->spec.shape.numel())) return p->spec.name + " (gradient)";
  return "";
}

}  // namespace claw::model
