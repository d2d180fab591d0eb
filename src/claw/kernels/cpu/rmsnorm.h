// RMSNorm over the last dimension (Zhang & Sennrich 2019; Llama).
//
//   rstd = 1 / sqrt((1/C) sum_c x_c^2 + eps),  y_c = x_c * rstd * weight_c
// backward, with g_c = dy_c * weight_c:
//   dx_c = rstd * (g_c - x_c * rstd^2 * (1/C) sum_c' g_c' x_c')
//   dweight_c += sum_n dy_c * x_c * rstd
//
// Shapes: x, y, dx, dy [N, C]; weight [C]; rstd [N] (saved).
// dweight may be null (a frozen weight: dx only). T is the storage type of
// x, y, dx, dy and weight; rstd and dweight are in acc_t<T> (core/storage.h).
// Gradient contract as for LayerNorm (dweight accumulates; dx overwrites
// unless `accumulate_dx`).
#pragma once

#include <cstdint>

#include "claw/core/parallel.h"
#include "claw/core/storage.h"

namespace claw::kernels {

template <typename T>
void rmsnorm_forward(const CpuCtx& ctx, T* y, acc_t<T>* rstd, const T* x, const T* weight, int64_t N, int64_t C,
                     double eps);

template <typename T>
void rmsnorm_backward(const CpuCtx& ctx, T* dx, acc_t<T>* dweight, const T* dy, const T* x, const T* weight,
                      const acc_t<T>* rstd, int64_t N, int64_t C, bool accumulate_dx);

}  // namespace claw::kernels
