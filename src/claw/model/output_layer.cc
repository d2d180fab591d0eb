#include "claw/model/output_layer.h"

#include <algorithm>

#include "claw/core/error.h"
#include "claw/kernels/cpu/bf16_gemm.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/kernels/cpu/cross_entropy.h"
#include "claw/kernels/cpu/reduce.h"
#include "claw/kernels/cpu/rowwise_linear.h"
#include "claw/kernels/cuda/context.h"

namespace claw::model {

void OutputLayer::Saved::layout(ArenaLayout& L, const ModelConfig& cfg, int64_t N) {
  losses = L.take<float>("output.losses", N);
  lse = L.take<float>("output.lse", N);
  dx = L.take<float>("output.dx", N * cfg.hidden_size);
}

OutputLayer::OutputLayer(const ModelConfig& cfg, const HfNames& hf, Param* tied, const TensorParallel& tp)
    : weight_(tied ? tied : &own_weight),
      tp_(tp),
      vocab_(VocabShard::of(cfg.vocab_size, tp.dims().padded_vocab(cfg), tp.rank(), tp.size())),
      C_(cfg.hidden_size) {
  cap_ = cfg.final_logit_softcapping;
  if (tied) return;
  own_weight.spec = {.name = "output_layer.weight",
                     .shape = {vocab_.Vp, C_},
                     .init_std = cfg.init_method_std,
                     .init_rows = cfg.vocab_size,
                     .hf = hf.output_layer()};
  if (tp.size() > 1) own_weight.spec.split(0, tp.size(), tp.rank(), "tp");
}

OutputLayer::Rows OutputLayer::pack(const StepCtx& ctx, const float* x, const int32_t* targets, const float* weight) {
  const int64_t N = ctx.tokens();
  rows_.clear();
  for (int64_t i = 0; i < N; ++i)
    if (targets[i] >= 0) rows_.push_back(i);
  const auto n = static_cast<int64_t>(rows_.size());
  packed_ = n < N && !ctx.cpu.gpu;
  rows_total_ = N;
  if (!packed_) return {N, x, targets, weight};
  rows_x_.resize(static_cast<size_t>(n * C_));
  rows_targets_.resize(static_cast<size_t>(n));
  rows_weight_.resize(weight ? static_cast<size_t>(n) : 0);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t i = rows_[static_cast<size_t>(j)];
    std::copy_n(x + i * C_, C_, rows_x_.data() + j * C_);
    rows_targets_[static_cast<size_t>(j)] = targets[i];
    if (weight) rows_weight_[static_cast<size_t>(j)] = weight[i];
  }
  return {n, rows_x_.data(), rows_targets_.data(), weight ? rows_weight_.data() : nullptr};
}

void OutputLayer::scatter(float* a, int64_t width) const {
  if (!packed_) return;
  // From the last row down: packed row j moves to row rows_[j] >= j, which
  // no packed row still to be moved occupies.
  auto j = static_cast<int64_t>(rows_.size()) - 1;
  for (int64_t i = rows_total_ - 1; i >= 0; --i) {
    if (j >= 0 && rows_[static_cast<size_t>(j)] == i) {
      if (i != j) std::copy_n(a + j * width, width, a + i * width);
      --j;
    } else {
      std::fill_n(a + i * width, width, 0.0f);
    }
  }
}

double OutputLayer::forward(const StepCtx& ctx, const float* x_rows, const int32_t* targets, double dloss_scale,
                            Saved& s, Scratch& scratch) {
  if (ctx.sequence_loss) return sequence_loss_forward(ctx, x_rows, targets, dloss_scale, s, scratch);
  const int64_t N = ctx.tokens(), Vl = vocab_.rows();
  const Rows p = pack(ctx, tp_.gather_rows(scratch.gathered, x_rows, ctx.B, ctx.T, C_), targets, ctx.loss_weight);
  const int64_t chunk = Scratch::logits_chunk(p.n);
  if (cap_ > 0) cap_grad_.resize(static_cast<size_t>(chunk * Vl));
  const float* W = weight_->data();
  const bool bf16 = gemm_dtype_ == DType::bf16;
  // bf16 operands: on the CPU in half_'s buffers; on the GPU the weight's
  // bf16 compute copy and device scratch slots 2 (x) and 3 (logit gradients).
  const GpuCtx* gpu = ctx.cpu.gpu;
  auto device_bf16 = [&](const float* a, int64_t n, int slot) {
    return kernels::Bf16Operand{.bits = kernels::cuda::bf16_in_scratch(*gpu, a, n, slot)};
  };
  kernels::Bf16Operand wq;  // the weight once per call, each chunk's x and logit gradients as they come
  if (bf16 && gpu) {
    const uint16_t* copy = weight_->bf16_compute();
    wq = copy ? kernels::Bf16Operand{.bits = copy}
              : device_bf16(W, Vl * C_, 1);  // no compute copy: slot 1 (the linear layers' second) is free here
  } else if (bf16) {
    wq = kernels::round_to_bf16(ctx.cpu, W, Vl * C_, half_.w32, half_.w16);
  }
  for (int64_t r0 = 0; r0 < p.n; r0 += chunk) {
    const int64_t rows = std::min(chunk, p.n - r0);
    const float* xc = p.x + r0 * C_;
    const int32_t* tc = p.targets + r0;
    float* logits = scratch.logits;
    kernels::Bf16Operand xq;
    if (bf16) {
      xq = gpu ? device_bf16(xc, rows * C_, 2) : kernels::round_to_bf16(ctx.cpu, xc, rows * C_, half_.x32, half_.x16);
      kernels::gemm_bf16(ctx.cpu, false, true, rows, Vl, C_, 1.0f, xq, C_, wq, C_, 0.0f, logits, Vl);
    } else {
      kernels::gemm(ctx.cpu, false, true, rows, Vl, C_, 1.0f, xc, C_, W, C_, 0.0f, logits, Vl);
    }
    soft_cap(ctx.cpu, logits, rows * Vl, dloss_scale != 0 ? cap_grad_.data() : nullptr);
    if (tp_.size() == 1)
      kernels::cross_entropy_forward(ctx.cpu, s.losses + r0, s.lse + r0, logits, tc, rows, vocab_.V, Vl);
    else
      vocab_parallel_cross_entropy_forward(ctx.cpu, *tp_.group, s.losses + r0, s.lse + r0, logits, tc, vocab_, rows);
    const float* w = p.weight ? p.weight + r0 : nullptr;
    if (w) kernels::mul(ctx.cpu, s.losses + r0, w, rows);
    if (dloss_scale == 0) continue;
    const float scale = static_cast<float>(dloss_scale);
    if (tp_.size() == 1)
      kernels::cross_entropy_backward(ctx.cpu, logits, logits, s.lse + r0, tc, scale, rows, vocab_.V, Vl);
    else
      vocab_parallel_cross_entropy_backward(ctx.cpu, logits, logits, s.lse + r0, tc, scale, vocab_, rows);
    if (cap_ > 0) kernels::mul(ctx.cpu, logits, cap_grad_.data(), rows * Vl);
    if (w) kernels::scale_rows(ctx.cpu, logits, w, rows, Vl);
    if (bf16) {
      const kernels::Bf16Operand gq = gpu ? device_bf16(logits, rows * Vl, 3)
                                          : kernels::round_to_bf16_in_place(ctx.cpu, logits, rows * Vl, half_.g16);
      kernels::gemm_bf16(ctx.cpu, false, false, rows, C_, Vl, 1.0f, gq, Vl, wq, C_, 0.0f, s.dx + r0 * C_, C_);
      if (weight_->grad.defined())
        kernels::gemm_bf16(ctx.cpu, true, false, Vl, C_, rows, 1.0f, gq, Vl, xq, C_, 1.0f, weight_->gdata(), C_);
      continue;
    }
    kernels::gemm(ctx.cpu, false, false, rows, C_, Vl, 1.0f, logits, Vl, W, C_, 0.0f, s.dx + r0 * C_, C_);
    if (weight_->grad.defined())  // not frozen
      kernels::gemm(ctx.cpu, true, false, Vl, C_, rows, 1.0f, logits, Vl, xc, C_, 1.0f, weight_->gdata(), C_);
  }
  scatter(s.losses, 1);
  scatter(s.lse, 1);
  if (dloss_scale != 0) {
    scatter(s.dx, C_);
    tp_.reduce_rows(s.dx, ctx.B, ctx.T, C_);
  }
  return kernels::sum(ctx.cpu, s.losses, N);
}

double OutputLayer::sequence_loss_forward(const StepCtx& ctx, const float* x_rows, const int32_t* targets,
                                          double dloss_scale, Saved& s, Scratch& scratch) {
  CLAW_CHECK(!ctx.loss_weight, "a sequence loss sets the token weights itself");
  if (ctx.cpu.gpu) fail("sequence losses (--dpo) run on the CPU backend for now (--device cpu)");
  const int64_t N = ctx.tokens(), Vl = vocab_.rows();
  const Rows p = pack(ctx, tp_.gather_rows(scratch.gathered, x_rows, ctx.B, ctx.T, C_), targets, nullptr);
  const int64_t chunk = Scratch::logits_chunk(p.n);
  if (cap_ > 0) cap_grad_.resize(static_cast<size_t>(chunk * Vl));
  const float* W = weight_->data();
  // Batch-invariant (an RL learner): the generation engine's products and
  // log-softmax, so each token's loss is its sampled log-probability negated,
  // to the bit (full_logits, serve/sampling.h). The backward's recomputed
  // logits need no such match: they come from the GEMM.
  const bool exact = ctx.batch_invariant;
  auto chunk_logits = [&](int64_t r0, int64_t rows, bool forward) {
    if (exact && forward)
      kernels::rowwise_linear_forward(ctx.cpu, scratch.logits, p.x + r0 * C_, W, nullptr, rows, C_, Vl);
    else
      kernels::gemm(ctx.cpu, false, true, rows, Vl, C_, 1.0f, p.x + r0 * C_, C_, W, C_, 0.0f, scratch.logits, Vl);
    soft_cap(ctx.cpu, scratch.logits, rows * Vl, forward ? nullptr : cap_grad_.data());
    return scratch.logits;
  };
  // Every token's loss first: the sequence loss needs whole sequences.
  for (int64_t r0 = 0; r0 < p.n; r0 += chunk) {
    const int64_t rows = std::min(chunk, p.n - r0);
    float* logits = chunk_logits(r0, rows, true);
    if (exact && tp_.size() == 1)
      kernels::cross_entropy_forward_exact(ctx.cpu, s.losses + r0, s.lse + r0, logits, p.targets + r0, rows,
                                           vocab_.V, Vl);
    else if (tp_.size() == 1)
      kernels::cross_entropy_forward(ctx.cpu, s.losses + r0, s.lse + r0, logits, p.targets + r0, rows, vocab_.V, Vl);
    else
      vocab_parallel_cross_entropy_forward(ctx.cpu, *tp_.group, s.losses + r0, s.lse + r0, logits, p.targets + r0,
                                           vocab_, rows);
  }
  scatter(s.losses, 1);  // lse stays packed for the backward
  sequence_weights_.resize(static_cast<size_t>(N));
  const double loss = ctx.sequence_loss->apply(ctx, s.losses, targets, sequence_weights_.data());
  if (dloss_scale == 0) {
    scatter(s.lse, 1);
    return loss;
  }
  // The weights of the rows run, in their packed order.
  if (packed_)
    for (int64_t j = 0; j < p.n; ++j)  // rows_[j] >= j: read before any write reaches it
      sequence_weights_[static_cast<size_t>(j)] = sequence_weights_[static_cast<size_t>(rows_[static_cast<size_t>(j)])];
  // Then backward, each chunk's logits recomputed, its token gradients
  // weighted by d loss / d loss_t.
  const float scale = static_cast<float>(dloss_scale);
  for (int64_t r0 = 0; r0 < p.n; r0 += chunk) {
    const int64_t rows = std::min(chunk, p.n - r0);
    float* logits = chunk_logits(r0, rows, false);
    if (tp_.size() == 1)
      kernels::cross_entropy_backward(ctx.cpu, logits, logits, s.lse + r0, p.targets + r0, scale, rows, vocab_.V, Vl);
    else
      vocab_parallel_cross_entropy_backward(ctx.cpu, logits, logits, s.lse + r0, p.targets + r0, scale, vocab_, rows);
    if (cap_ > 0) kernels::mul(ctx.cpu, logits, cap_grad_.data(), rows * Vl);
    kernels::scale_rows(ctx.cpu, logits, sequence_weights_.data() + r0, rows, Vl);
    kernels::gemm(ctx.cpu, false, false, rows, C_, Vl, 1.0f, logits, Vl, W, C_, 0.0f, s.dx + r0 * C_, C_);
    if (weight_->grad.defined())
      kernels::gemm(ctx.cpu, true, false, Vl, C_, rows, 1.0f, logits, Vl, p.x + r0 * C_, C_, 1.0f, weight_->gdata(), C_);
  }
  scatter(s.lse, 1);
  scatter(s.dx, C_);
  tp_.reduce_rows(s.dx, ctx.B, ctx.T, C_);
  return loss;
}

void OutputLayer::logits(const StepCtx& ctx, const float* x, float* out) const {
  CLAW_CHECK(tp_.size() == 1, "full logits are not assembled under tensor parallelism (TP {})", tp_.size());
  if (ctx.cpu.gpu) fail("writing logits runs on the CPU backend for now (--device cpu)");
  kernels::gemm(false, true, ctx.tokens(), vocab_.Vp, C_, 1.0f, x, C_, weight_->data(), C_, 0.0f, out, vocab_.Vp);
  soft_cap(ctx.cpu, out, ctx.tokens() * vocab_.Vp, nullptr);
}

void OutputLayer::soft_cap(const CpuCtx& cpu, float* z, int64_t n, float* d_capped) const {
  if (cap_ <= 0) return;
  if (cpu.gpu) fail("--final-logit-softcapping runs on the CPU only for now");
  const auto c = static_cast<float>(cap_), inv = static_cast<float>(1.0 / cap_);
  parallel_for(cpu, n, 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      z[i] = c * std::tanh(z[i] * inv);  // kernels/cpu/score_scale.h's soft cap
      if (d_capped) {
        const float u = z[i] * inv;
        d_capped[i] = 1.0f - u * u;
      }
    }
  });
}

void OutputLayer::full_logits(const StepCtx& ctx, const float* x, float* out) const {
  if (ctx.cpu.gpu) fail("full logits run on the CPU backend for now (--device cpu)");
  const int64_t N = ctx.tokens(), Vl = vocab_.rows(), V = vocab_.V, P = tp_.size();
  std::vector<float> local(static_cast<size_t>(N * Vl));
  if (ctx.batch_invariant && !inference_weight.empty())
    kernels::weight_linear_forward(ctx.cpu, local.data(), x, inference_weight, nullptr, N);
  else if (ctx.batch_invariant)
    kernels::rowwise_linear_forward(ctx.cpu, local.data(), x, weight_->data(), nullptr, N, C_, Vl);
  else
    kernels::gemm(false, true, N, Vl, C_, 1.0f, x, C_, weight_->data(), C_, 0.0f, local.data(), Vl);
  soft_cap(ctx.cpu, local.data(), N * Vl, nullptr);
  std::vector<float> all;
  const float* blocks = local.data();  // [P, N, Vl]: rank r's vocabulary rows [r Vl, (r + 1) Vl)
  if (P > 1) {
    all.resize(static_cast<size_t>(P * N * Vl));
    tp_.group->all_gather(local.data(), all.data(), N * Vl, DType::f32);
    blocks = all.data();
  }
  for (int64_t r = 0; r < P; ++r) {
    const int64_t v0 = r * Vl, n = std::clamp<int64_t>(V - v0, 0, Vl);
    for (int64_t i = 0; i < N && n > 0; ++i) std::copy_n(blocks + (r * N + i) * Vl, n, out + i * V + v0);
  }
}

void OutputLayer::collect(std::vector<Param*>& out) {
  if (weight_ == &own_weight) out.push_back(&own_weight);
}

}  // namespace claw::model
