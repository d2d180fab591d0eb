// Reductions and element-wise helpers used by the optimizer, the residual
// stream and the non-finite guard.
//
//   sum_squares(x) = sum_i x_i^2, accumulated in double (the local part of a
//                    global gradient norm; a distributed caller adds one
//                    all-reduce)
//   add:    out_i = a_i + b_i          (out may alias a or b)
//   axpy:   y_i  += alpha * x_i
//   scale:  x_i  *= alpha
//   first_non_finite: index of the first NaN/Inf in x, or -1
// T is the storage type; scalars, weights and arithmetic are acc_t<T>
// (core/storage.h), each stored element rounded once.
#pragma once

#include <cstdint>

#include "claw/core/parallel.h"
#include "claw/core/storage.h"

namespace claw::kernels {

template <typename T>
double sum_squares(const CpuCtx& ctx, const T* x, int64_t n);

template <typename T>
void add(const CpuCtx& ctx, T* out, const T* a, const T* b, int64_t n);

template <typename T>
void axpy(const CpuCtx& ctx, T* y, acc_t<T> alpha, const T* x, int64_t n);

template <typename T>
void scale(const CpuCtx& ctx, T* x, acc_t<T> alpha, int64_t n);

template <typename T>
int64_t first_non_finite(const CpuCtx& ctx, const T* x, int64_t n);

// sum_i x_i in double, in index order (one thread: the loss sum of a micro-batch).
template <typename T>
double sum(const CpuCtx& ctx, const T* x, int64_t n);
// x_i *= w_i (per-token loss weights).
template <typename T>
void mul(const CpuCtx& ctx, T* x, const acc_t<T>* w, int64_t n);
// x[r, c] *= w[r] for a [rows, cols] matrix.
template <typename T>
void scale_rows(const CpuCtx& ctx, T* x, const acc_t<T>* w, int64_t rows, int64_t cols);

}  // namespace claw::kernels
