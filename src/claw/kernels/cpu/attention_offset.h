// Causal attention between queries and keys that start at different
// positions and have different lengths: a KV cache (queries are the newest
// tokens of each sequence, keys everything cached so far) and context-parallel
// chunks (a rank's query chunk against another rank's key chunk).
//
// Positions. Query i of row b sits at position q_pos[b] + i; key j at
// position k_pos0 + j; row b has k_len[b] valid keys (null: Tk for every row).
// Key j is visible to query i iff
//     q_lo(b, i) <= k_pos0 + j <= q_pos[b] + i   and   j < k_len[b]
// where q_lo is the position of the first key of the query's document
// (q_lo [B, Tq], non-decreasing along a row; null: 0, plain causal). With
// q_pos = k_pos0 = 0, Tq = Tk and q_lo = seg_start this is exactly the mask of
// attention.h's flash kernel.
//
//   S = scale * Q K^T (masked),  P = softmax_row(S),  O = P V
//   lse_i = log sum_{visible j} exp(S_ij)
// A query that sees no key (a CP chunk that lies wholly after it) gets
// O = 0 and lse = -inf, so partial results merge by their lse:
//   lse = log(e^lse1 + e^lse2),  O = e^(lse1 - lse) O1 + e^(lse2 - lse) O2.
// backward (P recomputed from lse):
//   Delta_i = sum_d dO_id O_id,  dP = dO V^T,  dS = P * (dP - Delta)
//   dQ = scale dS K,  dK = scale dS^T Q,  dV = P^T dO
//
// Shapes: q, out, dq, dout [B, Tq, H, D] contiguous; lse [B, H, Tq]. Keys and
// values of row b start at k + b * ld_kv_batch with rows G * D apart, so a
// cache allocated for more positions than are filled is read in place:
// k, v, dk, dv [B, >= Tk, G, D] with ld_kv_batch >= Tk * G * D. H query heads
// share G key/value heads (query head h reads kv head h / (H / G)).
// Gradient contract: dq is overwritten; dk, dv rows [0, Tk) of every batch
// row are overwritten. T: float, double, or 16-bit storage (staged through
// the fp32 kernel; lse is acc_t<T>, fp32).
//
// The scores of a block of 64 queries against the keys any of them sees are
// materialised ([64, keys] per thread) and multiplied with BLAS: decoding
// (Tq = 1) is bound by reading the cache, and a chunked prefill's block is a
// GEMM. Forward tasks are (b, h), backward tasks (b, kv head), each owning
// the outputs it writes: results do not depend on the thread count, nor on
// which other rows share the call (a row's result is the same alone or in a
// batch), which is what reproducible sampling under load needs.
#pragma once

#include <cstdint>

#include "claw/core/parallel.h"
#include "claw/core/storage.h"
#include "claw/kernels/cpu/score_scale.h"

namespace claw::kernels {

struct AttentionOffsets {
  const int32_t* q_pos = nullptr;  // [B] position of each row's first query (null: 0)
  int64_t k_pos0 = 0;              // position of key 0
  const int32_t* k_len = nullptr;  // [B] valid keys per row (null: Tk)
  const int32_t* q_lo = nullptr;   // [B, Tq] first visible key position (documents; null: 0)
  int64_t ld_kv_batch = 0;         // elements between batch rows of k/v/dk/dv (0: Tk * G * D)
};

template <typename T>
void attention_offset_forward(const CpuCtx& ctx, T* out, acc_t<T>* lse, const T* q, const T* k, const T* v,
                              int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D, ScoreScale scale,
                              const AttentionOffsets& off);

template <typename T>
void attention_offset_backward(const CpuCtx& ctx, T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                               const T* v, const T* out, const acc_t<T>* lse, int64_t B, int64_t Tq, int64_t Tk,
                               int64_t H, int64_t G, int64_t D, ScoreScale scale, const AttentionOffsets& off);

}  // namespace claw::kernels
