// Fused AdamW step (Loshchilov & Hutter 2019, decoupled weight decay), in the
// exact order of PyTorch's torch.optim.AdamW so that the two agree to
// rounding:
//
//   g  = grad * grad_scale                      (grad_scale carries clipping / loss scaling)
//   p  = p * (1 - lr * weight_decay)
//   m  = beta1 m + (1 - beta1) g
//   v  = beta2 v + (1 - beta2) g^2
//   p -= (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
//
// Scalars (1 - lr wd, lr / bias_correction1, ...) are formed in double and
// rounded once to T, as PyTorch does with Python floats; the element-wise
// operations run in T in the order of PyTorch 1.x's tensor ops (mul_, add_,
// addcmul_, sqrt, div, add_, addcdiv_). From PyTorch 2.0 m is formed as
// m.lerp_(g, 1 - beta1): equal in exact arithmetic, it can differ in the last
// bit of m.
//
// Shapes: param, grad, m, v [n] (one flat range; a caller passes each
// parameter, or each ZeRO shard, with its own weight_decay from ParamSpec).
// step counts from 1. P is the storage type of param, and T = acc_t<P> the
// type of the arithmetic: fp32 (fp64 in tests), or f16 masters under
// --main-params-dtype fp16 (widened on load, the updated value rounded to
// nearest even on store) with fp32 arithmetic; G the storage type of the
// gradients (T, or bf16/f16 widened exactly on load); M and V the storage
// types of m and v (T, or bf16/f16 under --use-precision-aware-optimizer:
// widened on load, the new moment rounded to nearest even on store, the
// update reading the moment before that rounding).
#pragma once

#include <cstdint>

#include "claw/core/parallel.h"

namespace claw::kernels {

struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double grad_scale = 1.0;
  int64_t step = 1;
};

template <typename P, typename G = P, typename M = P, typename V = P>
void adamw_update(const CpuCtx& ctx, P* param, M* m, V* v, const G* grad, int64_t n, const AdamWHyper& h);

}  // namespace claw::kernels
