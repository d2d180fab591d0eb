// Output layer: logits = x W^T over the padded vocabulary, fused with the
// softmax cross-entropy loss. W is the word-embedding matrix when embeddings
// are tied, else its own [Vp, C] parameter.
//
// The [N, Vp] logits never exist at once: rows are processed in chunks of
// Scratch::logits_chunk(N). When a gradient is wanted, each chunk's
// backward runs right after its loss, while its logits are still in cache:
//   dlogits = dloss * (softmax - onehot)   (in place over the logits chunk)
//   dx[chunk] = dlogits W                  (saved for the final norm's backward)
//   dW       += dlogits^T x[chunk]
// so "forward with gradient" leaves the layer's whole backward done, and
// backward() has nothing left to compute. This trades a clean forward/backward
// split for never holding the logits (the largest activation: 206 MB for
// GPT-2 124M at 1024 tokens).
//
// Tensor parallelism: W is vocabulary-parallel (Vp/TP rows per rank, the
// same rows as the word embeddings), each rank computes its columns of the
// logits and the loss comes from model/vocab_parallel.h's cross-entropy (two
// all-reduces per chunk): no rank ever holds [chunk, Vp], let alone [N, Vp].
// The input is gathered from the sequence pieces under SP; dx is a partial
// sum, reduced (all-reduce, or reduce-scatter to the rows held) at the end.
//
// Rows without a target (a prompt, padding, an SFT mask's ignored tokens)
// have no loss and no gradient, so their logits are never computed: when
// some rows lack a target, the chunks run over the others, packed in front
// (their inputs, targets and weights gathered), and the per-row results
// (losses, lse, dx) are scattered back with 0 in the rows left out. In
// fine-tuning and RL batches most rows are such rows (GRPO: the prompt and
// the padding after a short completion). Every rank of a TP group holds the
// same targets, so all pack alike; a batch where every row has a target
// runs unpacked.
//
// --final-logit-softcapping c (Gemma 2): every logit becomes c tanh(z / c)
// where it is made, so losses, sampling and written logits all see the
// capped ones; backward multiplies the logit gradients by 1 - (z' / c)^2.
#pragma once

#include <string>
#include <vector>

#include "claw/core/arena.h"
#include "claw/kernels/cpu/quant.h"
#include "claw/model/config.h"
#include "claw/model/hf_names.h"
#include "claw/model/param.h"
#include "claw/model/scratch.h"
#include "claw/model/step.h"
#include "claw/model/tensor_parallel.h"
#include "claw/model/vocab_parallel.h"

namespace claw::model {

class OutputLayer {
 public:
  struct Saved {
    float* losses = nullptr;  // [N] per-token loss
    float* lse = nullptr;     // [N] log-sum-exp of each row
    float* dx = nullptr;      // [N, C] gradient w.r.t. the input, produced by forward (first R rows after the reduction)
    void layout(ArenaLayout& L, const ModelConfig& cfg, int64_t N);
  };

  // tied_word_embeddings: the embedding's word matrix, or null for an own weight.
  OutputLayer(const ModelConfig& cfg, const HfNames& hf, Param* tied_word_embeddings, const TensorParallel& tp);

  // x: [R, C], the rows held. Returns the sum of per-token losses over
  // targets >= 0, each times ctx.loss_weight's entry when given (of all N tokens, the same on every TP rank). With
  // dloss_scale != 0 also computes the gradient (dloss_scale = d total_loss /
  // d token_loss).
  double forward(const StepCtx& ctx, const float* x, const int32_t* targets, double dloss_scale, Saved& s,
                 Scratch& scratch);

  // Full logits [N, Vp] (for inspection and tests; not used in training;
  // one tensor-parallel rank only).
  void logits(const StepCtx& ctx, const float* x, float* out) const;
  // Logits over the real vocabulary [N, V] at any tensor-parallel size: each
  // rank computes its vocabulary rows and the group all-gathers them. x: the
  // final norm's output [N, C] (no sequence parallelism). No loss, no
  // gradient: generation and evaluation.
  void full_logits(const StepCtx& ctx, const float* x, float* out) const;

  void collect(std::vector<Param*>& out);
  // --bf16: the training products (logits, input and weight gradients) on
  // bf16 operands with fp32 accumulation (kernels/cpu/bf16_gemm.h); the
  // logits, softmax and loss stay fp32. Other types: fp32 products.
  void enable_half(DType t) { gemm_dtype_ = t; }
  // The [Vp/TP, C] matrix the logits are computed with: own_weight, or the
  // tied word embeddings.
  const Param& weight() const { return *weight_; }

  Param own_weight;
  // What full_logits reads in batch-invariant steps when set (a
  // low-precision copy of weight(); GPT::set_inference_weights).
  kernels::WeightMatrix inference_weight;

 private:
  // forward() under ctx.sequence_loss: all token losses, the sequence
  // loss's weights, then the weighted backward with the logits recomputed.
  double sequence_loss_forward(const StepCtx& ctx, const float* x_rows, const int32_t* targets, double dloss_scale,
                               Saved& s, Scratch& scratch);

  // The rows with a target, packed (see above). pack() returns the rows to
  // run: all N as given, or the n < N with a target gathered into rows_x_,
  // rows_targets_ and rows_weight_. scatter() moves packed per-row results
  // (width floats a row) to their rows and zeroes the rest.
  struct Rows {
    int64_t n;
    const float* x;
    const int32_t* targets;
    const float* weight;
  };
  Rows pack(const StepCtx& ctx, const float* x, const int32_t* targets, const float* weight);
  void scatter(float* a, int64_t width) const;

  Param* weight_;
  DType gemm_dtype_ = DType::f32;
  struct HalfBuffers {  // --bf16 operands: fp32 or bf16 bits (kernels::round_to_bf16)
    std::vector<float> w32, x32;
    std::vector<uint16_t> w16, x16, g16;
  } half_;
  std::vector<float> sequence_weights_;
  // --final-logit-softcapping: caps z (n values) in place; d_capped (or
  // null) receives each one's 1 - (z' / c)^2.
  void soft_cap(const CpuCtx& cpu, float* z, int64_t n, float* d_capped) const;
  double cap_ = 0;
  std::vector<float> cap_grad_;  // a chunk's 1 - (z' / c)^2
  bool packed_ = false;
  int64_t rows_total_ = 0;  // N of the packed batch
  std::vector<int64_t> rows_;
  std::vector<float> rows_x_, rows_weight_;
  std::vector<int32_t> rows_targets_;
  const TensorParallel& tp_;
  VocabShard vocab_;
  int64_t C_;
};

}  // namespace claw::model
