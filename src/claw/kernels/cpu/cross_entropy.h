// Softmax + cross-entropy over logits rows, fused: the loss and its gradient
// come from the logits buffer itself, and the gradient overwrites the logits
// in place, so no second [N, V]-sized buffer ever exists.
//
// Rows are logits[n, 0:Vp]; only the first V columns are real classes (the
// rest pad the vocabulary to a multiple for GEMM/TP efficiency and are
// excluded from the softmax; their gradient is 0).
//
//   lse_n    = log sum_{c<V} exp(logits[n, c])
//   losses_n = lse_n - logits[n, targets[n]]        (targets[n] < 0: ignored, loss 0)
//   dlogits[n, c] = dloss_scale * (exp(logits[n, c] - lse_n) - [c == targets[n]])   for c < V
//   dlogits[n, c] = 0                                          for c >= V, and for ignored rows
//
// Shapes: logits, dlogits [N, Vp]; targets [N]; losses, lse [N] (lse saved).
// dloss_scale is the gradient of the total loss w.r.t. each row's loss
// (1 / number of tokens in the global batch for a mean loss).
// dlogits may alias logits. targets[n] >= V is an error (CLAW_CHECK).
// Each row is read once for the log-sum-exp (online max/sum over L1-sized
// blocks) and once more for the gradient. T: float, double, or 16-bit
// logits (bfloat16, float16) with fp32 losses and lse (acc_t<T>).
#pragma once

#include <cstdint>

#include "claw/core/parallel.h"
#include "claw/core/storage.h"

namespace claw::kernels {

template <typename T>
void cross_entropy_forward(const CpuCtx& ctx, acc_t<T>* losses, acc_t<T>* lse, const T* logits,
                           const int32_t* targets, int64_t N, int64_t V, int64_t Vp);

template <typename T>
void cross_entropy_backward(const CpuCtx& ctx, T* dlogits, const T* logits, const acc_t<T>* lse,
                            const int32_t* targets, acc_t<T> dloss_scale, int64_t N, int64_t V, int64_t Vp);

// One row's log-softmax in one fixed order: the max, then sum exp(x - max)
// (fast_exp, each term widened to double, in vec_math.h's 16 lanes folded in
// a fixed order), then its log. A token's log-probability is logits[t] - max
// - log_z, the same expression wherever it is computed: the generation
// engine's sampler (serve/sampling.h) and an RL learner's loss
// (cross_entropy_forward_exact) agree to the bit.
struct LogSoftmaxRow {
  double max, log_z;
  LogSoftmaxRow(const float* logits, int64_t V);
  double logprob(float logit) const { return static_cast<double>(logit) - max - log_z; }
};

// cross_entropy_forward with each row's figures from LogSoftmaxRow: losses_n
// = -logprob(logits[n, targets[n]]) rounded once, lse_n = max + log_z; the
// backward is cross_entropy_backward's.
void cross_entropy_forward_exact(const CpuCtx& ctx, float* losses, float* lse, const float* logits,
                                 const int32_t* targets, int64_t N, int64_t V, int64_t Vp);

}  // namespace claw::kernels
