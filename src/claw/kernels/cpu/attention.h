// Causal scaled-dot-product attention, flash-style (Dao et al. 2022): the
// T x T score matrix is never materialised. Each task takes a block of query
// rows of one head and streams key/value blocks through an online softmax
// (running max m, running sum l, rescaled output accumulator), so scratch is
// O(block_q * block_k) per thread.
//
//   S = scale * Q K^T (masked: key j visible to query i iff lo_i <= j <= i),
//   P = softmax_row(S),  O = P V
//   lse_i = log sum_{visible j} exp(S_ij)             (saved for backward)
// backward (recomputing P from Q, K and lse block by block):
//   Delta_i = sum_d dO_id O_id
//   dP = dO V^T,  dS = P * (dP - Delta),  dQ = scale dS K,  dK = scale dS^T Q,  dV = P^T dO
// (P and dS are 0 where masked).
//
// Packed sequences (documents concatenated in one row): lo = seg_start
// [B, T], where seg_start[b * T + i] is the index within row b of the first
// token of i's document, so no query attends across a document boundary
// (Megatron's --reset-attention-mask) and each document gets exactly the
// causal attention it would get alone. Null seg_start is plain causal
// attention (lo = 0). The kernel needs only 0 <= seg_start[i] <= i and
// seg_start non-decreasing along a row (CLAW_CHECKed, O(B T)), and computes
// exactly the mask above for any such array: documents have seg_start
// constant within each one and equal to its first index, and a sliding
// window of w keys (seg_start[i] = max(0, i - w + 1)) also qualifies.
// Work follows the mask and no T x T mask is built: key tiles wholly before
// a query block's smallest lo are skipped, the rest are trimmed to the key
// rows and queries that can see them, the tile products skip register tiles
// (6 keys by one vector of queries) holding no visible pair, and element
// masks are applied only where the diagonal or a boundary crosses a tile. So
// the work is about sum over documents of len^2 / 2, not T^2 / 2. Per-block
// costs (packing, softmax bookkeeping, writing O) make short documents run
// at the rate of short causal sequences: at T = 1024 with documents of
// 100-300 tokens, forward + backward take 1/3 of the causal time and as long
// as one call per document (bench_attention, per_doc peer).
//
// Grouped-query attention: H query heads share G key/value heads
// (H % G == 0); query head h reads kv head h / (H / G). G == H is MHA.
// Shapes: q, dq, out, dout [B, T, H, D]; k, v, dk, dv [B, T, G, D]; lse [B, H, T].
// scale is usually 1/sqrt(D); with a soft cap (score_scale.h) S = c tanh(S / c)
// before the mask and softmax, and backward's dS takes the factor
// 1 - (S / c)^2 (the capped S recomputed).
// Gradient contract: dq, dk, dv are overwritten.
//
// block: query and key tile size, a positive multiple of 16. The default
// suits D = 64..128 from T = 256 up; at T >= 2048, 256 measured 0-8% faster
// on AVX-512 (fewer passes over K, V, dK, dV per FLOP; bench_attention
// prints both). Tests pass 16 to cover multi-block paths cheaply. Any T >= 1 and D >= 1 are accepted; partial tiles
// are handled inside.
//
// Threads: forward tasks are (b, h, query block), backward tasks (b, kv head),
// each covering every query head of its group and owning the dq, dk, dv rows
// it writes, so no two tasks touch the same output and results are bitwise
// identical for any thread count. Only when B * G is not a multiple of the
// thread count does backward also cut each (b, kv head) into query chunks
// (~4 tasks per thread), whose dk, dv partials (a workspace of about
// 2 * (chunks - 1) * B * G * T * D elements) are summed in chunk order
// afterwards: deterministic for a given thread count, equal to the unsplit
// result up to rounding.
// Per-thread scratch: O(block * block + block * D), allocated once per call.
// T: float, double, or 16-bit storage (bfloat16, float16: the operands are
// widened to fp32 for the fp32 kernel, the outputs rounded once; lse is
// acc_t<T>, fp32).
#pragma once

#include <cstdint>

#include "claw/core/parallel.h"
#include "claw/core/storage.h"
#include "claw/kernels/cpu/score_scale.h"

namespace claw::kernels {

inline constexpr int64_t kAttentionBlock = 128;

template <typename T>
void attention_forward(const CpuCtx& ctx, T* out, acc_t<T>* lse, const T* q, const T* k, const T* v, int64_t B,
                       int64_t T_, int64_t H, int64_t G, int64_t D, ScoreScale scale,
                       const int32_t* seg_start = nullptr, int64_t block = kAttentionBlock);

template <typename T>
void attention_backward(const CpuCtx& ctx, T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                        const T* v, const T* out, const acc_t<T>* lse, int64_t B, int64_t T_, int64_t H, int64_t G,
                        int64_t D, ScoreScale scale, const int32_t* seg_start = nullptr,
                        int64_t block = kAttentionBlock);

}  // namespace claw::kernels
