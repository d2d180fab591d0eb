#include "claw/model/norm.h"

#include <algorithm>

#include "claw/kernels/cpu/layernorm.h"
#include "claw/kernels/cpu/rmsnorm.h"

namespace claw::model {

void NormLayer::Saved::layout(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t rows) {
  out = L.take<float>(prefix + ".out", rows * cfg.hidden_size);
  if (cfg.normalization == Norm::layernorm) mean = L.take<float>(prefix + ".mean", rows);
  rstd = L.take<float>(prefix + ".rstd", rows);
}

NormLayer::NormLayer(const std::string& name, const ModelConfig& cfg, HfRef weight_hf, HfRef bias_hf,
                     const TensorParallel& tp)
    : tp_(tp), kind_(cfg.normalization), C_(cfg.hidden_size), eps_(cfg.norm_epsilon) {
  weight.spec = {.name = name + ".weight", .shape = {C_}, .weight_decay = false, .init = Init::ones,
                 .hf = std::move(weight_hf)};
  if (kind_ == Norm::layernorm)
    bias.spec = {.name = name + ".bias", .shape = {C_}, .weight_decay = false, .init = Init::zeros,
                 .hf = std::move(bias_hf)};
}

void NormLayer::forward(const StepCtx& ctx, const float* x, Saved& s) const {
  const int64_t rows = tp_.rows(ctx.tokens());
  if (kind_ == Norm::layernorm)
    kernels::layernorm_forward(ctx.cpu, s.out, s.mean, s.rstd, x, weight.data(), bias.data(), rows, C_, eps_);
  else
    kernels::rmsnorm_forward(ctx.cpu, s.out, s.rstd, x, weight.data(), rows, C_, eps_);
}

void NormLayer::backward(const StepCtx& ctx, const Saved& s, const float* x, const float* dy, float* dx,
                         bool accumulate, Scratch& scratch) {
  const int64_t rows = tp_.rows(ctx.tokens());
  const bool layernorm = kind_ == Norm::layernorm;
  // This rank's rows give part of the weight gradients under SP: gather them
  // apart, sum over the group, then accumulate (the buffers may already hold
  // earlier micro-batches' sums, which must not be reduced again).
  // Frozen weight and bias: only dx (null gradients skip the sums, and under
  // SP their reduction, which every TP rank skips alike).
  const bool trains = weight.grad.defined() || (layernorm && bias.grad.defined());
  const bool sp = tp_.sp() && trains;
  float* dw = sp ? scratch.dnorm_w : weight.gdata();
  float* db = sp ? scratch.dnorm_w + C_ : (layernorm ? bias.gdata() : nullptr);
  if (sp) std::fill(scratch.dnorm_w, scratch.dnorm_w + 2 * C_, 0.0f);
  if (layernorm)
    kernels::layernorm_backward(ctx.cpu, dx, dw, db, dy, x, weight.data(), s.mean, s.rstd, rows, C_, accumulate);
  else
    kernels::rmsnorm_backward(ctx.cpu, dx, dw, dy, x, weight.data(), s.rstd, rows, C_, accumulate);
  if (!sp) return;
  const int64_t n = layernorm ? 2 * C_ : C_;
  tp_.group->all_reduce(scratch.dnorm_w, n, DType::f32);
  if (float* gw = weight.gdata())
    for (int64_t c = 0; c < C_; ++c) gw[c] += dw[c];
  if (float* gb = layernorm ? bias.gdata() : nullptr)
    for (int64_t c = 0; c < C_; ++c) gb[c] += db[c];
}

void NormLayer::collect(std::vector<Param*>& out) {
  out.push_back(&weight);
  if (kind_ == Norm::layernorm) out.push_back(&bias);
}

}  // namespace claw::model
