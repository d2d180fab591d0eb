#include "claw/model/gpt.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "claw/core/error.h"
#include "claw/kernels/cpu/bf16_gemm.h"
#include "claw/kernels/cpu/reduce.h"
#include "claw/model/tp_mappings.h"

namespace claw::model {

PipelineStage PipelineStage::resolved(const ModelConfig& cfg) const {
  PipelineStage s = *this;
  const int64_t L = cfg.num_layers;
  if (s.num_layers < 0) s.num_layers = L - s.first_layer;
  CLAW_CHECK(s.first_layer >= 0 && s.num_layers >= 0 && s.first_layer + s.num_layers <= L,
             "pipeline stage of layers [{}, {}) is not within the model's {} layers", s.first_layer,
             s.first_layer + s.num_layers, L);
  CLAW_CHECK(!s.pre_process || s.first_layer == 0, "the stage holding the embedding must start at layer 0, not {}",
             s.first_layer);
  CLAW_CHECK(!s.post_process || s.first_layer + s.num_layers == L,
             "the stage holding the output layer must end at the last layer {}, not {}", L,
             s.first_layer + s.num_layers);
  return s;
}

bool PipelineStage::whole(const ModelConfig& cfg) const {
  const PipelineStage s = resolved(cfg);
  return s.pre_process && s.post_process;
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

GPT::GPT(ModelConfig cfg, StoreOptions storage, TensorParallel tp, PipelineStage stage)
    : cfg_((cfg.validate(), validate_tensor_parallel(cfg, tp.size(), tp.sequence_parallel), std::move(cfg))),
      stage_(stage.resolved(cfg_)),
      tp_(resolve_tp(tp, own_tp_, own_kv_)),
      hf_(cfg_),
      rope_(cfg_.position_embedding_type == Position::rope && storage.allocate  // a shape-only model runs nothing
                ? RopeTables(cfg_)
                : RopeTables()),
      rope_local_(cfg_.position_embedding_type == Position::rope && storage.allocate && cfg_.local_rotary_base > 0
                      ? RopeTables(local_rope_config(cfg_))
                      : RopeTables()),
      embedding_(cfg_, hf_, tp_),
      final_norm_("final_norm", cfg_, hf_.final_norm(false), hf_.final_norm(true), tp_),
      output_(cfg_, hf_, cfg_.tied() ? &embedding_.word : nullptr, tp_) {
  CLAW_CHECK(tp_.kv_group->size() == tp_.dims().kv_replicas(cfg_),
             "KV-replica group of {} ranks, but {} query groups over TP {} need {}", tp_.kv_group->size(),
             cfg_.kv_heads(), tp_.size(), tp_.dims().kv_replicas(cfg_));
  for (int64_t k = 0; k < stage_.num_layers; ++k) {
    const int l = static_cast<int>(stage_.first_layer + k);
    // --local-rotary-base: the windowed layers rotate by their own table.
    const RopeTables* rope = !rope_local_.empty() && cfg_.layer_window(l) > 0 ? &rope_local_ : &rope_;
    blocks_.push_back(std::make_unique<Block>(l, cfg_, hf_, rope, tp_));
  }
  // FP8 and 16-bit GEMMs for the blocks' dense linear layers (MoE experts stay in fp32).
  for (int64_t k = 0; k < stage_.num_layers; ++k) {
    std::vector<Linear*> ls;
    blocks_[static_cast<size_t>(k)]->attention.linears(ls);
    if (blocks_[static_cast<size_t>(k)]->mlp) blocks_[static_cast<size_t>(k)]->mlp->linears(ls);
    const bool fp8 = cfg_.fp8.layer_in_fp8(stage_.first_layer + k, cfg_.num_layers);
    for (Linear* l : ls) {
      l->enable_half(cfg_.gemm_dtype);
      if (fp8) l->enable_fp8(cfg_.fp8, stage_.first_layer + k);
    }
  }
  output_.enable_half(cfg_.gemm_dtype);
  // Replicated parameters count once over the TP group (on its rank 0);
  // experts reduced over their own group count there (ModelChunks).
  for (Param* p : params())
    if (p->spec.shard_dim < 0 && p->spec.reduction_group == "dp") p->spec.primary = tp_.rank() == 0;
  // The last stage's copy of tied word embeddings counts once, on the first stage.
  if (cfg_.tied() && stage_.post_process && !stage_.pre_process) embedding_.word.spec.primary = false;
  // With LoRA adapters only they (and --lora-modules-to-save) train, and not those --freeze names.
  for (Param* p : params())
    p->spec.trainable = !p->spec.buffer && !matches_any(storage.freeze, p->spec.name) &&
                        (!cfg_.lora.enabled() || lora_trains(cfg_.lora, p->spec.name));
  store_ = std::make_unique<ParamStore>(params(), storage);
  if (storage.device && !rope_.empty()) rope_.upload(*storage.device);
  if (storage.device && !rope_local_.empty()) rope_local_.upload(*storage.device);

  // Units: parameters collected per layer, in the store's (forward) order.
  std::vector<std::pair<std::string, std::vector<Param*>>> groups;
  if (stage_.pre_process) {
    emb_unit_ = static_cast<int>(groups.size());
    groups.push_back({"embedding", {}});
    embedding_.collect(groups.back().second);
  }
  block_unit0_ = static_cast<int>(groups.size());
  for (int k = 0; k < num_blocks(); ++k) {
    groups.push_back({"layers." + std::to_string(stage_.first_layer + k), {}});
    blocks_[k]->collect(groups.back().second);
  }
  if (stage_.post_process) {
    norm_unit_ = static_cast<int>(groups.size());
    groups.push_back({"final_norm", {}});
    final_norm_.collect(groups.back().second);
    out_unit_ = static_cast<int>(groups.size());
    groups.push_back({"output_layer", {}});
    collect_output(groups.back().second);
  }
  const std::vector<StoreRegion>& regions = store_->regions();
  std::vector<int64_t> end(regions.size(), 0);  // per region: where the previous unit ended
  size_t k = 0;
  for (auto& [name, ps] : groups) {
    Unit u{.name = name, .params = ps};
    for (size_t r = 0; r < regions.size(); ++r) u.ranges.push_back({end[r], end[r]});
    std::vector<bool> seen(regions.size(), false);
    for (Param* p : ps) {
      CLAW_CHECK(store_->params()[k] == p, "unit {} is not contiguous in the parameter store", name);
      const ParamSlot& at = store_->slot(k);
      auto& [lo, hi] = u.ranges[at.region];
      if (!seen[at.region]) lo = at.offset;
      seen[at.region] = true;
      hi = at.offset + p->spec.local_shape().numel();
      ++k;
    }
    for (size_t r = 0; r < regions.size(); ++r) end[r] = u.ranges[r].second;
    units_.push_back(std::move(u));
  }
}

void GPT::collect_output(std::vector<Param*>& out) {
  output_.collect(out);
  // Tied, without the embedding: this stage's copy of the word embeddings.
  if (cfg_.tied() && !stage_.pre_process) out.push_back(&embedding_.word);
}

std::vector<int> GPT::use_order(bool training) const {
  std::vector<int> order;
  const int last = stage_.post_process ? norm_unit_ : block_unit0_ + num_blocks() - 1;
  for (int u = 0; u <= last; ++u) order.push_back(u);
  if (stage_.post_process) order.push_back(output_value_unit());
  if (training)  // the output layer's backward ran in its forward; the embedding's backward needs no values
    for (int u = last; u >= block_unit0_; --u) order.push_back(u);
  return order;
}

std::vector<GPT::GradEvent> GPT::grad_order() const {
  std::vector<GradEvent> ev;
  if (stage_.post_process) {
    if (tied_here()) {
      ev.push_back({true, emb_unit_});
    } else {
      ev.push_back({true, out_unit_});
      ev.push_back({false, out_unit_});
    }
    ev.push_back({true, norm_unit_});
    ev.push_back({false, norm_unit_});
  }
  for (int u = block_unit0_ + num_blocks() - 1; u >= block_unit0_; --u) {
    ev.push_back({true, u});
    ev.push_back({false, u});
  }
  if (stage_.pre_process) {
    if (!tied_here()) ev.push_back({true, emb_unit_});
    ev.push_back({false, emb_unit_});
  }
  return ev;
}

std::vector<Param*> GPT::params() {
  std::vector<Param*> out;
  if (stage_.pre_process) embedding_.collect(out);
  for (auto& b : blocks_) b->collect(out);
  if (stage_.post_process) {
    final_norm_.collect(out);
    collect_output(out);
  }
  return out;
}

void GPT::use_slot(int k) {
  CLAW_CHECK(k >= 0 && k < slots(), "activation slot {} of {}", k, slots());
  slot_ = k;
}

void GPT::update_expert_bias(comm::Group* group) {
  for (auto& b : blocks_)
    if (b->moe) b->moe->update_expert_bias(group);
}

void GPT::take_moe_stats(MoeStats& stats) {
  for (auto& b : blocks_)
    if (b->moe) b->moe->take_stats(stats);
}

void GPT::set_context_parallel(comm::Group* group, CpCommType type) {
  cp_group_ = group && group->size() > 1 ? group : nullptr;
  cp_type_ = type;
  if (cp_group_) validate_cp_heads(type, cp_group_->size(), tp_.dims().heads(cfg_), tp_.dims().kv_groups(cfg_));
  B_ = T_ = 0;  // the next reserve() makes the CP attention
  cp_attention_.reset();
  for (auto& b : blocks_) b->attention.use_context_parallel(nullptr);
}

void GPT::reserve(int64_t B, int64_t T, Recompute recompute, int slots) {
  CLAW_CHECK(slots >= 1, "{} activation slots", slots);
  if (recompute.layers < 0 || recompute.layers > num_blocks()) {
    if (stage_.whole(cfg_))
      fail("--recompute-num-layers {} must be in [0, --num-layers {}]", recompute.layers, cfg_.num_layers);
    fail("--recompute-num-layers {} must be in [0, {}], the layers of this pipeline stage", recompute.layers,
         num_blocks());
  }
  if (B == B_ && T == T_ && recompute.layers == recompute_.layers && slots == this->slots()) return;
  if (T > cfg_.max_position_embeddings)
    fail("--seq-length {} exceeds --max-position-embeddings {} (the position table); use at most {} or raise "
         "--max-position-embeddings",
         T, cfg_.max_position_embeddings, cfg_.max_position_embeddings);
  if (tp_.sp()) check_sequence_split(T, tp_.size());
  act_plan_ = plan_activations(cfg_, B, T, recompute, tp_.dims(), stage_, slots);
  act_arena_ = Arena(act_plan_, store_->memory());
  ArenaLayout L = ArenaLayout::binding(act_plan_, act_arena_);
  slots_.assign(slots, Activations());
  for (int k = 0; k < slots; ++k) {
    L.set_prefix(k == 0 ? "" : "slot" + std::to_string(k) + ".");
    slots_[k].layout(L, cfg_, B, T, recompute, tp_.dims(), stage_, k == 0 ? nullptr : &slots_[0]);
  }
  slot_ = 0;
  B_ = B;
  T_ = T;
  recompute_ = recompute;
  if (cp_group_) {
    cp_attention_ = make_cp_attention(cp_type_, cp_group_, B, T, tp_.dims().heads(cfg_), tp_.dims().kv_groups(cfg_),
                                      cfg_.head_dim(), {cfg_.attention_scale(), cfg_.attn_logit_softcapping});
    for (auto& b : blocks_) b->attention.use_context_parallel(cp_attention_.get());
  }
}

double GPT::forward(const StepCtx& ctx, const int32_t* tokens, const int32_t* targets, double dloss_scale) {
  CLAW_CHECK(stage_.pre_process && stage_.post_process,
             "forward() runs the whole model; a pipeline stage runs forward_stage()");
  double loss = 0;
  forward_stage(ctx, tokens, Tensor(), targets, dloss_scale, &loss);
  return loss;
}

void GPT::backward(const StepCtx& ctx, const int32_t* tokens) { backward_stage(ctx, tokens, Tensor()); }

namespace {
// A boundary tensor handed to a stage is [R, C] of the model's activation dtype.
void check_boundary(const Tensor& t, const Tensor& want, const char* what) {
  CLAW_CHECK(t.dtype() == want.dtype() && t.shape() == want.shape(), "{}: {} {} where the stage takes {} {}", what,
             dtype_name(t.dtype()), t.shape().str(), dtype_name(want.dtype()), want.shape().str());
}
}  // namespace

void GPT::forward_stage(const StepCtx& ctx, const int32_t* tokens, const Tensor& input, const int32_t* targets,
                        double dloss_scale, double* loss_sum) {
  CLAW_CHECK(ctx.B == B_ && ctx.T == T_, "forward on [{}, {}] but activations are reserved for [{}, {}]", ctx.B,
             ctx.T, B_, T_);
  CLAW_CHECK(stage_.pre_process == !input.defined(),
             "forward_stage: the first stage takes tokens, a later one the previous stage's output");
  if (input.defined()) check_boundary(input, stage_input(ctx), "forward_stage input");
  UnitHooks none;
  UnitHooks& h = hooks_ ? *hooks_ : none;
  const bool grads = dloss_scale != 0;
  h.begin_pass(grads);
  if (stage_.pre_process) {
    h.before_use(emb_unit_);
    embedding_.forward(ctx, tokens, acts().input, acts().scratch);
    h.after_use(emb_unit_);
  } else if (input.raw() != acts().input) {
    std::copy_n(input.data<float>(), input.numel(), acts().input);
  }
  for (int k = 0; k < num_blocks(); ++k) {
    h.before_use(block_unit0_ + k);
    blocks_[k]->forward(ctx, acts().blocks[k], acts().scratch);
    if (ctx.training)  // 16-bit activations: the working region into the block's copies
      for (const Activations::PackedTensor& t : acts().packed[static_cast<size_t>(k)])
        kernels::pack_half(ctx.cpu, cfg_.activation_dtype(), t.work, t.bits, t.n);
    h.after_use(block_unit0_ + k);
  }
  if (!stage_.post_process) return;
  h.before_use(norm_unit_);
  final_norm_.forward(ctx, acts().out(), acts().final_norm);
  h.after_use(norm_unit_);
  h.before_use(output_value_unit());
  if (grads) h.grads_begin(output_value_unit());
  const double loss = output_.forward(ctx, acts().final_norm.out, targets, dloss_scale, acts().output, acts().scratch);
  if (grads && !tied_here()) h.grads_end(out_unit_);
  h.after_use(output_value_unit());
  if (loss_sum) *loss_sum = loss;
}

void GPT::backward_stage(const StepCtx& ctx, const int32_t* tokens, const Tensor& output_grad) {
  CLAW_CHECK(stage_.post_process == !output_grad.defined(),
             "backward_stage: the last stage starts from its loss, an earlier one from the next stage's input gradient");
  if (output_grad.defined()) check_boundary(output_grad, stage_output(ctx), "backward_stage output gradient");
  UnitHooks none;
  UnitHooks& h = hooks_ ? *hooks_ : none;
  if (stage_.post_process) {
    h.before_use(norm_unit_);
    h.grads_begin(norm_unit_);
    final_norm_.backward(ctx, acts().final_norm, acts().out(), acts().output.dx, acts().scratch.dres,
                         /*accumulate=*/false, acts().scratch);
    h.grads_end(norm_unit_);
    h.after_use(norm_unit_);
  } else {
    std::copy_n(output_grad.data<float>(), output_grad.numel(), acts().scratch.dres);
  }
  for (int k = num_blocks(); k-- > 0;) {
    const int u = block_unit0_ + k;
    h.before_use(u);
    h.grads_begin(u);
    // With one activation set the last recomputed block's values are still in
    // the shared region from the forward pass; the others are re-run (all of
    // them when micro-batches in flight share the region). Forward uses only
    // scratch tmp/act, never the gradients in dres/dnorm.
    if (k + 1 < recompute_.layers || (slots() > 1 && k < recompute_.layers))
      blocks_[k]->forward(ctx, acts().blocks[k], acts().scratch);
    for (const Activations::PackedTensor& t : acts().packed[static_cast<size_t>(k)])
      kernels::unpack_half(ctx.cpu, cfg_.activation_dtype(), t.bits, t.work, t.n);
    blocks_[k]->backward(ctx, acts().blocks[k], acts().scratch);
    h.grads_end(u);
    h.after_use(u);
  }
  if (!stage_.pre_process) return;
  if (!tied_here()) h.grads_begin(emb_unit_);
  embedding_.backward(ctx, tokens, acts().scratch.dres, acts().scratch);
  h.grads_end(emb_unit_);
}

std::vector<Fp8Linear*> GPT::fp8_layers() const {
  std::vector<Fp8Linear*> out;
  for (Linear* l : linears())
    if (l->fp8()) out.push_back(l->fp8());
  return out;
}

std::vector<Linear*> GPT::linears() const {
  std::vector<Linear*> ls;
  for (const auto& b : blocks_) {
    b->attention.linears(ls);
    if (b->mlp) b->mlp->linears(ls);
  }
  return ls;
}

void GPT::merge_lora(const CpuCtx& ctx) {
  for (Linear* l : linears()) l->merge_lora(ctx);
  for (const auto& b : blocks_)
    if (b->moe) b->moe->merge_lora(ctx);
}

void GPT::remerge_lora(const CpuCtx& ctx) {
  for (Linear* l : linears()) l->remerge_lora(ctx);
  for (const auto& b : blocks_)
    if (b->moe) b->moe->merge_lora(ctx, /*remerge=*/true);
}


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
  if (N > 0 && !finite(ctx, acts().input, R * C))
    return stage_.pre_process ? "embedding.out (activation)" : "stage.input (activation)";
  for (size_t l = 0; l < blocks_.size(); ++l) {
    std::vector<Param*> ps;
    blocks_[l]->collect(ps);
    for (const Param* p : ps)
      if (p->value.defined() && !finite(ctx, p->data(), p->spec.local_shape().numel())) return p->spec.name + " (parameter)";
    if (N == 0) continue;
    for (const NamedSpan& t : blocks_[l]->saved_tensors(acts().blocks[l], N)) {
      // A recomputed block's internals live in the shared region (they hold
      // the last recomputed block's values); only its output is its own.
      bool own = static_cast<int64_t>(l) >= recompute_.layers || t.data == acts().blocks[l].out;
      // A packed tensor's own values are its 16-bit copy (the working region holds the last block run).
      const auto& packed = acts().packed[l];
      const auto copy = std::find_if(packed.begin(), packed.end(),
                                     [&](const Activations::PackedTensor& p) { return p.work == t.data; });
      if (copy != packed.end()) {
        const uint16_t exp = cfg_.activation_dtype() == DType::f16 ? 0x7c00 : 0x7f80;  // all-ones exponent: inf, NaN
        for (int64_t i = 0; i < copy->n; ++i)
          if ((copy->bits[i] & exp) == exp) return t.name + " (activation)";
        continue;
      }
      if (own && !finite(ctx, t.data, t.numel)) return t.name + " (activation)";
    }
  }
  if (!stage_.post_process) return "";
  if (auto s = bad_params({&final_norm_.weight, &final_norm_.bias, &output_.own_weight}); !s.empty()) return s;
  if (N > 0 && !finite(ctx, acts().final_norm.out, R * C)) return "final_norm.out (activation)";
  if (N > 0 && !finite(ctx, acts().output.lse, N)) return "output.logits (activation: log-sum-exp of the logits)";
  if (N > 0 && !finite(ctx, acts().output.losses, N)) return "output.losses (activation)";
  return "";
}

std::string GPT::first_non_finite_grad(const CpuCtx& ctx) const {
  for (const Param* p : store_->params())
    if (p->grad.defined() && !finite(ctx, p->gdata(), p->spec.local_shape().numel())) return p->spec.name + " (gradient)";
  return "";
}

}  // namespace claw::model
