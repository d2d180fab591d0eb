#include "claw/train/step.h"

#include <cmath>

#include "claw/core/error.h"

namespace claw::train {

StepResult train_step(model::GPT& model, optim::AdamW& optimizer, const CpuCtx& cpu, const MicroBatchFn& next,
                      int64_t accum, int64_t step, double lr, uint64_t seed, uint64_t sample0, int32_t* tokens,
                      int32_t* targets, const std::function<void(const StepResult&)>& before_update) {
  const int64_t B = model.reserved_B(), T = model.reserved_T();
  const double tokens_per_step = static_cast<double>(accum * B * T);
  model.store().zero_grads();
  double loss_sum = 0;
  for (int64_t mb = 0; mb < accum; ++mb) {
    next(mb, tokens, targets);
    model::StepCtx ctx{.cpu = cpu, .B = B, .T = T, .training = true, .seed = seed,
                       .sample0 = sample0 + static_cast<uint64_t>(mb * B)};
    double mb_loss = model.forward(ctx, tokens, targets, 1.0 / tokens_per_step);
    if (!std::isfinite(mb_loss)) {
      std::string where = model.first_non_finite(cpu);
      fail("step {}: loss is {} (micro-batch {}); first non-finite tensor: {}", step + 1, mb_loss, mb,
           where.empty() ? "none (overflow in the loss sum)" : where);
    }
    model.backward(ctx, tokens);
    loss_sum += mb_loss;
  }
  StepResult r{loss_sum / tokens_per_step, std::sqrt(optimizer.grad_sum_squares(cpu))};
  if (!std::isfinite(r.grad_norm))
    fail("step {}: gradient norm is {} (loss {:.4f}); first non-finite tensor: {}", step + 1, r.grad_norm, r.loss,
         model.first_non_finite_grad(cpu));
  if (before_update) before_update(r);
  optimizer.step(cpu, lr, optimizer.clip_coefficient(r.grad_norm));
  return r;
}

}  // namespace claw::train
