// Causal attention of new tokens against a paged KV cache: the serving
// engine's step, where sequences of different lengths each bring some new
// tokens (a prefill chunk, or one decoded token) and their keys and values
// live in fixed-size blocks scattered over a pool.
//
// Cache layout (one layer): block b holds positions [i * bs, (i + 1) * bs)
// of the sequence whose block table has b at index i, as
// keys[b][G][slot][D] and values[b][G][slot][D] (bs = block_size slots):
// a KV head's rows of one block are contiguous, so a query head walks its
// keys in runs of bs rows rather than one row every G * D elements.
// The step's queries are q [N, H, D] (RoPE applied), grouped by sequence:
// sequence s owns rows [first_row, first_row + num_tokens), the first at
// position `context` (what it had cached before the step), whose keys must
// already be in the cache. Query at position p attends to keys [0, p] (a
// sliding window of W keys: [max(0, p - W + 1), p]); H
// query heads share G key/value heads (head h reads kv head h / (H / G)).
//
//   out_i = sum_j softmax_j(scale q_i . k_j) v_j
//
// Every query is computed on its own, visiting its keys in position order in
// tiles of 16 with an online softmax (running max and sum, rescaled per
// tile), each score a dot product summed in one fixed order: a query's
// output is bitwise the same whichever sequences share the step, however its
// prompt was split into prefill chunks, whatever the block size, and on any
// thread count.
//
// The cache may hold keys and values in fp32, bf16, or int8 with one fp32
// scale per (slot, KV head) row of D (scale = max|x| / 127, the row rounded
// to nearest): kv_store_row() writes a row, the kernel widens each row it
// reads to fp32. Rows are quantized on their own, so this too is the same
// whatever the batch.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "claw/core/parallel.h"
#include "claw/kernels/cpu/score_scale.h"

namespace claw::kernels {

// The widest head the paged and fixed-order kernels take (their per-query
// accumulators are on the stack): DeepSeek-V3's absorbed latent head is
// 512 + 64 (model/mla.h).
inline constexpr int64_t kMaxPagedHeadDim = 1024;

// int8: a scale per row (token and KV head), max|x| / 127; q8_0: llama.cpp's
// (--cache-type-k/v q8_0): a scale per 32 elements, max|x| / 127 rounded to
// f16, quants x (127 / max|x|) rounded half to even; f16 as llama.cpp's
// default cache (round to nearest even).
enum class KvDtype : uint8_t { f32, bf16, int8, f16, q8_0 };
std::string_view kv_dtype_name(KvDtype t);
std::optional<KvDtype> parse_kv_dtype(std::string_view s);  // "f32", "bf16", "f16", "int8", "q8_0"
inline constexpr std::string_view kKvDtypeChoices = "f32, bf16, f16, int8, q8_0";
size_t kv_dtype_size(KvDtype t);                            // bytes an element
int64_t kv_scales_per_row(KvDtype t, int64_t D);            // int8: 1, q8_0: D / 32, else 0

// One layer's keys or values: `data` as [blocks][G][block_size][D] of the
// dtype; `scales` [blocks][G][block_size][kv_scales_per_row] for int8 and
// q8_0 (else null).
struct KvView {
  KvDtype dtype = KvDtype::f32;
  void* data = nullptr;
  float* scales = nullptr;
};
// The row of KV head g at slot `slot` of block `block`.
inline int64_t kv_row(int64_t block, int64_t slot, int64_t g, int64_t G, int64_t block_size) {
  return (block * G + g) * block_size + slot;
}
// Writes row `row` (kv_row(); D elements of src) into the view.
void kv_store_row(const KvView& v, int64_t row, const float* src, int64_t D);

struct PagedSeq {
  int64_t first_row = 0;          // the sequence's first query row in q/out
  int64_t num_tokens = 0;         // its new tokens in this step
  int64_t context = 0;            // position of its first new token
  const int32_t* blocks = nullptr;  // block table: block of positions [i bs, (i + 1) bs) at [i]
};

void paged_attention_forward(const CpuCtx& ctx, float* out, const float* q, const KvView& keys,
                             const KvView& values, int64_t block_size, const PagedSeq* seqs, int64_t num_seqs,
                             int64_t H, int64_t G, int64_t D, ScoreScale scale, int64_t window = 0);

// The same per-query computation over contiguous keys and values, for
// training's causal attention when its result must equal the engine's to
// the bit (an RL learner's forward, whose log-probabilities are compared
// with the generator's; StepCtx::batch_invariant). Shapes as
// attention_forward (attention.h): q, out [B, T, H, D]; k, v [B, T, G, D];
// lse [B, H, T], the log-sum-exp its backward reads. seg_start (null: 0)
// gives each token's document start in its row: the query attends to keys
// [seg_start, t], its positions counted from there as the engine counts a
// sequence's, so a packed document gets what it gets alone; a sliding window
// of W keys (window > 0) starts at max(seg_start, t - W + 1), as the engine's.
void fixed_order_attention_forward(const CpuCtx& ctx, float* out, float* lse, const float* q, const float* k,
                                   const float* v, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D,
                                   ScoreScale scale, const int32_t* seg_start, int64_t window = 0);

}  // namespace claw::kernels
