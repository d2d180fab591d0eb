#include "claw/optim/adamw.h"

#include <algorithm>

#include "claw/core/error.h"
#include "claw/kernels/cpu/adamw.h"
#include "claw/kernels/cpu/reduce.h"

namespace claw::optim {

void AdamWConfig::validate() const {
  if (!(beta1 >= 0 && beta1 < 1)) fail("--adam-beta1 must be in [0, 1), got {}", beta1);
  if (!(beta2 >= 0 && beta2 < 1)) fail("--adam-beta2 must be in [0, 1), got {}", beta2);
  if (!(eps > 0)) fail("--adam-eps must be positive, got {}", eps);
  if (!(weight_decay >= 0)) fail("--weight-decay must be >= 0, got {}", weight_decay);
  if (!(clip_grad >= 0)) fail("--clip-grad must be >= 0 (0 disables clipping), got {}", clip_grad);
}

AdamW::AdamW(model::ParamStore& store, AdamWConfig cfg)
    : store_(store), cfg_(cfg), m_("adam.exp_avg", store.bytes()), v_("adam.exp_avg_sq", store.bytes()) {
  cfg_.validate();
}

double AdamW::grad_sum_squares(const CpuCtx& ctx) const {
  double s = 0;
  for (const model::Param* p : store_.params()) s += kernels::sum_squares(ctx, p->gdata(), p->spec.shape.numel());
  return s;
}

double AdamW::clip_coefficient(double grad_norm) const {
  if (cfg_.clip_grad <= 0) return 1.0;
  return std::min(1.0, cfg_.clip_grad / (grad_norm + 1e-6));
}

void AdamW::step(const CpuCtx& ctx, double lr, double grad_scale) {
  ++step_;
  const auto& params = store_.params();
  const auto& offsets = store_.offsets();
  for (size_t i = 0; i < params.size(); ++i) {
    const model::Param* p = params[i];
    kernels::AdamWHyper h{.lr = lr,
                          .beta1 = cfg_.beta1,
                          .beta2 = cfg_.beta2,
                          .eps = cfg_.eps,
                          .weight_decay = p->spec.weight_decay ? cfg_.weight_decay : 0.0,
                          .grad_scale = grad_scale,
                          .step = step_};
    size_t off = offsets[i] / sizeof(float);
    kernels::adamw_update(ctx, p->data(), exp_avg() + off, exp_avg_sq() + off, p->gdata(), p->spec.shape.numel(), h);
  }
}

}  // namespace claw::optim
