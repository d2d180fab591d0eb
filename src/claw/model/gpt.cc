#include "claw/model/gpt.h"

#include "claw/core/error.h"
#include "claw/kernels/cpu/reduce.h"
#include "claw/model/tp_mappings.h"

namespace claw::model {

void Activations::layout(ArenaLayout& L, const ModelConfig& cfg, int64_t B, int64_t T, Recompute recompute,
                         TpDims tp) {
  const int64_t N = B * T, R = tp.rows(N);
  embedding = L.take<float>("embedding.out", R * cfg.hidden_size);
  Block::Saved shared;
  if (recompute.layers > 0) shared.layout_internal(L, "recompute", cfg, B, T, tp);
  blocks.resize(cfg.num_layers);
  const float* x = embedding;
  for (int l = 0; l < cfg.num_layers; ++l) {
    if (l < recompute.layers) {
      blocks[l] = shared;
      blocks[l].out = L.take<float>("layers." + std::to_string(l) + ".out", R * cfg.hidden_size);
    } else {
      blocks[l].layout(L, l, cfg, B, T, tp);
    }
    blocks[l].x = x;
    x = blocks[l].out;
  }
  final_norm.layout(L, "final_norm", cfg, R);
  output.layout(L, cfg, N);
  scratch.layout(L, cfg, N, tp);
}

ArenaPlan plan_activations(const ModelConfig& cfg, int64_t B, int64_t T, Recompute recompute, TpDims tp) {
  ArenaPlan plan("activations");
  ArenaLayout L = ArenaLayout::planning(plan);
  Activations a;
  a.layout(L, cfg, B, T, recompute, tp);
  return plan;
}

namespace {
// The model's TP groups: the given ones, or one-rank groups owned by the model.
TensorParallel resolve_tp(TensorParallel tp, std::unique_ptr<comm::Group>& own_tp, std::unique_ptr<comm::Group>& own_kv) {
  if (!tp.group) {
    own_tp = std::make_unique<comm::SelfGroup>("tp");
    tp.group = own_tp.get();
  }
  if (!tp.kv_group) {
    CLAW_CHECK(tp.group->size() == 1, "a tensor-parallel group of {} ranks needs its KV-replica group", tp.group->size());
    own_kv = std::make_unique<comm::SelfGroup>("tp_kv");
    tp.kv_group = own_kv.get();
  }
  return tp;
}
}  // namespace

GPT::GPT(ModelConfig cfg, StoreOptions storage, TensorParallel tp)
    : cfg_((cfg.validate(), validate_tensor_parallel(cfg, tp.size(), tp.sequence_parallel), std::move(cfg))),
      tp_(resolve_tp(tp, own_tp_, own_kv_)),
      hf_(cfg_),
      rope_(cfg_.position_embedding_type == Position::rope
                ? RopeTables(cfg_.max_position_embeddings, cfg_.head_dim(), cfg_.rotary_base)
                : RopeTables()),
      embedding_(cfg_, hf_, tp_),
      final_norm_("final_norm", cfg_, hf_.final_norm(false), hf_.final_norm(true), tp_),
      output_(cfg_, hf_, cfg_.tied() ? &embedding_.word : nullptr, tp_) {
  CLAW_CHECK(tp_.kv_group->size() == tp_.dims().kv_replicas(cfg_),
             "KV-replica group of {} ranks, but {} query groups over TP {} need {}", tp_.kv_group->size(),
             cfg_.kv_heads(), tp_.size(), tp_.dims().kv_replicas(cfg_));
  for (int l = 0; l < cfg_.num_layers; ++l)
    blocks_.push_back(std::make_unique<Block>(l, cfg_, hf_, &rope_, tp_));
  // Replicated parameters count once over the TP group (on its rank 0).
  for (Param* p : params())
    if (p->spec.shard_dim < 0) p->spec.primary = tp_.rank() == 0;
  store_ = std::make_unique<ParamStore>(params(), storage);

  // Units: parameters collected per layer, in the store's (forward) order.
  std::vector<std::pair<std::string, std::vector<Param*>>> groups;
  groups.push_back({"embedding", {}});
  embedding_.collect(groups.back().second);
  for (int l = 0; l < cfg_.num_layers; ++l) {
    groups.push_back({"layers." + std::to_string(l), {}});
    blocks_[l]->collect(groups.back().second);
  }
  groups.push_back({"final_norm", {}});
  final_norm_.collect(groups.back().second);
  groups.push_back({"output_layer", {}});
  output_.collect(groups.back().second);
  const auto& offsets = store_->offsets();
  size_t k = 0;
  int64_t end = 0;
  for (auto& [name, ps] : groups) {
    Unit u{.name = name, .params = ps, .lo = end, .hi = end};
    for (Param* p : ps) {
      CLAW_CHECK(store_->params()[k] == p, "unit {} is not contiguous in the parameter store", name);
      u.hi = static_cast<int64_t>(offsets[k] / sizeof(float)) + p->spec.local_shape().numel();
      ++k;
    }
    if (!ps.empty()) u.lo = static_cast<int64_t>(offsets[k - ps.size()] / sizeof(float));
    end = u.hi;
    units_.push_back(std::move(u));
  }
}

std::vector<int> GPT::use_order(bool training) const {
  const int L = cfg_.num_layers;
  std::vector<int> order;
  for (int u = 0; u <= L + 1; ++u) order.push_back(u);
  order.push_back(output_value_unit());
  if (training)  // the output layer's backward ran in its forward; the embedding's backward needs no values
    for (int u = L + 1; u >= 1; --u) order.push_back(u);
  return order;
}

std::vector<GPT::GradEvent> GPT::grad_order() const {
  const int L = cfg_.num_layers;
  std::vector<GradEvent> ev;
  if (cfg_.tied()) {
    ev.push_back({true, 0});
  } else {
    ev.push_back({true, output_unit()});
    ev.push_back({false, output_unit()});
  }
  for (int u = L + 1; u >= 1; --u) {
    ev.push_back({true, u});
    ev.push_back({false, u});
  }
  if (!cfg_.tied()) ev.push_back({true, 0});
  ev.push_back({false, 0});
  return ev;
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
  if (tp_.sp()) check_sequence_split(T, tp_.size());
  act_plan_ = plan_activations(cfg_, B, T, recompute, tp_.dims());
  act_arena_ = Arena(act_plan_);
  ArenaLayout L = ArenaLayout::binding(act_plan_, act_arena_);
  acts_ = Activations();
  acts_.layout(L, cfg_, B, T, recompute, tp_.dims());
  B_ = B;
  T_ = T;
  recompute_ = recompute;
}

double GPT::forward(const StepCtx& ctx, const int32_t* tokens, const int32_t* targets, double dloss_scale) {
  CLAW_CHECK(ctx.B == B_ && ctx.T == T_, "forward on [{}, {}] but activations are reserved for [{}, {}]", ctx.B,
             ctx.T, B_, T_);
  UnitHooks none;
  UnitHooks& h = hooks_ ? *hooks_ : none;
  const bool grads = dloss_scale != 0;
  h.begin_pass(grads);
  h.before_use(0);
  embedding_.forward(ctx, tokens, acts_.embedding, acts_.scratch);
  h.after_use(0);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    h.before_use(static_cast<int>(l) + 1);
    blocks_[l]->forward(ctx, acts_.blocks[l], acts_.scratch);
    h.after_use(static_cast<int>(l) + 1);
  }
  const float* x = blocks_.empty() ? acts_.embedding : acts_.blocks.back().out;
  const int L = cfg_.num_layers;
  h.before_use(L + 1);
  final_norm_.forward(ctx, x, acts_.final_norm);
  h.after_use(L + 1);
  h.before_use(output_value_unit());
  if (grads) h.grads_begin(cfg_.tied() ? 0 : output_unit());
  const double loss = output_.forward(ctx, acts_.final_norm.out, targets, dloss_scale, acts_.output, acts_.scratch);
  if (grads && !cfg_.tied()) h.grads_end(output_unit());
  h.after_use(output_value_unit());
  return loss;
}

void GPT::backward(const StepCtx& ctx, const int32_t* tokens) {
  UnitHooks none;
  UnitHooks& h = hooks_ ? *hooks_ : none;
  const int L = cfg_.num_layers;
  const float* x = blocks_.empty() ? acts_.embedding : acts_.blocks.back().out;
  h.before_use(L + 1);
  h.grads_begin(L + 1);
  final_norm_.backward(ctx, acts_.final_norm, x, acts_.output.dx, acts_.scratch.dres, /*accumulate=*/false,
                       acts_.scratch);
  h.grads_end(L + 1);
  h.after_use(L + 1);
  for (size_t l = blocks_.size(); l-- > 0;) {
    const int u = static_cast<int>(l) + 1;
    h.before_use(u);
    h.grads_begin(u);
    // The last recomputed block's values are still in the shared region from
    // the forward pass; the others are re-run. Forward uses only scratch
    // tmp/act, never the gradients in dres/dnorm.
    if (static_cast<int64_t>(l) + 1 < recompute_.layers) blocks_[l]->forward(ctx, acts_.blocks[l], acts_.scratch);
    blocks_[l]->backward(ctx, acts_.blocks[l], acts_.scratch);
    h.grads_end(u);
    h.after_use(u);
  }
  if (!cfg_.tied()) h.grads_begin(0);
  embedding_.backward(ctx, tokens, acts_.scratch.dres, acts_.scratch);
  h.grads_end(0);
}

void GPT::logits(const StepCtx& ctx, float* out) const { output_.logits(ctx, acts_.final_norm.out, out); }

namespace {
bool finite(const CpuCtx& ctx, const float* p, int64_t n) { return kernels::first_non_finite(ctx, p, n) < 0; }
}  // namespace

std::string GPT::first_non_finite(const CpuCtx& ctx) const {
  const int64_t N = B_ * T_, C = cfg_.hidden_size, R = tp_.rows(N);
  auto bad_params = [&](std::initializer_list<const Param*> ps) -> std::string {
    for (const Param* p : ps)
      if (p->value.defined() && !finite(ctx, p->data(), p->spec.local_shape().numel())) return p->spec.name + " (parameter)";
    return "";
  };
  if (auto s = bad_params({&embedding_.word, &embedding_.position}); !s.empty()) return s;
  if (N > 0 && !finite(ctx, acts_.embedding, R * C)) return "embedding.out (activation)";
  for (size_t l = 0; l < blocks_.size(); ++l) {
    std::vector<Param*> ps;
    blocks_[l]->collect(ps);
    for (const Param* p : ps)
      if (p->value.defined() && !finite(ctx, p->data(), p->spec.local_shape().numel())) return p->spec.name + " (parameter)";
    if (N == 0) continue;
    for (const NamedSpan& t : blocks_[l]->saved_tensors(acts_.blocks[l], N)) {
      // A recomputed block's internals live in the shared region (they hold
      // the last recomputed block's values); only its output is its own.
      bool own = static_cast<int64_t>(l) >= recompute_.layers || t.data == acts_.blocks[l].out;
      if (own && !finite(ctx, t.data, t.numel)) return t.name + " (activation)";
    }
  }
  if (auto s = bad_params({&final_norm_.weight, &final_norm_.bias, &output_.own_weight}); !s.empty()) return s;
  if (N > 0 && !finite(ctx, acts_.final_norm.out, R * C)) return "final_norm.out (activation)";
  if (N > 0 && !finite(ctx, acts_.output.lse, N)) return "output.logits (activation: log-sum-exp of the logits)";
  if (N > 0 && !finite(ctx, acts_.output.losses, N)) return "output.losses (activation)";
  return "";
}

std::string GPT::first_non_finite_grad(const CpuCtx& ctx) const {
  for (const Param* p : store_->params())
    if (p->grad.defined() && !finite(ctx, p->gdata(), p->spec.local_shape().numel())) return p->spec.name + " (gradient)";
  return "";
}

}  // namespace claw::model
