#include "claw/model/linear.h"

#include <algorithm>
#include <cmath>

#include "claw/core/block_formats.h"
#include "claw/core/error.h"
#include "claw/core/storage.h"
#include "claw/core/philox.h"
#include "claw/kernels/cpu/bf16_gemm.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/kernels/cpu/dropout.h"
#include "claw/kernels/cpu/linear.h"
#include "claw/kernels/cpu/quant.h"
#include "claw/kernels/cpu/rowwise_linear.h"
#include "claw/kernels/cuda/ops.h"

namespace claw::model {

Linear::Linear(const std::string& name, int64_t in, int64_t out, bool bias, double init_std, HfRef weight_hf,
               HfRef bias_hf, const TensorParallel& tp, LinearSplit split)
    : tp_(tp), kind_(tp.size() == 1 ? TpSplit::none : split.kind), in_(in), out_(out), in_global_(in), has_bias_(bias) {
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
    in_offset_ = index * in_;
  }
}

void Linear::enable_lora(int64_t rank, double scale, double dropout) {
  CLAW_CHECK(rank > 0 && !has_lora(), "{}: LoRA rank {}", weight.spec.name, rank);
  lora_rank_ = rank;
  lora_scale_ = scale;
  lora_dropout_ = dropout;
  const std::string name = weight.spec.name.substr(0, weight.spec.name.size() - std::string(".weight").size());
  const int64_t out_global = weight.spec.shape[0];
  // PEFT's init: A Kaiming-uniform with a = sqrt(5), U(-1/sqrt(in), 1/sqrt(in)); B zero.
  lora_a.spec = {.name = name + ".lora_A.weight", .shape = {rank, in_global_}, .init = Init::uniform,
                 .init_std = 1.0 / std::sqrt(static_cast<double>(in_global_))};
  lora_b.spec = {.name = name + ".lora_B.weight", .shape = {out_global, rank}, .init = Init::zeros};
  // PEFT's tensors (ckpt/peft.h) on the Hugging Face module of the weight:
  // lora_A [r, in] and lora_B [out, r] whatever the base layer's layout; a
  // layer that is a slice of a fused module (GPT-2's c_attn) holds rows of B.
  if (const HfRef& w = weight.spec.hf; !w.name.empty()) {
    const std::string module = w.name.substr(0, w.name.size() - std::string(".weight").size());
    lora_a.spec.hf = {module + ".lora_A.weight"};
    lora_b.spec.hf = {module + ".lora_B.weight"};
    if (w.slice_dim >= 0) {
      lora_b.spec.hf.slice_dim = 0;
      lora_b.spec.hf.begin = w.begin;
      lora_b.spec.hf.end = w.end;
    }
  }
  if (kind_ == TpSplit::none) return;
  // Split like the weight's matching dimension; the other factor replicated.
  ParamSpec& split = kind_ == TpSplit::column ? lora_b.spec : lora_a.spec;
  split.split(kind_ == TpSplit::column ? 0 : 1, weight.spec.shard_count, weight.spec.shard_index, "tp");
  split.primary = weight.spec.primary;
}

void Linear::share_lora_a(Linear& owner) {
  CLAW_CHECK(has_lora() && owner.has_lora() && owner.lora_rank_ == lora_rank_ && owner.in_ == in_ &&
                 owner.in_offset_ == in_offset_ && !owner.lora_a_owner_,
             "{}: cannot share the LoRA A of {}", weight.spec.name, owner.weight.spec.name);
  lora_a_owner_ = &owner;
  lora_a.spec = {};
}

void Linear::merge_lora(const CpuCtx& cpu) {
  if (!has_lora() || lora_merged_) return;
  kernels::gemm(cpu, false, false, out_, in_, lora_rank_, static_cast<float>(lora_scale_), lora_b.data(), lora_rank_,
                a().data(), in_, 1.0f, weight.data(), in_);
  lora_merged_ = true;
}

const float* Linear::lora_input(const StepCtx& ctx, const float* x, std::vector<float>& buf) const {
  if (!ctx.training || lora_dropout_ <= 0) return x;
  const int64_t N = ctx.tokens();
  buf.resize(static_cast<size_t>(N * in_));
  const RandomStream rng(ctx.seed, hash_name(a().spec.name + ".dropout"));
  // Element (token, global input feature): the same mask at any TP split.
  parallel_for(ctx.cpu, N, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      kernels::dropout_forward(CpuCtx{1}, buf.data() + r * in_, x + r * in_, in_, lora_dropout_, rng,
                               static_cast<uint64_t>((ctx.first_token() + r) * in_global_ + in_offset_));
  });
  return buf.data();
}

void Linear::lora_forward(const StepCtx& ctx, const float* x, float* y) const {
  if (!has_lora() || lora_merged_) return;
  CLAW_CHECK(!ctx.kv_cache, "{}: generation reads merged LoRA adapters (Linear::merge_lora)", weight.spec.name);
  const int64_t N = ctx.tokens(), r = lora_rank_;
  thread_local std::vector<float> xbuf, t;
  const float* xin = lora_input(ctx, x, xbuf);
  t.resize(static_cast<size_t>(N * r));
  kernels::gemm(ctx.cpu, false, true, N, r, in_, 1.0f, xin, in_, a().data(), in_, 0.0f, t.data(), r);
  kernels::gemm(ctx.cpu, false, true, N, out_, r, static_cast<float>(lora_scale_), t.data(), r, lora_b.data(), r,
                1.0f, y, out_);
}

void Linear::lora_weight_grad(const StepCtx& ctx, const float* dy, const float* x, int64_t rows) {
  const int64_t N = rows, r = lora_rank_;
  const float s = static_cast<float>(lora_scale_);
  thread_local std::vector<float> xbuf, t, dt, part;
  const float* xin = lora_input(ctx, x, xbuf);
  t.resize(static_cast<size_t>(N * r));
  dt.resize(static_cast<size_t>(N * r));
  kernels::gemm(ctx.cpu, false, true, N, r, in_, 1.0f, xin, in_, a().data(), in_, 0.0f, t.data(), r);
  kernels::gemm(ctx.cpu, false, false, N, r, out_, s, dy, out_, lora_b.data(), r, 0.0f, dt.data(), r);
  // dA = dt^T x' [r, in], dB = s dy^T t [out, r]. The replicated factor's
  // gradient is this rank's part of a sum over the TP group (a column layer
  // sees its output slice only; a row layer its input slice): summed here,
  // with ranks that repeat a replicated KV slice adding nothing.
  const bool reduce = kind_ != TpSplit::none;
  const bool a_partial = reduce && kind_ == TpSplit::column, b_partial = reduce && kind_ == TpSplit::row;
  if (float* ga = a().gdata()) {
    const int64_t n = r * in_;
    if (a_partial) {
      part.assign(static_cast<size_t>(n), 0.0f);
      if (weight.spec.primary)
        kernels::gemm(ctx.cpu, true, false, r, in_, N, 1.0f, dt.data(), r, xin, in_, 0.0f, part.data(), in_);
      tp_.group->all_reduce(part.data(), n, DType::f32);
      for (int64_t i = 0; i < n; ++i) ga[i] += part[i];
    } else {
      kernels::gemm(ctx.cpu, true, false, r, in_, N, 1.0f, dt.data(), r, xin, in_, 1.0f, ga, in_);
    }
  }
  if (float* gb = lora_b.gdata()) {
    const int64_t n = out_ * r;
    if (b_partial) {
      part.assign(static_cast<size_t>(n), 0.0f);
      kernels::gemm(ctx.cpu, true, false, out_, r, N, s, dy, out_, t.data(), r, 0.0f, part.data(), r);
      tp_.group->all_reduce(part.data(), n, DType::f32);
      for (int64_t i = 0; i < n; ++i) gb[i] += part[i];
    } else {
      kernels::gemm(ctx.cpu, true, false, out_, r, N, s, dy, out_, t.data(), r, 1.0f, gb, r);
    }
  }
}

void Linear::enable_half(DType t) {
  CLAW_CHECK(t == DType::bf16 || t == DType::f16 || t == DType::f32, "16-bit GEMM operands of {}", dtype_name(t));
  half_ = t;
}

void Linear::enable_fp8(const Fp8Config& cfg, int64_t layer_index) {
  // Block recipes: a TP split must fall on block boundaries, or ranks would
  // scale other groups of elements than one rank does.
  const int64_t block = cfg.recipe == "mxfp8" ? 32 : cfg.recipe == "blockwise" ? 128 : cfg.recipe == "nvfp4" ? 16 : 0;
  if (block > 0 && tp_.size() > 1 && kind_ != TpSplit::none) {
    const bool column = kind_ == TpSplit::column;
    const int64_t local = column ? out_ : in_;
    if (local % block != 0)
      fail("--fp8-recipe {}: {} is split over --tensor-model-parallel-size {} into {} {} per rank, not a multiple of "
           "the recipe's block of {}; use a TP size that leaves a multiple of {}, or the delayed or tensorwise recipe",
           cfg.recipe, weight.spec.name, tp_.size(), local, column ? "output features" : "input features", block,
           block);
  }
  fp8_ = std::make_unique<Fp8Linear>(cfg, weight.spec.name, layer_index);
}

comm::Group* Linear::fp8_group(Fp8Role role) const {
  if (role == Fp8Role::weight) return kind_ == TpSplit::none ? nullptr : tp_.group;
  return tp_.moe_tokens ? tp_.moe_tokens : tp_.group;  // tokens split over cp, features over tp
}

namespace {
// The operands' buffers: fp32 values and bf16 bit patterns, two of each.
thread_local std::vector<float> operand_f32[2];
thread_local std::vector<uint16_t> operand_bf16[2];

void add_bias_rows(const CpuCtx& cpu, float* y, const float* b, int64_t rows, int64_t C) {
  if constexpr (kernels::cuda::cuda_built()) {
    if (cpu.gpu) return kernels::cuda::add_bias(*cpu.gpu, y, b, rows, C);
  }
  parallel_for(cpu, rows, std::max<int64_t>(1, 4096 / C), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      float* yr = y + r * C;
      for (int64_t c = 0; c < C; ++c) yr[c] += b[c];
    }
  });
}

// C = alpha_a alpha_b op(A) op(B) + beta C.
void multiply(const CpuCtx& cpu, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const auto& a, int64_t lda,
              const auto& b, int64_t ldb, float beta, float* c, int64_t ldc) {
  kernels::gemm_bf16(cpu, ta, tb, M, N, K, a.alpha * b.alpha, a.values, lda, b.values, ldb, beta, c, ldc);
}

}  // namespace

Linear::Operand Linear::gemm_operand(const CpuCtx& cpu, Fp8Role role, const float* a, int64_t rows, int64_t cols,
                                     bool along_rows, int slot, bool record) const {
  const int64_t n = rows * cols;
  // --device cuda (--bf16; the configuration refuses FP8 and --fp16 there):
  // the weight's bf16 compute copy, refreshed after each optimizer step, or
  // the operand rounded into a device scratch slot.
  if (cpu.gpu) {
    CLAW_CHECK(half_ == DType::bf16 && !(fp8_ && fp8_->active()), "{}: the GPU's low-precision products are bf16",
               weight.spec.name);
    if (const uint16_t* copy = weight.bf16_compute(); role == Fp8Role::weight && a == weight.data() && copy)
      return {{.bits = copy}};
    return {{.bits = kernels::cuda::bf16_in_scratch(*cpu.gpu, a, n, slot)}};
  }
  std::vector<float>& buf = operand_f32[slot];
  std::vector<uint16_t>& bits = operand_bf16[slot];
  if (fp8_ && fp8_->active()) {
    const Fp8Linear::Operand q = fp8_->quantize(cpu, role, a, rows, cols, along_rows, buf, fp8_group(role), record);
    return {kernels::exact_bf16(cpu, q.data, n, bits), q.alpha};
  }
  if (half_ == DType::bf16) return {kernels::round_to_bf16(cpu, a, n, buf, bits)};
  // f16 values in fp32 (no f16 GEMM here): round to nearest even, overflow to inf as IEEE does.
  buf.resize(static_cast<size_t>(n));
  parallel_for(cpu, n, 1 << 14, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float v = round_to_grid(a[i], 10, -14);
      buf[static_cast<size_t>(i)] = std::fabs(v) > 65504.0f ? std::copysign(INFINITY, a[i]) : v;
    }
  });
  return {{.f32 = buf.data()}};
}

void Linear::quantized_forward(const StepCtx& ctx, const float* x, float* y) const {
  const int64_t N = ctx.tokens();
  const bool record = ctx.training && !(fp8_ && fp8_->calibrating());
  const Operand qx = gemm_operand(ctx.cpu, Fp8Role::input, x, N, in_, false, 0, record);
  const Operand qw = gemm_operand(ctx.cpu, Fp8Role::weight, weight.data(), out_, in_, false, 1, record);
  multiply(ctx.cpu, false, true, N, out_, in_, qx, in_, qw, in_, 0.0f, y, out_);
}

void Linear::quantized_backward_input(const CpuCtx& cpu, const float* dy, float* dx, int64_t N, float beta) const {
  const bool record = !(fp8_ && fp8_->calibrating());
  const Operand qdy = gemm_operand(cpu, Fp8Role::grad_output, dy, N, out_, false, 0, record);
  const Operand qw = gemm_operand(cpu, Fp8Role::weight, weight.data(), out_, in_, true, 1, record);
  multiply(cpu, false, false, N, in_, out_, qdy, out_, qw, in_, beta, dx, in_);
}

void Linear::quantized_weight_grad(const CpuCtx& cpu, const float* dy, const float* x, int64_t rows, float* dw,
                                   float beta) const {
  const bool record = !(fp8_ && fp8_->calibrating());
  const Operand qdy = gemm_operand(cpu, Fp8Role::grad_output, dy, rows, out_, true, 0, record);
  const Operand qx = gemm_operand(cpu, Fp8Role::input, x, rows, in_, true, 1, record);
  multiply(cpu, true, false, out_, in_, rows, qdy, out_, qx, in_, beta, dw, in_);
}

void Linear::forward(const StepCtx& ctx, const float* x, float* y) const {
  const float* b = has_bias_ ? bias.data() : nullptr;
  const bool quantized = low_precision() && !ctx.batch_invariant;
  auto product = [&](const float* with_bias) {
    if (quantized) {
      quantized_forward(ctx, x, y);
      if (with_bias) add_bias_rows(ctx.cpu, y, with_bias, ctx.tokens(), out_);
    } else if (ctx.row_kernels() && !inference_weight.empty())
      kernels::weight_linear_forward(ctx.cpu, y, x, inference_weight, with_bias, ctx.tokens());
    else if (ctx.row_kernels())
      kernels::rowwise_linear_forward(ctx.cpu, y, x, weight.data(), with_bias, ctx.tokens(), in_, out_);
    else
      kernels::linear_forward(ctx.cpu, y, x, weight.data(), with_bias, ctx.tokens(), in_, out_);
  };
  if (kind_ != TpSplit::row) {
    product(b);
    lora_forward(ctx, x, y);
  } else {
    product(nullptr);
    lora_forward(ctx, x, y);  // a partial sum too: reduced with the product
    tp_.reduce_rows(y, ctx.B, ctx.T, out_);
    if (b) add_bias_rows(ctx.cpu, y, b, tp_.rows(ctx.tokens()), out_);
  }
}

const float* Linear::output_grad(const StepCtx& ctx, const float* dy, float* full) const {
  return kind_ == TpSplit::row ? tp_.gather_rows(full, dy, ctx.B, ctx.T, out_) : dy;
}

void Linear::backward_input(const StepCtx& ctx, const float* dy, float* dx, bool accumulate) const {
  const int64_t N = ctx.tokens();
  if (low_precision())
    quantized_backward_input(ctx.cpu, dy, dx, N, accumulate ? 1.0f : 0.0f);
  else
    kernels::linear_backward_input(ctx.cpu, dx, dy, weight.data(), N, in_, out_, accumulate);
  if (!has_lora() || lora_merged_) return;
  // dx += (s dy B) A, through the dropout mask when there is one.
  const int64_t r = lora_rank_;
  thread_local std::vector<float> dt, dxd;
  dt.resize(static_cast<size_t>(N * r));
  kernels::gemm(ctx.cpu, false, false, N, r, out_, static_cast<float>(lora_scale_), dy, out_, lora_b.data(), r, 0.0f,
                dt.data(), r);
  if (!ctx.training || lora_dropout_ <= 0) {
    kernels::gemm(ctx.cpu, false, false, N, in_, r, 1.0f, dt.data(), r, a().data(), in_, 1.0f, dx, in_);
    return;
  }
  dxd.resize(static_cast<size_t>(N * in_));
  kernels::gemm(ctx.cpu, false, false, N, in_, r, 1.0f, dt.data(), r, a().data(), in_, 0.0f, dxd.data(), in_);
  const RandomStream rng(ctx.seed, hash_name(a().spec.name + ".dropout"));
  parallel_for(ctx.cpu, N, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      float* d = dxd.data() + row * in_;
      kernels::dropout_backward(CpuCtx{1}, d, d, in_, lora_dropout_, rng,
                                static_cast<uint64_t>((ctx.first_token() + row) * in_global_ + in_offset_));
      float* o = dx + row * in_;
      for (int64_t c = 0; c < in_; ++c) o[c] += d[c];
    }
  });
}

void Linear::backward_weight(const StepCtx& ctx, const float* dy, const float* x) {
  // The adapter's gradients now, also under a deferring schedule (its
  // reductions and dropout need this step's context).
  if (has_lora() && !lora_merged_) lora_weight_grad(ctx, dy, x, ctx.tokens());
  if (!weight.grad.defined() && !(has_bias_ && bias.grad.defined())) return;  // frozen
  if (ctx.defer_weight_grads) {
    ctx.defer_weight_grads->record(this, dy, x, ctx.tokens());
    return;
  }
  apply_weight_grad(ctx.cpu, dy, x, ctx.tokens());
}

void Linear::apply_weight_grad(const CpuCtx& cpu, const float* dy, const float* x, int64_t rows) {
  if (low_precision()) {
    if (weight.grad.defined()) quantized_weight_grad(cpu, dy, x, rows, weight.gdata(), 1.0f);
    if (has_bias_ && bias.grad.defined())
      kernels::linear_backward_weight(cpu, static_cast<float*>(nullptr), bias.gdata(), dy, x, rows, in_, out_);
    return;
  }
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
  if (has_lora() && !lora_a_owner_) out.push_back(&lora_a);
  if (has_lora()) out.push_back(&lora_b);
}

}  // namespace claw::model
