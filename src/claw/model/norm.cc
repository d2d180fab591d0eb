#include "claw/model/norm.h"

#include "claw/kernels/cpu/layernorm.h"
#include "claw/kernels/cpu/rmsnorm.h"

namespace claw::model {

void NormLayer::Saved::layout(ArenaLayout& L, const std::string& prefix, const ModelConfig& cfg, int64_t N) {
  out = L.take<float>(prefix + ".out", N * cfg.hidden_size);
  if (cfg.normalization == Norm::layernorm) mean = L.take<float>(prefix + ".mean", N);
  rstd = L.take<float>(prefix + ".rstd", N);
}

NormLayer::NormLayer(const std::string& name, const ModelConfig& cfg, HfRef weight_hf, HfRef bias_hf)
    : kind_(cfg.normalization), C_(cfg.hidden_size), eps_(cfg.norm_epsilon) {
  weight.spec = {.name = name + ".weight", .shape = {C_}, .weight_decay = false, .init = Init::ones,
                 .hf = std::move(weight_hf)};
  if (kind_ == Norm::layernorm)
    bias.spec = {.name = name + ".bias", .shape = {C_}, .weight_decay = false, .init = Init::zeros,
                 .hf = std::move(bias_hf)};
}

void NormLayer::forward(const StepCtx& ctx, const float* x, Saved& s) const {
  if (kind_ == Norm::layernorm)
    kernels::layernorm_forward(ctx.cpu, s.out, s.mean, s.rstd, x, weight.data(), bias.data(), ctx.tokens(), C_, eps_);
  else
    kernels::rmsnorm_forward(ctx.cpu, s.out, s.rstd, x, weight.data(), ctx.tokens(), C_, eps_);
}

void NormLayer::backward(const StepCtx& ctx, const Saved& s, const float* x, const float* dy, float* dx,
                         bool accumulate) {
  if (kind_ == Norm::layernorm)
    kernels::layernorm_backward(ctx.cpu, dx, weight.gdata(), bias.gdata(), dy, x, weight.data(), s.mean, s.rstd,
                                ctx.tokens(), C_, accumulate);
  else
    kernels::rmsnorm_backward(ctx.cpu, dx, weight.gdata(), dy, x, weight.data(), s.rstd, ctx.tokens(), C_, accumulate);
}

void NormLayer::collect(std::vector<Param*>& out) {
  out.push_back(&weight);
  if (kind_ == Norm::layernorm) out.push_back(&bias);
}

}  // namespace claw::model
