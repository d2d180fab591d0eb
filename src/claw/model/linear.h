// Linear layer y = x W^T + b (W: [out, in], PyTorch/HF Llama convention),
// plain or split over the tensor-parallel group (Megatron's
// ColumnParallelLinear and RowParallelLinear):
//
//   column   W's rows (output features) and b split: y holds this rank's
//            columns of the output; the input x is whole ([N, in]).
//   row      W's columns (input features) split, b replicated: x holds this
//            rank's columns; forward reduces the partial products over the
//            group (all-reduce, or reduce-scatter to the sequence piece under
//            SP) and then adds b.
// The caller gathers a column-parallel layer's input (several layers share
// it: q/k/v, gate/up) and reduces the partial input gradients they produce;
// the row-parallel layer's output reduction is here. With one rank both are
// the plain layer.
//
// Saved: the layer's input, held by the caller (it is some other layer's
// output already in the activation arena).
//
// A LoRA adapter (enable_lora, config.h's LoraConfig) adds s (x' A^T) B^T,
// x' = dropout(x): A [r, in], B [out, r] split like W's matching dimension
// (column: B's rows; row: A's columns) and replicated along the other. Its
// rank-r products are recomputed in backward rather than saved; the
// gradient of the replicated factor (A of a column-parallel layer, B of a
// row-parallel one) is a partial sum on each TP rank, reduced over the group
// right away (as norm weights under SP are). Dropout masks are Philox
// streams keyed by the layer's name over (token, global input feature), so
// every layout drops the same elements. The base weight and bias are frozen
// when adapters are on (ModelConfig::lora). Layers that Hugging Face fuses
// into one module (GPT-2's q, k, v in c_attn) share one A (share_lora_a), as
// PEFT's single adapter on the fused module does: each adds its share of dA.
//
// enable_fp8 runs the layer's three GEMMs in FP8 (model/fp8.h): x, W and dy
// are quantised to the recipe's format and scales and multiplied with fp32
// accumulation; the bias, its gradient and the adapter stay in fp32.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "claw/kernels/cpu/bf16_gemm.h"
#include "claw/kernels/cpu/quant.h"
#include "claw/model/fp8.h"
#include "claw/model/param.h"
#include "claw/model/step.h"
#include "claw/model/tensor_parallel.h"

namespace claw::model {

enum class TpSplit { none, column, row };

// How a Linear is split: `count` equal slices, this rank holding `index`,
// the same slice held by `replicas` TP ranks (KV groups replicated when the
// TP size exceeds their count). Defaults to the TP group's own split.
struct LinearSplit {
  TpSplit kind = TpSplit::none;
  int count = 0;  // 0: the TP size, index the TP rank
  int index = 0;
  int replicas = 1;
};

class Linear {
 public:
  // init_std: N(0, init_std) weights; biases start at zero and do not decay.
  // in/out are the global feature counts.
  Linear(const std::string& name, int64_t in, int64_t out, bool bias, double init_std, HfRef weight_hf,
         HfRef bias_hf, const TensorParallel& tp, LinearSplit split = {});

  // x [N, in_local] -> y [N, out_local], N = ctx.tokens(). Row-parallel: y has
  // room for [N, out]; on return its first tp.rows(N) rows hold the result.
  void forward(const StepCtx& ctx, const float* x, float* y) const;
  // Row-parallel: the whole output gradient [N, out] from this rank's rows
  // dy [tp.rows(N), out] (all-gathered into `full` under SP; else dy itself).
  // Other layers: dy.
  const float* output_grad(const StepCtx& ctx, const float* dy, float* full) const;
  // dx [N, in_local] = dy W (overwrites, or accumulates when several branches
  // share x); dy [N, out_local] whole (see output_grad). Column-parallel: a
  // partial sum over the group, reduced by the caller.
  void backward_input(const StepCtx& ctx, const float* dy, float* dx, bool accumulate) const;
  // dW += dy^T x, db += colsum(dy). Separate so a schedule may defer it:
  // with ctx.defer_weight_grads set, dy and x are copied there instead.
  // A frozen weight or bias (unbound gradient) gets nothing.
  void backward_weight(const StepCtx& ctx, const float* dy, const float* x);
  // The weight-gradient GEMM itself, on `rows` rows.
  void apply_weight_grad(const CpuCtx& cpu, const float* dy, const float* x, int64_t rows);

  void collect(std::vector<Param*>& out);
  int64_t in() const { return in_; }    // local
  int64_t out() const { return out_; }  // local

  // Adds a LoRA adapter of `rank` (before the model's parameters are laid
  // out); in_global: the layer's input features.
  void enable_lora(int64_t rank, double scale, double dropout);
  // This layer's adapter reads `owner`'s A (same input, same rank) and adds
  // its part of A's gradient there; its own A is not a parameter.
  void share_lora_a(Linear& owner);
  bool has_lora() const { return lora_rank_ > 0; }
  bool lora_merged() const { return lora_merged_; }
  // FP8 GEMMs from now on (training and evaluation; batch-invariant
  // inference keeps its own kernels).
  // layer_index: the transformer block the layer belongs to.
  void enable_fp8(const Fp8Config& cfg, int64_t layer_index);
  Fp8Linear* fp8() const { return fp8_.get(); }
  // 16-bit GEMM operands (--bf16, --fp16) where FP8 is off: x, W and dy
  // rounded to bf16 or f16 (IEEE overflow to inf), fp32 accumulation.
  void enable_half(DType t);
  // Whether the GEMMs run on FP8 or 16-bit operands.
  bool low_precision() const { return (fp8_ && fp8_->active()) || half_ != DType::f32; }
  // W += s B A on this rank's slice, and the adapter is gone from the
  // forward (generation merges adapters once; claw ckpt merge-lora).
  void merge_lora(const CpuCtx& cpu);
  // The weight was overwritten with unmerged values (an RL weight sync
  // brings base and adapters): folds the adapter in again.
  void remerge_lora(const CpuCtx& cpu) {
    lora_merged_ = false;
    merge_lora(cpu);
  }

  Param weight;
  Param bias;  // value undefined when the layer has no bias
  Param lora_a, lora_b;  // defined with an adapter: [r, in] (unless shared), [out, r]
  // The weight generation reads (batch-invariant steps, ctx.batch_invariant)
  // when set: this rank's [out, in] in a low-precision type
  // (GPT::set_inference_weights). Empty: the fp32 weight.
  kernels::WeightMatrix inference_weight;

 private:
  // The A this adapter reads: its own or its owner's (share_lora_a).
  const Param& a() const { return lora_a_owner_ ? lora_a_owner_->lora_a : lora_a; }
  Param& a() { return lora_a_owner_ ? lora_a_owner_->lora_a : lora_a; }
  // x' (dropout of x, into buf) or x itself; xd scales the input gradient.
  const float* lora_input(const StepCtx& ctx, const float* x, std::vector<float>& buf) const;
  void lora_forward(const StepCtx& ctx, const float* x, float* y) const;
  void lora_weight_grad(const StepCtx& ctx, const float* dy, const float* x, int64_t rows);

  // A GEMM operand in this layer's precision: fp32 values (FP8 codes or
  // 16-bit values, exactly), or their bf16 bit patterns where products run
  // on bf16 hardware (kernels/cpu/bf16_gemm.h); times alpha (1 / scale).
  struct Operand {
    kernels::Bf16Operand values;  // f32 only for f16 values
    float alpha = 1.0f;
  };
  // The products on FP8 or 16-bit operands (gemm_operand): y = x W^T (no
  // bias); dx = dy W + beta dx; dw = dy^T x + beta dw.
  void quantized_forward(const StepCtx& ctx, const float* x, float* y) const;
  void quantized_backward_input(const CpuCtx& cpu, const float* dy, float* dx, int64_t N, float beta) const;
  void quantized_weight_grad(const CpuCtx& cpu, const float* dy, const float* x, int64_t rows, float* dw, float beta) const;
  // A GEMM operand in this layer's precision (FP8 recipe or 16-bit); `slot`
  // picks one of two sets of buffers (the product's two operands).
  Operand gemm_operand(const CpuCtx& cpu, Fp8Role role, const float* a, int64_t rows, int64_t cols, bool along_rows,
                       int slot, bool record) const;
  // The ranks holding other parts of a tensor of this role (tensorwise amax).
  comm::Group* fp8_group(Fp8Role role) const;

  const TensorParallel& tp_;
  TpSplit kind_;
  int64_t in_, out_;
  int64_t in_offset_ = 0;  // the first global input feature of this rank's columns (row-parallel)
  int64_t in_global_ = 0;
  bool has_bias_;
  int64_t lora_rank_ = 0;
  bool lora_merged_ = false;
  Linear* lora_a_owner_ = nullptr;
  double lora_scale_ = 0, lora_dropout_ = 0;
  std::unique_ptr<Fp8Linear> fp8_;
  DType half_ = DType::f32;
};

// Weight-gradient GEMMs recorded by a backward that computed input gradients
// only (StepCtx::defer_weight_grads), with copies of their operands (the
// operands live in shared scratch or in activations that are released once
// the input gradients are done). run() performs them in recording order and
// empties the list; buffers are kept for reuse.
class DeferredWeightGrads {
 public:
  void record(Linear* layer, const float* dy, const float* x, int64_t rows);
  void run(const CpuCtx& cpu);
  bool empty() const { return used_ == 0; }
  size_t bytes() const;  // held by the recorded operands

 private:
  struct Entry {
    Linear* layer = nullptr;
    std::vector<float> dy, x;
    int64_t rows = 0;
  };
  std::vector<Entry> entries_;
  size_t used_ = 0;
};

}  // namespace claw::model
