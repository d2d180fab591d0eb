#include "claw/model/moe.h"

#include <algorithm>
#include <cmath>

#include "claw/comm/group.h"
#include "claw/core/error.h"
#include "claw/kernels/cpu/activations.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/kernels/cpu/reduce.h"

namespace claw::model {

void MoELayer::Saved::layout(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t N) {
  const int64_t M = N * cfg.moe.router_topk;
  logits = L.take<float>(prefix + ".router_logits", N * cfg.moe.num_experts);
  h = L.take<float>(prefix + ".experts.h", M * cfg.moe_ffn());
  if (cfg.mlp == Mlp::swiglu) u = L.take<float>(prefix + ".experts.u", M * cfg.moe_ffn());
  o = L.take<float>(prefix + ".experts.out", M * cfg.hidden_size);
  if (cfg.moe.shared_expert_intermediate_size > 0)
    shared.layout(L, prefix + ".shared_experts", cfg, N, TpDims{}, cfg.moe.shared_expert_intermediate_size);
}

namespace {
std::string moe_name(int layer, const std::string& what) { return "layers." + std::to_string(layer) + ".mlp." + what; }
}  // namespace

MoELayer::MoELayer(int l, const ModelConfig& cfg, const HfNames& hf, const TensorParallel& tp)
    : cfg_(cfg),
      C_(cfg.hidden_size),
      E_(cfg.moe.num_experts),
      k_(cfg.moe.router_topk),
      Fe_(cfg.moe_ffn()),
      score_(kernels::parse_moe_score(cfg.moe.router_score_function)),
      drop_(kernels::parse_moe_drop(cfg.moe.token_drop_policy)),
      swiglu_(cfg.mlp == Mlp::swiglu) {
  (void)hf;
  CLAW_CHECK(tp.size() == 1, "MoE layers run at tensor-parallel size 1 for now");
  const double std = cfg.init_method_std;
  router.spec = {.name = moe_name(l, "router.weight"), .shape = {E_, C_}, .init_std = std};
  if (cfg.moe.router_enable_expert_bias)
    expert_bias.spec = {.name = moe_name(l, "router.expert_bias"), .shape = {E_}, .weight_decay = false,
                        .init = Init::zeros, .buffer = true};
  fc.spec = {.name = moe_name(l, swiglu_ ? "experts.gate_proj.weight" : "experts.fc.weight"), .shape = {E_, Fe_, C_},
             .init_std = std};
  if (swiglu_) up.spec = {.name = moe_name(l, "experts.up_proj.weight"), .shape = {E_, Fe_, C_}, .init_std = std};
  proj.spec = {.name = moe_name(l, swiglu_ ? "experts.down_proj.weight" : "experts.proj.weight"),
               .shape = {E_, C_, Fe_}, .init_std = std / std::sqrt(2.0 * cfg.num_layers)};
  if (cfg.moe.shared_expert_intermediate_size > 0)
    shared.emplace(moe_name(l, "shared_experts"), cfg.moe.shared_expert_intermediate_size, cfg,
                   "model.layers." + std::to_string(l) + ".mlp.shared_experts", tp);
  step_load_.assign(static_cast<size_t>(E_), 0);
  bias_load_.assign(static_cast<size_t>(E_), 0);
}

void MoELayer::collect(std::vector<Param*>& out) {
  out.push_back(&router);
  if (cfg_.moe.router_enable_expert_bias) out.push_back(&expert_bias);
  out.push_back(&fc);
  if (swiglu_) out.push_back(&up);
  out.push_back(&proj);
  if (shared) shared->collect(out);
}

void MoELayer::activate(const CpuCtx& cpu, const Saved& s, int64_t rows, float* a) const {
  if (swiglu_)
    kernels::swiglu_forward(cpu, a, s.h, s.u, rows * Fe_);
  else
    kernels::gelu_forward(cpu, a, s.h, rows * Fe_);
}

void MoELayer::forward(const StepCtx& ctx, const float* x, float* y, Saved& s, Scratch& scratch) const {
  const int64_t N = ctx.tokens();
  kernels::gemm(ctx.cpu, false, true, N, E_, C_, 1.0f, x, C_, router.data(), C_, 0.0f, s.logits, E_);
  kernels::MoeRouting& r = routing_;
  kernels::moe_route(s.logits, cfg_.moe.router_enable_expert_bias ? expert_bias.data() : nullptr, N, E_, k_, score_,
                     cfg_.moe.expert_capacity_factor, drop_, r);
  const int64_t* off = r.offsets.data();
  kernels::moe_gather(ctx.cpu, r, x, C_, scratch.moe_rows);
  kernels::grouped_gemm(ctx.cpu, off, E_, Fe_, C_, scratch.moe_rows, fc.data(), 0.0f, s.h);
  if (swiglu_) kernels::grouped_gemm(ctx.cpu, off, E_, Fe_, C_, scratch.moe_rows, up.data(), 0.0f, s.u);
  const auto M = static_cast<int64_t>(r.order.size());
  activate(ctx.cpu, s, M, scratch.moe_act);
  kernels::grouped_gemm(ctx.cpu, off, E_, C_, Fe_, scratch.moe_act, proj.data(), 0.0f, s.o);
  kernels::moe_combine(ctx.cpu, r, s.o, C_, y, false);
  if (shared) {
    shared->forward(ctx, x, scratch.moe_shared, s.shared, scratch);
    kernels::add(ctx.cpu, y, y, scratch.moe_shared, N * C_);
  }
  if (!ctx.training) return;
  // Statistics of this micro-batch (recomputed blocks count twice: the means
  // and the bias rule's signs are unchanged by that).
  std::vector<double> score_sum(static_cast<size_t>(E_));
  const double lse2 = kernels::moe_route_sums(r, score_sum.data());
  aux_sum_ += kernels::moe_aux_loss(1.0, r.routed.data(), score_sum.data(), N, E_, k_);
  z_sum_ += lse2 / static_cast<double>(N);
  ++micro_batches_;
  for (int64_t e = 0; e < E_; ++e) {
    step_load_[static_cast<size_t>(e)] += r.load[static_cast<size_t>(e)];
    bias_load_[static_cast<size_t>(e)] += r.load[static_cast<size_t>(e)];
  }
}

void MoELayer::backward(const StepCtx& ctx, Saved& s, const float* x, const float* dy, float* dx, Scratch& scratch) {
  const int64_t N = ctx.tokens();
  // The shared expert first: its backward overwrites dx.
  if (shared)
    shared->backward(ctx, s.shared, x, dy, dx, scratch);
  else
    std::fill_n(dx, N * C_, 0.0f);
  kernels::MoeRouting& r = routing_;
  kernels::moe_route(s.logits, cfg_.moe.router_enable_expert_bias ? expert_bias.data() : nullptr, N, E_, k_, score_,
                     cfg_.moe.expert_capacity_factor, drop_, r);
  const int64_t* off = r.offsets.data();
  const auto M = static_cast<int64_t>(r.order.size());
  kernels::moe_combine_backward(ctx.cpu, r, dy, s.o, C_, scratch.moe_drows, scratch.moe_dprob);
  kernels::moe_gather(ctx.cpu, r, x, C_, scratch.moe_rows);
  activate(ctx.cpu, s, M, scratch.moe_act);  // recompute
  if (float* g = proj.gdata())
    kernels::grouped_gemm_dw(ctx.cpu, off, E_, C_, Fe_, scratch.moe_drows, scratch.moe_act, 1.0f, g);
  float* da = scratch.moe_act;  // the activation is dead once proj's gradient has it
  kernels::grouped_gemm_dx(ctx.cpu, off, E_, C_, Fe_, scratch.moe_drows, proj.data(), 0.0f, da);
  if (swiglu_)
    kernels::swiglu_backward(ctx.cpu, s.h, s.u, da, s.h, s.u, M * Fe_);  // dgate over gate, dup over up
  else
    kernels::gelu_backward(ctx.cpu, s.h, da, s.h, M * Fe_);
  if (float* g = fc.gdata()) kernels::grouped_gemm_dw(ctx.cpu, off, E_, Fe_, C_, s.h, scratch.moe_rows, 1.0f, g);
  if (swiglu_)
    if (float* g = up.gdata()) kernels::grouped_gemm_dw(ctx.cpu, off, E_, Fe_, C_, s.u, scratch.moe_rows, 1.0f, g);
  float* drows = scratch.moe_drows;  // the output gradient is dead: the rows' input gradients go here
  kernels::grouped_gemm_dx(ctx.cpu, off, E_, Fe_, C_, s.h, fc.data(), 0.0f, drows);
  if (swiglu_) kernels::grouped_gemm_dx(ctx.cpu, off, E_, Fe_, C_, s.u, up.data(), 1.0f, drows);
  kernels::moe_scatter_add(ctx.cpu, r, drows, C_, dx);
  // The router: the combine weights' gradient and the auxiliary losses'.
  const double scale = ctx.moe_aux_scale;
  std::vector<double> aux_dscore;
  if (cfg_.moe.aux_loss_coeff > 0) {
    aux_dscore.resize(static_cast<size_t>(E_));
    kernels::moe_aux_dscore(cfg_.moe.aux_loss_coeff, r.routed.data(), N, E_, k_, scale, aux_dscore.data());
  }
  kernels::moe_route_backward(s.logits, r, score_, scratch.moe_dprob, aux_dscore.empty() ? nullptr : aux_dscore.data(),
                              scale * cfg_.moe.z_loss_coeff / static_cast<double>(N), scratch.moe_dlogits);
  kernels::gemm(ctx.cpu, false, false, N, C_, E_, 1.0f, scratch.moe_dlogits, E_, router.data(), C_, 1.0f, dx, C_);
  if (float* g = router.gdata())
    kernels::gemm(ctx.cpu, true, false, E_, C_, N, 1.0f, scratch.moe_dlogits, E_, x, C_, 1.0f, g, C_);
}

void MoELayer::update_expert_bias(comm::Group* group) {
  if (!cfg_.moe.router_enable_expert_bias) return;
  if (group && group->size() > 1) group->all_reduce(bias_load_.data(), E_, DType::i64);
  kernels::moe_update_expert_bias(expert_bias.data(), bias_load_.data(), E_, cfg_.moe.router_bias_update_rate);
  std::fill(bias_load_.begin(), bias_load_.end(), 0);
}

void MoELayer::take_stats(MoeStats& stats) {
  ++stats.layers;
  stats.aux_loss += aux_sum_;
  stats.z_loss += z_sum_;
  stats.micro_batches = std::max(stats.micro_batches, micro_batches_);
  int64_t total = 0, most = 0;
  for (int64_t v : step_load_) total += v, most = std::max(most, v);
  if (total > 0)
    stats.max_load_over_mean =
        std::max(stats.max_load_over_mean, static_cast<double>(most) * static_cast<double>(E_) / static_cast<double>(total));
  aux_sum_ = z_sum_ = 0;
  micro_batches_ = 0;
  std::fill(step_load_.begin(), step_load_.end(), 0);
}

}  // namespace claw::model
