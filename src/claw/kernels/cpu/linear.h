// Linear layer GEMMs (PyTorch nn.Linear convention: weight is [N, K]).
//
//   forward:        out[M, N]     = inp[M, K] @ weight[N, K]^T + bias[N]
//   backward input: dinp[M, K]   (=|+=) dout[M, N] @ weight[N, K]
//   backward weight: dweight[N, K] += dout[M, N]^T @ inp[M, K]
//                    dbias[N]      += sum_m dout[m, :]
//
// M = B*T rows (tokens), K = input features, N = output features.
// Gradient contract: parameter grads accumulate (+=); the input grad
// overwrites unless `accumulate` (used where several branches feed one input,
// e.g. q/k/v projections of one normed activation). The weight-gradient half
// is separate so that schedules may defer it (zero-bubble pipelines, overlap).
// bias / dbias may be null; so may dweight (a frozen weight: only dbias).
// T is the storage type of activations and weights; the products accumulate
// in fp32 (or fp64 for double) and the parameter gradients dweight, dbias are
// acc_t<T> (core/storage.h).
#pragma once

#include <cstdint>

#include "claw/core/parallel.h"
#include "claw/core/storage.h"

namespace claw::kernels {

template <typename T>
void linear_forward(const CpuCtx& ctx, T* out, const T* inp, const T* weight, const T* bias, int64_t M,
                    int64_t K, int64_t N);

template <typename T>
void linear_backward_input(const CpuCtx& ctx, T* dinp, const T* dout, const T* weight, int64_t M, int64_t K,
                           int64_t N, bool accumulate);

template <typename T>
void linear_backward_weight(const CpuCtx& ctx, acc_t<T>* dweight, acc_t<T>* dbias, const T* dout, const T* inp,
                            int64_t M, int64_t K, int64_t N);

}  // namespace claw::kernels
