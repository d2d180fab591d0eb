#include "claw/model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "claw/comm/group.h"
#include "claw/core/error.h"
#include "claw/core/log.h"
#include "claw/kernels/cpu/activations.h"
#include "claw/kernels/cpu/bf16_gemm.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/kernels/cpu/reduce.h"
#include "claw/kernels/cpu/rowwise_linear.h"

namespace claw::model {

void MoELayer::Saved::layout(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t N, TpDims tp) {
  const int64_t R = tp.rows(N), M = R * cfg.moe.router_topk, Rin = M * tp.ep;
  logits = L.take<float>(prefix + ".router_logits", R * cfg.moe.num_experts);
  h = L.take<float>(prefix + ".experts.h", Rin * cfg.moe_ffn());
  if (cfg.mlp == Mlp::swiglu) u = L.take<float>(prefix + ".experts.u", Rin * cfg.moe_ffn());
  o = L.take<float>(prefix + ".experts.out", M * cfg.hidden_size);
  if (tp.ep > 1) x_in = L.take<float>(prefix + ".experts.in", Rin * cfg.hidden_size);
  if (cfg.moe.shared_expert_intermediate_size > 0)
    shared.layout(L, prefix + ".shared_experts", cfg, N, tp, cfg.moe.shared_expert_intermediate_size);
}

namespace {
std::string moe_name(int layer, const std::string& what) { return "layers." + std::to_string(layer) + ".mlp." + what; }
}  // namespace

MoELayer::MoELayer(int l, const ModelConfig& cfg, const HfNames& hf, const TensorParallel& tp)
    : cfg_(cfg),
      tp_(tp),
      C_(cfg.hidden_size),
      E_(cfg.moe.num_experts),
      k_(cfg.moe.router_topk),
      Fe_(cfg.moe_ffn()),
      El_(cfg.moe.num_experts / tp.ep_size()),
      score_(kernels::parse_moe_score(cfg.moe.router_score_function)),
      drop_(kernels::parse_moe_drop(cfg.moe.token_drop_policy)),
      swiglu_(cfg.mlp == Mlp::swiglu) {
  CLAW_CHECK(tp.size() == 1 || (tp.sp() && tp.expert_region),
             "MoE layers under tensor parallelism need sequence parallelism and expert tensor parallelism 1");
  CLAW_CHECK(E_ % tp.ep_size() == 0, "{} experts over {} expert-parallel ranks", E_, tp.ep_size());
  const double std = cfg.init_method_std;
  router.spec = {.name = moe_name(l, "router.weight"), .shape = {E_, C_}, .init_std = std, .hf = hf.moe(l, "router")};
  if (cfg.moe.router_enable_expert_bias)
    expert_bias.spec = {.name = moe_name(l, "router.expert_bias"), .shape = {E_}, .weight_decay = false,
                        .init = Init::zeros, .hf = hf.moe(l, "expert_bias"), .buffer = true};
  // Mixtral's names where the model is a Mixtral (SwiGLU experts); a GELU
  // expert has none (export refuses the model).
  fc.spec = {.name = moe_name(l, swiglu_ ? "experts.gate_proj.weight" : "experts.fc.weight"), .shape = {E_, Fe_, C_},
             .init_std = std, .hf = swiglu_ ? hf.moe(l, "gate") : HfRef{}};
  if (swiglu_)
    up.spec = {.name = moe_name(l, "experts.up_proj.weight"), .shape = {E_, Fe_, C_}, .init_std = std,
               .hf = hf.moe(l, "up")};
  proj.spec = {.name = moe_name(l, swiglu_ ? "experts.down_proj.weight" : "experts.proj.weight"),
               .shape = {E_, C_, Fe_}, .init_std = std / std::sqrt(2.0 * cfg.num_layers),
               .hf = swiglu_ ? hf.moe(l, "down") : HfRef{}};
  for (Param* p : {&fc, &up, &proj}) {
    if (p->spec.name.empty()) continue;
    if (tp.ep_size() > 1) p->spec.split(0, tp.ep_size(), tp.ep_rank(), "ep");
    if (tp.expert_region) p->spec.reduction_group = "expert_dp";
  }
  if (cfg.moe.shared_expert_intermediate_size > 0)
    shared.emplace(moe_name(l, "shared_experts"), cfg.moe.shared_expert_intermediate_size, cfg,
                   "model.layers." + std::to_string(l) + ".mlp.shared_experts", tp);
  if (cfg.lora.enabled()) enable_lora(hf);
  step_load_.assign(static_cast<size_t>(E_), 0);
  bias_load_.assign(static_cast<size_t>(E_), 0);
}

void MoELayer::enable_lora(const HfNames& hf) {
  const LoraConfig& c = cfg_.lora;
  const bool mixtral = hf.mixtral_experts();
  // Megatron's and Hugging Face's names of each matrix, as LoraConfig::targets takes them.
  const std::pair<const char*, const char*> names[3] = {{"linear_fc1", mixtral ? "w1" : "gate_proj"},
                                                        {"linear_fc1", mixtral ? "w3" : "up_proj"},
                                                        {"linear_fc2", mixtral ? "w2" : "down_proj"}};
  Param* w[3] = {&fc, swiglu_ ? &up : nullptr, &proj};
  for (int m = 0; m < 3; ++m) {
    if (!w[m] || !c.targets(names[m].first, names[m].second)) continue;
    if (c.dropout > 0)
      fail("--lora-dropout {} with adapters on experts ({}): the experts' adapters have no dropout yet; use 0 or "
           "--lora-target-modules without the MLP's",
           c.dropout, w[m]->spec.name);
    const ParamSpec& ws = w[m]->spec;
    const int64_t out = ws.shape[1], in = ws.shape[2];
    const std::string base = ws.name.substr(0, ws.name.size() - std::string(".weight").size());
    Lora& a = lora[m].emplace();
    // PEFT's init per expert: A Kaiming-uniform, U(-1/sqrt(in), 1/sqrt(in)); B zero.
    a.a.spec = {.name = base + ".lora_A.weight", .shape = {E_, c.rank, in}, .init = Init::uniform,
                .init_std = 1.0 / std::sqrt(static_cast<double>(in))};
    a.b.spec = {.name = base + ".lora_B.weight", .shape = {E_, out, c.rank}, .init = Init::zeros};
    if (!ws.hf.name.empty()) {  // experts.{}.gate_proj.weight -> experts.{}.gate_proj.lora_A.weight
      const std::string module = ws.hf.name.substr(0, ws.hf.name.size() - std::string(".weight").size());
      a.a.spec.hf = {module + ".lora_A.weight"};
      a.b.spec.hf = {module + ".lora_B.weight"};
      a.a.spec.hf.stack = a.b.spec.hf.stack = E_;
    }
    for (Param* p : {&a.a, &a.b}) {
      if (tp_.ep_size() > 1) p->spec.split(0, tp_.ep_size(), tp_.ep_rank(), "ep");
      if (tp_.expert_region) p->spec.reduction_group = "expert_dp";
    }
    lora_rank_ = c.rank;
    lora_scale_ = c.scale();
  }
}

void MoELayer::lora_forward(const CpuCtx& cpu, int m, const int64_t* off, int64_t N, int64_t K, const float* X,
                            float* Y) const {
  if (!lora[m] || lora_merged_) return;
  const int64_t rows = off[El_], r = lora_rank_;
  thread_local std::vector<float> t;
  t.resize(static_cast<size_t>(rows * r));
  kernels::grouped_gemm(cpu, off, El_, r, K, X, lora[m]->a.data(), 0.0f, t.data());
  kernels::scale(cpu, t.data(), static_cast<float>(lora_scale_), rows * r);
  kernels::grouped_gemm(cpu, off, El_, N, r, t.data(), lora[m]->b.data(), 1.0f, Y);
}

void MoELayer::lora_backward(const CpuCtx& cpu, int m, const int64_t* off, int64_t N, int64_t K, const float* dY,
                             const float* X, float* dX) {
  if (!lora[m]) return;
  const int64_t rows = off[El_], r = lora_rank_;
  const float s = static_cast<float>(lora_scale_);
  thread_local std::vector<float> t, dt;
  t.resize(static_cast<size_t>(rows * r));
  dt.resize(static_cast<size_t>(rows * r));
  // t = s X A^T, dB += dY^T t; dt = s dY B, dA += dt^T X; dX += dt A.
  kernels::grouped_gemm(cpu, off, El_, r, K, X, lora[m]->a.data(), 0.0f, t.data());
  kernels::scale(cpu, t.data(), s, rows * r);
  if (float* g = lora[m]->b.gdata()) kernels::grouped_gemm_dw(cpu, off, El_, N, r, dY, t.data(), 1.0f, g);
  kernels::grouped_gemm_dx(cpu, off, El_, N, r, dY, lora[m]->b.data(), 0.0f, dt.data());
  kernels::scale(cpu, dt.data(), s, rows * r);
  if (float* g = lora[m]->a.gdata()) kernels::grouped_gemm_dw(cpu, off, El_, r, K, dt.data(), X, 1.0f, g);
  if (dX) kernels::grouped_gemm_dx(cpu, off, El_, r, K, dt.data(), lora[m]->a.data(), 1.0f, dX);
}

void MoELayer::merge_lora(const CpuCtx& cpu, bool remerge) {
  if (shared) {
    std::vector<Linear*> ls;
    shared->linears(ls);
    for (Linear* l : ls) remerge ? l->remerge_lora(cpu) : l->merge_lora(cpu);
  }
  if (lora_merged_ && !remerge) return;
  Param* w[3] = {&fc, &up, &proj};
  for (int m = 0; m < 3; ++m) {
    if (!lora[m]) continue;
    const int64_t out = w[m]->spec.shape[1], in = w[m]->spec.shape[2], r = lora_rank_;
    for (int64_t e = 0; e < El_; ++e)  // W_e += s B_e A_e
      kernels::gemm(cpu, false, false, out, in, r, static_cast<float>(lora_scale_), lora[m]->b.data() + e * out * r, r,
                    lora[m]->a.data() + e * r * in, in, 1.0f, w[m]->data() + e * out * in, in);
  }
  lora_merged_ = true;
}

void MoELayer::collect(std::vector<Param*>& out) {
  out.push_back(&router);
  if (cfg_.moe.router_enable_expert_bias) out.push_back(&expert_bias);
  out.push_back(&fc);
  if (swiglu_) out.push_back(&up);
  out.push_back(&proj);
  for (std::optional<Lora>& a : lora)
    if (a) out.insert(out.end(), {&a->a, &a->b});
  if (shared) shared->collect(out);
}

void MoELayer::activate(const CpuCtx& cpu, const Saved& s, int64_t rows, float* a) const {
  if (swiglu_)
    kernels::swiglu_forward(cpu, a, s.h, s.u, rows * Fe_);
  else
    kernels::gelu_forward(cpu, a, s.h, rows * Fe_);
}

void MoELayer::route(const float* logits, int64_t R) const {
  const MoeConfig& m = cfg_.moe;
  const kernels::MoeTopK topk{.num_groups = m.router_num_groups, .group_topk = m.router_group_topk,
                              .scaling_factor = m.router_topk_scaling_factor};
  kernels::moe_route(logits, m.router_enable_expert_bias ? expert_bias.data() : nullptr, R, E_, k_, score_,
                     m.expert_capacity_factor, drop_, routing_, topk);
}

int64_t MoELayer::token_counts(std::vector<int64_t>& routed) const {
  routed = routing_.routed;
  const int64_t R = routing_.N;
  if (!tp_.moe_tokens || tp_.moe_tokens->size() == 1) return R;
  routed.push_back(R);
  tp_.moe_tokens->all_reduce(routed.data(), E_ + 1, DType::i64);
  const int64_t N = routed.back();
  routed.pop_back();
  return N;
}

int64_t MoELayer::dispatch(const CpuCtx& cpu, float* out, float* staging, float* in, Received& d) const {
  const int ep = tp_.ep_size();
  std::vector<int64_t> send(static_cast<size_t>(E_)), blocks(static_cast<size_t>(ep), El_);
  for (int64_t e = 0; e < E_; ++e) send[static_cast<size_t>(e)] = routing_.offsets[e + 1] - routing_.offsets[e];
  d.counts.resize(static_cast<size_t>(E_));
  tp_.ep->all_to_all(send.data(), blocks, d.counts.data(), blocks, DType::i64);
  exchange_rows(d.counts, out, staging, false);
  d.offsets.resize(static_cast<size_t>(El_ + 1));
  return kernels::moe_permute_received(cpu, d.counts.data(), ep, El_, C_, staging, in, true, d.offsets.data());
}

void MoELayer::undispatch(const CpuCtx& cpu, const Received& d, float* in, float* staging, float* out) const {
  kernels::moe_permute_received(cpu, d.counts.data(), tp_.ep_size(), El_, C_, in, staging, false);
  exchange_rows(d.counts, out, staging, true);
}

void MoELayer::exchange_rows(const std::vector<int64_t>& counts, float* out, float* in, bool inverse) const {
  const int ep = tp_.ep_size();
  std::vector<int64_t> sent(static_cast<size_t>(ep)), got(static_cast<size_t>(ep), 0);
  for (int q = 0; q < ep; ++q) {
    sent[q] = (routing_.offsets[(q + 1) * El_] - routing_.offsets[q * El_]) * C_;
    for (int64_t j = 0; j < El_; ++j) got[q] += counts[static_cast<size_t>(q * El_ + j)] * C_;
  }
  if (inverse)
    tp_.ep->all_to_all(in, got, out, sent, DType::f32);
  else
    tp_.ep->all_to_all(out, sent, in, got, DType::f32);
}

void MoELayer::forward(const StepCtx& ctx, const float* x, float* y, Saved& s, Scratch& scratch) const {
  const int64_t N = ctx.tokens(), R = tp_.rows(N);
  // The engine's steps (batch-invariant) in the fixed-order kernels: a
  // request's routing and experts give the same rows alone and batched, and
  // decoding's one-row expert groups stream their weights at memory bandwidth.
  const bool fixed_order = ctx.row_kernels();
  if (fixed_order)
    kernels::rowwise_linear_forward(ctx.cpu, s.logits, x, router.data(), nullptr, R, C_, E_);
  else
    kernels::gemm(ctx.cpu, false, true, R, E_, C_, 1.0f, x, C_, router.data(), C_, 0.0f, s.logits, E_);
  const kernels::MoeRouting& r = routing_;
  route(s.logits, R);
  const auto M = static_cast<int64_t>(r.order.size());
  // The rows this rank's experts run (expert-major) and their cut.
  const bool ep = tp_.ep_size() > 1;
  Received d;
  kernels::moe_gather(ctx.cpu, r, x, C_, ep ? scratch.moe_drows : scratch.moe_rows);
  const int64_t Rin = ep ? dispatch(ctx.cpu, scratch.moe_drows, scratch.moe_rows, s.x_in, d) : M;
  if (const FaultInjector* f = ep ? tp_.ep->faults() : nullptr;
      f && Rin > 0 && f->drops_ep_row(tp_.ep->world_ranks()[tp_.ep->rank()])) {
    std::memset(s.x_in + (Rin - 1) * C_, 0, C_ * sizeof(float));  // the mutation drop-ep-row (tests only)
    static std::once_flag told;
    std::call_once(told, [] { log::warn("fault", "--test-fault drop-ep-row: each MoE dispatch loses its last row"); });
  }
  const float* rows = ep ? s.x_in : scratch.moe_rows;
  const int64_t* off = ep ? d.offsets.data() : r.offsets.data();
  const auto experts = [&](int64_t N, int64_t K, const float* X, const float* W, float* Y) {
    if (fixed_order)
      kernels::grouped_rowwise_linear(ctx.cpu, off, El_, N, K, X, W, Y);
    else
      kernels::grouped_gemm(ctx.cpu, off, El_, N, K, X, W, 0.0f, Y);
  };
  experts(Fe_, C_, rows, fc.data(), s.h);
  lora_forward(ctx.cpu, 0, off, Fe_, C_, rows, s.h);
  if (swiglu_) {
    experts(Fe_, C_, rows, up.data(), s.u);
    lora_forward(ctx.cpu, 1, off, Fe_, C_, rows, s.u);
  }
  const bool round = activation_dtype_ != DType::f32 && !ctx.kv_cache && !ctx.batch_invariant;
  if (round) {
    kernels::round_half_values(ctx.cpu, activation_dtype_, s.h, Rin * Fe_);
    if (swiglu_) kernels::round_half_values(ctx.cpu, activation_dtype_, s.u, Rin * Fe_);
  }
  activate(ctx.cpu, s, Rin, scratch.moe_act);
  experts(C_, Fe_, scratch.moe_act, proj.data(), ep ? scratch.moe_rows : s.o);
  lora_forward(ctx.cpu, 2, off, C_, Fe_, scratch.moe_act, ep ? scratch.moe_rows : s.o);
  if (ep) undispatch(ctx.cpu, d, scratch.moe_rows, scratch.moe_drows, s.o);
  if (round) kernels::round_half_values(ctx.cpu, activation_dtype_, s.o, M * C_);
  kernels::moe_combine(ctx.cpu, r, s.o, C_, y, false);
  if (shared) {
    shared->forward(ctx, x, scratch.moe_shared, s.shared, scratch);
    kernels::add(ctx.cpu, y, y, scratch.moe_shared, R * C_);
  }
  if (!ctx.training) return;
  // Statistics of this micro-batch over all its tokens (recomputed blocks
  // count twice: the means and the bias rule's signs are unchanged by that).
  std::vector<double> sums(static_cast<size_t>(3 * E_ + 2));
  double* score_sum = sums.data();
  sums[static_cast<size_t>(E_)] = kernels::moe_route_sums(r, score_sum);
  sums[static_cast<size_t>(E_ + 1)] = static_cast<double>(R);
  for (int64_t e = 0; e < E_; ++e) {
    sums[static_cast<size_t>(E_ + 2 + e)] = static_cast<double>(r.routed[static_cast<size_t>(e)]);
    sums[static_cast<size_t>(2 * E_ + 2 + e)] = static_cast<double>(r.load[static_cast<size_t>(e)]);
  }
  if (tp_.moe_tokens && tp_.moe_tokens->size() > 1)
    tp_.moe_tokens->all_reduce(sums.data(), static_cast<int64_t>(sums.size()), DType::f64);
  const auto Ng = static_cast<int64_t>(sums[static_cast<size_t>(E_ + 1)]);
  std::vector<int64_t> routed(static_cast<size_t>(E_));
  for (int64_t e = 0; e < E_; ++e) {
    routed[static_cast<size_t>(e)] = static_cast<int64_t>(sums[static_cast<size_t>(E_ + 2 + e)]);
    const auto load = static_cast<int64_t>(sums[static_cast<size_t>(2 * E_ + 2 + e)]);
    step_load_[static_cast<size_t>(e)] += load;
    bias_load_[static_cast<size_t>(e)] += load;
  }
  aux_sum_ += kernels::moe_aux_loss(1.0, routed.data(), score_sum, Ng, E_, k_);
  z_sum_ += sums[static_cast<size_t>(E_)] / static_cast<double>(Ng);
  ++micro_batches_;
}

void MoELayer::backward(const StepCtx& ctx, Saved& s, const float* x, const float* dy, float* dx, Scratch& scratch) {
  const int64_t N = ctx.tokens(), R = tp_.rows(N);
  // The shared expert first: its backward overwrites dx.
  if (shared)
    shared->backward(ctx, s.shared, x, dy, dx, scratch);
  else
    std::fill_n(dx, R * C_, 0.0f);
  std::vector<int64_t> routed;
  route(s.logits, R);
  const int64_t Ng = token_counts(routed);
  const kernels::MoeRouting& r = routing_;
  const auto M = static_cast<int64_t>(r.order.size());
  kernels::moe_combine_backward(ctx.cpu, r, dy, s.o, C_, scratch.moe_drows, scratch.moe_dprob);
  // The received rows (saved under EP, else gathered again) and their
  // output gradients, expert-major.
  const bool ep = tp_.ep_size() > 1;
  Received d;
  if (!ep) kernels::moe_gather(ctx.cpu, r, x, C_, scratch.moe_rows);
  const int64_t Rin = ep ? dispatch(ctx.cpu, scratch.moe_drows, scratch.moe_rows, scratch.moe_drows, d) : M;
  const float* rows = ep ? s.x_in : scratch.moe_rows;
  const int64_t* off = ep ? d.offsets.data() : r.offsets.data();
  activate(ctx.cpu, s, Rin, scratch.moe_act);  // recompute
  if (float* g = proj.gdata())
    kernels::grouped_gemm_dw(ctx.cpu, off, El_, C_, Fe_, scratch.moe_drows, scratch.moe_act, 1.0f, g);
  // proj's adapter reads the activation too; its input gradient waits aside.
  thread_local std::vector<float> lora_da;
  if (lora[2]) {
    lora_da.assign(static_cast<size_t>(Rin * Fe_), 0.0f);
    lora_backward(ctx.cpu, 2, off, C_, Fe_, scratch.moe_drows, scratch.moe_act, lora_da.data());
  }
  float* da = scratch.moe_act;  // the activation is dead once proj's gradient has it
  kernels::grouped_gemm_dx(ctx.cpu, off, El_, C_, Fe_, scratch.moe_drows, proj.data(), 0.0f, da);
  if (lora[2]) kernels::add(ctx.cpu, da, da, lora_da.data(), Rin * Fe_);
  if (swiglu_)
    kernels::swiglu_backward(ctx.cpu, s.h, s.u, da, s.h, s.u, Rin * Fe_);  // dgate over gate, dup over up
  else
    kernels::gelu_backward(ctx.cpu, s.h, da, s.h, Rin * Fe_);
  if (float* g = fc.gdata()) kernels::grouped_gemm_dw(ctx.cpu, off, El_, Fe_, C_, s.h, rows, 1.0f, g);
  if (swiglu_)
    if (float* g = up.gdata()) kernels::grouped_gemm_dw(ctx.cpu, off, El_, Fe_, C_, s.u, rows, 1.0f, g);
  float* drows = scratch.moe_drows;  // the output gradient is dead: the rows' input gradients go here
  kernels::grouped_gemm_dx(ctx.cpu, off, El_, Fe_, C_, s.h, fc.data(), 0.0f, drows);
  if (swiglu_) kernels::grouped_gemm_dx(ctx.cpu, off, El_, Fe_, C_, s.u, up.data(), 1.0f, drows);
  lora_backward(ctx.cpu, 0, off, Fe_, C_, s.h, rows, drows);
  if (swiglu_) lora_backward(ctx.cpu, 1, off, Fe_, C_, s.u, rows, drows);
  if (ep) undispatch(ctx.cpu, d, drows, scratch.moe_rows, drows);  // back to the tokens' ranks
  kernels::moe_scatter_add(ctx.cpu, r, drows, C_, dx);
  // The router: the combine weights' gradient and the auxiliary losses'.
  const double scale = ctx.moe_aux_scale;
  std::vector<double> aux_dscore;
  if (cfg_.moe.aux_loss_coeff > 0) {
    aux_dscore.resize(static_cast<size_t>(E_));
    kernels::moe_aux_dscore(cfg_.moe.aux_loss_coeff, routed.data(), Ng, E_, k_, scale, aux_dscore.data());
  }
  kernels::moe_route_backward(s.logits, r, score_, scratch.moe_dprob, aux_dscore.empty() ? nullptr : aux_dscore.data(),
                              scale * cfg_.moe.z_loss_coeff / static_cast<double>(Ng), scratch.moe_dlogits);
  kernels::gemm(ctx.cpu, false, false, R, C_, E_, 1.0f, scratch.moe_dlogits, E_, router.data(), C_, 1.0f, dx, C_);
  if (float* g = router.gdata()) {
    if (!tp_.sp()) {
      kernels::gemm(ctx.cpu, true, false, E_, C_, R, 1.0f, scratch.moe_dlogits, E_, x, C_, 1.0f, g, C_);
    } else {  // replicated over TP, each rank's tokens a part of the sum
      kernels::gemm(ctx.cpu, true, false, E_, C_, R, 1.0f, scratch.moe_dlogits, E_, x, C_, 0.0f, scratch.moe_drouter,
                    C_);
      tp_.group->all_reduce(scratch.moe_drouter, E_ * C_, DType::f32);
      kernels::add(ctx.cpu, g, g, scratch.moe_drouter, E_ * C_);
    }
  }
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
