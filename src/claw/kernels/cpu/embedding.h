// Token (+ learned position) embedding.
//
//   forward:  out[b, t, :] = wte[tokens[b, t], :] + (wpe ? wpe[pos(b, t), :] : 0)
//   backward: dwte[v, :] += sum over (b, t) with tokens[b, t] == v of dout[b, t, :]
//             dwpe[p, :] += sum over (b, t) with pos(b, t) == p of dout[b, t, :]   (if dwpe)
// pos(b, t) = positions[b * T + t] (positions [B, T]), or t when positions is
// null. Packed sequences restart positions at each document (Megatron's
// --reset-position-ids), so a document gets the embedding it would get alone.
//
// Shapes: tokens, positions [B, T]; wte [V, C]; wpe [P, C]; out, dout [B, T, C].
// Token ids and positions are trusted here (validated, or produced, when the
// batch is built): 0 <= token < V, 0 <= pos < P.
// Gradient contract: parameter grads accumulate; dwte may be null (only the
// position gradient, when the word embeddings are vocabulary-parallel). Threads split the C
// channels, so the scatter-adds (repeated tokens, repeated positions) have no
// races and each sum is taken in (b, t) order whatever the thread count.
// T is the storage type of wte, wpe, out and dout; dwte, dwpe are acc_t<T>
// (core/storage.h).
#pragma once

#include <cstdint>

#include "claw/core/parallel.h"
#include "claw/core/storage.h"

namespace claw::kernels {

template <typename T>
void embedding_forward(const CpuCtx& ctx, T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                       int64_t T_, int64_t C, const int32_t* positions = nullptr);

template <typename T>
void embedding_backward(const CpuCtx& ctx, acc_t<T>* dwte, acc_t<T>* dwpe, const T* dout, const int32_t* tokens,
                        int64_t B, int64_t T_, int64_t C, const int32_t* positions = nullptr);

}  // namespace claw::kernels
