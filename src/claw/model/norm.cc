#include "claw/model/norm.h"

#include <algorithm>

#include "claw/core/error.h"
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
    : tp_(tp), kind_(cfg.normalization), C_(cfg.hidden_size), eps_(cfg.norm_epsilon), one_plus_(cfg.apply_layernorm_1p) {
  weight.spec = {.name = name + ".weight", .shape = {C_}, .weight_decay = false,
                 .init = one_plus_ ? Init::zeros : Init::ones, .hf = std::move(weight_hf)};
  if (kind_ == Norm::layernorm)
    bias.spec = {.name = name + ".bias", .shape = {C_}, .weight_decay = false, .init = Init::zeros,
                 .hf = std::move(bias_hf)};
}

const float* scale_weight(const CpuCtx& cpu, const Param& w, bool one_plus, std::vector<float>& buffer) {
  if (!one_plus) return w.data();
  if (cpu.gpu) fail("--apply-layernorm-1p runs on the CPU only for now");
  const int64_t n = w.spec.local_shape().numel();
  buffer.resize(static_cast<size_t>(n));
  const float* v = w.data();
  for (int64_t i = 0; i < n; ++i) buffer[i] = 1.0f + v[i];  // transformers: 1.0 + weight.float()
  return buffer.data();
}

void NormLayer::forward(const StepCtx& ctx, const float* x, Saved& s) const {
  const int64_t rows = tp_.rows(ctx.tokens());
  const float* w = scale_weight(ctx.cpu, weight, one_plus_, scale_);
  if (kind_ == Norm::layernorm)
    kernels::layernorm_forward(ctx.cpu, s.out, s.mean, s.rstd, x, w, bias.data(), rows, C_, eps_);
  else
    kernels::rmsnorm_forward(ctx.cpu, s.out, s.rstd, x, w, rows, C_, eps_);
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
  const float* w = scale_weight(ctx.cpu, weight, one_plus_, scale_);  // d(1 + w) = dw
  if (layernorm)
    kernels::layernorm_backward(ctx.cpu, dx, dw, db, dy, x, w, s.mean, s.rstd, rows, C_, accumulate);
  else
    kernels::rmsnorm_backward(ctx.cpu, dx, dw, dy, x, w, s.rstd, rows, C_, accumulate);
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
