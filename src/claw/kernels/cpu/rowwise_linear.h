// A batch-invariant linear layer for inference:
//
//   out[M, N] = inp[M, K] @ weight[N, K]^T + bias[N]
//
// Each output element is one dot product of an input row with a weight row,
// accumulated in the same order whatever M is, wherever the row sits in the
// batch and however many threads run: fixed_order_dot.h's order (16 lanes,
// a fixed fold, the tail), then the bias. A request's logits are therefore bitwise the
// same alone and among other requests (BLAS picks kernels and blockings by
// the matrix shape, and its small-matrix and GEMV paths sum in other orders),
// and a token's projection is the same in a prefill chunk as in a decode
// step.
//
// Tiles of 4 input rows x 4 weight rows (16 vector accumulators) over panels
// of weight rows that stay in L2 while the input rows stream; threads split
// the weight rows, so decoding (M = 1..64), which reads every weight once per
// step, is bound by memory bandwidth.
#pragma once

#include <cstdint>

#include "claw/core/parallel.h"

namespace claw::kernels {

void rowwise_linear_forward(const CpuCtx& ctx, float* out, const float* inp, const float* weight, const float* bias,
                            int64_t M, int64_t K, int64_t N);

}  // namespace claw::kernels
