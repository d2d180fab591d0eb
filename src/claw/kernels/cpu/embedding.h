// Token (+ learned position) embedding.
//
//   forward:  out[b, t, :] = wte[tokens[b, t], :] + (wpe ? wpe[pos0 + t, :] : 0)
//   backward: dwte[v, :] += sum over (b, t) with tokens[b, t] == v of dout[b, t, :]
//             dwpe[pos0 + t, :] += sum_b dout[b, t, :]          (if dwpe)
//
// Shapes: tokens [B, T]; wte [V, C]; wpe [P, C] with pos0 + T <= P; out, dout [B, T, C].
// Token ids are trusted here (validated when the batch is read).
// Gradient contract: parameter grads accumulate. Threads split the C
// channels, so the scatter-add has no races and a fixed summation order.
#pragma once

#include <cstdint>

#include "claw/core/parallel.h"

namespace claw::kernels {

template <typename T>
void embedding_forward(const CpuCtx& ctx, T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                       int64_t T_, int64_t C, int64_t pos0 = 0);

template <typename T>
void embedding_backward(const CpuCtx& ctx, T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B,
                        int64_t T_, int64_t C, int64_t pos0 = 0);

}  // namespace claw::kernels
