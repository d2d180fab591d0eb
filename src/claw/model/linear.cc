#include "claw/model/linear.h"

#include <algorithm>

#include "claw/core/error.h"
#include "claw/kernels/cpu/linear.h"
#include "claw/kernels/cpu/quant.h"
#include "claw/kernels/cpu/rowwise_linear.h"

namespace claw::model {

Linear::Linear(const std::string& name, int64_t in, int64_t out, bool bias, double init_std, HfRef weight_hf,
               HfRef bias_hf, const TensorParallel& tp, LinearSplit split)
    : tp_(tp), kind_(tp.size() == 1 ? TpSplit::none : split.kind), in_(in), out_(out), has_bias_(bias) {
  weight.spec = {.name = name + ".weight", .shape = {out, in}, .init_std = init_std, .hf = std::move(weight_hf)};
  if (bias)
    this->bias.spec = {.name = name + ".bias", .shape = {out}, .weight_decay = false, .init = Init::zeros,
                       .hf = std::move(bias_hf)};
  if (kind_ == TpSplit::none) return;
  const int count = split.count > 0 ? split.count : tp.size();
  const int index = split.count > 0 ? split.index : tp.rank();
  const int dim = kind_ == TpSplit::column ? 0 : 1;
  const int64_t n = weight.spec.shape[dim];
  CLAW_CHECK(n % count == 0, "{}: {} features do not split into {} slices", weight.spec.name, n, count);
  auto shard = [&](ParamSpec& s, int d) {
    s.split(d, count, index, "tp");
    s.primary = tp.rank() % split.replicas == 0;
  };
  shard(weight.spec, dim);
  if (kind_ == TpSplit::column) {
    out_ = out / count;
    if (bias) shard(this->bias.spec, 0);
  } else {
    in_ = in / count;
  }
}

void Linear::forward(const StepCtx& ctx, const float* x, float* y) const {
  const float* b = has_bias_ ? bias.data() : nullptr;
  auto product = [&](const float* with_bias) {
    if (ctx.batch_invariant && !ctx.cpu.gpu && !inference_weight.empty())
      kernels::weight_linear_forward(ctx.cpu, y, x, inference_weight, with_bias, ctx.tokens());
    else if (ctx.batch_invariant && !ctx.cpu.gpu)
      kernels::rowwise_linear_forward(ctx.cpu, y, x, weight.data(), with_bias, ctx.tokens(), in_, out_);
    else
      kernels::linear_forward(ctx.cpu, y, x, weight.data(), with_bias, ctx.tokens(), in_, out_);
  };
  if (kind_ != TpSplit::row) {
    product(b);
    return;
  }
  product(nullptr);
  tp_.reduce_rows(y, ctx.B, ctx.T, out_);
  if (!b) return;
  const int64_t rows = tp_.rows(ctx.tokens()), C = out_;
  parallel_for(ctx.cpu, rows, std::max<int64_t>(1, 4096 / C), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      float* yr = y + r * C;
      for (int64_t c = 0; c < C; ++c) yr[c] += b[c];
    }
  });
}

const float* Linear::output_grad(const StepCtx& ctx, const float* dy, float* full) const {
  return kind_ == TpSplit::row ? tp_.gather_rows(full, dy, ctx.B, ctx.T, out_) : dy;
}

void Linear::backward_input(const StepCtx& ctx, const float* dy, float* dx, bool accumulate) const {
  kernels::linear_backward_input(ctx.cpu, dx, dy, weight.data(), ctx.tokens(), in_, out_, accumulate);
}

void Linear::backward_weight(const StepCtx& ctx, const float* dy, const float* x) {
  if (!weight.grad.defined() && !(has_bias_ && bias.grad.defined())) return;  // frozen
  if (ctx.defer_weight_grads) {
    ctx.defer_weight_grads->record(this, dy, x, ctx.tokens());
    return;
  }
  apply_weight_grad(ctx.cpu, dy, x, ctx.tokens());
}

void Linear::apply_weight_grad(const CpuCtx& cpu, const float* dy, const float* x, int64_t rows) {
  kernels::linear_backward_weight(cpu, weight.gdata(), has_bias_ ? bias.gdata() : nullptr, dy, x, rows, in_, out_);
}

void DeferredWeightGrads::record(Linear* layer, const float* dy, const float* x, int64_t rows) {
  if (used_ == entries_.size()) entries_.emplace_back();
  Entry& e = entries_[used_++];
  e.layer = layer;
  e.rows = rows;
  e.dy.assign(dy, dy + rows * layer->out());
  e.x.assign(x, x + rows * layer->in());
}

void DeferredWeightGrads::run(const CpuCtx& cpu) {
  for (size_t i = 0; i < used_; ++i) entries_[i].layer->apply_weight_grad(cpu, entries_[i].dy.data(), entries_[i].x.data(),
                                                                          entries_[i].rows);
  used_ = 0;
}

size_t DeferredWeightGrads::bytes() const {
  size_t b = 0;
  for (size_t i = 0; i < used_; ++i) b += (entries_[i].dy.size() + entries_[i].x.size()) * sizeof(float);
  return b;
}

void Linear::collect(std::vector<Param*>& out) {
  out.push_back(&weight);
  if (has_bias_) out.push_back(&bias);
}

}  // namespace claw::model
