#include "claw/model/linear.h"

#include "claw/kernels/cpu/linear.h"

namespace claw::model {

Linear::Linear(const std::string& name, int64_t in, int64_t out, bool bias, double init_std, HfRef weight_hf,
               HfRef bias_hf)
    : in_(in), out_(out), has_bias_(bias) {
  weight.spec = {.name = name + ".weight", .shape = {out, in}, .init_std = init_std, .hf = std::move(weight_hf)};
  if (bias)
    this->bias.spec = {.name = name + ".bias", .shape = {out}, .weight_decay = false, .init = Init::zeros,
                       .hf = std::move(bias_hf)};
}

void Linear::forward(const StepCtx& ctx, const float* x, float* y) const {
  kernels::linear_forward(ctx.cpu, y, x, weight.data(), has_bias_ ? bias.data() : nullptr, ctx.tokens(), in_, out_);
}

void Linear::backward_input(const StepCtx& ctx, const float* dy, float* dx, bool accumulate) const {
  kernels::linear_backward_input(ctx.cpu, dx, dy, weight.data(), ctx.tokens(), in_, out_, accumulate);
}

void Linear::backward_weight(const StepCtx& ctx, const float* dy, const float* x) {
  kernels::linear_backward_weight(ctx.cpu, weight.gdata(), has_bias_ ? bias.gdata() : nullptr, dy, x, ctx.tokens(),
                                  in_, out_);
}

void Linear::collect(std::vector<Param*>& out) {
  out.push_back(&weight);
  if (has_bias_) out.push_back(&bias);
}

}  // namespace claw::model
