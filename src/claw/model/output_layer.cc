#include "claw/model/output_layer.h"

#include <algorithm>

#include "claw/kernels/cpu/blas.h"
#include "claw/kernels/cpu/cross_entropy.h"

namespace claw::model {

void OutputLayer::Saved::layout(ArenaLayout& L, const ModelConfig& cfg, int64_t N) {
  losses = L.take<float>("output.losses", N);
  lse = L.take<float>("output.lse", N);
  dx = L.take<float>("output.dx", N * cfg.hidden_size);
}

OutputLayer::OutputLayer(const ModelConfig& cfg, const HfNames& hf, Param* tied)
    : weight_(tied ? tied : &own_weight), C_(cfg.hidden_size), V_(cfg.vocab_size), Vp_(cfg.padded_vocab_size()) {
  if (!tied)
    own_weight.spec = {.name = "output_layer.weight",
                       .shape = {Vp_, C_},
                       .init_std = cfg.init_method_std,
                       .init_rows = cfg.vocab_size,
                       .hf = hf.output_layer()};
}

double OutputLayer::forward(const StepCtx& ctx, const float* x, const int32_t* targets, double dloss_scale, Saved& s,
                            Scratch& scratch) {
  const int64_t N = ctx.tokens(), chunk = Scratch::logits_chunk(N);
  const float* W = weight_->data();
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t rows = std::min(chunk, N - r0);
    const float* xc = x + r0 * C_;
    float* logits = scratch.logits;
    kernels::gemm(false, true, rows, Vp_, C_, 1.0f, xc, C_, W, C_, 0.0f, logits, Vp_);
    kernels::cross_entropy_forward(ctx.cpu, s.losses + r0, s.lse + r0, logits, targets + r0, rows, V_, Vp_);
    if (dloss_scale == 0) continue;
    kernels::cross_entropy_backward(ctx.cpu, logits, logits, s.lse + r0, targets + r0,
                                    static_cast<float>(dloss_scale), rows, V_, Vp_);
    kernels::gemm(false, false, rows, C_, Vp_, 1.0f, logits, Vp_, W, C_, 0.0f, s.dx + r0 * C_, C_);
    kernels::gemm(true, false, Vp_, C_, rows, 1.0f, logits, Vp_, xc, C_, 1.0f, weight_->gdata(), C_);
  }
  double total = 0;
  for (int64_t i = 0; i < N; ++i) total += s.losses[i];
  return total;
}

void OutputLayer::logits(const StepCtx& ctx, const float* x, float* out) const {
  kernels::gemm(false, true, ctx.tokens(), Vp_, C_, 1.0f, x, C_, weight_->data(), C_, 0.0f, out, Vp_);
}

void OutputLayer::collect(std::vector<Param*>& out) {
  if (weight_ == &own_weight) out.push_back(&own_weight);
}

}  // namespace claw::model
