// LayerNorm over the last dimension (Ba et al. 2016).
//
//   mean = (1/C) sum_c x_c,  rstd = 1 / sqrt((1/C) sum_c (x_c - mean)^2 + eps)
//   y_c  = (x_c - mean) * rstd * weight_c + bias_c
// backward, with xhat_c = (x_c - mean) * rstd and g_c = dy_c * weight_c:
//   dx_c = rstd * (g_c - mean_c'(g) - xhat_c * mean_c'(g * xhat))
//   dweight_c += sum_n dy_c * xhat_c,  dbias_c += sum_n dy_c
//
// Shapes: x, y, dx, dy [N, C] (N = B*T rows); weight, bias [C]; mean, rstd [N] (saved).
// bias/dbias may be null (no-bias variant); dweight/dbias null for a frozen
// weight/bias (dx only). T is the storage type of x, y, dx, dy, weight and
// bias; mean, rstd, dweight and dbias are in acc_t<T> (core/storage.h).
// Gradient contract: dweight/dbias accumulate; dx overwrites, or accumulates
// when `accumulate_dx` (the norm's input is the residual stream, whose grad
// already holds the skip-path contribution).
#pragma once

#include <cstdint>

#include "claw/core/parallel.h"
#include "claw/core/storage.h"

namespace claw::kernels {

template <typename T>
void layernorm_forward(const CpuCtx& ctx, T* y, acc_t<T>* mean, acc_t<T>* rstd, const T* x, const T* weight,
                       const T* bias, int64_t N, int64_t C, double eps);

template <typename T>
void layernorm_backward(const CpuCtx& ctx, T* dx, acc_t<T>* dweight, acc_t<T>* dbias, const T* dy, const T* x,
                        const T* weight, const acc_t<T>* mean, const acc_t<T>* rstd, int64_t N, int64_t C,
                        bool accumulate_dx);

}  // namespace claw::kernels
